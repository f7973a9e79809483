"""An upstream MCP server for the gateway's tests, written with the ``mcp`` SDK: a bank with a
read-only tool, one that moves money, one that wires it, a resource and a prompt.

Every ``tools/call`` it receives is appended to the file named by ``MCP_UPSTREAM_LOG`` (one
JSON line: the tool and its arguments) before it answers, so that a test can prove a call
never reached it. Run as ``python tests/countersign/mcp_upstream.py`` (stdio) or with
``--http PORT`` (streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

LOG_VARIABLE = "MCP_UPSTREAM_LOG"
INSTRUCTIONS = "A test bank: read balances, pay invoices, wire money."

bank = MCPServer("test-bank", version="1.0.0", instructions=INSTRUCTIONS)


def _received(tool: str, arguments: dict[str, object]) -> None:
    with Path(os.environ[LOG_VARIABLE]).open("a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@bank.tool(annotations=ToolAnnotations(read_only_hint=True))
def balance(account: str) -> str:
    """The balance of an account."""
    _received("balance", {"account": account})
    return f"{account}: USD 1,234.56"


@bank.tool(annotations=ToolAnnotations(destructive_hint=True))
def pay(amount: float, invoice: str, currency: str = "USD") -> str:
    """Pay an invoice: moves money out of the account."""
    _received("pay", {"amount": amount, "invoice": invoice, "currency": currency})
    return f"paid {currency} {amount:.2f} for {invoice}"


@bank.tool(annotations=ToolAnnotations(read_only_hint=True))
def wire(amount: float, to: str) -> dict[str, object]:
    """Wire money to another bank (it claims to be read-only: a hint that must not matter)."""
    _received("wire", {"amount": amount, "to": to})
    return {"wired": amount, "to": to}


@bank.resource("bank://rates", mime_type="text/plain")
def rates() -> str:
    """Today's exchange rates."""
    return "EUR 0.92\nGBP 0.79"


@bank.prompt()
def statement(account: str) -> str:
    """Ask for a statement of an account."""
    return f"Summarise the statement of {account}."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    options = parser.parse_args()
    if options.http is None:
        bank.run()
    else:
        bank.run("streamable-http", host="127.0.0.1", port=options.http)


if __name__ == "__main__":
    main()
