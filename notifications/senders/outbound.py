"""The connections of one attempt: ended at its wall-clock deadline, and kept to public
addresses while ``COUNTERSIGN_NOTIFY_PRIVATE_TARGETS`` is off.

Mail (smtplib, under Django's mail API) and Apprise (requests) bound each socket operation,
not the whole attempt: a receiver that answers a byte at a time keeps every read short of any
timeout. So their attempts run in a thread of their own (``attempt_within``), and each socket
that thread connects is seen as it connects, through the interpreter's ``socket.connect``
audit event (PEP 578): at the deadline every one of them is shut down, which ends the read,
write or connect blocked on it, and any later connect of that thread is refused. The same
event checks the address each connection is actually opened to, so a name that resolves to
an internal address at send time is refused whatever it resolved to before. Webhooks are
bounded by asyncio instead, and use this for the address check only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings

from notifications.senders.result import SendResult

T = TypeVar("T")

# Seconds a delivery thread waits, after an attempt's deadline, for the attempt's thread to
# end once its sockets are shut down; past it the thread is left to end on its own (a name
# lookup cannot be interrupted), unable to connect anywhere.
GRACE_SECONDS = 2.0
TIMED_OUT = "no answer within COUNTERSIGN_NOTIFY_TIMEOUT ({seconds:g} s)"
REFUSED = "refused: the target's address is {kind} (COUNTERSIGN_NOTIFY_PRIVATE_TARGETS=0)"
LOCAL_SOCKET = "a local socket"
# The audit events that name where a socket sends: each is checked, a connect also kept.
_CONNECT = "socket.connect"
_WATCHED = frozenset({_CONNECT, "socket.sendto", "socket.sendmsg"})
_current = threading.local()

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AttemptTimedOut(TimeoutError):
    """The attempt passed its deadline: its connections were cut."""

    def __init__(self, seconds: float) -> None:
        super().__init__(TIMED_OUT.format(seconds=seconds))

    def result(self) -> SendResult:
        """The failed attempt, told as the webhook's timeout is."""
        return SendResult(ok=False, error=f"TimeoutError: {self}")


class PrivateAddressRefused(ConnectionRefusedError):
    """A connection to a non-public address, refused before it was opened."""


