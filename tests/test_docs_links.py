"""Every relative link in the documentation resolves, and nothing names a document that is not
in the repository (docs/policies.md and the others are the project's own)."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest

from capcore.budgets import Budget, BudgetScope, RunCounters, Usage, evaluate_budget, parse_cost
from capcore.findings import ActionKind
from capcore.permissions import (
    DANGEROUS_WORDS,
    READ_VERBS,
    Decision,
    Mode,
    PermissionRule,
    ToolClass,
    ToolClassPin,
    evaluate_permissions,
    guess_tool_class,
    words_of_tool,
)

ROOT = Path(__file__).resolve().parent.parent

DOCUMENTS = sorted(
    [ROOT / "README.md", ROOT / "config" / "runtime" / "README.md", *(ROOT / "docs").glob("*.md")]
)

# The places whose text a reader of this repository reads: docs, docstrings, templates.
SCANNED = (
    "README.md",
    "Makefile",
    "docs",
    "approvals",
    "notifications",
    "config",
    "capcore",
    "clients/python/README.md",
    "clients/python/countersign",
    "templates",
    "static",
    "examples",
    "bench",
)
SCANNED_SUFFIXES = frozenset({"", ".md", ".py", ".html", ".txt", ".js", ".css"})

# The product's specification files. They are not part of this repository, so a mention of
# one is a dead end for a reader unless the project has a document of that name.
SPEC_NAMES = (
    "agent-api.md",
    "approver-ui.md",
    "cap-rules.md",
    "capcore-api.md",
    "hardening.md",
    "implementation-notes",
    "integrations.md",
    "notifications.md",
    "operations.md",
    "policies.md",
    "reviewing.md",
)

BROKEN_FILE = "{where}: the link {target!r} names no file in the repository"
BROKEN_ANCHOR = "{where}: the link {target!r} names no heading of {document}"
OUTSIDE = "{where}: the link {target!r} leaves the repository"
IGNORED = "{where}: the link {target!r} names a file git ignores"
SPEC_MENTION = "{where}: {mention!r} is not a document of this repository"

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [label](target "title") and ![alt](target); labels may hold one level of brackets.
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SPEC_MENTION = re.compile(
    r"(?<![\w.-])((?:[\w.-]+/)*)(" + "|".join(re.escape(name) for name in SPEC_NAMES) + r")"
)


def prose_of(*, text: str) -> str:
    """``text`` with fenced code blocks and code spans blanked out, lines kept where they were,
    so a link that wraps across lines is still found and counted on its own line."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1) == fence:
                fence = None
            lines.append("")
        elif opening:
            fence = opening.group(1)
            lines.append("")
        else:
            lines.append(_CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line))
    return "\n".join(lines)


def links_of_markdown(*, text: str) -> list[tuple[int, str]]:
    """Every link target with the line it is on: inline links, images, reference
    definitions."""
    prose = prose_of(text=text)
    matches = sorted(
        [*_INLINE_LINK.finditer(prose), *_REFERENCE.finditer(prose)],
        key=lambda match: match.start(1),
    )
    return [
        (prose.count("\n", 0, match.start(1)) + 1, match.group(1).strip("<>")) for match in matches
    ]


def slug_of_heading(*, heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped, each space a
    hyphen (a second heading of the same text gets ``-1``, see ``anchors_of_markdown``)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its label
    text = text.replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors_of_markdown(*, text: str) -> set[str]:
    """The anchors GitHub gives a document: its headings' slugs, numbered when repeated, and
    any ``<a id>``/``<a name>``."""
    anchors: set[str] = set()
    seen: Counter[str] = Counter()
    fence: str | None = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1) == fence:
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        heading = _HEADING.match(line)
        if heading:
            slug = slug_of_heading(heading=heading.group(2))
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
        anchors.update(_HTML_ANCHOR.findall(line))
    return anchors


def _git_ignores(path: Path) -> bool:
    try:
        result = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "-q", str(path)],
            check=False,
            capture_output=True,
        )
    except OSError:  # no git here: nothing to ask
        return False
    return result.returncode == 0


