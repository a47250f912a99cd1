"""The README's examples run as printed, and its two commands are the ones the suite and CI run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks():
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _command_after(lead: str) -> str:
    """The first indented line after the paragraph that starts with ``lead`` (as tests/run.sh reads it)."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(lead))
    return next(line[4:] for line in lines[start + 1 :] if re.match(r"^    \S", line))


def test_first_example_runs():
    blocks = _blocks()
    assert blocks, "README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert abs(namespace["sol"].acceptance - 0.8251173) < 1e-6


def test_every_example_runs():
    for block in _blocks()[1:]:
        exec(compile(block, "README.md", "exec"), {})


def test_the_two_commands():
    # tests/run.sh runs the main command as the README writes it (with --quick), in the clone's root.
    assert _command_after("Install and run the main job") == "pip install . && mentored demo"
    assert _command_after("Run the whole suite") == "bash tests/run.sh"
    run_sh = (ROOT / "tests" / "run.sh").read_text()
    assert "/^Install and run the main job/" in run_sh and 'bash -c "$main_command --quick"' in run_sh
    assert "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()
    assert 'mentored = "mentored.demo.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_python_m_mentored_outside_the_clone(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mentored", "demo", "--quick", "--vocab", "300"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "optimal acceptance" in out.stdout


def test_source_folder_without_core_says_why(tmp_path):
    # A copy of the sources without the compiled core, imported first (as from a clone's root).
    # -S: no site-packages, so that an editable install's import hook cannot redirect the import;
    # the check runs before numpy is needed.
    src = tmp_path / "mentored"
    src.mkdir()
    for py in (ROOT / "mentored").glob("*.py"):
        (src / py.name).write_text(py.read_text())
    out = subprocess.run([sys.executable, "-S", "-c", "import mentored"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "compiled core" in out.stderr and "pip install ." in out.stderr, out.stderr
    assert "circular import" not in out.stderr


def test_import_is_light_and_submodules_are_attributes():
    code = (
        "import sys, mentored\n"
        "heavy = [m for m in ('sympy', 'cvxpy', 'scipy', 'torch', 'transformers', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert callable(mentored.rules.audit) and callable(mentored.quality.small_budget)\n"
        "assert 'sympy' not in sys.modules and mentored.symbolic.analyse and 'sympy' in sys.modules\n"
        "assert {'rules', 'quality', 'hf', 'textlm'} <= set(dir(mentored))\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_flat_paths_are_the_moved_modules():
    """Every earlier flat path (mentored.serving, ...) imports, as the moved module object itself; a
    name that never was a module is still an AttributeError; `python -m` runs a moved module."""
    import importlib.util

    import mentored

    for old, new in mentored._MOVED.items():
        moved = importlib.import_module(f"mentored.{new}")
        assert importlib.import_module(f"mentored.{old}") is moved and getattr(mentored, old) is moved, old
        assert moved.__spec__.name == f"mentored.{new}", old  # its own spec, not the alias's
    from mentored.serving import rejection_sample
    from mentored.verify.serving import rejection_sample as same

    assert rejection_sample is same
    with pytest.raises(AttributeError, match="no attribute 'servin'"):
        mentored.servin
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mentored.servin")
    out = subprocess.run([sys.executable, "-P", "-m", "mentored.train", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--target-steps" in out.stdout, out.stderr


def test_missing_extras_are_named():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "import mentored\n"
        "for name, extra in (('hf', 'pip install torch transformers'), ('torch_backend', 'pip install torch')):\n"
        "    try:\n"
        "        getattr(mentored, name)\n"
        "    except ImportError as exc:\n"
        "        assert extra in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(name)\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_extras_take_any_recent_torch():
    """A user who installed torch (a CPU build, a newer release) keeps it: every extra asks for a range
    that admits the releases from 2.1 on, so `pip install '.[test]' torch==2.14.1` resolves."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    torch_reqs = [Requirement(r) for reqs in extras.values() for r in reqs if Requirement(r).name == "torch"]
    assert {"torch", "hf", "smollm", "test"} <= {name for name, reqs in extras.items() if any(r.startswith("torch") for r in reqs)}
    for req in torch_reqs:
        for version in ("2.1.0", "2.13.0", "2.13.0+cpu", "2.14.1", "3.0.0"):
            assert req.specifier.contains(Version(version)), (str(req), version)


def test_the_readme_is_a_door():
    """What a newcomer needs in two minutes; measured tables live in docs/, and every link resolves."""
    assert len(README.splitlines()) <= 150
    assert "µs" not in README and " ms |" not in README
    for target in re.findall(r"\]\(([^)#\s]+)", README):
        if not re.match(r"^[a-z]+:", target):
            assert (ROOT / target).exists(), target


# Built from pieces so that this file does not match itself.
_HISTORY = [r"\b" + "Is" + r"sue \d+", "python" + "-native", "the old " + "default", "before the " + "one-call", r"\(it was \d"]


def test_docs_and_code_speak_of_what_is():
    """No tracker numbers, machine names or history ("it was 45×") in the docs, code, tests or benchmarks."""
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "README.md", "docs", "mentored", "tests",
                            "benchmarks", "notebooks", "cpp"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not names:
        pytest.skip("not a git checkout: the file list comes from git")
    found = []
    for name in names:
        path = ROOT / name
        if not path.is_file() or path.suffix not in {".md", ".py", ".ipynb", ".cpp", ".hpp", ".sh"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}: {m.group(0)!r}" for pattern in _HISTORY for m in re.finditer(pattern, text)]
    assert not found, found


def test_install_hints_work_wherever_the_user_is():
    """A missing-dependency hint names packages on the index, never `mentored[...]` (no such package is
    published) nor `'.[...]'` (only right in a clone's root); each one installs exactly an extra's
    packages, so it stays true to pyproject.toml."""
    import tomllib

    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extra_sets = {frozenset(Requirement(r).name for r in reqs) for reqs in extras.values()}
    named = []
    for path in sorted([*(ROOT / "mentored").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "tests").glob("test_*.py")]):
        if path.name == Path(__file__).name:
            continue  # its patterns would match themselves
        text = path.read_text()
        bad = re.findall(r"pip install[^\n]{0,12}?(?:mentored\[|\.\[)", text)
        assert not bad, (path.name, bad)
        named += [(path.name, frozenset(m.split())) for m in re.findall(r"pip install ((?:[a-z][a-z0-9-]*\b ?)+)", text)]
    extra_names = {"torch", "transformers", "gguf", "accelerate", "matplotlib"}
    hints = [(name, packages) for name, packages in named if packages <= extra_names]
    assert len(hints) >= 6, named
    for name, packages in hints:
        assert packages in extra_sets, (name, sorted(packages), "installs no extra's packages exactly")
