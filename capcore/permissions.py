"""The permission policy: an agent's mode, the tool classifier, and allow/ask/deny rules.

Everything here fails closed: an unknown mode holds every call,
an unpinned tool is classified by whole words (never substrings), equally specific pins with
different classes resolve to the most dangerous one, and a matching ``deny`` beats everything.
Messages name the mode, the tool class and rule ids only: the tool name is written by a model
and never appears in a finding.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from types import MappingProxyType

from capcore.findings import DEFAULT_GATE, REFUSE, Action, ActionKind, Finding, Policy

__all__ = [
    "CLAUDE_CODE_TOOLS",
    "DANGEROUS_WORDS",
    "READ_VERBS",
    "Classification",
    "Decision",
    "Mode",
    "PermissionResult",
    "PermissionRule",
    "ToolClass",
    "ToolClassPin",
    "classify_tool",
    "evaluate_permissions",
    "guess_tool_class",
    "held_by_mode_only",
    "mcp_tool_part",
    "words_of_tool",
]


class Mode(enum.Enum):
    """An agent's permission mode; the values are the strings stored in the database."""

    DEFAULT = "default"
    READ_ONLY = "read_only"
    WORKSPACE_WRITE = "workspace_write"
    DANGER_FULL_ACCESS = "danger_full_access"
    ALLOW = "allow"
    PROMPT = "prompt"

    @classmethod
    def parse(cls, value: str) -> Mode:
        """The mode stored as ``value``; anything unknown is ``PROMPT``, never a permissive
        mode.

        Matching is exact (``"Allow"`` is unknown) so a mistyped or tampered value can only
        make the agent ask more, not less.
        """
        try:
            return cls(value)
        except ValueError:
            return cls.PROMPT


class ToolClass(enum.Enum):
    READ = "read"
    WRITE = "write"
    DANGEROUS = "dangerous"


# Fail-closed order for ties between equally specific pins.
_DANGER_RANK = {ToolClass.READ: 0, ToolClass.WRITE: 1, ToolClass.DANGEROUS: 2}


