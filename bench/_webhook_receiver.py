"""A webhook receiver in a process of its own, for ``notify_bench.py``: a threaded
``http.server`` that verifies nothing, answers 204 over kept-alive connections, and writes
one line per message to stdout: its arrival (``time.perf_counter()``, the system's monotonic
clock, which the bench process reads too), its ``webhook-id`` and its call's id.

Its own process, so that parsing the webhooks takes no turn of the GIL from the load
generator's clients in the bench process during one phase and not the other.

Usage: python bench/_webhook_receiver.py  (prints its port on its first line)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_out = threading.Lock()


class Receiver(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept alive, as a real receiver's are

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        moment = time.perf_counter()
        call_id = json.loads(body)["data"]["call"]["id"]
        line = f"{moment!r} {self.headers['webhook-id']} {call_id}\n"
        with _out:
            sys.stdout.write(line)
            sys.stdout.flush()
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    receiver.daemon_threads = True
    print(receiver.server_address[1], flush=True)
    receiver.serve_forever()


if __name__ == "__main__":
    main()
