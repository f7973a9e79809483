"""An MCP client that reaches the tiny bank (``mcp_bank_server.py``) through Countersign's MCP
gateway, launched as a desktop MCP client launches a server from its config: a balance is
read at once, and a payment over the cap waits for a person at the approver's page.

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… python examples/mcp_gateway.py

The gateway's stderr, shown here, names the tools as it submits them (``bank:pay``) and, while
the payment is held, the page where it is decided. The bank runs with ``--require-receipts``:
it checks the receipt the gateway passes with each call (docs/receipts.md), so the service's
``COUNTERSIGN_PUBLIC_URL`` must be the ``COUNTERSIGN_URL`` given here (``make run`` sets it so).
Needs the client's ``mcp`` extra: ``pip install './clients/python[mcp]'``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

BANK = Path(__file__).with_name("mcp_bank_server.py")

# As in a client's config: the gateway's command, with the bank's command after "--". The
# environment carries COUNTERSIGN_URL and COUNTERSIGN_TOKEN (a config's "env" block).
GATEWAY = StdioServerParameters(
    command=sys.executable,
    args=[
        *("-m", "countersign", "mcp", "proxy", "--name", "bank", "--"),
        *(sys.executable, str(BANK), "--require-receipts"),
    ],
    env=dict(os.environ),
)

PLAN: list[tuple[str, dict[str, str]]] = [
    ("balance", {"account": "ACME"}),
    # Over the cap: a person decides.
    ("pay", {"amount": "1250.00", "currency": "USD", "invoice": "INV-0042"}),
]


async def main() -> None:
    async with stdio_client(GATEWAY) as streams, ClientSession(*streams) as session:
        await session.initialize()
        listed = await session.list_tools()
        print("tools:", ", ".join(tool.name for tool in listed.tools))
        for tool, arguments in PLAN:
            result = await session.call_tool(tool, arguments)
            text = " ".join(item.text for item in result.content if item.type == "text")
            print(f"not done: {text}" if result.is_error else f"done: {text}")


if __name__ == "__main__":
    anyio.run(main)