def link_problems_of(*, path: Path, text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the relative links of the document ``text`` kept at ``path``."""
    problems: list[str] = []
    for number, target in links_of_markdown(text=text):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # a web address: not this test's business
        where = f"{path.relative_to(root)}:{number}"
        file_part, _, anchor = target.partition("#")
        if not file_part:  # an anchor of this very document
            if unquote(anchor) not in anchors_of_markdown(text=text):
                problems.append(
                    BROKEN_ANCHOR.format(
                        where=where, target=target, document=path.relative_to(root)
                    )
                )
            continue
        linked = (path.parent / unquote(file_part)).resolve()
        if not linked.is_relative_to(root):
            problems.append(OUTSIDE.format(where=where, target=target))
        elif not linked.exists():
            problems.append(BROKEN_FILE.format(where=where, target=target))
        elif _git_ignores(linked):
            problems.append(IGNORED.format(where=where, target=target))
        elif anchor and (
            linked.suffix != ".md"
            or not linked.is_file()
            or unquote(anchor) not in anchors_of_markdown(text=linked.read_text(encoding="utf-8"))
        ):
            document = linked.relative_to(root)
            problems.append(BROKEN_ANCHOR.format(where=where, target=target, document=document))
    return problems


def spec_mentions_of(*, path: Path, text: str, root: Path = ROOT) -> list[str]:
    """Mentions of a specification file that do not lead to a document of the repository:
    written as a path from the repository's root or from the mentioning file."""
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _SPEC_MENTION.finditer(line):
            mention = match.group(0)
            candidates = (root / mention, path.parent / mention)
            if not any(candidate.resolve().is_file() for candidate in candidates):
                where = f"{path.relative_to(root)}:{number}"
                problems.append(SPEC_MENTION.format(where=where, mention=mention))
    return problems


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for place in SCANNED:
        base = ROOT / place
        candidates = [base] if base.is_file() else sorted(base.rglob("*"))
        files += [
            path
            for path in candidates
            if path.is_file()
            and path.suffix in SCANNED_SUFFIXES
            and "__pycache__" not in path.parts
        ]
    return files


# --- the repository's documents -------------------------------------------------------------


def test_policies_page_exists_and_is_in_the_documentation_list() -> None:
    assert (ROOT / "docs" / "policies.md").is_file()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/policies.md)" in readme


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    assert link_problems_of(path=document, text=document.read_text(encoding="utf-8")) == []


def test_nothing_names_a_document_that_is_not_in_the_repository() -> None:
    files = _scanned_files()
    assert len(files) > 50  # the walk found the tree
    problems = [
        problem
        for path in files
        for problem in spec_mentions_of(path=path, text=path.read_text(encoding="utf-8"))
    ]
    assert problems == []


# --- the checker itself ---------------------------------------------------------------------

MADE_UP = """\
# A made-up page

## Budgets and `gates` — quorum

See [the rules](rules.md), [a section](rules.md#gates), [here](#budgets-and-gates--quorum)
and [a picture](screenshots/queue.png "the queue"), on the [web](https://example.com/x.md).

A [missing page](cap-rules.md), a [missing heading](rules.md#no-such-heading), a
[missing local heading](#nowhere), [outside](../../etc/passwd), [a heading of a picture](
screenshots/queue.png#top).

```
[in a fence](nowhere.md) is code, not a link
```

And `[in a code span](nowhere.md)` neither. [ref]: also-missing.md
[ref]: also-missing.md
"""


def test_the_checker_catches_each_broken_link_of_a_made_up_page() -> None:
    page = ROOT / "docs" / "made-up.md"  # never written: the text is passed in
    problems = link_problems_of(path=page, text=MADE_UP)
    where = "docs/made-up.md"
    assert problems == [
        BROKEN_FILE.format(where=f"{where}:8", target="cap-rules.md"),
        BROKEN_ANCHOR.format(
            where=f"{where}:8", target="rules.md#no-such-heading", document=Path("docs/rules.md")
        ),
        BROKEN_ANCHOR.format(where=f"{where}:9", target="#nowhere", document=Path(where)),
        OUTSIDE.format(where=f"{where}:9", target="../../etc/passwd"),
        BROKEN_ANCHOR.format(
            where=f"{where}:10",
            target="screenshots/queue.png#top",
            document=Path("docs/screenshots/queue.png"),
        ),
        BROKEN_FILE.format(where=f"{where}:17", target="also-missing.md"),
    ]


def test_an_existing_but_ignored_file_is_not_a_link_target() -> None:
    page = ROOT / "docs" / "made-up.md"
    problems = link_problems_of(path=page, text="[the venv](../.venv/pyvenv.cfg)\n")
    if not (ROOT / ".venv" / "pyvenv.cfg").exists():
        pytest.skip("no .venv here")
    assert problems == [
        IGNORED.format(where="docs/made-up.md:1", target="../.venv/pyvenv.cfg"),
    ]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("`POST /api/v1/calls` — submit a call", "post-apiv1calls--submit-a-call"),
        (
            "9. A policy change applies to the next call, on every worker",
            "9-a-policy-change-applies-to-the-next-call-on-every-worker",
        ),
        ("Call — `/calls/<id>/`", "call--callsid"),
        ("Permission rules (allow, ask, deny)", "permission-rules-allow-ask-deny"),
        ("`sqlite_pooled/` — SQLite connections", "sqlite_pooled--sqlite-connections"),
        ("See [the rules](rules.md)", "see-the-rules"),
    ],
)
def test_slugs_are_githubs(heading: str, slug: str) -> None:
    assert slug_of_heading(heading=heading) == slug


def test_a_repeated_heading_is_numbered_and_fenced_headings_are_not_headings() -> None:
    text = "# Tests\n\n## Tests\n\n```sh\n# not a heading\n```\n"
    assert anchors_of_markdown(text=text) == {"tests", "tests-1"}


