"""Claude Code's hook as Claude Code runs it: a process fed the documented PreToolUse JSON on
stdin, against a live server, for each kind of tool (Bash, Edit, Read, an MCP tool), decided by
a person at the approver's forms — approved, denied with a comment, expired, given up on,
stopped by a signal — and failing closed (exit 2, one stderr line) on a lost service, a bad
token, missing settings and garbage. Against a service that dribbles its answers or never
answers, the hook ends within ``--timeout`` + 15 s and blocks the tool. Then ``install`` over
an existing settings file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from countersign import bounded, errors, waiting
from countersign.integrations import claude_code
from tests.countersign import slow_service as slow
from tests.factories import agent_with_token, gate_make, user_make
from tests.live import Approver, LiveServer, free_port, start_server

pytestmark = pytest.mark.django_db(transaction=True)

# One agent per permission mode the tests need: "default" holds dangerous tools only,
# "prompt" holds every tool, "read_only" refuses all but read tools.
DEFAULT_TOKEN = "cs_claude-default-0123456789"
PROMPT_TOKEN = "cs_claude-prompt-0123456789"
READ_ONLY_TOKEN = "cs_claude-read-only-0123456789"
APPROVER, PASSWORD = "alice", "pw"
CWD = "/home/dev/project"
WAIT = 20.0  # the longest any step here may take: a guard against hangs, not a measure

BASH = ("Bash", {"command": "git push origin main", "description": "Push the fix to main"})
EDIT = (
    "Edit",
    {"file_path": f"{CWD}/app.py", "old_string": "rate = 1.10", "new_string": "rate = 1.25"},
)
READ = ("Read", {"file_path": f"{CWD}/README.md"})
MCP = (
    "mcp__github__create_issue",
    {"owner": "acme", "repo": "app", "title": "Flaky test", "labels": ["ci"]},
)


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[LiveServer]:
    """One server for the module: every test makes the same world (committed, and flushed
    after it) in the database the server reads."""
    running = start_server()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def world(transactional_db: None) -> None:
    agent_with_token(token=DEFAULT_TOKEN, name="claude-default", mode="default")
    agent_with_token(token=PROMPT_TOKEN, name="claude-prompt", mode="prompt")
    agent_with_token(token=READ_ONLY_TOKEN, name="claude-read-only", mode="read_only")
    user_make(username=APPROVER, password=PASSWORD)


def hook_json(tool: tuple[str, dict[str, Any]], *, session: str = "session-1") -> dict[str, Any]:
    """The hook input as Claude Code writes it for one tool call."""
    name, arguments = tool
    return {
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/project/{session}.jsonl",
        "cwd": CWD,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": name,
        "tool_input": arguments,
        "tool_use_id": f"toolu_{uuid.uuid4().hex}",
    }


def hook_env(url: str | None, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.update({"COUNTERSIGN_URL": url or "", "COUNTERSIGN_TOKEN": token or ""})
    return env


def start_hook(
    stdin: str, *, url: str | None, token: str | None, timeout: float = 60
) -> subprocess.Popen[str]:
    hook = subprocess.Popen(
        [sys.executable, "-m", "countersign", "hook", "claude-code", "--timeout", f"{timeout:g}"],
        env=hook_env(url, token),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert hook.stdin is not None
    hook.stdin.write(stdin)
    hook.stdin.close()
    return hook


def finish(hook: subprocess.Popen[str]) -> tuple[int, str, str]:
    assert hook.stdout is not None
    assert hook.stderr is not None
    try:
        hook.wait(timeout=WAIT)
    finally:
        if hook.poll() is None:
            hook.kill()
    return hook.returncode, hook.stdout.read(), hook.stderr.read()


def run_hook(
    stdin: str, *, url: str | None, token: str | None, timeout: float = 60
) -> tuple[int, str, str]:
    return finish(start_hook(stdin, url=url, token=token, timeout=timeout))


def decided(stdout: str) -> tuple[str, str]:
    """The decision and its reason, from exactly one JSON object of the documented shape."""
    (line,) = stdout.splitlines()
    output = json.loads(line)["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse"
    assert set(output) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
    return output["permissionDecision"], output["permissionDecisionReason"]


def blocked(result: tuple[int, str, str]) -> str:
    """The one stderr line of a hook that blocked with exit status 2 and said nothing else."""
    code, stdout, stderr = result
    assert (code, stdout) == (2, ""), stderr
    (line,) = stderr.splitlines()
    assert line.startswith("countersign: ")
    assert "Traceback" not in stderr
    return line


def calls(server: LiveServer, token: str, **query: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{server.url}/api/v1/calls",
        params=query,
        headers={"Authorization": f"Bearer {token}"},
        timeout=WAIT,
    )
    return list(answer.json()["items"])


def held_call(server: LiveServer, token: str) -> dict[str, Any]:
    """The agent's pending call, once the hook has submitted it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if pending := calls(server, token, status="pending"):
            return pending[0]
        time.sleep(0.05)
    raise AssertionError("the hook submitted nothing")


