"""Claude Code: a PreToolUse command hook that asks Countersign before every tool runs, and
the command that installs it into Claude Code's settings.

``countersign hook claude-code`` reads the hook input on stdin, submits the tool call, waits
for the final state, and prints one decision as JSON on stdout with exit status 0. Anything
that keeps it from a decision — input that is not the documented JSON, no URL or token, the
service unreachable or answering an error, a signal — is one line on stderr and exit status
2, which Claude Code takes as a block. It never exits 1: Claude Code lets a tool run after a
hook's other failures.

One hard deadline bounds the whole run, whatever the service does (silent, or dribbling its
answers a byte at a time): the wait for a decision ends ``--timeout`` seconds after the hook
starts, the cancel after it gets ``WITHDRAW_TIMEOUT``, and a watchdog thread ends the process
with the blocking answer ``HARD_MARGIN`` seconds after ``--timeout`` if it is still running.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from countersign import bounded, errors, protocol, waiting
from countersign.client import Client

EXIT_DECIDED = 0
EXIT_BLOCK = 2

DEFAULT_TIMEOUT = 3600.0
# Claude Code lets the tool run when a hook outlives the hook's own timeout (unless the entry
# says onFailure "block", which only Claude Code 2.1.295 and later read), so the installed entry
# gives the hook its whole run, the hard deadline's margin included, and more.
CLAUDE_TIMEOUT_MARGIN = 60
# The watchdog's margin past --timeout: room for the cancel at the deadline (WITHDRAW_TIMEOUT)
# to finish first, and, with the interpreter's start, still within --timeout + 15 s.
HARD_MARGIN = 10.0
ON_FAILURE = "block"  # Claude Code blocks the tool when the hook cannot start, crashes or times out
# Each request is short, and a lost service is given up on after this long, so that an
# unreachable service blocks the tool within about 30 seconds rather than hanging the session.
REQUEST_TIMEOUT = 5.0
RECONNECT_FOR = 20.0
CONTEXT_LIMIT = 4000  # the service's limit on a call's context
EVENT = "PreToolUse"
DEFAULT_MATCHER = "*"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

BAD_INPUT = "The hook input is not Claude Code's PreToolUse JSON: {problem}."
NOT_JSON = "it is not JSON"
NOT_AN_OBJECT = "it is not a JSON object"
BAD_FIELD = "{field} is missing or not {kind}"
NOT_PRE_TOOL_USE = "hook_event_name is not PreToolUse"
BAD_EDIT = "The approver's edited arguments are not a JSON object: the tool must not run."
STOPPED = "Stopped by a signal before a decision; {outcome}. The tool must not run."
STOPPED_CANCELLED = "the call was cancelled"
STOPPED_NOT_CANCELLED = "the call could not be cancelled ({detail})"
STOPPED_NOT_SUBMITTED = (
    "if the service received the call before that, it stays pending until it expires"
)
FAILED = "Countersign could not decide this call ({kind}): the tool must not run."
OVERRAN = (
    "No decision from Countersign within the hook's deadline ({seconds:g} seconds): the tool "
    "must not run. A call the service received stays pending until it expires."
)
BLOCK_LINE = "countersign: {message}"

CONTEXT = "Claude Code, working in {cwd}"
CONTEXT_DESCRIPTION = "{context}: {description}"
ALLOWED = "Countersign: allowed by policy."
APPROVED = "Countersign: approved by {by}."
APPROVED_COMMENT = "Countersign: approved by {by}: {comment}"
NOT_APPROVED = "Countersign: {message}"

NOT_SETTINGS = "{path} is not a JSON object of Claude Code settings: nothing was changed."
NOT_HOOKS = "{path}: {where} is not what Claude Code reads there: nothing was changed."
UNCHANGED = "{path}: the Countersign hook is there already as asked; nothing changed."
ADDED = "{path}: added a {event} hook for tools matching {matcher!r}: {command}"
REPLACED = (
    "{path}: replaced the Countersign {event} hook ({before}) with one for tools matching "
    "{matcher!r}: {command}"
)
CREATED = "{path}: created."
WAITS = (
    "Claude Code waits up to {seconds} s for it. It reads COUNTERSIGN_URL and COUNTERSIGN_TOKEN "
    "from the environment Claude Code runs in; no token is written to {path}."
)
# An installed hook of ours, whichever way it is spelled (the console script or python -m).
OURS = re.compile(r"\bcountersign hook claude-code\b")


class HookFailed(Exception):
    """What keeps the hook from a decision: blocks the tool with exit status 2."""


class SettingsUnfit(Exception):
    """The settings file cannot be merged into: nothing is written."""


class _Stopped(BaseException):
    """A stop signal arrived: end the wait, cancel the call, block. A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that no ``except Exception`` on the way swallows it."""


@dataclass(frozen=True, slots=True)
class HookInput:
    """What the hook uses of Claude Code's PreToolUse input."""

    tool_name: str
    tool_input: dict[str, Any]
    session_id: str
    tool_use_id: str
    cwd: str

    def context(self) -> str:
        """What the approver reads as the reason: where Claude Code works, and for ``Bash``
        the description the model gave its command."""
        context = CONTEXT.format(cwd=self.cwd or "an unnamed directory")
        description = self.tool_input.get("description")
        if self.tool_name == "Bash" and isinstance(description, str) and description:
            context = CONTEXT_DESCRIPTION.format(context=context, description=description)
        return context[:CONTEXT_LIMIT]