def address_kind(address: IPAddress) -> str | None:
    """What makes ``address`` non-public (loopback, link-local, private, non-public); None
    for a globally reachable one. An IPv4 address mapped into IPv6 is judged as itself."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_private:
        return "private"
    if not address.is_global or address.is_multicast:
        return "non-public"
    return None


def host_kind(host: str) -> str | None:
    """What makes ``host`` non-public without resolving it: an IP address as above, or the
    name ``localhost`` (and its subdomains, RFC 6761); None for any other name."""
    name = host.strip("[]").lower().rstrip(".")
    try:
        return address_kind(ipaddress.ip_address(name))
    except ValueError:
        pass
    return "loopback" if name == "localhost" or name.endswith(".localhost") else None


def resolved_kind(host: str) -> str | None:
    """What makes any address ``host`` resolves to non-public; None when all are public or the
    name does not resolve here (the connection then fails, or a proxy resolves it)."""
    kind = host_kind(host)
    if kind is not None:
        return kind
    try:
        found = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return next(
        (k for *_, sockaddr in found if (k := address_kind(_address(sockaddr))) is not None),
        None,
    )


def _address(sockaddr: Any) -> IPAddress:
    return ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])


def proxy_addresses() -> frozenset[tuple[IPAddress, int]]:
    """The addresses of the configured proxies (``HTTP_PROXY``, ``HTTPS_PROXY``): an attempt
    may connect to these whatever they are, the proxy reaching the target."""
    found: set[tuple[IPAddress, int]] = set()
    proxies = settings.COUNTERSIGN_WEBHOOK_PROXIES
    for proxy in (proxies.http, proxies.https):
        if proxy is None:
            continue
        try:
            infos = socket.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        found.update((_address(sockaddr), proxy.port) for *_, sockaddr in infos)
    return frozenset(found)


class AttemptSockets:
    """The sockets one attempt's thread connects. ``public_only``: a connection to any other
    address than a public one (or one of ``exempt``, the proxies) is refused. ``cut``: each
    is kept, to be shut down by ``expire``; without, they are only checked."""

    def __init__(
        self,
        *,
        public_only: bool,
        exempt: Iterable[tuple[IPAddress, int]] = (),
        cut: bool = True,
    ) -> None:
        self.public_only = public_only
        self.cut = cut
        # Set before the first connection, from the attempt's thread (resolving takes time).
        self.exempt = frozenset(exempt)
        self.expired = False
        self.finished = False
        self.refused = ""  # why a connection was refused, for the attempt's error
        self._lock = threading.Lock()
        # Duplicates of the sockets' descriptors: a socket wrapped for TLS after it connected
        # gives its descriptor up, and a duplicate still shuts the connection down.
        self._descriptors: list[int] = []

    def check(self, sock: socket.socket, address: Any, *, keep: bool) -> None:
        """Refuse a connection past the deadline or to a refused address; ``keep`` the
        socket to shut down at the deadline. Called by the audit hook, in the attempt's
        thread, before the connection is opened."""
        if self.expired:
            raise AttemptTimedOut(settings.COUNTERSIGN_NOTIFY_TIMEOUT)
        if self.public_only:
            kind = self._refused_kind(sock, address)
            if kind is not None:
                self.refused = REFUSED.format(kind=kind)
                raise PrivateAddressRefused(self.refused)
        if keep and self.cut:
            with self._lock:
                if self.expired:
                    raise AttemptTimedOut(settings.COUNTERSIGN_NOTIFY_TIMEOUT)
                self._descriptors.append(os.dup(sock.fileno()))

    def check_host(self, host: str) -> None:
        """Refuse ``host`` if any address it resolves to is not public: for a connection
        that a proxy opens, which this process never sees."""
        kind = resolved_kind(host)
        if kind is not None:
            self.refused = REFUSED.format(kind=kind)
            raise PrivateAddressRefused(self.refused)

    def _refused_kind(self, sock: socket.socket, address: Any) -> str | None:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return LOCAL_SOCKET  # a Unix socket is on this machine
        try:
            ip = _address(address)
        except (ValueError, TypeError, IndexError):
            return "not an IP address"
        if (ip, int(address[1])) in self.exempt:
            return None
        return address_kind(ip)

    def finish(self) -> None:
        """The attempt's work has returned: a deadline that comes now cuts nothing."""
        with self._lock:
            self.finished = True

    def expire(self) -> bool:
        """The deadline: shut every connection down, and refuse any later one; False if the
        attempt finished first."""
        with self._lock:
            if self.finished:
                return False
            self.expired = True
            descriptors, self._descriptors = self._descriptors, []
        for descriptor in descriptors:
            # Closed by the other end already, or never connected: nothing to end.
            with socket.socket(fileno=descriptor) as duplicate, contextlib.suppress(OSError):
                duplicate.shutdown(socket.SHUT_RDWR)
        return True

    def close(self) -> None:
        """Let the duplicates go once the attempt has ended."""
        with self._lock:
            descriptors, self._descriptors = self._descriptors, []
        for descriptor in descriptors:
            os.close(descriptor)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audited event of the process: a set lookup for all others.
    if event in _WATCHED:
        sockets: AttemptSockets | None = getattr(_current, "sockets", None)
        if sockets is not None:
            sockets.check(args[0], args[1], keep=event == _CONNECT)


_hook_lock = threading.Lock()
_hook_added = False


def _hook_once() -> None:
    """Add the audit hook (it can never be removed) when the first attempt needs it: every
    audited event of the process pays a call from then on, so a process that never watches
    an attempt (webhooks only, private targets allowed) never has it."""
    global _hook_added
    with _hook_lock:
        if not _hook_added:
            sys.addaudithook(_audit)
            _hook_added = True


@contextmanager
def watched(sockets: AttemptSockets) -> Iterator[AttemptSockets]:
    """The current thread's connections checked and kept by ``sockets`` meanwhile."""
    _hook_once()
    outer = getattr(_current, "sockets", None)
    _current.sockets = sockets
    try:
        yield sockets
    finally:
        _current.sockets = outer


def attempt_within(work: Callable[[], T], *, seconds: float, sockets: AttemptSockets) -> T:
    """``work()`` in a thread of its own whose connections ``sockets`` watches; its result,
    or its exception. Past ``seconds`` its connections are shut down and ``AttemptTimedOut``
    is raised within ``GRACE_SECONDS`` more, the thread ended or not."""
    outcome: list[T] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            with watched(sockets):
                outcome.append(work())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)
        finally:
            sockets.finish()
            sockets.close()
            done.set()

    threading.Thread(target=run, name="notify-attempt", daemon=True).start()
    if not done.wait(seconds):
        if sockets.expire():
            done.wait(GRACE_SECONDS)  # its sockets shut, it ends at once but for a lookup
            raise AttemptTimedOut(seconds)
        done.wait()  # it finished just then, in time: its outcome stands
    if failure:
        raise failure[0]
    return outcome[0]
