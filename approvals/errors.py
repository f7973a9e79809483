"""The domain's refusals: one base, ``ApplicationError``, and the few kinds a surface answers.

Services and selectors raise these and nothing of HTTP; each surface turns a kind into its
own answer in one place: the agent API into an ``ApiError`` (``approvals.api.errors``), the
approver's pages into a status and a text (``approvals.web.views``), admin and the commands
into a message.
"""

from __future__ import annotations


class ApplicationError(Exception):
    """A request refused with nothing changed. ``message`` is safe to show anyone: our own
    words, naming at most what admins wrote (a rule, a gate), never what an agent sent.
    Empty when the surface's own words say it better."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class NotFound(ApplicationError):
    """What the request names does not exist, or not for whoever asks."""


class NotPermitted(ApplicationError):
    """Whoever asks may not do this."""


class Invalid(ApplicationError, ValueError):
    """What was given cannot be used as it is: a value error, so plain ``except
    ValueError`` callers keep working."""


class Conflict(ApplicationError):
    """The request is sound but the state it meets refuses it (final, changed, taken)."""


class Unavailable(ApplicationError):
    """Something the answer depends on did not answer: try again."""