def hook_input(text: str) -> HookInput:
    """The hook input read strictly; ``HookFailed`` names the part that is wrong, never its
    value. Numbers are read as ``Decimal`` so that the arguments go as the model wrote them."""
    try:
        data = json.loads(text, parse_float=Decimal)
    except ValueError:
        raise HookFailed(BAD_INPUT.format(problem=NOT_JSON)) from None
    if not isinstance(data, dict):
        raise HookFailed(BAD_INPUT.format(problem=NOT_AN_OBJECT))
    if data.get("hook_event_name", EVENT) != EVENT:
        raise HookFailed(BAD_INPUT.format(problem=NOT_PRE_TOOL_USE))
    for field in ("tool_name", "session_id", "tool_use_id"):
        if not isinstance(data.get(field), str) or not data[field]:
            raise HookFailed(BAD_INPUT.format(problem=BAD_FIELD.format(field=field, kind="text")))
    if not isinstance(data.get("tool_input"), dict):
        problem = BAD_FIELD.format(field="tool_input", kind="an object")
        raise HookFailed(BAD_INPUT.format(problem=problem))
    cwd = data.get("cwd", "")
    if not isinstance(cwd, str):
        raise HookFailed(BAD_INPUT.format(problem=BAD_FIELD.format(field="cwd", kind="text")))
    return HookInput(
        tool_name=data["tool_name"],
        tool_input=data["tool_input"],
        session_id=data["session_id"],
        tool_use_id=data["tool_use_id"],
        cwd=cwd,
    )


def _output(decision: str, reason: str, updated: Mapping[str, Any] | None = None) -> str:
    output: dict[str, Any] = {
        "hookEventName": EVENT,
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }
    if updated is not None:
        output["updatedInput"] = updated
    # Numbers as written, so that an edited amount keeps its digits.
    return protocol.json_as_written({"hookSpecificOutput": output})


def _edited_input(state: protocol.CallState) -> dict[str, Any]:
    try:
        edited = json.loads(state["arguments"], parse_float=Decimal)
    except (KeyError, TypeError, ValueError):
        raise HookFailed(BAD_EDIT) from None
    if not isinstance(edited, dict):
        raise HookFailed(BAD_EDIT)
    return edited


def decision_for(state: protocol.CallState) -> str:
    """The hook's stdout for a final call state: ``allow`` for allowed or approved (with the
    approver's edited arguments as ``updatedInput``), ``deny`` with the reason otherwise."""
    if state["status"] not in protocol.GO_STATUSES:
        return _output("deny", NOT_APPROVED.format(message=errors.Denied(state)))
    decision = state.get("decision") or {}
    if not decision:
        reason = ALLOWED
    elif decision.get("comment"):
        reason = APPROVED_COMMENT.format(by=decision.get("by"), comment=decision["comment"])
    else:
        reason = APPROVED.format(by=decision.get("by"))
    updated = _edited_input(state) if state.get("edited") is True else None
    return _output("allow", reason, updated)


