"""A plain-Python agent loop whose tools are gated by Countersign.

Each tool function runs only if Countersign allows it or a human approves it; otherwise a
``NotApproved`` says why (refused, denied with the reviewer's comment, expired, given up on
after the deadline, or the service unreachable), and the loop carries on. No model is
involved: the "plan" is a canned list of steps.

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… python examples/gated_agent.py
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from countersign import Client, NotApproved

client = Client()  # COUNTERSIGN_URL and COUNTERSIGN_TOKEN from the environment


@client.gated("read_file", run_id="example-run")
def read_file(path: str) -> str:
    return f"(contents of {path})"


@client.gated(
    "pay",
    run_id="example-run",
    deadline=120,  # then the call is cancelled: nobody can approve a payment that never ran
    context=lambda args: f"Paying invoice {args['invoice']} to {args['payee']['email']}",
)
def pay(amount: Decimal, currency: str, payee: dict[str, str], invoice: str) -> str:
    return f"paid {currency} {amount} to {payee['email']}"


PLAN: list[Callable[[], str]] = [
    lambda: read_file("invoices/2026-11.pdf"),
    lambda: pay(Decimal("120.00"), "USD", {"email": "ada@example.com"}, "INV-0041"),
    # Over the cap: a human decides.
    lambda: pay(Decimal("1250.00"), "USD", {"email": "bob@example.com"}, "INV-0042"),
]


def main() -> None:
    with client:
        for step in PLAN:
            try:
                print("done:", step())
            except NotApproved as no:
                print(f"not done: {no}")


if __name__ == "__main__":
    main()
