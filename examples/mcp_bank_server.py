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

``examples/mcp_gateway.py`` is an MCP client that does all this and calls both tools.
"""

from __future__ import annotations

from decimal import Decimal

from mcp.server.mcpserver import MCPServer

bank = MCPServer("bank", version="1.0.0", instructions="Read balances and pay invoices.")


@bank.tool()
def balance(account: str) -> str:
    """The balance of an account."""
    return f"{account}: USD 1,234.56"


@bank.tool()
def pay(amount: Decimal, currency: str, invoice: str) -> str:
    """Pay an invoice: moves money out of the account."""
    return f"paid {currency} {amount} for {invoice}"


if __name__ == "__main__":
    bank.run()