def timed_out(error: errors.TimedOut, *, seconds: float) -> str:
    """The hook's stdout when its wait ran out ``seconds`` after the hook started: ``deny``,
    saying it stopped waiting, and whether it cancelled the call."""
    cause = error.__cause__
    if error.cancelled:
        message = errors.DEADLINE_CANCELLED.format(seconds=seconds)
    elif isinstance(cause, Exception):
        detail = waiting.failure_detail(cause)
        message = errors.DEADLINE_NOT_CANCELLED.format(seconds=seconds, detail=detail)
    else:
        message = str(error)
    return _output("deny", NOT_APPROVED.format(message=message))


@contextmanager
def _stop_signals() -> Iterator[None]:
    """Claude Code ends a hook with a signal when its user interrupts it: the wait ends in
    ``_Stopped`` rather than a silent exit that would leave the call pending."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _decide(text: str, *, timeout: float, started: float) -> str:
    call = hook_input(text)
    try:
        client = Client(timeout=REQUEST_TIMEOUT, reconnect_for=RECONNECT_FOR)
    except ValueError as error:
        raise HookFailed(str(error)) from None
    state: protocol.CallState | None = None
    with client:
        try:
            state = client.submit(
                call.tool_name,
                protocol.json_as_written(call.tool_input),  # numbers as the model wrote them
                run_id=call.session_id,
                context=call.context(),
                idempotency_key=call.tool_use_id,
            )
            # The submit's time counts: the wait ends --timeout seconds after the hook began.
            final = client.wait(state, deadline=timeout - (time.monotonic() - started))
        except errors.TimedOut as error:
            return timed_out(error, seconds=timeout)
        except _Stopped:
            raise HookFailed(STOPPED.format(outcome=_withdraw(client, state))) from None
        except errors.NotApproved as error:
            raise HookFailed(str(error)) from None
    return decision_for(final)


def _withdraw(client: Client, state: protocol.CallState | None) -> str:
    if state is None:
        return STOPPED_NOT_SUBMITTED
    try:
        bounded.within(waiting.WITHDRAW_TIMEOUT, lambda: client.cancel(state))
    except (errors.NotApproved, bounded.NoAnswer) as error:
        return STOPPED_NOT_CANCELLED.format(detail=waiting.failure_detail(error))
    return STOPPED_CANCELLED


class _Answer:
    """The hook's one answer, given once: by the hook when it has one, else by the watchdog
    at the hard deadline, which then ends the process with it.

    A watchdog thread rather than a bound on each step: it also ends what no request timeout
    reaches (a stdin never closed, a name lookup that hangs, a service dribbling its answers)."""

    def __init__(self, stderr: TextIO, *, seconds: float) -> None:
        self._stderr = stderr
        self._seconds = seconds
        self._given = threading.Lock()
        self._watchdog = threading.Timer(seconds, self._overran)
        self._watchdog.daemon = True
        self._watchdog.start()

    def give(self, stream: TextIO, line: str) -> None:
        """Write the answer, unless the watchdog is giving its own (it then ends the process)."""
        self._given.acquire()
        self._watchdog.cancel()
        stream.write(line + "\n")
        stream.flush()

    def _overran(self) -> None:
        if not self._given.acquire(blocking=False):
            return  # the hook is writing its answer
        message = OVERRAN.format(seconds=self._seconds)
        self._stderr.write(BLOCK_LINE.format(message=message) + "\n")
        self._stderr.flush()
        os._exit(EXIT_BLOCK)


def hook(stdin: TextIO, stdout: TextIO, stderr: TextIO, *, timeout: float) -> int:
    """``countersign hook claude-code``: the exit status; one JSON decision on stdout (0), or
    one line on stderr (2). Every failure blocks, including the unforeseen; a run still going
    ``HARD_MARGIN`` seconds past ``timeout`` ends the process with status 2."""
    started = time.monotonic()
    answer = _Answer(stderr, seconds=timeout + HARD_MARGIN)
    try:
        with _stop_signals():
            output = _decide(stdin.read(), timeout=timeout, started=started)
    except HookFailed as failure:
        message = str(failure)
    except _Stopped:
        message = STOPPED.format(outcome=STOPPED_NOT_SUBMITTED)
    except Exception as error:  # whatever it is, the tool must not run
        message = FAILED.format(kind=type(error).__name__)
    else:
        answer.give(stdout, output)
        return EXIT_DECIDED
    answer.give(stderr, BLOCK_LINE.format(message=" ".join(message.split())))
    return EXIT_BLOCK


# --- install -----------------------------------------------------------------------------


def settings_path(*, project: Path | None, user: bool) -> Path:
    """``~/.claude/settings.json`` for ``user``, else the project's (the current directory's
    when none is named)."""
    base = Path.home() if user else (project or Path.cwd())
    return base / ".claude" / "settings.json"


def hook_command(*, timeout: float, python: str = sys.executable) -> str:
    """The command Claude Code runs: this interpreter, so the hook finds this installation of
    the client whatever Claude Code's PATH is."""
    return f"{shlex.quote(python)} -m countersign hook claude-code --timeout {timeout:g}"


