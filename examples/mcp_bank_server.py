"""A tiny MCP server to put behind Countersign's MCP gateway: a bank with a tool that reads a
balance and one that pays an invoice. Run on its own it serves MCP over stdio, as MCP clients
launch servers:

    python examples/mcp_bank_server.py

Behind the gateway (``pip install './clients/python[mcp]'``), every ``tools/call`` is asked of
Countersign first:

    countersign mcp proxy --name bank -- python examples/mcp_bank_server.py

With ``--name bank`` its tools are submitted as ``bank:balance`` and ``bank:pay`` (the gateway
logs the names at start), so a cap rule for them names them so (docs/rules.md):

    bank-payment: bank:pay arg=amount currency=currency max USD 500.00 -> gate

With ``--require-receipts`` the bank does not take the gateway's word for it: each tool runs
only with the receipt Countersign signed for that very call (docs/receipts.md), which the
gateway passes in the request's ``_meta["dev.countersign/receipt"]``. The receipt is verified
against the keys the service publishes at ``ISSUER/.well-known/jwks.json`` (``--issuer``, by
default ``COUNTERSIGN_URL``, which the gateway hands on), for the tool's name as submitted
(``--gateway-name``, ``bank`` by default) and the arguments exactly as they arrive, and each
receipt runs one call. A client that reaches the bank without the gateway, a call whose
arguments were changed on the way, or a receipt used twice is refused:

    countersign mcp proxy --name bank -- python examples/mcp_bank_server.py --require-receipts

``examples/mcp_gateway.py`` is an MCP client that does all this and calls both tools.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import ParamSpec, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

import countersign

P = ParamSpec("P")
R = TypeVar("R")
NO_ISSUER = (
    "mcp_bank_server.py: --require-receipts needs the service's address: "
    "pass --issuer URL or set COUNTERSIGN_URL."
)


def bank_server(*, issuer: str | None = None, gateway_name: str = "bank") -> MCPServer:
    """The bank; with ``issuer``, every tool requires a receipt of that service."""
    bank = MCPServer("bank", version="1.0.0", instructions="Read balances and pay invoices.")
    guard = countersign.ReplayGuard()

    def receipted(function: Callable[P, R]) -> Callable[P, R]:
        """``function`` run only with a valid receipt; a refusal is the tool's error result,
        saying why (the SDK shows any other exception as a bare crash)."""
        if issuer is None:
            return function
        tool = f"{gateway_name}:{function.__name__}" if gateway_name else function.__name__
        verified = countersign.requires_receipt(
            function, tool=tool, issuer=issuer, replay_guard=guard
        )

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return verified(*args, **kwargs)
            except countersign.ReceiptInvalid as refused:
                raise ToolError(str(refused)) from None

        return run

    @bank.tool()
    @receipted
    def balance(account: str, ctx: Context) -> str:
        """The balance of an account."""
        return f"{account}: USD 1,234.56"

    @bank.tool()
    @receipted
    def pay(amount: Decimal, currency: str, invoice: str, ctx: Context) -> str:
        """Pay an invoice: moves money out of the account."""
        return f"paid {currency} {amount} for {invoice}"

    return bank


def main() -> None:
    parser = argparse.ArgumentParser(description="A tiny MCP bank, over stdio.")
    parser.add_argument(
        "--require-receipts",
        action="store_true",
        help="run a tool only with Countersign's receipt for that call",
    )
    parser.add_argument("--issuer", help="the Countersign service (default: COUNTERSIGN_URL)")
    parser.add_argument(
        "--gateway-name",
        default="bank",
        help="the gateway's --name, which the tools are submitted under (default: bank)",
    )
    options = parser.parse_args()
    issuer = None
    if options.require_receipts:
        issuer = options.issuer or os.environ.get("COUNTERSIGN_URL")
        if not issuer:
            sys.exit(NO_ISSUER)
    bank_server(issuer=issuer, gateway_name=options.gateway_name).run()


if __name__ == "__main__":
    main()