class Decision(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


# The base word lists, with no project additions (docs/capcore.md). An addition belongs in
# docs/policies.md (tests/test_docs_links.py holds the two equal) and here, and is never
# `format`, `document`, `update`, `catalog`, `running` or `jobs` (the seed's substring
# matcher misclassified tools because of `rm` and `cat` inside words).
DANGEROUS_WORDS: frozenset[str] = frozenset(
    {
        "shell", "exec", "execute", "bash", "sh", "run", "command", "cmd", "sudo",
        "kill", "delete", "remove", "rm", "drop", "truncate", "destroy", "purge", "wipe", "eval",
        "deploy", "push", "publish", "http", "https", "curl", "wget", "fetch", "request",
        "webhook", "send", "email", "sms", "post", "pay", "payment", "transfer", "wire", "refund",
        "charge", "purchase", "buy", "withdraw", "grant", "revoke", "sql",
    }
)  # fmt: skip
READ_VERBS: frozenset[str] = frozenset(
    {
        "read", "list", "get", "search", "find", "view", "show", "describe", "stat",
        "query", "count", "lookup", "check", "inspect",
    }
)  # fmt: skip

# One word of a tool name, tried in order at each position of an ASCII letter/digit run:
#   an acronym directly followed by a capitalised word ("HTTP" in "getHTTPStatus"),
#   a lower-case word, optionally capitalised ("get", "Status"),
#   a trailing acronym ("HTTP" in "useHTTP"),
#   digits with no letters before them ("3" in "3d").
# Digits end the word whose letters precede them ("s3", "HTTP2"). Every other character
# (the separators _ - . / : and anything a valid tool name cannot hold) separates words, so
# no character can glue a dangerous word to its neighbour.
_WORD = re.compile(r"[A-Z]+[0-9]*(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+")


def words_of_tool(tool: str) -> list[str]:
    """The lower-cased words of a tool name, as the classifier compares them.

    ``"getHTTPStatus"`` → ``["get", "http", "status"]``; ``"s3_get"`` → ``["s3", "get"]``.
    """
    return [word.lower() for word in _WORD.findall(tool)]


# Claude Code's own tools whose words do not tell what they do, by their exact names: the
# others (Read, Edit, Write, MultiEdit, NotebookEdit, TodoWrite, Bash, WebFetch) classify by
# their words as they should. WebSearch sends what the model writes to a search engine, and
# Task starts a sub-agent that may use every tool: both reach past the machine.
CLAUDE_CODE_TOOLS: Mapping[str, ToolClass] = MappingProxyType(
    {
        "Grep": ToolClass.READ,
        "Glob": ToolClass.READ,
        "LS": ToolClass.READ,
        "WebSearch": ToolClass.DANGEROUS,
        "Task": ToolClass.DANGEROUS,
    }
)

# An MCP server's tool as Claude Code names it: mcp__<server>__<tool>, the server's name
# without a double underscore.
_MCP_TOOL = re.compile(r"mcp__(?:[^_]|_(?!_))+__(.+)", re.DOTALL)


def mcp_tool_part(tool: str) -> str:
    """The upstream tool's own name in ``mcp__<server>__<tool>``; any other name as it is."""
    match = _MCP_TOOL.fullmatch(tool)
    return tool if match is None else match[1]


def guess_tool_class(tool: str) -> ToolClass:
    """The heuristic class of a tool no admin has pinned.

    Claude Code's tools that words cannot tell are known by name (``CLAUDE_CODE_TOOLS``); an
    MCP tool named ``mcp__<server>__<tool>`` is judged by its last part alone. Then whole
    words only: any dangerous word makes it dangerous wherever it stands; otherwise a first
    word that is a read verb makes it read; anything else may change state, so write.
    """
    known = CLAUDE_CODE_TOOLS.get(tool)
    if known is not None:
        return known
    words = words_of_tool(mcp_tool_part(tool))
    if any(word in DANGEROUS_WORDS for word in words):
        return ToolClass.DANGEROUS
    if words and words[0] in READ_VERBS:
        return ToolClass.READ
    return ToolClass.WRITE


@dataclass(frozen=True, slots=True)
class ToolClassPin:
    """An admin-pinned class for a tool name or ``fnmatch`` glob (matched case-sensitively)."""

    pattern: str
    tool_class: ToolClass


@dataclass(frozen=True, slots=True)
class Classification:
    """A tool's class and whether it was guessed (no pin matched), which the UI shows."""

    tool_class: ToolClass
    guessed: bool


_GLOB_CHARS = frozenset("*?[")


def _specificity(pattern: str) -> tuple[int, int]:
    """Sort key of a matching pin: an exact name beats any glob; a longer glob beats a shorter."""
    if _GLOB_CHARS.isdisjoint(pattern):
        return (1, 0)
    return (0, len(pattern))


def classify_tool(*, tool: str, pins: Sequence[ToolClassPin]) -> Classification:
    """The class of ``tool``: the most specific matching pin, else the heuristic guess.

    Equally specific pins that disagree resolve to the most dangerous class, so a conflicting
    admin configuration asks more rather than less.
    """
    matching = [pin for pin in pins if fnmatchcase(tool, pin.pattern)]
    if not matching:
        return Classification(guess_tool_class(tool), guessed=True)
    best = max(_specificity(pin.pattern) for pin in matching)
    tool_class = max(
        (pin.tool_class for pin in matching if _specificity(pin.pattern) == best),
        key=_DANGER_RANK.__getitem__,
    )
    return Classification(tool_class, guessed=False)


def _check_aware(value: datetime, what: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime")


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """An allow/ask/deny rule for a tool name or glob, already filtered by the caller to this
    agent or all agents.

    ``run_id`` ``None`` applies to every run; ``arguments_sha256`` ``None`` to any arguments,
    else only to a call whose arguments have that digest; ``expires_at`` ``None`` never
    expires. An approval's grant is stored so: ``run_same`` is run-scoped with the call's
    digest, ``run`` run-scoped, ``hour`` expiring an hour after the approval, ``always`` none.
    """

    id: int
    pattern: str
    decision: Decision
    run_id: str | None = None
    expires_at: datetime | None = None
    arguments_sha256: str | None = None

    def __post_init__(self) -> None:
        # A naive expiry cannot be compared with `now`; refuse it where it is built.
        if self.expires_at is not None:
            _check_aware(self.expires_at, "expires_at")

    def applies(
        self, *, tool: str, run_id: str, now: datetime, arguments_sha256: str | None = None
    ) -> bool:
        """Whether this rule speaks for ``tool`` in ``run_id`` at ``now``, for arguments
        with the digest ``arguments_sha256`` (expiry is exclusive: at ``expires_at`` the rule
        is already gone). A rule bound to a digest never speaks for a call whose digest is
        unknown (``None``)."""
        return (
            fnmatchcase(tool, self.pattern)
            and (self.run_id is None or self.run_id == run_id)
            and (self.arguments_sha256 is None or self.arguments_sha256 == arguments_sha256)
            and (self.expires_at is None or now < self.expires_at)
        )


@dataclass(frozen=True, slots=True)
class PermissionResult:
    """The permission policy's findings, and the class it used.

    ``classification`` is ``None`` only when a rule decided or mode ``allow`` let the call
    through without classifying it.
    """

    findings: tuple[Finding, ...]
    classification: Classification | None


def _row(
    read: Action | None, write: Action | None, dangerous: Action | None
) -> dict[ToolClass, Action | None]:
    return {ToolClass.READ: read, ToolClass.WRITE: write, ToolClass.DANGEROUS: dangerous}


# What each mode does with each class: None passes, else the action. ALLOW (passes without
# classifying) and PROMPT (holds every class) are decided in evaluate_permissions.
_MODE_TABLE: dict[Mode, dict[ToolClass, Action | None]] = {
    #                               read  write   dangerous
    Mode.DEFAULT: _row(             None, None,   DEFAULT_GATE),
    Mode.READ_ONLY: _row(           None, REFUSE, REFUSE),
    Mode.WORKSPACE_WRITE: _row(     None, None,   REFUSE),
    Mode.DANGER_FULL_ACCESS: _row(  None, None,   None),
}  # fmt: skip


def _rule_findings(
    rules: Sequence[PermissionRule], action: Action, message: str
) -> tuple[Finding, ...]:
    return tuple(
        Finding(Policy.PERMISSION, f"permission-rule:{rule.id}", action, message)
        for rule in sorted(rules, key=lambda rule: rule.id)
    )


def _mode_finding(mode: Mode, classification: Classification, action: Action) -> Finding:
    class_name = classification.tool_class.value
    if mode is Mode.PROMPT:
        message = "mode prompt holds every call for a human"
    elif action.kind is ActionKind.REFUSE:
        message = f"mode {mode.value} refuses {class_name} tools"
    else:
        message = f"mode {mode.value} holds {class_name} tools for a human"
    if classification.guessed and mode is not Mode.PROMPT:
        message += " (class guessed)"
    return Finding(Policy.PERMISSION, f"mode:{mode.value}", action, message)


def evaluate_permissions(
    *,
    tool: str,
    mode: Mode,
    rules: Sequence[PermissionRule],
    pins: Sequence[ToolClassPin],
    run_id: str,
    now: datetime,
    arguments_sha256: str | None = None,
) -> PermissionResult:
    """The permission policy for one call; ``arguments_sha256`` is the digest of its
    arguments' text (``None``: unknown, so no rule bound to a digest applies).

    Fixed precedence: any applicable ``deny`` refuses; else any ``ask`` holds at the default
    gate; else any ``allow`` passes; else the mode decides by the tool's class. Every applicable
    rule of the deciding kind gets a finding (sorted by id), so the approver sees them all.
    """
    _check_aware(now, "now")
    applicable = [
        rule
        for rule in rules
        if rule.applies(tool=tool, run_id=run_id, now=now, arguments_sha256=arguments_sha256)
    ]
    denies = [rule for rule in applicable if rule.decision is Decision.DENY]
    if denies:
        message = "denied by a permission rule for this tool"
        return PermissionResult(_rule_findings(denies, REFUSE, message), None)
    asks = [rule for rule in applicable if rule.decision is Decision.ASK]
    if asks:
        message = "a permission rule asks a human to approve this tool"
        return PermissionResult(_rule_findings(asks, DEFAULT_GATE, message), None)
    if any(rule.decision is Decision.ALLOW for rule in applicable):
        return PermissionResult((), None)

    if mode is Mode.ALLOW:
        return PermissionResult((), None)
    classification = classify_tool(tool=tool, pins=pins)
    if mode is Mode.PROMPT:
        action: Action | None = DEFAULT_GATE
    else:
        action = _MODE_TABLE[mode][classification.tool_class]
    if action is None:
        return PermissionResult((), classification)
    return PermissionResult((_mode_finding(mode, classification, action),), classification)


def held_by_mode_only(findings: Sequence[Finding]) -> bool:
    """Whether the call was held by its permission mode and nothing else.

    Only then may an approval widen to ``scope=run``/``always`` (an allow rule): an allow rule
    answers the mode, but would not answer a cap, a budget or an ``ask``/``deny`` rule.
    """
    return bool(findings) and all(
        finding.policy is Policy.PERMISSION
        and finding.rule is not None
        and finding.rule.startswith("mode:")
        and finding.action.kind is ActionKind.GATE
        for finding in findings
    )
