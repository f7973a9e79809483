"""Settings readers refuse malformed values instead of guessing."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    UNKNOWN_CHOICES,
    env_bool,
    env_choices,
    env_int,
    env_list,
    env_rate,
    secret_key,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("TRUE", True), (" on ", True), ("0", False), ("no", False), ("", False)],
)
def test_env_bool_reads_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("FLAG", raw)
    assert env_bool("FLAG", not expected) is expected


def test_env_bool_refuses_a_typo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLAG", "ture")
    with pytest.raises(ImproperlyConfigured):
        env_bool("FLAG", False)


def test_env_bool_default_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLAG", raising=False)
    assert env_bool("FLAG", True) is True


@pytest.mark.parametrize("raw", ["-1", "1.5", "abc", "99999", "1e3"])
def test_env_int_refuses_out_of_range_or_non_integers(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("NUMBER", raw)
    with pytest.raises(ImproperlyConfigured):
        env_int("NUMBER", 5, minimum=0, maximum=1000)


def test_env_int_reads_a_value_in_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMBER", " 42 ")
    assert env_int("NUMBER", 5, minimum=0, maximum=1000) == 42


def test_env_list_drops_blanks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTS", "a.example, ,b.example,")
    assert env_list("HOSTS", "") == ["a.example", "b.example"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("600/m", (600, 60)), ("5/s", (5, 1)), ("100/h", (100, 3600)), ("0", None)],
)
def test_env_rate(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: tuple[int, int] | None
) -> None:
    monkeypatch.setenv("RATE", raw)
    assert env_rate("RATE", "1/s") == expected


@pytest.mark.parametrize("raw", ["600", "600/d", "0/m", "-1/m", "10 / m", "ten/m"])
def test_env_rate_refuses_malformed(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("RATE", raw)
    with pytest.raises(ImproperlyConfigured):
        env_rate("RATE", "1/s")


PIECES = ("handler", "layer", "sqlite")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, set()),
        ("", set()),
        ("layer", {"layer"}),
        (" Handler , layer,", {"handler", "layer"}),
        ("all", set(PIECES)),
        ("layer,ALL", set(PIECES)),
    ],
)
def test_env_choices(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: set[str]) -> None:
    if raw is None:
        monkeypatch.delenv("PIECES", raising=False)
    else:
        monkeypatch.setenv("PIECES", raw)
    assert env_choices("PIECES", PIECES) == expected


def test_env_choices_refuses_an_unknown_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIECES", "layer,handlr")
    message = UNKNOWN_CHOICES.format(
        name="PIECES", unknown="handlr", choices="handler, layer, sqlite"
    )
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        env_choices("PIECES", PIECES)


def test_secret_key_prefers_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SECRET_KEY", "from-env")
    assert secret_key(tmp_path / "key") == "from-env"
    assert not (tmp_path / "key").exists()


def test_secret_key_is_generated_once_and_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SECRET_KEY", raising=False)
    path = tmp_path / "var" / "secret_key"
    first = secret_key(path)
    assert len(first) >= 50
    assert secret_key(path) == first
    assert path.stat().st_mode & 0o077 == 0


def test_secret_key_racing_workers_agree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SECRET_KEY", raising=False)
    path = tmp_path / "secret_key"
    keys: list[str] = []
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        keys.append(secret_key(path))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1
    assert keys[0] == path.read_text()
