"""capcore benchmarks; prints one JSON object on its last line.

Figures are compared as ratios within one run (these machines are noisy):
- strict read (parse_arguments + lookup + assess) of argument documents against plain
  json.loads of the same bytes (target: ratio <= 2.0 for each of "flat", "nested", "10KiB" and
  "100KiB"): a flat ~1 KiB object; a ~1 KiB tool call with a nested object, a 200-character
  string and an array of 20 small objects; that record repeated to ~10 KiB and ~100 KiB; plus,
  reported without a target, a tool call as models write them ("payment") and many small
  objects in ~1 KiB ("dense");
- one call evaluated against 100 cap rules of which 10 apply (target: <= 200 us per call);
- parse_rules of 1,000 lines (target: <= 100 ms);
- refusing a 1,000,000-digit amount (target: well under 1 ms).

Usage: python bench/capcore_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit
from collections.abc import Callable
from datetime import UTC, datetime

from capcore import (
    CallRequest,
    Mode,
    NotAssessable,
    PolicyState,
    Unit,
    assess,
    evaluate_call,
    ledgers_of_call,
    lookup,
    parse_amount,
    parse_arguments,
    parse_rules,
)


def _seconds_per_call(function: Callable[[], object], repeat: int) -> float:
    """The median over ``repeat`` rounds of the time per call, each round about 0.1 s."""
    timer = timeit.Timer(function)
    number, _ = timer.autorange()
    return statistics.median(t / number for t in timer.repeat(repeat=repeat, number=number))


def _payment_document() -> bytes:
    """A tool call as a model writes one: a few members, one nested object, prose."""
    document = {
        "amount": "1250.00",
        "currency": "USD",
        "payee": {
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "iban": "GB33BUKB20201555555555",
            "address": "12 St James's Square, London SW1Y 4LB, United Kingdom",
        },
        "reference": "INV-2026-11-0042",
        "memo": (
            "Payment for consulting services rendered in November 2026 under the master "
            "services agreement of 3 March 2025, statement of work 7: architecture review of "
            "the settlement pipeline, two on-site workshops, and the written report delivered "
            "on 24 November. Net 30 days; late fees waived by agreement with the client. "
            "Please quote the invoice reference on the remittance advice so that the payment "
            "can be matched automatically, and send the advice to accounts@example.com."
        ),
        "scheduled_for": "2026-12-01",
        "priority": "normal",
        "notify_payee": True,
    }
    return json.dumps(document, indent=1).encode()


def _dense_document() -> bytes:
    """The worst case for the strict reader at this size: many small objects."""
    document = {
        "amount": {"value": "1250.00", "currency": "USD"},
        "payee": {
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "iban": "GB33BUKB20201555555555",
        },
        "memo": "Invoice 2026-11 for consulting services rendered in November, net 30 days.",
        "lines": [
            {
                "sku": f"SKU-{i:04d}",
                "quantity": i + 1,
                "unit_price": f"{10 + i}.50",
                "taxable": i % 2 == 0,
            }
            for i in range(7)
        ],
        "metadata": {
            "run": "run-7",
            "attempt": 1,
            "tags": ["finance", "monthly", "approved-vendor"],
        },
    }
    return json.dumps(document).encode()


def _flat_document() -> bytes:
    """One object of about 1 KiB: short strings, a number, a flag."""
    document: dict[str, object] = {f"field_{i:02d}": f"value number {i} " * 3 for i in range(18)}
    document.update({"amount": "1250.00", "currency": "USD", "count": 3, "urgent": False})
    return json.dumps(document).encode()


def _nested_record(serial: int) -> dict[str, object]:
    return {
        "invoiceId": f"INV-2026-{serial:05d}",
        "amount": "1250.00",
        "currency": "USD",
        "payee": {"fullName": "Ada Lovelace", "emailAddress": "ada@example.com"},
        "memo": ("Consulting, November 2026, statement of work 7. " * 5)[:200],
        "lineItems": [
            {
                "itemId": i,
                "unitPrice": f"{10 + i}.50",
                "quantity": 1 + i % 3,
                "isTaxable": i % 2 == 0,
            }
            for i in range(20)
        ],
    }


def _nested_document(size: int) -> bytes:
    """About ``size`` bytes: the nested record alone, or a batch total and an array of them."""
    records = [_nested_record(0)]
    if size <= 1500:
        return json.dumps(records[0]).encode()
    while len(json.dumps({"amount": "0.00", "records": records})) < size:
        records.append(_nested_record(len(records)))
    total = f"{1250 * len(records)}.00"
    return json.dumps({"amount": total, "currency": "USD", "records": records}).encode()


def _strict_read(data: bytes, path: tuple[str, ...], repeat: int) -> dict[str, float]:
    def strict() -> int:
        return assess(lookup(parse_arguments(data), path), Unit.MAJOR, 2)

    plain_timer, strict_timer = timeit.Timer(lambda: json.loads(data)), timeit.Timer(strict)
    number, _ = strict_timer.autorange()
    plain: list[float] = []
    strict_times: list[float] = []
    # Interleaved rounds and the best of each: the machine's noise only ever adds time.
    for _ in range(repeat):
        plain.append(plain_timer.timeit(number) / number)
        strict_times.append(strict_timer.timeit(number) / number)
    return {
        "document_bytes": len(data),
        "objects": data.count(b"{"),
        "json_loads_us": min(plain) * 1e6,
        "strict_read_us": min(strict_times) * 1e6,
        "ratio": min(strict_times) / min(plain),
    }


STRICT_READ_TARGETS = ("flat", "nested", "10KiB", "100KiB")


def bench_strict_read(repeat: int) -> dict[str, dict[str, float]]:
    return {
        "flat": _strict_read(_flat_document(), ("amount",), repeat),
        "nested": _strict_read(_nested_document(1024), ("amount",), repeat),
        "10KiB": _strict_read(_nested_document(10 * 1024), ("amount",), repeat),
        "100KiB": _strict_read(_nested_document(100 * 1024), ("amount",), repeat),
        "payment": _strict_read(_payment_document(), ("amount",), repeat),
        "dense": _strict_read(_dense_document(), ("amount", "value"), repeat),
    }


def _rules_text(count: int, applying: int) -> str:
    lines = []
    for i in range(count):
        tool = "pay" if i < applying else f"tool_{i}"
        if i % 2:
            lines.append(
                f"sum-{i}: {tool},refund arg=amount sum USD {1000 + i}.00 per day"
                " by principal -> gate"
            )
        else:
            lines.append(f"max-{i}: {tool},wire arg=amount max USD {500 + i}.00 -> gate finance")
    return "\n".join(lines)


def bench_evaluate(repeat: int) -> dict[str, float]:
    rules = parse_rules(_rules_text(100, 10))
    request = CallRequest(
        tool="pay", arguments_text='{"amount": "125.00", "payee": "ada"}', principal="u-1"
    )
    spent = dict.fromkeys(ledgers_of_call(request, rules), 50_000)
    state = PolicyState(
        now=datetime(2026, 11, 30, 12, tzinfo=UTC),
        mode=Mode.WORKSPACE_WRITE,
        cap_rules=rules,
        spent=spent,
    )
    evaluation = evaluate_call(request, state)
    assert evaluation.error is None, evaluation.error
    per_call = _seconds_per_call(lambda: evaluate_call(request, state), repeat)
    with_ledgers = _seconds_per_call(
        lambda: (ledgers_of_call(request, rules), evaluate_call(request, state)), repeat
    )
    return {
        "rules": 100,
        "applicable": 10,
        "evaluate_us": per_call * 1e6,
        "ledgers_and_evaluate_us": with_ledgers * 1e6,
    }


def bench_parse_rules(repeat: int) -> dict[str, float]:
    text = _rules_text(1000, 0)
    return {"lines": 1000, "parse_ms": _seconds_per_call(lambda: parse_rules(text), repeat) * 1e3}


def bench_huge_amount(repeat: int) -> dict[str, float]:
    digits = "1" * 1_000_000

    def refuse() -> None:
        try:
            parse_amount(digits, Unit.MAJOR, 2)
        except NotAssessable:
            return
        raise AssertionError("a million digits were accepted")

    return {"digits": len(digits), "refuse_us": _seconds_per_call(refuse, repeat) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7, help="timing rounds per figure (median)")
    options = parser.parse_args()
    strict = bench_strict_read(options.repeat)
    evaluate = bench_evaluate(options.repeat)
    parse = bench_parse_rules(options.repeat)
    huge = bench_huge_amount(options.repeat)
    result = {
        "benchmark": "capcore",
        "strict_read": strict,
        "evaluate": evaluate,
        "parse_rules": parse,
        "huge_amount": huge,
        "targets_met": {
            "strict_read_ratio_le_2": all(
                strict[name]["ratio"] <= 2.0 for name in STRICT_READ_TARGETS
            ),
            "evaluate_le_200us": evaluate["evaluate_us"] <= 200,
            "parse_1000_rules_le_100ms": parse["parse_ms"] <= 100,
            "huge_amount_le_1ms": huge["refuse_us"] <= 1000,
        },
    }
    print(json.dumps(result, indent=None))


if __name__ == "__main__":
    main()