def decide(server: LiveServer, call_id: str, *, approve: bool, comment: str) -> None:
    approver = Approver(server, APPROVER, PASSWORD)
    try:
        assert approver.decide(call_id, approve=approve, comment=comment) == 303
    finally:
        approver.close()


# --- decisions ----------------------------------------------------------------------------


def test_read_is_allowed_at_once_and_submitted_as_documented(server: LiveServer) -> None:
    sent = hook_json(READ, session="session-read")
    code, stdout, stderr = run_hook(json.dumps(sent), url=server.url, token=DEFAULT_TOKEN)
    assert code == 0, stderr
    assert decided(stdout) == ("allow", claude_code.ALLOWED)
    (call,) = calls(server, DEFAULT_TOKEN)
    assert (call["tool"], call["status"], call["run_id"]) == ("Read", "allowed", "session-read")
    # The same tool_use_id again is the same call (its Idempotency-Key), not a second one.
    code, stdout, _ = run_hook(json.dumps(sent), url=server.url, token=DEFAULT_TOKEN)
    assert (code, decided(stdout)[0]) == (0, "allow")
    assert [c["id"] for c in calls(server, DEFAULT_TOKEN)] == [call["id"]]


def test_bash_is_held_and_runs_once_approved(server: LiveServer) -> None:
    hook = start_hook(json.dumps(hook_json(BASH)), url=server.url, token=DEFAULT_TOKEN)
    call = held_call(server, DEFAULT_TOKEN)
    assert call["tool"] == "Bash"
    assert "dangerous" in call["reasons"][0]["message"]  # the server's class for Bash
    page = Approver(server, APPROVER, PASSWORD)
    try:
        shown = page.http.get(f"/calls/{call['id']}/").text
    finally:
        page.close()
    assert f"Claude Code, working in {CWD}: Push the fix to main" in shown  # the context
    decide(server, call["id"], approve=True, comment="Go ahead.")
    code, stdout, stderr = finish(hook)
    assert code == 0, stderr
    assert decided(stdout) == (
        "allow",
        claude_code.APPROVED_COMMENT.format(by=APPROVER, comment="Go ahead."),
    )


def test_edit_denied_with_a_comment_tells_the_model_the_comment(server: LiveServer) -> None:
    hook = start_hook(json.dumps(hook_json(EDIT)), url=server.url, token=PROMPT_TOKEN)
    call = held_call(server, PROMPT_TOKEN)
    assert call["tool"] == "Edit"
    decide(server, call["id"], approve=False, comment="Not on main; open a branch.")
    code, stdout, stderr = finish(hook)
    assert code == 0, stderr
    decision, reason = decided(stdout)
    assert decision == "deny"
    assert reason.startswith("Countersign: The call was denied: do not run the tool")
    assert reason.endswith("Comment: Not on main; open a branch.")


def test_an_mcp_tool_that_nobody_decides_expires_and_is_denied(server: LiveServer) -> None:
    gate_make(name="", timeout_seconds=1)
    code, stdout, stderr = run_hook(json.dumps(hook_json(MCP)), url=server.url, token=PROMPT_TOKEN)
    assert code == 0, stderr
    decision, reason = decided(stdout)
    assert decision == "deny"
    assert reason.startswith(
        "Countersign: "
        + errors.DENIED.format(status="expired", advice=errors.DENIED_ADVICE["expired"])
    )
    (call,) = calls(server, PROMPT_TOKEN)
    assert (call["tool"], call["status"]) == ("mcp__github__create_issue", "expired")