def hook_entry(*, timeout: float, python: str = sys.executable) -> dict[str, Any]:
    """The settings' entry: the command, Claude Code's own timeout for it, and ``onFailure``
    so that a hook Claude Code cannot start, that crashes or that outlives that timeout blocks
    the tool (Claude Code before 2.1.295 ignores the key, and the hook's own deadline guards)."""
    return {
        "type": "command",
        "command": hook_command(timeout=timeout, python=python),
        "timeout": math.ceil(timeout) + CLAUDE_TIMEOUT_MARGIN,
        "onFailure": ON_FAILURE,
    }


def _ours(entry: object) -> bool:
    return isinstance(entry, dict) and bool(OURS.search(str(entry.get("command", ""))))


def merged(
    settings: dict[str, Any], *, matcher: str, entry: dict[str, Any], path: Path
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The settings with our hook in them, once: every other setting and hook kept as it was,
    any earlier entry of ours replaced where it stood. Also the groups ours was taken from."""
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsUnfit(NOT_HOOKS.format(path=path, where="hooks"))
    groups = hooks.get(EVENT, [])
    if not isinstance(groups, list):
        raise SettingsUnfit(NOT_HOOKS.format(path=path, where=f"hooks.{EVENT}"))
    ours = {"matcher": matcher, "hooks": [entry]}
    result: list[Any] = []
    replaced: list[dict[str, Any]] = []
    for group in groups:
        entries = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(entries, list) or not any(_ours(item) for item in entries):
            result.append(group)
            continue
        replaced.append(group)
        if len(replaced) == 1:  # ours takes the place of the first group it was in
            result.append(ours)
        kept = [item for item in entries if not _ours(item)]
        if kept:
            result.append({**group, "hooks": kept})
    if not replaced:
        result.append(ours)
    return {**settings, "hooks": {**hooks, EVENT: result}}, replaced


def _described(groups: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"matcher {group.get('matcher', '')!r}: {item.get('command')}"
        for group in groups
        for item in group["hooks"]
        if _ours(item)
    )


def install(*, path: Path, matcher: str, timeout: float) -> list[str]:
    """Merge the hook into the settings file at ``path`` (created if missing); the lines that
    say what changed. ``SettingsUnfit`` when the file is not settings, which it leaves alone."""
    lines: list[str] = []
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        settings = {}
        lines.append(CREATED.format(path=path))
    except (OSError, ValueError):
        raise SettingsUnfit(NOT_SETTINGS.format(path=path)) from None
    if not isinstance(settings, dict):
        raise SettingsUnfit(NOT_SETTINGS.format(path=path))
    entry = hook_entry(timeout=timeout)
    updated, replaced = merged(settings, matcher=matcher, entry=entry, path=path)
    waits = WAITS.format(seconds=entry["timeout"], path=path)
    if updated == settings:
        return [UNCHANGED.format(path=path), waits]
    _write(path, updated)
    said = {"path": path, "event": EVENT, "matcher": matcher, "command": entry["command"]}
    if replaced:
        lines.append(REPLACED.format(before=_described(replaced), **said))
    else:
        lines.append(ADDED.format(**said))
    return [*lines, waits]


def _write(path: Path, settings: Mapping[str, Any]) -> None:
    """Whole or not at all: a reader never sees half a settings file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".settings.", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(settings, out, indent=2, ensure_ascii=False)
            out.write("\n")
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
