"""The permission policy: modes, the tool classifier, pins, and the deny > ask > allow > mode
precedence of permission rules."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capcore.findings import DEFAULT_GATE, REFUSE, Action, ActionKind, Finding, Policy
from capcore.permissions import (
    CLAUDE_CODE_TOOLS,
    DANGEROUS_WORDS,
    READ_VERBS,
    Classification,
    Decision,
    Mode,
    PermissionResult,
    PermissionRule,
    ToolClass,
    ToolClassPin,
    classify_tool,
    evaluate_permissions,
    guess_tool_class,
    held_by_mode_only,
    mcp_tool_part,
    words_of_tool,
)

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
RUN = "run-7"
TOOL_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}"


def evaluate(
    tool: str,
    mode: Mode = Mode.DEFAULT,
    rules: tuple[PermissionRule, ...] = (),
    pins: tuple[ToolClassPin, ...] = (),
    run_id: str = RUN,
    now: datetime = NOW,
) -> PermissionResult:
    return evaluate_permissions(
        tool=tool, mode=mode, rules=rules, pins=pins, run_id=run_id, now=now
    )


def rules_of(result: PermissionResult) -> list[str | None]:
    return [finding.rule for finding in result.findings]


# --- the base lists -----------------------------------------------------------------------


def test_base_lists_are_exactly_the_spec() -> None:
    assert {
        "shell", "exec", "execute", "bash", "sh", "run", "command", "cmd", "sudo",
        "kill", "delete", "remove", "rm", "drop", "truncate", "destroy", "purge", "wipe", "eval",
        "deploy", "push", "publish", "http", "https", "curl", "wget", "fetch", "request",
        "webhook", "send", "email", "sms", "post", "pay", "payment", "transfer", "wire", "refund",
        "charge", "purchase", "buy", "withdraw", "grant", "revoke", "sql",
    } == DANGEROUS_WORDS  # fmt: skip
    assert {
        "read", "list", "get", "search", "find", "view", "show", "describe", "stat",
        "query", "count", "lookup", "check", "inspect",
    } == READ_VERBS  # fmt: skip
    assert DANGEROUS_WORDS.isdisjoint(READ_VERBS)


@pytest.mark.parametrize("word", ["format", "document", "update", "catalog", "running", "jobs"])
def test_seed_false_positives_are_not_dangerous_words(word: str) -> None:
    assert word not in DANGEROUS_WORDS


# --- words_of_tool and guess_tool_class ------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "words"),
    [
        ("getHTTPStatus", ["get", "http", "status"]),
        ("fs:read/x", ["fs", "read", "x"]),
        ("s3_get", ["s3", "get"]),
        ("readFile", ["read", "file"]),
        ("search.docs", ["search", "docs"]),
        ("list-running-jobs", ["list", "running", "jobs"]),
        ("HTTP2Status", ["http2", "status"]),
        ("getS3Object", ["get", "s3", "object"]),
        ("useHTTPS", ["use", "https"]),
        ("RM", ["rm"]),
        ("a__b..c//d::e--f", ["a", "b", "c", "d", "e", "f"]),
        ("_", []),
        ("", []),
    ],
)
def test_tool_words(tool: str, words: list[str]) -> None:
    assert words_of_tool(tool) == words


@pytest.mark.parametrize(
    ("tool", "tool_class"),
    [
        ("update_catalog", ToolClass.WRITE),  # the seed said read, because of "cat"
        ("format_document", ToolClass.WRITE),  # the seed said dangerous, because of "rm"
        ("list_running_jobs", ToolClass.READ),  # "running" is not "run"
        ("transfer_funds", ToolClass.DANGEROUS),
        ("drop_table", ToolClass.DANGEROUS),
        ("getHTTPStatus", ToolClass.DANGEROUS),  # "http" is a dangerous word
        ("readFile", ToolClass.READ),
        ("catalog_update", ToolClass.WRITE),
        ("rm_rf", ToolClass.DANGEROUS),
        ("firmware", ToolClass.WRITE),  # "rm" only as a substring
        ("bash", ToolClass.DANGEROUS),
        ("search.docs", ToolClass.READ),
        ("fs:read/x", ToolClass.WRITE),  # a read verb that is not the first word
        ("get_and_delete", ToolClass.DANGEROUS),  # a dangerous word anywhere wins
        ("", ToolClass.WRITE),
    ],
)
def test_tool_class_guess(tool: str, tool_class: ToolClass) -> None:
    assert guess_tool_class(tool) is tool_class


@pytest.mark.parametrize("word", sorted(DANGEROUS_WORDS))
def test_every_dangerous_word_alone_is_dangerous(word: str) -> None:
    assert guess_tool_class(word) is ToolClass.DANGEROUS
    assert guess_tool_class(word.upper()) is ToolClass.DANGEROUS


@pytest.mark.parametrize("verb", sorted(READ_VERBS))
def test_every_read_verb_first_is_read(verb: str) -> None:
    assert guess_tool_class(f"{verb}_items") is ToolClass.READ
    assert guess_tool_class(f"{verb}Items") is ToolClass.READ


@given(st.from_regex(TOOL_NAME, fullmatch=True))
def test_guess_never_raises_on_a_valid_tool_name(tool: str) -> None:
    assert isinstance(guess_tool_class(tool), ToolClass)
    assert all(word and word == word.lower() for word in words_of_tool(tool))


@given(
    st.from_regex(TOOL_NAME, fullmatch=True),
    st.sampled_from(sorted(DANGEROUS_WORDS)),
    st.booleans(),
)
def test_an_extra_dangerous_word_makes_it_dangerous(tool: str, word: str, before: bool) -> None:
    extended = f"{word}_{tool}" if before else f"{tool}_{word}"
    assert guess_tool_class(extended) is ToolClass.DANGEROUS


@given(st.text(max_size=200))
def test_words_never_raise_on_any_text(text: str) -> None:
    words = words_of_tool(text)
    assert all(set(word) <= set(string.ascii_lowercase + string.digits) for word in words)


# --- Claude Code's tool names ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "tool_class"),
    [
        ("Read", ToolClass.READ),
        ("Grep", ToolClass.READ),
        ("Glob", ToolClass.READ),
        ("LS", ToolClass.READ),
        ("Edit", ToolClass.WRITE),
        ("Write", ToolClass.WRITE),
        ("MultiEdit", ToolClass.WRITE),
        ("NotebookEdit", ToolClass.WRITE),
        ("TodoWrite", ToolClass.WRITE),
        ("Bash", ToolClass.DANGEROUS),
        ("WebFetch", ToolClass.DANGEROUS),
        ("WebSearch", ToolClass.DANGEROUS),
        ("Task", ToolClass.DANGEROUS),
        ("mcp__github__create_issue", ToolClass.WRITE),
        ("mcp__github__get_issue", ToolClass.READ),
        ("mcp__github__delete_repository", ToolClass.DANGEROUS),
        ("mcp__my_files__list_files", ToolClass.READ),  # one underscore inside the server's name
        ("mcp__shell__read_log", ToolClass.READ),  # the server's name is not the tool's
        ("mcp__srv__Grep", ToolClass.WRITE),  # an MCP tool is not Claude Code's own Grep
    ],
)
def test_claude_codes_tools_classify_as_they_are(tool: str, tool_class: ToolClass) -> None:
    assert guess_tool_class(tool) is tool_class
    assert classify_tool(tool=tool, pins=()) == Classification(tool_class, guessed=True)


def test_claude_codes_names_are_exact_and_a_pin_still_wins() -> None:
    assert guess_tool_class("grep") is ToolClass.WRITE  # pins and names are case-sensitive
    assert guess_tool_class("Task_list") is ToolClass.WRITE
    pin = ToolClassPin("Grep", ToolClass.DANGEROUS)
    assert classify_tool(tool="Grep", pins=(pin,)).tool_class is ToolClass.DANGEROUS
    # Only the names the words get wrong are listed: the lists stay the policy's own.
    assert all(guess_tool_class(f"x_{name}") is not cls for name, cls in CLAUDE_CODE_TOOLS.items())


@pytest.mark.parametrize(
    ("tool", "part"),
    [
        ("mcp__github__create_issue", "create_issue"),
        ("mcp__a__b__c", "b__c"),
        ("mcp__my_server__run", "run"),
        ("mcp__github__", "mcp__github__"),
        ("mcp____tool", "mcp____tool"),
        ("mcp_github__tool", "mcp_github__tool"),
        ("xmcp__github__tool", "xmcp__github__tool"),
    ],
)
def test_the_mcp_tool_part(tool: str, part: str) -> None:
    assert mcp_tool_part(tool) == part


# --- pins ---------------------------------------------------------------------------------


def test_no_pin_means_guessed() -> None:
    assert classify_tool(tool="drop_table", pins=()) == Classification(ToolClass.DANGEROUS, True)
    other = (ToolClassPin("fs.*", ToolClass.READ),)
    assert classify_tool(tool="drop_table", pins=other) == Classification(ToolClass.DANGEROUS, True)


def test_a_pin_overrides_the_guess() -> None:
    pins = (ToolClassPin("drop_table", ToolClass.READ),)
    assert classify_tool(tool="drop_table", pins=pins) == Classification(ToolClass.READ, False)


def test_exact_pin_beats_any_glob() -> None:
    pins = (
        ToolClassPin("fs.read_*_with_a_very_long_glob*", ToolClass.DANGEROUS),
        ToolClassPin("fs.read_file", ToolClass.READ),
        ToolClassPin("*", ToolClass.DANGEROUS),
    )
    tool = "fs.read_file_with_a_very_long_glob"
    assert classify_tool(tool=tool, pins=pins).tool_class is ToolClass.DANGEROUS
    assert classify_tool(tool="fs.read_file", pins=pins) == Classification(ToolClass.READ, False)


def test_longer_glob_beats_shorter_glob() -> None:
    pins = (
        ToolClassPin("fs.*", ToolClass.DANGEROUS),
        ToolClassPin("fs.read_*", ToolClass.READ),
    )
    assert classify_tool(tool="fs.read_file", pins=pins) == Classification(ToolClass.READ, False)
    assert classify_tool(tool="fs.write_file", pins=pins).tool_class is ToolClass.DANGEROUS


@pytest.mark.parametrize(
    ("classes", "winner"),
    [
        ((ToolClass.READ, ToolClass.WRITE), ToolClass.WRITE),
        ((ToolClass.DANGEROUS, ToolClass.READ), ToolClass.DANGEROUS),
        ((ToolClass.READ, ToolClass.DANGEROUS, ToolClass.WRITE), ToolClass.DANGEROUS),
    ],
)
def test_equally_specific_pins_resolve_to_the_most_dangerous(
    classes: tuple[ToolClass, ...], winner: ToolClass
) -> None:
    globs = ("pay_*", "*_api", "pa?_*")  # all five characters long, all match "pay_api"
    pins = tuple(ToolClassPin(glob, cls) for glob, cls in zip(globs, classes, strict=False))
    assert classify_tool(tool="pay_api", pins=pins) == Classification(winner, False)
    exact = tuple(ToolClassPin("pay_api", cls) for cls in classes)
    assert classify_tool(tool="pay_api", pins=exact) == Classification(winner, False)


def test_pins_are_case_sensitive() -> None:
    pins = (ToolClassPin("Pay", ToolClass.READ), ToolClassPin("PAY*", ToolClass.READ))
    assert classify_tool(tool="pay", pins=pins) == Classification(ToolClass.DANGEROUS, True)
    assert classify_tool(tool="Pay", pins=pins) == Classification(ToolClass.READ, False)


# --- modes --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(Mode))
def test_mode_parse_known_values(mode: Mode) -> None:
    assert Mode.parse(mode.value) is mode


@pytest.mark.parametrize(
    "value", ["Allow", "ALLOW", "", "root", "danger", " allow", "allow ", "Default"]
)
def test_unknown_mode_is_prompt(value: str) -> None:
    assert Mode.parse(value) is Mode.PROMPT


PASS = None
MODE_TABLE: list[tuple[Mode, ToolClass, Action | None]] = [
    (Mode.DEFAULT, ToolClass.READ, PASS),
    (Mode.DEFAULT, ToolClass.WRITE, PASS),
    (Mode.DEFAULT, ToolClass.DANGEROUS, DEFAULT_GATE),
    (Mode.READ_ONLY, ToolClass.READ, PASS),
    (Mode.READ_ONLY, ToolClass.WRITE, REFUSE),
    (Mode.READ_ONLY, ToolClass.DANGEROUS, REFUSE),
    (Mode.WORKSPACE_WRITE, ToolClass.READ, PASS),
    (Mode.WORKSPACE_WRITE, ToolClass.WRITE, PASS),
    (Mode.WORKSPACE_WRITE, ToolClass.DANGEROUS, REFUSE),
    (Mode.DANGER_FULL_ACCESS, ToolClass.READ, PASS),
    (Mode.DANGER_FULL_ACCESS, ToolClass.WRITE, PASS),
    (Mode.DANGER_FULL_ACCESS, ToolClass.DANGEROUS, PASS),
    (Mode.ALLOW, ToolClass.READ, PASS),
    (Mode.ALLOW, ToolClass.WRITE, PASS),
    (Mode.ALLOW, ToolClass.DANGEROUS, PASS),
    (Mode.PROMPT, ToolClass.READ, DEFAULT_GATE),
    (Mode.PROMPT, ToolClass.WRITE, DEFAULT_GATE),
    (Mode.PROMPT, ToolClass.DANGEROUS, DEFAULT_GATE),
]


def test_mode_table_covers_every_cell() -> None:
    assert {(mode, cls) for mode, cls, _ in MODE_TABLE} == {
        (mode, cls) for mode in Mode for cls in ToolClass
    }


@pytest.mark.parametrize(("mode", "tool_class", "action"), MODE_TABLE)
def test_mode_table(mode: Mode, tool_class: ToolClass, action: Action | None) -> None:
    pins = (ToolClassPin("zqxj_tool", tool_class),)
    result = evaluate("zqxj_tool", mode=mode, pins=pins)
    if action is None:
        assert result.findings == ()
    else:
        (finding,) = result.findings
        assert finding.policy is Policy.PERMISSION
        assert finding.rule == f"mode:{mode.value}"
        assert finding.action == action
        assert mode.value in finding.message
        assert "guessed" not in finding.message
    if mode is Mode.ALLOW:
        assert result.classification is None
    else:
        assert result.classification == Classification(tool_class, False)


def test_mode_messages() -> None:
    (refused,) = evaluate("zqxj_write", mode=Mode.READ_ONLY).findings
    assert refused.message == "mode read_only refuses write tools (class guessed)"
    pins = (ToolClassPin("zqxj_write", ToolClass.DANGEROUS),)
    (refused,) = evaluate("zqxj_write", mode=Mode.WORKSPACE_WRITE, pins=pins).findings
    assert refused.message == "mode workspace_write refuses dangerous tools"
    (held,) = evaluate("zqxj_pay", mode=Mode.DEFAULT).findings
    assert held.message == "mode default holds dangerous tools for a human (class guessed)"
    (held,) = evaluate("zqxj_pay", mode=Mode.PROMPT).findings
    assert held.message == "mode prompt holds every call for a human"


def test_mode_allow_passes_a_dangerous_tool_without_classifying() -> None:
    result = evaluate("rm_rf", mode=Mode.ALLOW)
    assert result == PermissionResult((), None)


def test_an_unknown_mode_in_the_database_holds() -> None:
    (finding,) = evaluate("list_items", mode=Mode.parse("Allow")).findings
    assert finding.action == DEFAULT_GATE
    assert finding.rule == "mode:prompt"


# --- allow / ask / deny rules -------------------------------------------------------------


def rule(
    id: int,
    decision: Decision,
    pattern: str = "zqxj_*",
    run_id: str | None = None,
    expires_at: datetime | None = None,
) -> PermissionRule:
    return PermissionRule(id, pattern, decision, run_id, expires_at)


def test_deny_beats_ask_allow_and_mode() -> None:
    rules = (
        rule(5, Decision.ALLOW),
        rule(9, Decision.DENY, "zqxj_transfer"),
        rule(3, Decision.ASK),
        rule(2, Decision.DENY),
        rule(7, Decision.DENY, "other"),
    )
    result = evaluate("zqxj_transfer", mode=Mode.DANGER_FULL_ACCESS, rules=rules)
    assert rules_of(result) == ["permission-rule:2", "permission-rule:9"]
    assert all(f.action == REFUSE and f.policy is Policy.PERMISSION for f in result.findings)
    assert result.findings[0].message == "denied by a permission rule for this tool"
    assert result.classification is None


def test_deny_and_allow_both_matching_refuses() -> None:
    rules = (rule(1, Decision.ALLOW, "zqxj_transfer"), rule(2, Decision.DENY, "*"))
    result = evaluate("zqxj_transfer", mode=Mode.ALLOW, rules=rules)
    assert rules_of(result) == ["permission-rule:2"]
    assert result.findings[0].action == REFUSE


def test_ask_beats_allow_and_mode() -> None:
    rules = (rule(4, Decision.ASK), rule(1, Decision.ALLOW), rule(2, Decision.ASK, "*"))
    result = evaluate("zqxj_list", mode=Mode.ALLOW, rules=rules)
    assert rules_of(result) == ["permission-rule:2", "permission-rule:4"]
    for finding in result.findings:
        assert finding.action == DEFAULT_GATE
        assert finding.message == "a permission rule asks a human to approve this tool"
    assert result.classification is None


@pytest.mark.parametrize("mode", [Mode.PROMPT, Mode.READ_ONLY, Mode.DEFAULT])
def test_allow_rule_beats_mode(mode: Mode) -> None:
    result = evaluate("zqxj_transfer", mode=mode, rules=(rule(1, Decision.ALLOW),))
    assert result == PermissionResult((), None)


def test_no_matching_rule_leaves_it_to_the_mode() -> None:
    rules = (rule(1, Decision.ALLOW, "other_*"), rule(2, Decision.DENY, "ZQXJ_*"))
    result = evaluate("zqxj_transfer", mode=Mode.DEFAULT, rules=rules)
    assert rules_of(result) == ["mode:default"]
    assert result.classification == Classification(ToolClass.DANGEROUS, True)


def test_run_scoped_rule_applies_only_to_its_run() -> None:
    rules = (rule(1, Decision.ALLOW, run_id=RUN),)
    assert evaluate("zqxj_transfer", rules=rules, run_id=RUN).findings == ()
    other = evaluate("zqxj_transfer", rules=rules, run_id="run-8")
    assert rules_of(other) == ["mode:default"]
    default_run = evaluate("zqxj_transfer", rules=rules, run_id="")
    assert rules_of(default_run) == ["mode:default"]


def test_rule_for_every_run_applies_to_any_run() -> None:
    rules = (rule(1, Decision.DENY),)
    for run_id in ("", RUN, "run-8"):
        assert rules_of(evaluate("zqxj_x", rules=rules, run_id=run_id)) == ["permission-rule:1"]


def test_expired_rule_is_ignored() -> None:
    second = timedelta(seconds=1)
    live = (rule(1, Decision.DENY, expires_at=NOW + second),)
    assert rules_of(evaluate("zqxj_read", rules=live)) == ["permission-rule:1"]
    at_expiry = (rule(1, Decision.DENY, expires_at=NOW),)
    assert evaluate("zqxj_read", rules=at_expiry).findings == ()
    past = (rule(1, Decision.DENY, expires_at=NOW - second),)
    assert evaluate("zqxj_read", rules=past).findings == ()


def test_a_rule_bound_to_a_digest_speaks_only_for_arguments_with_that_digest() -> None:
    digest, other = "a" * 64, "b" * 64
    allow = (PermissionRule(1, "zqxj_push", Decision.ALLOW, RUN, arguments_sha256=digest),)

    def held(arguments_sha256: str | None) -> list[str | None]:
        return rules_of(
            evaluate_permissions(
                tool="zqxj_push",
                mode=Mode.PROMPT,
                rules=allow,
                pins=(),
                run_id=RUN,
                now=NOW,
                arguments_sha256=arguments_sha256,
            )
        )

    assert held(digest) == []
    assert held(other) == ["mode:prompt"]
    assert held(None) == ["mode:prompt"]  # a digest unknown never matches one


def test_expiry_compares_instants_across_time_zones() -> None:
    plus_two = timezone(timedelta(hours=2))
    # 12:00:01 at +02:00 is one second after NOW (10:00 UTC); 12:00:00 is NOW itself.
    live = (rule(1, Decision.DENY, expires_at=datetime(2026, 11, 30, 12, 0, 1, tzinfo=plus_two)),)
    assert rules_of(evaluate("zqxj_read", rules=live)) == ["permission-rule:1"]
    gone = (rule(1, Decision.DENY, expires_at=datetime(2026, 11, 30, 12, 0, tzinfo=plus_two)),)
    assert evaluate("zqxj_read", rules=gone).findings == ()


def test_rule_patterns_are_case_sensitive() -> None:
    rules = (rule(1, Decision.ALLOW, "pay"),)
    assert rules_of(evaluate("Pay", rules=rules)) == ["mode:default"]
    assert evaluate("pay", rules=rules).findings == ()


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        rule(1, Decision.DENY, expires_at=datetime(2026, 11, 30))
    with pytest.raises(ValueError, match="aware"):
        evaluate("zqxj_x", now=datetime(2026, 11, 30))


# --- messages never carry the tool name ---------------------------------------------------


@pytest.mark.parametrize(
    "rules",
    [
        (),
        (rule(1, Decision.DENY, "zqxj_transfer"),),
        (rule(1, Decision.ASK, "zqxj_transfer"),),
    ],
)
@pytest.mark.parametrize("mode", list(Mode))
def test_no_message_contains_the_tool_name(rules: tuple[PermissionRule, ...], mode: Mode) -> None:
    for tool in ("zqxj_transfer", "zqxjTransfer", "zqxj_list"):
        for finding in evaluate(tool, mode=mode, rules=rules).findings:
            assert "zqxj" not in finding.message.lower()
            assert "transfer" not in finding.message.lower()


# --- held_by_mode_only -----------------------------------------------------------------------


def mode_hold(mode: str = "default") -> Finding:
    return Finding(Policy.PERMISSION, f"mode:{mode}", DEFAULT_GATE, "mode holds")


@pytest.mark.parametrize(
    ("findings", "expected"),
    [
        ((), False),
        ((mode_hold(),), True),
        ((mode_hold("default"), mode_hold("prompt")), True),
        ((Finding(Policy.PERMISSION, "mode:read_only", REFUSE, "refuses"),), False),
        (
            (mode_hold(), Finding(Policy.PERMISSION, "permission-rule:3", DEFAULT_GATE, "ask")),
            False,
        ),
        ((mode_hold(), Finding(Policy.CAP, "daily-spend", DEFAULT_GATE, "over")), False),
        ((mode_hold(), Finding(Policy.BUDGET, "budget:calls", DEFAULT_GATE, "over")), False),
        ((Finding(Policy.CAP, "mode:default", DEFAULT_GATE, "a cap rule named mode:"),), False),
        ((Finding(Policy.PERMISSION, "mode:default", Action(ActionKind.GATE, "ops"), "x"),), True),
        ((Finding(Policy.ARGUMENTS, None, REFUSE, "not strict"),), False),
    ],
)
def test_mode_hold_only(findings: tuple[Finding, ...], expected: bool) -> None:
    assert held_by_mode_only(findings) is expected


def test_mode_hold_only_on_evaluated_findings() -> None:
    assert held_by_mode_only(evaluate("zqxj_pay", mode=Mode.DEFAULT).findings)
    assert held_by_mode_only(evaluate("zqxj_write", mode=Mode.PROMPT).findings)
    assert not held_by_mode_only(evaluate("zqxj_write", mode=Mode.READ_ONLY).findings)
    ask = (rule(1, Decision.ASK),)
    assert not held_by_mode_only(evaluate("zqxj_pay", rules=ask).findings)
    assert not held_by_mode_only(evaluate("zqxj_list", mode=Mode.DEFAULT).findings)