def test_a_wait_past_timeout_cancels_the_call_and_denies(server: LiveServer) -> None:
    code, stdout, stderr = run_hook(
        json.dumps(hook_json(EDIT)), url=server.url, token=PROMPT_TOKEN, timeout=1
    )
    assert code == 0, stderr
    assert decided(stdout) == (
        "deny",
        "Countersign: " + errors.DEADLINE_CANCELLED.format(seconds=1),
    )
    (call,) = calls(server, PROMPT_TOKEN)
    assert call["status"] == "cancelled"


def test_a_hook_stopped_by_a_signal_cancels_its_call_and_blocks(server: LiveServer) -> None:
    hook = start_hook(json.dumps(hook_json(MCP)), url=server.url, token=PROMPT_TOKEN)
    call = held_call(server, PROMPT_TOKEN)
    hook.send_signal(signal.SIGTERM)
    line = blocked(finish(hook))
    assert line == "countersign: " + claude_code.STOPPED.format(
        outcome=claude_code.STOPPED_CANCELLED
    )
    (after,) = calls(server, PROMPT_TOKEN)
    assert (after["id"], after["status"]) == (call["id"], "cancelled")


@pytest.mark.parametrize(
    ("tool", "decision"),
    [
        ("Grep", "allow"),
        ("LS", "allow"),
        ("mcp__github__get_issue", "allow"),
        ("WebSearch", "deny"),
        ("Task", "deny"),
        ("mcp__github__create_issue", "deny"),
    ],
)
def test_claude_codes_tool_names_are_classified_by_the_server(
    server: LiveServer, tool: str, decision: str
) -> None:
    # A read-only agent: its read tools are allowed, all others refused at once.
    code, stdout, stderr = run_hook(
        json.dumps(hook_json((tool, {}))), url=server.url, token=READ_ONLY_TOKEN
    )
    assert code == 0, stderr
    assert decided(stdout)[0] == decision


# --- failing closed -----------------------------------------------------------------------


def test_a_stopped_server_blocks_within_30_seconds() -> None:
    started = time.monotonic()
    line = blocked(
        run_hook(
            json.dumps(hook_json(BASH)), url=f"http://127.0.0.1:{free_port()}", token=DEFAULT_TOKEN
        )
    )
    assert time.monotonic() - started < 30
    assert "could not be reached" in line


def test_a_token_the_service_refuses_blocks(server: LiveServer) -> None:
    line = blocked(run_hook(json.dumps(hook_json(READ)), url=server.url, token="cs_unknown"))
    assert line.startswith("countersign: " + errors.UNAUTHORIZED)


@pytest.mark.parametrize(
    ("url", "token", "variable"),
    [(None, DEFAULT_TOKEN, "COUNTERSIGN_URL"), ("http://127.0.0.1:9", None, "COUNTERSIGN_TOKEN")],
)
def test_a_missing_url_or_token_blocks_naming_it(
    url: str | None, token: str | None, variable: str
) -> None:
    assert variable in blocked(run_hook(json.dumps(hook_json(READ)), url=url, token=token))


@pytest.mark.parametrize(
    ("stdin", "problem"),
    [
        ("", claude_code.NOT_JSON),
        ("Bash: rm -rf /", claude_code.NOT_JSON),
        ('["Bash"]', claude_code.NOT_AN_OBJECT),
        ('{"tool_name": "Bash", "tool_input": {}}', "session_id is missing"),
        (json.dumps({**hook_json(READ), "tool_input": "ls"}), "tool_input is missing"),
        (json.dumps({**hook_json(READ), "tool_name": 7}), "tool_name is missing"),
        (json.dumps({**hook_json(READ), "hook_event_name": "PostToolUse"}), "not PreToolUse"),
    ],
)
def test_garbage_on_stdin_blocks_saying_what_is_wrong(stdin: str, problem: str) -> None:
    # No server at all: nothing may be submitted before the input is read.
    line = blocked(run_hook(stdin, url="http://127.0.0.1:9", token=DEFAULT_TOKEN))
    assert line.startswith("countersign: " + claude_code.BAD_INPUT.format(problem="")[:-1])
    assert problem in line


