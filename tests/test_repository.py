"""The repository is self-contained, and its citations of the theory notes resolve.

1. No file of the repository links to or cites a path outside it: the internal notes file, a sibling
   folder of shared material, an absolute path of the machine it was written on, or a relative link
   that climbs above the repository root.
2. Every "docs/theory.md §N" anywhere in the repository names a section of docs/theory.md, and every
   Coq theorem and test that docs/theory.md cites exists.

The files are those git knows (tracked, plus untracked files that are not ignored, so that a new file
is checked before it is committed), read as UTF-8 text; binary files are skipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "docs" / "theory.md"
PROOFS = ROOT / "proofs"
TESTS = ROOT / "tests"

# Built from pieces so that this file does not match itself.
_NOTES = "MATH" + ".md"
_SHARED = "sha" + "red"
_WORK = "/" + "work" + "/"
FORBIDDEN = [
    (re.compile(re.escape(_NOTES)), "cites the internal notes file"),
    (re.compile(r"(?<![\w-])" + _SHARED + r"/|\.\./" + _SHARED + r"\b"), "cites a path in a folder outside the repository"),
    (re.compile(r"(?<![\w.])" + re.escape(_WORK)), "cites an absolute path of the build machine"),
]
# [text](target) anywhere (markdown files, notebooks, docstrings) and [label]: target definitions.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")
LINK_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _repository_texts() -> dict[str, str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the file list comes from git")
    texts = {}
    for name in sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n}):
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _outside(name: str, target: str) -> bool:
    """Whether a link target written in file ``name`` points outside the repository."""
    target = target.split("#", 1)[0].split("?", 1)[0]
    if not target or SCHEME.match(target) or target.startswith(("{", "$")):
        return False
    if target.startswith("/"):
        return True
    resolved = ((ROOT / name).parent / target).resolve()
    return not resolved.is_relative_to(ROOT.resolve())


def outside_references(texts: dict[str, str]) -> list[str]:
    found = []
    for name, text in texts.items():
        for pattern, why in FORBIDDEN:
            for m in pattern.finditer(text):
                found.append(f"{name}:{_line(text, m.start())}: {why}: {m.group(0)!r}")
        for pattern in (LINK, LINK_DEF):
            for m in pattern.finditer(text):
                if _outside(name, m.group(1)):
                    found.append(f"{name}:{_line(text, m.start())}: link outside the repository: {m.group(1)!r}")
    return found


def test_nothing_links_outside_the_repository():
    found = outside_references(_repository_texts())
    assert not found, "references to paths outside the repository:\n" + "\n".join(found)


# ---------------------------------------------------------------------------------------------
# Citations of docs/theory.md

SECTION = re.compile(r"^## (\d+)\. ", re.M)
# "theory.md §3", "theory.md §3–4", "theory.md §2, §7", "theory.md` §1", "(docs/theory.md §6, theorem 9)".
REFERENCE = re.compile(r"theory\.md`?\)?[ \t]*((?:§[ \t]*\d+(?:[ \t]*[–-][ \t]*\d+)?(?:[ \t]*(?:,|and|&)[ \t]*(?=§))?)+)")
NUMBERS = re.compile(r"(\d+)(?:\s*[–-]\s*(\d+))?")
SELF_REFERENCE = re.compile(r"§[ \t]*(\d+)(?:[ \t]*[–-][ \t]*(\d+))?")
COQ_CHAIN = re.compile(r"`(\w+\.v) : ([\w']+)`((?:\s*(?:,|and)\s*`[\w']+`)*)")
COQ_FILE = re.compile(r"`(\w+\.v)\b")
TEST_CHAIN = re.compile(r"`tests/(test_\w+\.py)::(test_\w+)`((?:\s*(?:,|and)\s*`test_\w+`)*)")
BARE_TEST = re.compile(r"`(test_\w+)`")
DEFINED = re.compile(r"^\s*(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark|Definition|Fixpoint)\s+([\w']+)", re.M)


def _expand(numbers: str) -> set[int]:
    out = set()
    for m in NUMBERS.finditer(numbers):
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        out.update(range(lo, hi + 1))
    return out


def theory_reference_problems(texts: dict[str, str], theory: str | None) -> list[str]:
    problems = []
    sections = {int(n) for n in SECTION.findall(theory or "")}
    for name, text in texts.items():
        for m in REFERENCE.finditer(text):
            missing = sorted(_expand(m.group(1)) - sections)
            if theory is None or missing:
                problems.append(f"{name}:{_line(text, m.start())}: {m.group(0)!r} names no section of docs/theory.md {missing}")
    if theory is None:
        return problems + ["docs/theory.md is missing"]
    for m in SELF_REFERENCE.finditer(theory):
        lo = int(m.group(1))
        missing = sorted(set(range(lo, int(m.group(2) or lo) + 1)) - sections)
        if missing:
            problems.append(f"docs/theory.md:{_line(theory, m.start())}: {m.group(0)!r} names no section {missing}")

    coq = {f.name: set(DEFINED.findall(f.read_text(encoding="utf-8"))) for f in PROOFS.glob("*.v")}
    for m in COQ_CHAIN.finditer(theory):
        names = [m.group(2)] + re.findall(r"`([\w']+)`", m.group(3))
        if m.group(1) not in coq:
            problems.append(f"docs/theory.md:{_line(theory, m.start())}: no file proofs/{m.group(1)}")
            continue
        for n in names:
            if n not in coq[m.group(1)]:
                problems.append(f"docs/theory.md:{_line(theory, m.start())}: {m.group(1)} defines no {n!r}")
    for m in COQ_FILE.finditer(theory):
        if m.group(1) not in coq:
            problems.append(f"docs/theory.md:{_line(theory, m.start())}: no file proofs/{m.group(1)}")

    tests = {f.name: set(re.findall(r"^def (test_\w+)", f.read_text(encoding="utf-8"), re.M)) for f in TESTS.glob("test_*.py")}
    every_test = set().union(*tests.values())
    chained = set()
    for m in TEST_CHAIN.finditer(theory):
        chained.update(range(m.start(), m.end()))
        names = [m.group(2)] + re.findall(r"`(test_\w+)`", m.group(3))
        for n in names:
            if n not in tests.get(m.group(1), ()):
                problems.append(f"docs/theory.md:{_line(theory, m.start())}: tests/{m.group(1)} has no {n!r}")
    for m in BARE_TEST.finditer(theory):
        if m.start() not in chained and m.group(1) not in every_test:
            problems.append(f"docs/theory.md:{_line(theory, m.start())}: no test {m.group(1)!r} in tests/")
    return problems


def test_theory_citations_resolve():
    theory = THEORY.read_text(encoding="utf-8") if THEORY.is_file() else None
    problems = theory_reference_problems(_repository_texts(), theory)
    assert not problems, "unresolved citations of the theory notes:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Figures


def test_save_figure_refuses_what_a_reader_would_miss(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mentored.demo.plotting import figure_problems, figure_text, save_figure

    x = [1.0, 2.0, 3.0, 4.0]
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_title("a title far too long to fit on a figure three inches wide, cut at both ends")
    with pytest.raises(ValueError, match="title 'a title far too long.*cut by the edge"):
        save_figure(fig, tmp_path / "cut.png", source="benchmarks/neural.py")
    assert not (tmp_path / "cut.png").exists()
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(x, [1.0, 1.0, 1.0, 4.0], "o-", label="a curve with a point under the legend")
    ax.legend(loc="upper left")
    assert any("legend covers 1 point(s)" in p for p in figure_problems(fig))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(x, x, label="under")
    top = ax.plot(x, x, label="over")[0]
    assert figure_problems(fig) == ["'under' hides under 'over' in axes 0 (''): draw the one on top dashed, "
                                    "or give the one underneath markers of another shape or size"]
    top.set_linestyle("--")
    ax.set_title("π over p, docs/theory.md §6")
    ax.legend(loc="lower right")
    assert figure_problems(fig) == []
    path = save_figure(fig, tmp_path / "ok.png", source="benchmarks/neural.py")
    chunks = figure_text(path)
    assert chunks["Source"] == "benchmarks/neural.py"
    assert chunks["Description"].splitlines() == ["π over p, docs/theory.md §6", "under", "over"]
    plt.close(fig)

    with pytest.raises(ValueError, match="source=''"):
        save_figure(fig, tmp_path / "x.png", source="")
    with pytest.raises(ValueError, match="path='.*x.svg' must end in .png"):
        save_figure(fig, tmp_path / "x.svg", source="benchmarks/neural.py")


def test_divergence_colors_are_one_per_builtin_divergence():
    import mentored
    from mentored.demo.plotting import DIVERGENCE_COLORS, divergence_color

    assert tuple(DIVERGENCE_COLORS) == mentored.BUILTIN_NAMES
    assert len(set(DIVERGENCE_COLORS.values())) == len(DIVERGENCE_COLORS)
    with pytest.raises(ValueError, match="name='triangular' is not a built-in divergence"):
        divergence_color("triangular")


def _notebook_figures(name: str, monkeypatch):
    """The figures the notebook draws: its code cells run in order (IPython magics left out, cwd
    notebooks/) up to its last cell that draws."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = ["".join(c["source"]) for c in json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    last = max(i for i, c in enumerate(cells) if "plt.subplots" in c)
    monkeypatch.chdir(ROOT / "notebooks")
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    plt.close("all")
    namespace: dict = {}
    for cell in cells[: last + 1]:
        exec(compile("\n".join(line for line in cell.splitlines() if not line.lstrip().startswith("%")), name, "exec"), namespace)
    return [plt.figure(n) for n in plt.get_fignums()]


