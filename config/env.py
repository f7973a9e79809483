"""Readers for settings that come from environment variables.

Each reader refuses a malformed value at start-up rather than guessing: a typo in
``COUNTERSIGN_HTTPS`` must not quietly run production without TLS settings.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.validators import validate_email

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
_RATE = re.compile(r"(?P<count>[1-9][0-9]{0,8})/(?P<period>[smh])", re.ASCII)
_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600}
ALL_CHOICES = "all"
UNKNOWN_CHOICES = "{name} names {unknown}: choose from {choices}, or all"


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return _bool(name, raw)


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,12}", text, re.ASCII):
        raise ImproperlyConfigured(f"{name} must be a whole number")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}")
    return value


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_rate(name: str, default: str) -> tuple[int, int] | None:
    """``N/s``, ``N/m`` or ``N/h`` as (count, window seconds); ``0`` turns the limit off."""
    text = env_str(name, default).strip()
    if text == "0":
        return None
    match = _RATE.fullmatch(text)
    if match is None:
        raise ImproperlyConfigured(f"{name} must look like 600/m (N/s, N/m or N/h) or be 0")
    return int(match["count"]), _PERIOD_SECONDS[match["period"]]


def env_choices(name: str, choices: Iterable[str]) -> frozenset[str]:
    """A comma-separated subset of ``choices``, or ``all`` of them; none when unset."""
    allowed = frozenset(choices)
    named = {item.lower() for item in env_list(name, "")}
    if ALL_CHOICES in named:
        return allowed
    unknown = named - allowed
    if unknown:
        raise ImproperlyConfigured(
            UNKNOWN_CHOICES.format(
                name=name, unknown=", ".join(sorted(unknown)), choices=", ".join(sorted(allowed))
            )
        )
    return frozenset(named)


def secret_key(path: Path) -> str:
    """``SECRET_KEY`` from the environment, else one generated once and kept in ``path``."""
    configured = os.environ.get("SECRET_KEY")
    if configured:
        return configured
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write aside, then link into place: when several workers start at once, exactly one key
    # wins and nobody ever reads a half-written file.
    fd, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o600)  # the owner's alone, whatever the umask (mkstemp's mode is filtered)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(50))
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)
    return path.read_text().strip()


# Seconds: more than channels_redis's 5 s blocking pop, and less than the database pool's 10 s
# wait, since a push hanging after a commit keeps its thread's connection (15 s starved 200
# racing submissions on PostgreSQL + Redis).
REDIS_READ_TIMEOUT = 7
REDIS_CONNECT_TIMEOUT = 2  # seconds
REDIS_MAX_CONNECTIONS = 1000  # per process
# Messages waiting per channel key. channels_redis queues every process-local channel of a
# worker under one key, so its default of 100 silently dropped pushes beyond the 100th when
# many calls were decided at once (a bulk approval).
CHANNEL_CAPACITY = 50_000
REDIS_LAYER = "config.runtime.redis_layer.WaitingRedisChannelLayer"
STOCK_REDIS_LAYER = "channels_redis.core.RedisChannelLayer"


def redis_channel_layer(url: str, *, stock: bool = False) -> dict[str, Any]:
    """The Channels layer on the Redis at ``url``.

    channels_redis waits for messages with a 5 s BZPOPMIN, and redis-py's default read
    timeout is also 5 s: an idle receive could time out just as Redis answered, and the
    socket's consumer would die with it. Reads get more than that. redis-py's default pool of
    100 connections refuses a burst of agents joining their groups at once (seen with 300):
    the pool gets more room, and a command waits for a free connection rather than fail
    (``config.runtime.redis_layer``; ``stock``: channels_redis's own layer, which fails).
    And see ``CHANNEL_CAPACITY``.
    """
    host = {
        "address": url,
        "socket_timeout": REDIS_READ_TIMEOUT,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT,
        "max_connections": REDIS_MAX_CONNECTIONS,
    }
    return {
        "BACKEND": STOCK_REDIS_LAYER if stock else REDIS_LAYER,
        "CONFIG": {"hosts": [host], "capacity": CHANNEL_CAPACITY},
    }


# --- Email ----------------------------------------------------------------------------------
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
# Printed in short (each mail's recipients, subject and text) rather than whole.
CONSOLE_BACKEND = "notifications.senders.console.EmailBackend"
# EMAIL_URL's schemes: the port each defaults to, and its TLS (None: not SMTP).
EMAIL_SCHEMES: dict[str, tuple[int, str] | None] = {
    "smtp": (25, "none"),  # plain, unless ?tls=1 (STARTTLS) or ?ssl=1 (TLS from the start)
    "submission": (587, "tls"),  # STARTTLS
    "smtps": (465, "ssl"),  # TLS from the start
    "console": None,  # printed to the server's output
}
TLS_PORTS = {"tls": 587, "ssl": 465}
EMAIL_OPTIONS = frozenset({"tls", "ssl", "from"})
DEFAULT_FROM_EMAIL = "countersign@localhost"
# The value is never repeated in an error: it may hold a password.
BAD_EMAIL_URL = "{name} {problem}; the form is smtp://user:password@host:587?tls=1"


@dataclass(frozen=True)
class EmailSettings:
    """Django's ``EMAIL_*`` settings, and whether any mail server was configured."""

    backend: str
    host: str = "localhost"
    port: int = 25
    user: str = ""
    password: str = ""
    use_tls: bool = False
    use_ssl: bool = False
    from_email: str = DEFAULT_FROM_EMAIL
    configured: bool = False


def _email_problem(name: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(BAD_EMAIL_URL.format(name=name, problem=problem))


def _address(name: str, value: str) -> str:
    try:
        validate_email(value)
    except ValidationError:
        raise ImproperlyConfigured(f"{name} must be an email address") from None
    return value


def parse_email_url(url: str, *, name: str = "EMAIL_URL") -> EmailSettings:
    """``smtp://user:password@host:port?tls=1``, ``submission://…`` (STARTTLS, port 587),
    ``smtps://…`` (TLS, port 465) or ``console://``; the user and password percent-encoded;
    ``?from=address`` sets the sender. Anything else is refused, without repeating it."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise _email_problem(name, "is not a URL with a valid port") from None
    scheme = parts.scheme.lower()
    if scheme not in EMAIL_SCHEMES:
        raise _email_problem(name, "must start with " + ", ".join(f"{s}://" for s in EMAIL_SCHEMES))
    defaults = EMAIL_SCHEMES[scheme]
    if parts.path not in ("", "/") or parts.fragment:
        raise _email_problem(name, "has a path or fragment, which means nothing here")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise _email_problem(name, "has a malformed query") from None
    options = dict(pairs)
    if len(options) != len(pairs):
        raise _email_problem(name, "repeats an option")
    unknown = set(options) - EMAIL_OPTIONS
    if unknown:
        raise _email_problem(name, "has an unknown option (known: from, ssl, tls)")
    from_email = _address(f"{name}'s from", options["from"]) if "from" in options else ""
    if defaults is None:
        if parts.netloc or set(options) - {"from"}:
            raise _email_problem(name, "console:// takes no host and no options but from")
        return EmailSettings(
            backend=CONSOLE_BACKEND, from_email=from_email or DEFAULT_FROM_EMAIL, configured=True
        )
    default_port, tls = defaults
    if not parts.hostname:
        raise _email_problem(name, "names no host")
    use_tls = _bool(f"{name}'s tls", options["tls"]) if "tls" in options else tls == "tls"
    use_ssl = _bool(f"{name}'s ssl", options["ssl"]) if "ssl" in options else tls == "ssl"
    if use_tls and use_ssl:
        raise _email_problem(name, "asks for both tls (STARTTLS) and ssl (TLS from the start)")
    if port is None:
        port = TLS_PORTS["ssl"] if use_ssl else TLS_PORTS["tls"] if use_tls else default_port
    if port == 0:
        raise _email_problem(name, "has port 0")
    return EmailSettings(
        backend=SMTP_BACKEND,
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        use_tls=use_tls,
        use_ssl=use_ssl,
        from_email=from_email or DEFAULT_FROM_EMAIL,
        configured=True,
    )


def email_settings(*, debug: bool) -> EmailSettings:
    """From ``EMAIL_URL`` if set, else Django's own ``EMAIL_*`` variables. With neither, mail
    is printed to the console under ``DEBUG`` and otherwise handed to an SMTP server on
    localhost:25 (``configured`` False: a system check warns where email channels exist)."""
    from_email = os.environ.get("DEFAULT_FROM_EMAIL", "").strip()
    if from_email:
        _address("DEFAULT_FROM_EMAIL", from_email)
    url = os.environ.get("EMAIL_URL", "").strip()
    if url:
        found = parse_email_url(url)
        if from_email and found.from_email == DEFAULT_FROM_EMAIL:
            found = replace(found, from_email=from_email)
        return found
    host = env_str("EMAIL_HOST", "").strip()
    backend = env_str("EMAIL_BACKEND", "").strip()
    use_tls = env_bool("EMAIL_USE_TLS", False)
    use_ssl = env_bool("EMAIL_USE_SSL", False)
    if use_tls and use_ssl:
        raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be on")
    configured = bool(host or backend)
    default_backend = SMTP_BACKEND if configured or not debug else CONSOLE_BACKEND
    return EmailSettings(
        backend=backend or default_backend,
        host=host or "localhost",
        port=env_int("EMAIL_PORT", 25, minimum=1, maximum=65535),
        user=env_str("EMAIL_HOST_USER", ""),
        password=env_str("EMAIL_HOST_PASSWORD", ""),
        use_tls=use_tls,
        use_ssl=use_ssl,
        from_email=from_email or DEFAULT_FROM_EMAIL,
        configured=configured,
    )


# The value is never repeated in an error: it may hold a password.
BAD_PROXY = (
    "{name} {problem}; webhooks go through an http:// proxy, e.g. http://user:password@host:3128"
)


@dataclass(frozen=True)
class Proxy:
    """An ``http://`` proxy: where to connect, and the ``Proxy-Authorization`` value for the
    user and password in its URL, if any."""

    host: str
    port: int
    authorization: str | None = None


@dataclass(frozen=True)
class OutboundProxies:
    """The proxies of ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY`` (each also lower-case,
    which wins, as curl and Python's urllib have it): which proxy a request to a URL of each
    scheme goes through, and the hosts that are reached directly."""

    http: Proxy | None = None
    https: Proxy | None = None
    no_proxy: tuple[str, ...] = ()  # lower-case entries, without a leading dot

    def proxy_for(self, *, https: bool, host: str, port: int) -> Proxy | None:
        """The proxy a request to ``host`` goes through; None where ``NO_PROXY`` names it."""
        proxy = self.https if https else self.http
        if proxy is None or any(_bypassed(entry, host.lower(), port) for entry in self.no_proxy):
            return None
        return proxy


def _bypassed(entry: str, host: str, port: int) -> bool:
    """Whether a ``NO_PROXY`` entry names the host: ``*``; the host or a domain it is in,
    with or without ``:port``; an IP address, or a network in CIDR notation."""
    if entry == "*":
        return True
    try:
        address = ipaddress.ip_address(host)
        return address in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        pass
    name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
    if entry_port and entry_port != str(port):
        return False
    return host == name or host.endswith(f".{name}")


def _no_proxy_entries(value: str) -> tuple[str, ...]:
    entries = (entry.strip().lower().lstrip(".") for entry in value.split(","))
    return tuple(entry for entry in entries if entry)


def _proxy_variable(name: str) -> str:
    value = os.environ.get(name.lower())
    return (os.environ.get(name, "") if value is None else value).strip()


def parse_proxy_url(url: str, *, name: str) -> Proxy:
    """An ``http://`` proxy URL (``host:port`` alone means one); anything else is refused at
    start-up, never taken for no proxy: a request that should pass a proxy must not go out
    directly."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        port = parts.port or 80
    except ValueError:
        raise ImproperlyConfigured(
            BAD_PROXY.format(name=name, problem="is not a URL with a host and port")
        ) from None
    if parts.scheme != "http":
        raise ImproperlyConfigured(
            BAD_PROXY.format(name=name, problem="names a scheme other than http")
        )
    if not parts.hostname:
        raise ImproperlyConfigured(BAD_PROXY.format(name=name, problem="names no host"))
    return Proxy(parts.hostname, port, basic_credentials(parts.username, parts.password))


def basic_credentials(username: str | None, password: str | None) -> str | None:
    """The Basic authentication header value for a URL's user and password (percent-encoded,
    as a URL has them); None where it has neither."""
    if not (username or password):
        return None
    login = f"{unquote(username or '')}:{unquote(password or '')}"
    return "Basic " + base64.b64encode(login.encode()).decode()


def outbound_proxies() -> OutboundProxies:
    """The proxies webhooks go through, from the conventional variables."""
    found = {}
    for scheme in ("http", "https"):
        name = f"{scheme.upper()}_PROXY"
        url = _proxy_variable(name)
        found[scheme] = parse_proxy_url(url, name=name) if url else None
    return OutboundProxies(
        found["http"], found["https"], _no_proxy_entries(_proxy_variable("NO_PROXY"))
    )
