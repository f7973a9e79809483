"""Schemathesis against ``/api/v1/openapi.json`` on a live server (issue 6): every operation,
with a valid bearer token, positive and negative cases, checked for server errors and for
responses that the document does not describe (status, content type, headers, body schema).

Bounded: ``MAX_EXAMPLES`` cases per operation and mode, derandomised (the same cases every
run), and the server's longest long-poll is one second.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from approvals.services.rules import cap_rule_save
from tests.scale.servers import agent_create, bearer, workers

pytestmark = pytest.mark.django_db(transaction=True)

MAX_EXAMPLES = 30


def _checks() -> list[Any]:
    """Server errors and conformance of every response to the document. Not the stricter
    positive_data_acceptance / negative_data_rejection: the first trips over refusals no
    schema can state (a principal the agent may not act for, cancelling a final call), the
    second over the token this test adds to every case, including those meant to lack one."""
    base = pytest.importorskip("schemathesis.checks")
    openapi = pytest.importorskip("schemathesis.specs.openapi.checks")
    return [
        base.not_a_server_error,
        openapi.status_code_conformance,
        openapi.content_type_conformance,
        openapi.response_headers_conformance,
        openapi.response_schema_conformance,
    ]


def _run(operation: Any, strategy: Any, base_url: str, token: str, statuses: Counter[int]) -> int:
    """Run one operation's cases; how many there were. Counts the answers' statuses."""
    count = 0
    checks = _checks()

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        nonlocal count
        count += 1
        response = case.call_and_validate(
            base_url=base_url, headers=bearer(token), checks=checks, timeout=15
        )
        statuses[response.status_code] += 1

    try:
        check()
    except Unsatisfiable:
        # Negative mode, and nothing in the operation to make invalid (no parameters, or
        # only the fixed call id).
        assert count == 0
    return count


def test_the_api_keeps_its_openapi_document(transactional_db: None) -> None:
    schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    _, token = agent_create("schemathesis")
    with workers(1, {"COUNTERSIGN_MAX_WAIT": "1"}) as (server,):
        api = httpx.Client(base_url=server.url, headers=bearer(token), timeout=10)
        final = api.post("/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "1"}'})
        held = api.post("/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "600"}'})
        assert (final.json()["status"], held.json()["status"]) == ("allowed", "pending")
        api.close()

        schema = schemathesis.openapi.from_url(f"{server.url}/api/v1/openapi.json", timeout=10)
        cases: dict[str, int] = {}
        statuses: Counter[int] = Counter()
        for result in schema.get_all_operations():
            operation = result.ok()
            runs: list[tuple[str, dict[str, Any] | None]] = [("", None)]
            if "{call_id}" in operation.path:
                # Random ids are 404s: also run against a final call and a held one.
                runs += [
                    (" (final call)", {"call_id": final.json()["id"]}),
                    (" (held call)", {"call_id": held.json()["id"]}),
                ]
            for mode in (
                schemathesis.GenerationMode.POSITIVE,
                schemathesis.GenerationMode.NEGATIVE,
            ):
                for label, path_parameters in runs:
                    strategy = operation.as_strategy(
                        generation_mode=mode, path_parameters=path_parameters
                    )
                    name = f"{operation.method.upper()} {operation.path} {mode.value}{label}"
                    cases[name] = _run(operation, strategy, server.url, token, statuses)

    total = sum(cases.values())
    print(
        f"\nschemathesis: {total} cases over {len(cases)} runs; statuses {sorted(statuses.items())}"
    )
    for name, count in cases.items():
        print(f"  {count:4} {name}")
    operations = {name.split(" ")[0] + " " + name.split(" ")[1] for name in cases}
    assert operations == {
        "POST /api/v1/calls",
        "POST /api/v1/calls/simulate",
        "GET /api/v1/calls",
        "GET /api/v1/calls/{call_id}",
        "POST /api/v1/calls/{call_id}/cancel",
        "GET /api/v1/calls/{call_id}/wait",
        "GET /api/v1/currencies",
        "GET /api/v1/audit",
        "GET /api/v1/audit/head",
    }
    assert total >= 200
    # Authenticated for real: calls were read, listed, waited for, cancelled and created.
    assert {200, 201, 400, 404, 409} <= set(statuses)
    assert not any(status >= 500 for status in statuses)


def test_the_documented_tool_pattern_is_anchored_at_both_ends(client: Any) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    body = schema["paths"]["/api/v1/calls"]["post"]["requestBody"]["content"]["application/json"]
    pattern = body["schema"]["properties"]["tool"]["pattern"]
    assert re.search(pattern, "pay") is not None
    for refused in ("¸H_TQSP-", "no spaces allowed", "-pay"):
        assert re.search(pattern, refused) is None, refused
