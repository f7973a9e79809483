"""Claude Code's Countersign hook, run the way Claude Code runs it, without Claude Code: the
PreToolUse input of one ``Bash`` call goes to ``countersign hook claude-code`` on stdin, and
the decision it prints is what Claude Code would act on (``allow`` runs the command, ``deny``
tells the model why; exit status 2 blocks it too).

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… python examples/claude_code_hook.py

For Claude Code itself, ``countersign install claude-code --project .`` writes this hook into
``.claude/settings.json`` (docs/integrations.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

HOOK_INPUT = {
    "session_id": "example-session",
    "transcript_path": "/tmp/example-session.jsonl",  # noqa: S108 - only a name Claude Code sends
    "cwd": "/home/dev/project",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "git push origin main", "description": "Push the fix to main"},
    "tool_use_id": f"toolu_{uuid.uuid4().hex}",
}


def main() -> int:
    hook = subprocess.run(
        [sys.executable, "-m", "countersign", "hook", "claude-code", "--timeout", "120"],
        input=json.dumps(HOOK_INPUT),
        capture_output=True,
        text=True,
        check=False,
    )
    if hook.returncode != 0:
        print(f"blocked (exit {hook.returncode}): {hook.stderr.strip()}")
        return 1
    decision = json.loads(hook.stdout)["hookSpecificOutput"]
    print(f"{decision['permissionDecision']}: {decision['permissionDecisionReason']}")
    return 0 if decision["permissionDecision"] == "allow" else 1


if __name__ == "__main__":
    sys.exit(main())