@pytest.mark.parametrize("notebook", ["quickstart.ipynb", "trees.ipynb"])
def test_notebook_figures_hide_no_point_and_no_curve(notebook, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mentored.demo.plotting import figure_problems

    figures = _notebook_figures(notebook, monkeypatch)
    try:
        assert figures
        problems = [p for fig in figures for p in figure_problems(fig)]
    finally:
        plt.close("all")
    assert not problems, f"{notebook}:\n" + "\n".join(problems)


# [alt](target.png) in markdown, notebooks and docstrings.
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+\.png)")
# A file name drawn into a figure: "docs/theory.md", "results.json", "benchmarks/neural.py".
FILE_NAME = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:md|py|json|csv|png|ipynb|v))\b")
# Figures drawn by scripts that save them without mentored.demo.plotting.save_figure (no text record);
# they draw no file names or citations (titles "kl: peers against the frontier (n = 4096)" and the like).
UNRECORDED_FIGURES = {"benchmarks/audit.png": "benchmarks/audit.py", "benchmarks/audit_demo.png": "benchmarks/audit.py"}
FIGURE_SCRIPTS = ("benchmarks/quality_study.py", "benchmarks/neural.py", "benchmarks/real_target.py")


def _tracked(pattern: str) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", pattern],
                             cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the file list comes from git")
    return sorted(n for n in out.decode("utf-8", "surrogateescape").split("\0") if n and (ROOT / n).is_file())