# --- one hard deadline, whatever the service does ------------------------------------------

TIMEOUT = 1.0
# What the promise allows: --timeout and 15 s more, the interpreter's start included.
HARD_BOUND = TIMEOUT + 15
NO_ANSWER = bounded.NO_ANSWER.format(seconds=waiting.WITHDRAW_TIMEOUT)


def deny_reason(result: tuple[int, str, str]) -> str:
    code, stdout, stderr = result
    assert code == 0, stderr
    decision, reason = decided(stdout)
    assert decision == "deny"
    return reason


@pytest.mark.parametrize(
    ("steps", "outcome"),
    [
        # No call state, so nothing to cancel: the watchdog ends the run and blocks.
        ({slow.SUBMIT: "dribble"}, "overran"),
        ({slow.SUBMIT: "silent"}, "overran"),
        # The wait ends at --timeout, held long-poll or not, and the cancel goes through.
        ({slow.WAIT: "dribble"}, "cancelled"),
        ({slow.WAIT: "silent"}, "cancelled"),
        # The cancel gets WITHDRAW_TIMEOUT of its own, then the hook denies.
        ({slow.WAIT: "dribble", slow.CANCEL: "dribble"}, "not cancelled"),
        ({slow.WAIT: "silent", slow.CANCEL: "silent"}, "not cancelled"),
    ],
    ids=[
        "submit-dribbles",
        "submit-never-answers",
        "long-poll-dribbles",
        "long-poll-never-answers",
        "cancel-dribbles-too",
        "cancel-never-answers-either",
    ],
)
def test_a_service_that_dribbles_or_never_answers_blocks_the_tool_within_the_bound(
    steps: dict[str, slow.Step], outcome: str
) -> None:
    with slow.slow_service(steps) as service:
        began = time.monotonic()
        result = run_hook(
            json.dumps(hook_json(BASH)), url=service.url, token=DEFAULT_TOKEN, timeout=TIMEOUT
        )
        took = time.monotonic() - began
    assert took < HARD_BOUND
    if outcome == "overran":
        line = blocked(result)
        seconds = TIMEOUT + claude_code.HARD_MARGIN
        assert line == "countersign: " + claude_code.OVERRAN.format(seconds=seconds)
        assert took >= seconds
    elif outcome == "cancelled":
        reason = deny_reason(result)
        assert reason == "Countersign: " + errors.DEADLINE_CANCELLED.format(seconds=TIMEOUT)
        assert service.asked[-1] == slow.CANCEL
        assert took < TIMEOUT + waiting.WITHDRAW_TIMEOUT  # by the clock, not a read timeout
    else:
        reason = deny_reason(result)
        assert reason == "Countersign: " + errors.DEADLINE_NOT_CANCELLED.format(
            seconds=TIMEOUT, detail=NO_ANSWER
        )
        assert took >= TIMEOUT + waiting.WITHDRAW_TIMEOUT


def test_a_hook_stopped_while_the_cancel_dribbles_blocks_within_the_cancels_bound() -> None:
    with slow.slow_service({slow.WAIT: "dribble", slow.CANCEL: "dribble"}) as service:
        hook = start_hook(json.dumps(hook_json(BASH)), url=service.url, token=DEFAULT_TOKEN)
        deadline = time.monotonic() + WAIT
        while slow.WAIT not in service.asked and time.monotonic() < deadline:
            time.sleep(0.05)
        hook.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        line = blocked(finish(hook))
        took = time.monotonic() - stopped
    assert line == "countersign: " + claude_code.STOPPED.format(
        outcome=claude_code.STOPPED_NOT_CANCELLED.format(detail=NO_ANSWER)
    )
    assert waiting.WITHDRAW_TIMEOUT <= took < waiting.WITHDRAW_TIMEOUT + 3


# --- the decision for a final state ---------------------------------------------------------


