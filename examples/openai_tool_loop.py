"""An OpenAI-style tool-call loop with Countersign in the middle.

The model's reply carries ``tool_calls`` whose ``function.arguments`` is a JSON *string*; that
string is submitted verbatim, so the amount an approver sees, the amount a cap reads and the
amount the tool decodes are the same bytes. The tool runs only when the call is allowed or
approved; either way a ``tool`` message goes back into the conversation. The model's replies
are canned, so this runs without any model or network beyond Countersign itself.

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… python examples/openai_tool_loop.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from countersign import Client

GO = {"allowed", "approved"}

# What a chat-completions API would return, turn by turn.
CANNED_REPLIES: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "get_invoice",
                    "arguments": '{"invoice_id": "INV-2026-11-0042"}',
                },
            }
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_2",
                "type": "function",
                "function": {
                    "name": "pay",
                    "arguments": (
                        '{"amount": "1250.00", "currency": "USD", '
                        '"payee": {"email": "ada@example.com"}}'
                    ),
                },
            }
        ],
    },
    {"role": "assistant", "content": "The invoice is settled (or I was told not to pay it)."},
]

TOOLS: dict[str, Callable[..., str]] = {
    "get_invoice": lambda invoice_id: json.dumps(
        {"id": invoice_id, "amount": "1250.00", "currency": "USD"}
    ),
    "pay": lambda amount, currency, payee: f"paid {currency} {amount} to {payee['email']}",
}


def run(client: Client) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Pay invoice INV-2026-11-0042."}]
    for reply in CANNED_REPLIES:
        messages.append(reply)
        for tool_call in reply.get("tool_calls", []):
            function = tool_call["function"]
            state = client.call(
                function["name"], function["arguments"], run_id="openai-example", deadline=120
            )
            if state["status"] in GO:
                content = TOOLS[function["name"]](**json.loads(function["arguments"]))
            else:
                decision = state.get("decision") or {}
                content = (
                    f"Not run ({state['status']}): {decision.get('comment') or 'refused by policy'}"
                )
            messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": content})
            print(f"{function['name']}: {state['status']} -> {content}")
    return messages


def main() -> None:
    with Client(
        os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000"), os.environ["COUNTERSIGN_TOKEN"]
    ) as client:
        run(client)


if __name__ == "__main__":
    main()