def figure_text_problems(name: str, text: str, files: set[str]) -> list[str]:
    """Citations in the text drawn into figure ``name`` that do not resolve: the internal notes file or
    a path outside the repository, a section of docs/theory.md that does not exist, or a file name that
    is neither a path of the repository nor the name of one of its files."""
    problems = [f"{name}: {why}: {m.group(0)!r}" for pattern, why in FORBIDDEN for m in pattern.finditer(text)]
    theory = THEORY.read_text(encoding="utf-8") if THEORY.is_file() else None
    problems += [p for p in theory_reference_problems({name: text}, theory) if p.startswith(name)]
    basenames = {f.rsplit("/", 1)[-1] for f in files}
    for m in FILE_NAME.finditer(text):
        cited = m.group(1)
        if cited not in files and ("/" in cited or cited not in basenames):
            problems.append(f"{name}: draws the name of a file that does not exist: {cited!r}")
    return problems


def test_every_figure_the_docs_show_exists():
    texts = _repository_texts()
    missing = []
    for name, text in texts.items():
        for m in IMAGE.finditer(text):
            target = m.group(1).split("#", 1)[0]
            if SCHEME.match(target):
                continue
            if not ((ROOT / name).parent / target).resolve().is_file():
                missing.append(f"{name}:{_line(text, m.start())}: shows {target!r}, which does not exist")
    assert not missing, "\n".join(missing)


def test_every_figure_records_its_drawn_text_and_cites_only_what_exists():
    from mentored.demo.plotting import figure_text

    files = set(_tracked("*"))
    problems = []
    for name in _tracked("*.png"):
        if name in UNRECORDED_FIGURES:
            continue
        chunks = figure_text(ROOT / name)
        if "Description" not in chunks or "Source" not in chunks:
            problems.append(f"{name}: no record of its drawn text; draw it again with its script "
                            "(mentored.demo.plotting.save_figure writes the record)")
            continue
        if chunks["Source"] not in files:
            problems.append(f"{name}: drawn by {chunks['Source']!r}, which does not exist")
        problems += figure_text_problems(name, chunks["Description"], files)
    for name, script in UNRECORDED_FIGURES.items():
        if name in files and script not in files:
            problems.append(f"{name}: drawn by {script!r}, which does not exist")
    assert not problems, "figures that cite what does not exist, or cannot be checked:\n" + "\n".join(problems)


def test_figure_text_problems_finds_a_stale_citation():
    files = {"docs/theory.md", "benchmarks/quality_study.py"}
    stale = "Small-budget approximations (" + _NOTES + " §6): error O(√ε)\nfrom old_results.json"
    found = figure_text_problems("x.png", stale, files)
    assert any("internal notes file" in p for p in found)
    assert any("'old_results.json'" in p for p in found)
    assert not figure_text_problems("x.png", "Small-budget approximations (docs/theory.md §6)\ntheory.md", files)


