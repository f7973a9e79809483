"""The ``countersign`` command (also ``python -m countersign``).

``countersign submit …`` submits a tool call from a shell and prints its state. The exit
status is 0 only when the call may go (allowed or approved), so a script can gate a command
with ``countersign submit … --wait && the-command``; it is 1 for anything else (refused,
denied, still pending, an error, a passed deadline, after which the call is cancelled) and 2
for a usage error. Errors go to stderr as one line, without a traceback. On a terminal, stderr
also gets the line a wait says as it begins (the call's page, and why it is held) and, after
Ctrl-C, that the call was withdrawn (it is withdrawn either way).

``countersign hook claude-code`` is Claude Code's PreToolUse hook and ``countersign install
claude-code`` puts it in Claude Code's settings (``countersign.integrations.claude_code``).

``countersign mcp proxy`` is an MCP server in front of another that asks Countersign before
every tool call (``countersign.integrations.mcp_proxy``, with the ``mcp`` extra installed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TextIO

from countersign.client import Client
from countersign.errors import NotApproved, TimedOut
from countersign.integrations import claude_code
from countersign.protocol import GO_STATUSES, CallState

EXIT_GO = 0
EXIT_NO_GO = 1
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
DEFAULT_URL = "http://127.0.0.1:8000"

NO_TOKEN = "a token is required: --token or the COUNTERSIGN_TOKEN environment variable"  # noqa: S105
DEADLINE_NEEDS_WAIT = "--deadline needs --wait"
BAD_DEADLINE = "the deadline must be a positive number of seconds"
CLAUDE_CODE = "claude-code"
CALL_NAMED = "{error} (call {call_id})"
NO_UPSTREAM = "name the upstream: --upstream-url URL, or -- COMMAND [ARGS...]"
TWO_UPSTREAMS = "name one upstream: --upstream-url URL or -- COMMAND [ARGS...], not both"
BAD_LISTEN = "--listen is HOST:PORT, e.g. 127.0.0.1:8808"
NO_MCP = "countersign mcp needs the mcp package: pip install 'countersign-client[mcp]'"
NOTICE = "countersign: %(message)s"


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(BAD_DEADLINE) from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(BAD_DEADLINE)
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="countersign", description="The command line of the Countersign client."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _hook_parser(commands.add_parser("hook", help="run as an agent's hook (Claude Code)"))
    _install_parser(commands.add_parser("install", help="install a hook into an agent's settings"))
    _mcp_parser(commands.add_parser("mcp", help="an MCP gateway that asks before each tool call"))
    submit = commands.add_parser(
        "submit",
        help="submit a tool call and print its state as JSON",
        description="Submit a tool call and print its state (with --wait: its final state).",
    )
    submit.add_argument(
        "--url",
        default=os.environ.get("COUNTERSIGN_URL", DEFAULT_URL),
        help=f"the service (default: $COUNTERSIGN_URL, else {DEFAULT_URL})",
    )
    submit.add_argument(
        "--token",
        default=os.environ.get("COUNTERSIGN_TOKEN"),
        help="the agent's API token (default: $COUNTERSIGN_TOKEN, which keeps it out of ps)",
    )
    submit.add_argument("--tool", required=True, help="the tool's name")
    submit.add_argument(
        "--arguments", required=True, help="the arguments as JSON text, sent exactly as given"
    )
    submit.add_argument("--principal", help="on whose behalf (default: the agent's own)")
    submit.add_argument("--run-id", help="the agent run this call belongs to")
    submit.add_argument("--context", help="why the agent wants this, shown to the approver")
    submit.add_argument("--wait", action="store_true", help="wait for the final state")
    submit.add_argument(
        "--deadline", type=_seconds, help="with --wait: give up after this many seconds"
    )
    return parser


def _hook_parser(hook: argparse.ArgumentParser) -> None:
    agents = hook.add_subparsers(dest="agent", required=True)
    claude = agents.add_parser(
        CLAUDE_CODE,
        help="Claude Code's PreToolUse hook: hook input on stdin, one decision on stdout",
        description="Ask Countersign before a tool runs; blocks (exit 2) whenever it cannot.",
    )
    claude.add_argument(
        "--timeout",
        type=_seconds,
        default=claude_code.DEFAULT_TIMEOUT,
        metavar="S",
        help="the longest wait for a decision in seconds, from the hook's start; then cancel "
        "the call and deny. The hook ends within S + 15 s whatever the service does "
        "(default: %(default)g)",
    )


def _install_parser(install: argparse.ArgumentParser) -> None:
    agents = install.add_subparsers(dest="agent", required=True)
    claude = agents.add_parser(
        CLAUDE_CODE,
        help="merge the PreToolUse hook into Claude Code's settings.json",
        description="Merge the Countersign hook into .claude/settings.json; run it again to "
        "change it. The token is never written there.",
    )
    where = claude.add_mutually_exclusive_group()
    where.add_argument(
        "--project",
        type=Path,
        metavar="DIR",
        help="the project whose DIR/.claude/settings.json to change (default: the current one)",
    )
    where.add_argument("--user", action="store_true", help="change ~/.claude/settings.json instead")
    claude.add_argument(
        "--matcher",
        default=claude_code.DEFAULT_MATCHER,
        metavar="GLOB",
        help="the tools to gate, as a Claude Code matcher (default: %(default)s, every tool)",
    )
    claude.add_argument(
        "--timeout",
        type=_seconds,
        default=claude_code.DEFAULT_TIMEOUT,
        metavar="S",
        help="the hook's longest wait for a decision in seconds (default: %(default)g)",
    )


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(BAD_LISTEN)
    return host.strip("[]"), int(port)


def _mcp_parser(mcp: argparse.ArgumentParser) -> None:
    roles = mcp.add_subparsers(dest="role", required=True)
    proxy = roles.add_parser(
        "proxy",
        help="stand in front of one MCP server: every tools/call is asked of Countersign first",
        description="An MCP server in front of one upstream MCP server: tools, resources and "
        "prompts pass through; each tools/call runs only when Countersign allows or a person "
        "approves it. COUNTERSIGN_URL and COUNTERSIGN_TOKEN come from the environment.",
        usage="%(prog)s [--name NAME] [--listen HOST:PORT] "
        "(--upstream-url URL | -- COMMAND [ARGS ...])",
    )
    proxy.add_argument(
        "--name", help="submit tools as NAME:TOOL, to tell this server's tools from others'"
    )
    proxy.add_argument("--upstream-url", metavar="URL", help="the upstream's streamable HTTP URL")
    proxy.add_argument(
        "--listen",
        type=_listen,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    proxy.add_argument(
        "--progress-every",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="while a call is held, a progress notification every S seconds (default: %(default)g)",
    )
    proxy.add_argument("upstream", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _mcp(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    command = list(options.upstream)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command and options.upstream_url is None:
        parser.error(NO_UPSTREAM)
    if command and options.upstream_url is not None:
        parser.error(TWO_UPSTREAMS)
    try:
        from countersign.integrations import mcp_proxy  # the mcp extra, only for this command
    except ImportError:
        print(NO_MCP, file=sys.stderr)
        return 2
    return mcp_proxy.main(
        mcp_proxy.Upstream(command=command, url=options.upstream_url),
        name=options.name,
        listen=options.listen,
        progress_every=options.progress_every,
    )


def _install(options: argparse.Namespace) -> int:
    path = claude_code.settings_path(project=options.project, user=options.user)
    try:
        lines = claude_code.install(path=path, matcher=options.matcher, timeout=options.timeout)
    except (claude_code.SettingsUnfit, OSError) as error:
        print(f"countersign: {error}", file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(lines))
    return EXIT_GO


def _submit(client: Client, options: argparse.Namespace) -> CallState:
    state = client.submit(
        options.tool,
        options.arguments,
        principal=options.principal,
        run_id=options.run_id,
        context=options.context,
    )
    if not options.wait:
        return state
    try:
        return client.wait(state, deadline=options.deadline)
    except TimedOut as error:
        raise TimedOut(
            CALL_NAMED.format(error=error, call_id=error.call_id),
            call_id=error.call_id,
            cancelled=error.cancelled,
        ) from None


@contextmanager
def _notices(stream: TextIO) -> Iterator[None]:
    """The client's INFO lines (where a call waits, a withdrawal) as lines on ``stream``."""
    logger = logging.getLogger("countersign")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(NOTICE))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if options.command == "hook":
        return claude_code.hook(sys.stdin, sys.stdout, sys.stderr, timeout=options.timeout)
    if options.command == "install":
        return _install(options)
    if options.command == "mcp":
        with _notices(sys.stderr):
            return _mcp(parser, options)
    if not options.token:
        parser.error(NO_TOKEN)
    if options.deadline is not None and not options.wait:
        parser.error(DEADLINE_NEEDS_WAIT)
    try:
        client = Client(options.url, options.token)
    except ValueError as error:
        parser.error(str(error))
    try:
        with _notices(sys.stderr) if sys.stderr.isatty() else nullcontext(), client:
            state = _submit(client, options)
    except NotApproved as error:
        print(f"countersign: {error}", file=sys.stderr)
        return EXIT_NO_GO
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    print(json.dumps(state, indent=2, ensure_ascii=False))
    return EXIT_GO if state["status"] in GO_STATUSES else EXIT_NO_GO


if __name__ == "__main__":
    sys.exit(main())
