"""``manage.py runserver``: Django's habit, serving the project's own ASGI server.

Django's ``runserver`` serves WSGI: no WebSockets and no long-poll, so the pages never go
live and agents cannot wait. This one keeps Django's command (its address argument, its
system and migration checks, ``--noreload``, its autoreloader) and replaces only the server
it runs with ``config.serve.serve``, the one server Countersign has (docs/deploy.md), as
daphne's ``runserver`` does for daphne. The ``config`` app is listed first in
``INSTALLED_APPS`` so that this command is the one ``runserver`` finds.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.management.commands.runserver import Command as DjangoRunserver
from django.db import connections
from django.utils import autoreload

from config.serve import serve

# Django's runserver binds "0" to every address, as "0.0.0.0" does.
ANY_ADDRESS = {"0": "0.0.0.0"}  # noqa: S104 - only when asked for, as Django's runserver does
NOT_STARTED = "Error: the server did not start on {address} (its reason is above)."


class Command(DjangoRunserver):
    help = (
        "Serve Countersign's ASGI application (WebSockets and the long-poll included) with "
        "the project's server, config/serve.py, restarting it when the code changes "
        "(--noreload: not)."
    )
    # Set by Django's handle() from the address argument, before inner_run.
    addr: str
    port: str

    def inner_run(self, *args: Any, **options: Any) -> None:
        # An error silenced by the reloader's parent is raised again here, in the child.
        autoreload.raise_last_exception()
        if not options["skip_checks"]:
            self.stdout.write("Performing system checks...\n\n")
            self.check(display_num_errors=True)
        self.check_migrations()
        for connection in connections.all(initialized_only=True):
            connection.close()
        host = ANY_ADDRESS.get(self.addr, self.addr)
        shown = f"[{host}]" if ":" in host else host
        address = f"http://{shown}:{self.port}/"
        self.stdout.write(
            f"{datetime.now():%B %d, %Y - %X}\n"
            f"Countersign (settings {settings.SETTINGS_MODULE!r}, DEBUG={settings.DEBUG}) at "
            f"{address}\n"
            "The project's ASGI server (config/serve.py), WebSockets and the long-poll "
            f"included{', restarted when the code changes' if options['use_reloader'] else ''}."
            "\nQuit the server with CONTROL-C."
        )
        try:
            serve(host=host, port=int(self.port))
        except SystemExit as stopped:
            # uvicorn exits when it cannot bind or start. Under the reloader it runs in a
            # thread, where an exit would end only that thread and leave the process idle.
            if stopped.code not in (None, 0):
                self.stderr.write(NOT_STARTED.format(address=address))
                os._exit(1)
        except KeyboardInterrupt:
            sys.exit(0)
