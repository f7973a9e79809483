"""A plain-Python agent loop whose tools are gated by Countersign.

Each tool function runs only if Countersign allows it or a human approves it; otherwise
``Denied`` says why (with the reviewer's comment), and the loop carries on. No model is
involved: the "plan" is a canned list of steps.

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… python examples/gated_agent.py
"""

from __future__ import annotations

import os
from collections.abc import Callable

from countersign import Client, Denied

client = Client(
    os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000"), os.environ["COUNTERSIGN_TOKEN"]
)


@client.gated("read_file", run_id="example-run")
def read_file(path: str) -> str:
    return f"(contents of {path})"


@client.gated("pay", run_id="example-run", deadline=120)
def pay(amount: str, currency: str, payee: dict[str, str]) -> str:
    return f"paid {currency} {amount} to {payee['email']}"


PLAN: list[Callable[[], str]] = [
    lambda: read_file("invoices/2026-11.pdf"),
    lambda: pay("120.00", "USD", {"email": "ada@example.com"}),
    lambda: pay("1250.00", "USD", {"email": "bob@example.com"}),  # over the cap: a human decides
]


def main() -> None:
    for step in PLAN:
        try:
            print("done:", step())
        except Denied as denied:
            print(f"not done ({denied.status}): {denied.comment}")
    client.close()


if __name__ == "__main__":
    main()
