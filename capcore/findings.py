"""Actions and findings: what one policy says about one call, with the reason fields of the
agent API (``policy``, ``rule``, ``action``, ``gate``, ``message``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ActionKind(enum.Enum):
    GATE = "gate"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class Action:
    """Hold the call at ``gate`` (``""`` is the default gate), or refuse it."""

    kind: ActionKind
    gate: str = ""

    def __post_init__(self) -> None:
        if self.kind is ActionKind.REFUSE and self.gate:
            raise ValueError("a refusal names no gate")


REFUSE = Action(ActionKind.REFUSE)
DEFAULT_GATE = Action(ActionKind.GATE, "")


class Policy(enum.Enum):
    ARGUMENTS = "arguments"
    PERMISSION = "permission"
    BUDGET = "budget"
    CAP = "cap"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason a call was held or refused.

    ``message`` is written by capcore from rule names, categories and amounts as decimal
    text; it never contains text from the call's arguments.
    """

    policy: Policy
    rule: str | None
    action: Action
    message: str

    def as_reason(self) -> dict[str, str | None]:
        """The reason object of the agent API."""
        return {
            "policy": self.policy.value,
            "rule": self.rule,
            "action": self.action.kind.value,
            "gate": self.action.gate,
            "message": self.message,
        }
