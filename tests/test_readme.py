"""The README's first example runs as printed, and its commands are the ones CI uses."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _blocks():
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_first_example_runs():
    blocks = _blocks()
    assert blocks, "README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert abs(namespace["sol"].acceptance - 0.8251173) < 1e-6


def test_every_example_runs():
    for block in _blocks()[1:]:
        exec(compile(block, "README.md", "exec"), {})


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "    bash tests/run.sh\n" in readme
    assert "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()
    assert "python -m mentored demo" in readme
