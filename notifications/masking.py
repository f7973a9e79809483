"""A channel's target and secret as people who may not change channels see them in admin: each
secret as ``••••`` in its place, the rest as written (docs/notifications.md, "Who sees a
channel's secrets")."""

from __future__ import annotations

import functools
import ipaddress
import re

from notifications.models import NotificationChannel

Kind = NotificationChannel.Kind

SECRET_MASK = "\u2022\u2022\u2022\u2022"  # noqa: S105 (a mask)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}", re.ASCII)
_URL_REST = re.compile(
    r"(?P<netloc>[^/?#]*)(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?",
    re.DOTALL,
)
_HOST_NAME = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?",
    re.ASCII,
)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
# A query parameter's name (Apprise's ``?to=``, ``+Header=``, ``-field=``); its value may be a
# credential, its name is not.
_PARAMETER_NAME = re.compile(r"[+:-]?[A-Za-z0-9_.-]{1,64}", re.ASCII)
# Where every URL form of an Apprise service names the host it sends to, right after the
# scheme or a user's part: anywhere else that place holds a token (``slack://T…/B…/…``).
_HOST_PLACE = re.compile(r"\{schema\}://(?:[^/@]*@)?\{host\}")


def target_masked(kind: str, target: str) -> str:
    """``target`` with each part that may be a credential as ``SECRET_MASK``: a user and a
    password, each path segment, each query value, the fragment, and the host unless it is
    one (an email target is addresses, shown whole). Anything not read as a URL is masked
    whole; the scheme and a port are kept."""
    target = target.strip()
    if kind == Kind.EMAIL:
        return target
    scheme, separator, rest = target.partition("://")
    match = _URL_REST.fullmatch(rest)
    if not separator or not _SCHEME.fullmatch(scheme) or match is None:
        return SECRET_MASK
    user_part, at, host_port = match["netloc"].rpartition("@")
    shown = f"{scheme}://"
    if at:
        shown += ":".join(SECRET_MASK for _ in user_part.split(":", 1)) + "@"
    if host_port.startswith("["):
        host, _, port = host_port[1:].partition("]")
        shown_host = f"[{host}]" if _is_ip(host) else SECRET_MASK
        port = port.removeprefix(":")
    else:
        host, _, port = host_port.partition(":")
        names_host = kind == Kind.WEBHOOK or _apprise_names_host(scheme.lower())
        shown_host = host if names_host and _is_host(host) else SECRET_MASK
    shown += shown_host if host_port else ""
    if port:
        shown += ":" + (port if _PORT.fullmatch(port) else SECRET_MASK)
    shown += "/".join(SECRET_MASK if segment else "" for segment in match["path"].split("/"))
    if match["query"] is not None:
        shown += "?" + "&".join(_parameter(pair) for pair in match["query"].split("&"))
    if match["fragment"] is not None:
        shown += "#" + SECRET_MASK
    return shown


def secret_masked(secret: str) -> str:
    return SECRET_MASK if secret else ""


def _parameter(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    if not pair:
        return ""
    if equals and _PARAMETER_NAME.fullmatch(name):
        return f"{name}={SECRET_MASK}"
    return SECRET_MASK


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_host(text: str) -> bool:
    return bool(text) and (_is_ip(text) or bool(_HOST_NAME.fullmatch(text)))


@functools.lru_cache(maxsize=256)
def _apprise_names_host(scheme: str) -> bool:
    """Whether every URL form of Apprise's service for ``scheme`` has a host where a URL has
    one; False for a scheme Apprise does not know."""
    # Imported here: Apprise loads every service it has, which only this question needs.
    import apprise

    services = apprise.NotificationManager()  # type: ignore[no-untyped-call]
    if scheme not in services:
        return False
    templates = getattr(services[scheme], "templates", None) or ()
    return bool(templates) and all(_HOST_PLACE.match(str(form)) for form in templates)