def test_the_spec_check_catches_a_made_up_docstring() -> None:
    module = ROOT / "approvals" / "made_up.py"
    text = (
        '"""See policies.md and docs/cap-rules.md, /work/shared/spec/agent-api.md and the\n'
        'implementation-notes; docs/policies.md and ../docs/policies.md are fine."""\n'
    )
    assert spec_mentions_of(path=module, text=text) == [
        SPEC_MENTION.format(where="approvals/made_up.py:1", mention="policies.md"),
        SPEC_MENTION.format(where="approvals/made_up.py:1", mention="docs/cap-rules.md"),
        SPEC_MENTION.format(
            where="approvals/made_up.py:1", mention="work/shared/spec/agent-api.md"
        ),
        SPEC_MENTION.format(where="approvals/made_up.py:2", mention="implementation-notes"),
    ]


# --- docs/policies.md says what the code does -------------------------------------------------

POLICIES = ROOT / "docs" / "policies.md"


def _policies_text() -> str:
    return POLICIES.read_text(encoding="utf-8")


def _table_rows(*, text: str, header: str) -> list[list[str]]:
    """The cells of the Markdown table whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _words_after(*, text: str, lead: str) -> set[str]:
    paragraph = text[text.index(lead) :].split("\n\n", 1)[0]
    return set(re.findall(r"`([a-z0-9]+)`", paragraph))


def test_the_word_lists_are_capcores() -> None:
    text = _policies_text()
    assert _words_after(text=text, lead="The dangerous words:") == DANGEROUS_WORDS
    assert _words_after(text=text, lead="The read verbs:") == READ_VERBS


def test_the_guessed_classes_shown_are_the_guesses() -> None:
    rows = _table_rows(text=_policies_text(), header="| tool | words | class |")
    assert len(rows) >= 5
    for tool, words, tool_class, _why in rows:
        assert words_of_tool(tool.strip("`")) == re.findall(r"`([^`]+)`", words), tool
        assert guess_tool_class(tool.strip("`")).value == tool_class, tool


def test_the_mode_table_and_its_messages_are_capcores() -> None:
    text = _policies_text()
    rows = _table_rows(text=text, header="| mode | read tool |")
    assert {row[0].strip("`") for row in rows} == {mode.value for mode in Mode}
    now = datetime(2026, 12, 2, tzinfo=UTC)
    for mode_cell, *cells in rows:
        mode = Mode(mode_cell.strip("`"))
        for tool_class, cell in zip(ToolClass, cells, strict=True):
            result = evaluate_permissions(
                tool="zqxj",
                mode=mode,
                rules=(),
                pins=(ToolClassPin("zqxj", tool_class),),
                run_id="",
                now=now,
            )
            said = cell.strip("*").split(" ")[0]
            if not result.findings:
                assert said == "allow", (mode, tool_class)
                continue
            (finding,) = result.findings
            assert said == ("refuse" if finding.action.kind is ActionKind.REFUSE else "hold")
            assert finding.action.gate == ""
            assert f"`{finding.message}`" in text, finding.message


def test_the_budget_messages_shown_are_capcores() -> None:
    text = _policies_text()
    start = datetime(2026, 12, 2, tzinfo=UTC)
    budget = Budget(
        max_calls=3,
        max_tokens=1000,
        max_cost=parse_cost("1"),
        cost_currency="USD",
        max_duration=60,
    )
    findings = evaluate_budget(
        budget,
        counters=RunCounters(calls=3, tokens=1200, cost=parse_cost("0.9958"), started_at=start),
        usage=Usage(tokens=100, cost=parse_cost("0.004200001"), cost_currency="USD"),
        now=start + timedelta(seconds=60, microseconds=1),
    )
    day = Budget(max_tokens=1000, max_cost=1, cost_currency="USD", scope=BudgetScope.DAY)
    findings += evaluate_budget(
        day,
        counters=RunCounters(tokens=1200),
        usage=Usage(tokens=100, cost=1, cost_currency="EUR"),
        now=start,
    )
    messages = [finding.message for finding in findings]
    assert messages[:4] == [
        "call 4 would pass the ceiling of 3 calls in this run",
        "1300 tokens would pass the ceiling of 1000 in this run",
        "a cost of USD 1.000000001 would pass the ceiling of USD 1.000000000 in this run",
        "61 s since the first call passes the ceiling of 60 s",
    ]
    shown = {messages[0], messages[2], messages[3], *messages[4:]}
    assert shown == {
        "call 4 would pass the ceiling of 3 calls in this run",
        "a cost of USD 1.000000001 would pass the ceiling of USD 1.000000000 in this run",
        "61 s since the first call passes the ceiling of 60 s",
        "1300 tokens would pass the ceiling of 1000 today",
        "not assessable: the cost is not reported in USD",
    }
    for message in shown:
        assert f"`{message}`" in text, message


def test_the_permission_rule_messages_shown_are_capcores() -> None:
    text = _policies_text()
    now = datetime(2026, 12, 2, tzinfo=UTC)
    for decision in (Decision.DENY, Decision.ASK):
        (finding,) = evaluate_permissions(
            tool="pay",
            mode=Mode.DEFAULT,
            rules=(PermissionRule(id=12, pattern="pay", decision=decision),),
            pins=(),
            run_id="",
            now=now,
        ).findings
        assert finding.rule == "permission-rule:12"
        assert finding.message in re.sub(r"\s+", " ", text), finding.message
