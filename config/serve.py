"""The ASGI server, one way for every use: ``python -m config.serve [--host H] [--port P]``.

uvicorn, because it hands a request body to the application as it arrives: daphne (Twisted)
stores the whole body in a temporary file before the application sees a byte, so neither a
body limit nor a body timeout could act before a client had sent what it declared
(docs/deploy.md, "The ASGI server"). The options below are the ones Countersign relies on;
``make run``, ``manage.py runserver`` (with Django's autoreloader), the live-server tests and
the benchmarks all start the server through here.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os

import uvicorn

# Thousands of agents reconnecting at once after a deploy overflow a short listen backlog:
# their SYNs are dropped and retried after 1, 3, 7, 15 s. Linux caps it at somaxconn.
LISTEN_BACKLOG = 4096
# Agents and pages send nothing on their sockets: a frame larger than this is an attack.
WEBSOCKET_MAX_FRAME = 64 * 1024
# Every push is compressed once per socket when permessage-deflate is on: a change to many open
# queue pages compressed the whole queue once for each (docs/performance.md), and each socket
# kept a compressor's memory. Pages and agent states are small.
WEBSOCKET_COMPRESSION = False
APPLICATION = "config.asgi:application"
# Seconds a stopping server lets requests finish; a parked long-poll would hold it for its
# whole wait otherwise (waiters re-read the database when they reconnect).
GRACEFUL_SHUTDOWN_SECONDS = 5


def serve(*, host: str, port: int, access_log: bool = True) -> None:
    """Serve the ASGI application on ``host:port`` until stopped: ``python -m config.serve``
    and ``manage.py runserver`` (config/management/commands/runserver.py) both come here."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings

    forwarded = settings.COUNTERSIGN_FORWARDED_ALLOW_IPS
    # Django and every module it loads live as long as the process: frozen out of the cyclic
    # collector's way, a full collection no longer walks them (a pause in the pages' p99).
    importlib.import_module(APPLICATION.partition(":")[0])
    gc.freeze()
    uvicorn.run(
        APPLICATION,
        host=host,
        port=port,
        backlog=LISTEN_BACKLOG,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",
        ws_max_size=WEBSOCKET_MAX_FRAME,
        ws_per_message_deflate=WEBSOCKET_COMPRESSION,
        lifespan="on",
        # Client addresses (the login throttle's) come from X-Forwarded-For only when the
        # request comes from a proxy listed here; otherwise anyone could choose theirs.
        proxy_headers=bool(forwarded),
        forwarded_allow_ips=forwarded or None,
        server_header=False,
        access_log=access_log,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m config.serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--no-access-log", action="store_true", help="do not log a line per request"
    )
    args = parser.parse_args(argv)
    serve(host=args.host, port=args.port, access_log=not args.no_access_log)


if __name__ == "__main__":
    main()