def _load_script(relative: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_figure_script_" + Path(relative).stem, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _redraw(relative: str, out: Path) -> dict[str, Path]:
    """The figures of the script ``relative`` drawn again from its stored results into ``out``: committed path → new file."""
    if relative == "benchmarks/quality_study.py":
        study = _load_script(relative)
        curves, scatter, table, text = study.load_results(ROOT / "benchmarks" / "quality" / "results.json")
        study.plot_synthetic(curves, scatter, out)
        study.plot_approximation(table, out)
        study.plot_text(text, out)
        return {f"benchmarks/quality/{f.name}": f for f in sorted(out.glob("*.png"))}
    import json

    from mentored.demo.plotting import save_figure

    pytest.importorskip("torch")
    if relative == "benchmarks/neural.py":
        pytest.importorskip("transformers")
        neural = _load_script(relative)
        saved = json.loads((ROOT / "benchmarks" / "neural_results.json").read_text())
        fig = neural.figure(saved["rows"], saved["quality"])
        target = "docs/neural.png"
    else:
        pytest.importorskip("transformers")
        real = _load_script(relative)
        fig = real.figure(json.loads((ROOT / "benchmarks" / "real_target_results.json").read_text()))
        target = "docs/real_target.png"
    import matplotlib.pyplot as plt

    try:
        path = save_figure(fig, out / Path(target).name, source=relative)
    finally:
        plt.close(fig)
    return {target: path}


@pytest.mark.parametrize("script", FIGURE_SCRIPTS)
def test_figure_scripts_redraw_their_committed_figures_from_stored_results(script, tmp_path):
    """Each script draws its figures again from its results file, past save_figure's checks (no text
    cut, no point under a legend, no hidden curve), and the committed figures draw the same text."""
    pytest.importorskip("matplotlib")
    from mentored.demo.plotting import figure_text

    redrawn = _redraw(script, tmp_path)
    assert redrawn
    for committed, new in redrawn.items():
        assert (ROOT / committed).is_file(), committed
        old = figure_text(ROOT / committed).get("Description")
        assert old == figure_text(new)["Description"], f"{committed} is stale: python {script} --figure-only draws it again"


def test_neural_figures_plot_the_gain_of_pi_over_p_in_one_colour_per_divergence():
    """Both figures of docs/neural.md: every curve or point named after a divergence is in that
    divergence's colour, and the gain panels plot bits(p) − bits(π) (> 0: π beats p), as the tables do."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import json

    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import same_color
    from matplotlib.lines import Line2D

    import mentored
    from mentored.demo.plotting import divergence_color

    named = re.compile(r"(?<![\w])(" + "|".join(sorted(mentored.BUILTIN_NAMES, key=len, reverse=True)) + r")(?![\w])")
    neural = json.loads((ROOT / "benchmarks" / "neural_results.json").read_text())
    real = json.loads((ROOT / "benchmarks" / "real_target_results.json").read_text())
    figures = {"docs/neural.png": _load_script("benchmarks/neural.py").figure(neural["rows"], neural["quality"]),
               "docs/real_target.png": _load_script("benchmarks/real_target.py").figure(real)}
    wrong, plotted = [], {}
    try:
        for name, fig in figures.items():
            gain_axes = [ax for ax in fig.axes if ax.get_ylabel().startswith("bits(p) − bits(π)")]
            if len(gain_axes) != 1:
                wrong.append(f"{name}: {len(gain_axes)} panels labelled bits(p) − bits(π)")
            for ax in fig.axes:
                for artist in [*ax.lines, *ax.collections]:
                    m = named.search(artist.get_label())
                    if m is None:
                        continue
                    color = artist.get_color() if isinstance(artist, Line2D) else artist.get_facecolor()[0]
                    if not same_color(color, divergence_color(m.group(1))):
                        wrong.append(f"{name}: {artist.get_label()!r} is not in {m.group(1)}'s colour")
                    if ax in gain_axes:
                        plotted[(name, artist.get_label())] = np.asarray(artist.get_ydata(), dtype=float)
    finally:
        for fig in figures.values():
            plt.close(fig)
    assert not wrong, "\n".join(wrong)
    for res in neural["quality"]:
        for div, sw in res["sweep"].items():
            expected = np.array(sw["gain_test"]) / np.log(2) * 1e3  # gain_test: E[log π − log p] in nats
            np.testing.assert_allclose(plotted[("docs/neural.png", f"{res['pair']}: {div}")], expected)
    for key, q in real["quality"].items():
        for div in {r["divergence"] for r in q["budgets"]}:
            expected = [1e3 * r["gain"] for r in q["budgets"] if r["divergence"] == div and np.isfinite(r["gain"])]
            np.testing.assert_allclose(plotted[("docs/real_target.png", f"{div}, {key.replace('_', '-')}")], expected)