def test_an_approval_of_edited_arguments_hands_them_to_the_tool() -> None:
    state = {
        "status": "approved",
        "arguments": '{"file_path": "/p/app.py", "new_string": "rate = 1.20", "rate": 1.20}',
        "edited": True,
        "decision": {"by": "alice", "comment": ""},
    }
    output = json.loads(claude_code.decision_for(state), parse_float=Decimal)
    assert output["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert output["hookSpecificOutput"]["updatedInput"] == {
        "file_path": "/p/app.py",
        "new_string": "rate = 1.20",
        "rate": Decimal("1.20"),
    }
    assert '"rate": 1.20' in claude_code.decision_for(state)  # the approver's digits


def test_an_edit_that_is_not_an_object_never_allows() -> None:
    state = {"status": "approved", "arguments": "[1]", "edited": True, "decision": {"by": "a"}}
    with pytest.raises(claude_code.HookFailed, match="not a JSON object"):
        claude_code.decision_for(state)


# --- install --------------------------------------------------------------------------------

THEIRS: dict[str, Any] = {
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "./check-bash.sh"}]}
        ],
        "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "./log.sh"}]}],
    },
}
COUNTERSIGN = Path(sys.executable).parent / "countersign"  # the console script


def install(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "COUNTERSIGN_TOKEN": "cs_secret-never-written"}
    return subprocess.run(
        [str(COUNTERSIGN), "install", "claude-code", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def ours(settings: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (group["matcher"], entry)
        for group in settings["hooks"]["PreToolUse"]
        for entry in group["hooks"]
        if "countersign hook claude-code" in entry["command"]
    ]


def test_install_twice_keeps_their_settings_and_leaves_one_entry(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(THEIRS))
    first = install("--project", str(tmp_path), home=tmp_path / "home")
    assert first.returncode == 0, first.stderr
    entry = claude_code.hook_entry(timeout=claude_code.DEFAULT_TIMEOUT)
    assert first.stdout.splitlines()[0] == claude_code.ADDED.format(
        path=path, event="PreToolUse", matcher="*", command=entry["command"]
    )
    settings = json.loads(path.read_text())
    assert ours(settings) == [("*", entry)]
    assert entry["timeout"] == 3600 + claude_code.CLAUDE_TIMEOUT_MARGIN  # Claude Code waits
    assert entry["onFailure"] == "block"  # and blocks the tool if the hook fails to answer
    assert settings["permissions"] == THEIRS["permissions"]
    assert settings["hooks"]["PreToolUse"][0] == THEIRS["hooks"]["PreToolUse"][0]
    assert settings["hooks"]["PostToolUse"] == THEIRS["hooks"]["PostToolUse"]
    assert "cs_secret-never-written" not in path.read_text()
    written = path.read_text()
    again = install("--project", str(tmp_path), home=tmp_path / "home")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == claude_code.UNCHANGED.format(path=path)
    assert path.read_text() == written


def test_install_again_with_other_options_replaces_its_entry_in_place(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = home / ".claude" / "settings.json"
    created = install("--user", home=home)
    assert created.stdout.splitlines()[0] == claude_code.CREATED.format(path=path)
    changed = install("--user", "--matcher", "Bash|Edit", "--timeout", "600", home=home)
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.startswith(f"{path}: replaced the Countersign PreToolUse hook")
    ((matcher, entry),) = ours(json.loads(path.read_text()))
    assert (matcher, entry["timeout"]) == ("Bash|Edit", 600 + claude_code.CLAUDE_TIMEOUT_MARGIN)
    assert entry["command"].endswith("-m countersign hook claude-code --timeout 600")


def test_install_leaves_a_file_that_is_not_settings_alone(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"hooks": [')
    result = install("--project", str(tmp_path), home=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == "countersign: " + claude_code.NOT_SETTINGS.format(path=path)
    assert path.read_text() == '{"hooks": ['


def test_the_installed_command_runs_the_hook(tmp_path: Path, server: LiveServer) -> None:
    install("--project", str(tmp_path), home=tmp_path)
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    ((_, entry),) = ours(settings)
    done = subprocess.run(
        entry["command"],
        shell=True,  # as Claude Code runs it
        input=json.dumps(hook_json(READ)),
        env=hook_env(server.url, DEFAULT_TOKEN),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert decided(done.stdout)[0] == "allow"
