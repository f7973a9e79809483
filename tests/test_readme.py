"""The README's Python example runs and shows what it says it shows."""

from __future__ import annotations

import re
from pathlib import Path

import capcore

README = Path(__file__).resolve().parent.parent / "README.md"


def test_capcore_example_runs_and_holds_the_call() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    example = next((b for b in blocks if "import capcore" in b), None)
    assert example is not None
    namespace: dict[str, object] = {}
    exec(compile(example, str(README), "exec"), namespace)

    evaluation = namespace["evaluation"]
    assert isinstance(evaluation, capcore.Evaluation)
    assert evaluation.verdict.status is capcore.Status.PENDING
    assert [r.as_reason() for r in evaluation.verdict.reasons] == [
        {
            "policy": "cap",
            "rule": "daily-spend",
            "action": "gate",
            "gate": "",
            "message": "USD 1,050.00 would exceed the limit of USD 1,000.00 per day "
            "(spent USD 800.00)",
        }
    ]
