"""python -m mentored {demo, solve, frontier, certify}: run in-process on small inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mentored
from mentored.__main__ import main


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


def test_demo_on_text_small(capsys):
    args = ["demo", "--prompts", "2", "--new-tokens", "12", "--eval-tokens", "300", "--prompt-len", "16"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "lossless" in out and "passes/tok" in out and "bits(pi)" in out


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
    assert main(["frontier", str(tmp / "p.npy"), str(tmp / "q.npy"), "--divergences", "tv", "kl", "--budgets", "0", "0.1", "--plot", str(png), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    tv = np.abs(p - q).sum(1) / 2
    assert_allclose(got["acceptance"]["tv"], [np.mean(1 - tv), np.mean(np.minimum(1, 1 - tv + 0.1))], rtol=1e-9)
    assert png.stat().st_size > 1000


def test_certify_accepts_the_solution_and_refuses_the_target(rows, capsys):
    tmp, p, q = rows
    np.save(tmp / "pi.npy", mentored.solve(p, q, divergence="kl", budget=0.1).pi)
    assert main(["certify", str(tmp / "p.npy"), str(tmp / "q.npy"), str(tmp / "pi.npy"), "--budget", "0.1"]) == 0
    capsys.readouterr()
    # π = p is feasible but far from optimal: the gap is large and the exit status says so
    assert main(["certify", str(tmp / "p.npy"), str(tmp / "q.npy"), str(tmp / "p.npy"), "--budget", "0.1", "--json"]) == 1
    assert all(r["ok"] == 0 and r["gap"] > 1e-3 for r in json.loads(capsys.readouterr().out))


def test_cli_errors_are_clear(rows, capsys):
    tmp, p, q = rows
    np.save(tmp / "bad.npy", p[:, :5])
    with pytest.raises(SystemExit) as exc:
        main(["solve", str(tmp / "p.npy"), str(tmp / "bad.npy"), "--budget", "0.1"])
    assert exc.value.code == 2
    assert "same shape" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["solve", str(tmp / "p.npy"), str(tmp / "q.npy")])
