"""``manage.py demo_setup``: the demo installation behind ``make run``, and what to do next
(README.md, "A 60-second tour").

It runs just before the server starts, so it first makes sure the server can listen: a port
already taken (another ``make run``, say) stops it before it prints a banner or touches a
token, and the running server's token keeps working.
"""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from approvals.services.demo import (
    DEMO_DEFAULT_URL,
    DEMO_TOKEN_FILE,
    DEMO_URL_FILE,
    demo_ensure,
    demo_state_read,
    demo_state_write,
)

PORT_TAKEN = (
    "Port {port} on {host} is already in use (another `make run` still running?): stop it, "
    "or start on another port, e.g. `make run PORT={other}`. Nothing was changed."
)
BAD_URL = "--url must be http://HOST:PORT, e.g. http://127.0.0.1:8000"

HELD_ARGUMENTS = {"amount": "1250.00", "currency": "USD", "payee": {"email": "ada@example.com"}}
HELD_CALL = json.dumps(
    {
        "tool": "pay",
        "arguments": json.dumps(HELD_ARGUMENTS),
        "context": "Paying the November invoice",
    }
)


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise CommandError(BAD_URL) from None
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise CommandError(BAD_URL)
    return parts.hostname, port


def port_check(*, host: str, port: int) -> None:
    """``CommandError`` unless a server could listen on ``host:port`` now. The probe sets
    ``SO_REUSEADDR`` as the server (asyncio's listener) does, so connections of a server just
    stopped, left in TIME_WAIT, do not count as taken; a socket still listening does."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror:
        raise CommandError(BAD_URL) from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError:
            raise CommandError(PORT_TAKEN.format(port=port, host=host, other=port + 1)) from None


class Command(BaseCommand):
    help = (
        "Create what is missing of the demo (approvers, admin, agents, rules, gates), keeping "
        "what exists as it is; print how to use them. Stops first if the port of --url is taken."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--rules", default=str(Path(settings.BASE_DIR) / "examples" / "rules.txt")
        )
        parser.add_argument(
            "--url", default=DEMO_DEFAULT_URL, help="where the server is about to listen"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"].rstrip("/")
        host, port = _address(url)
        port_check(host=host, port=port)
        var_dir = Path(settings.VAR_DIR)
        demo = demo_ensure(
            rules_file=Path(options["rules"]),
            stored_token=demo_state_read(var_dir=var_dir, name=DEMO_TOKEN_FILE),
            url=url,
        )
        demo_state_write(var_dir=var_dir, name=DEMO_TOKEN_FILE, value=demo.token)
        demo_state_write(var_dir=var_dir, name=DEMO_URL_FILE, value=url)
        curl = (
            f"curl -sS -X POST {url}/api/v1/calls -H 'Authorization: Bearer {demo.token}' "
            f"-H 'Content-Type: application/json' -d {shlex.quote(HELD_CALL)}"
        )
        kept = "the one from the last run" if demo.token_reused else "new"
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"Countersign is starting at {url}/",
                    f"  Approvers: log in as {' or '.join(demo.approvers)}, "
                    f"password {demo.password}",
                    f"  Admin (rules, gates, agents, budgets): {url}/admin/ as {demo.admin}, "
                    f"password {demo.password}",
                    f"  Demo agent {demo.agent}, token ({kept}, kept in var/{DEMO_TOKEN_FILE}): "
                    f"{demo.token}",
                    "",
                    "Create a held call (USD 1,250.00 is over the USD 500.00 per-payment cap):",
                    f"  {curl}",
                    "  Its notifications print here: the approvers' mail, and a signed webhook "
                    "the server's demo receiver verifies.",
                    "",
                    "Watch an agent react to your decisions (in another terminal):",
                    "  .venv/bin/python manage.py demo_agent",
                    "",
                ]
            )
        )
