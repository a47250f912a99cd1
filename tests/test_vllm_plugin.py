"""The vLLM plugin: configuration, vLLM's target probabilities, and the sampler's forward.

vLLM's metadata objects are duck-typed here (SimpleNamespace with the attributes the plugin reads),
so that the suite runs without vLLM. ``test_against_vllm_classes`` runs where vLLM is importable
(it was run in a throwaway venv with vLLM 0.33.0, CPU only; docs/serving.md).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

torch = pytest.importorskip("torch", reason="the plugin needs torch")

from mentored.integrations import vllm_plugin as vp  # noqa: E402
from mentored.verify.serving import rejection_sample  # noqa: E402


def _meta(draft, n):
    return SimpleNamespace(draft_token_ids=torch.as_tensor(draft, dtype=torch.int32), num_draft_tokens=list(n), max_spec_len=max(n))


def _sampling(temperature, top_k=None, top_p=None, generators=None):
    t = torch.as_tensor(temperature, dtype=torch.float32)
    greedy = t < 1e-5
    return SimpleNamespace(
        temperature=t, all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()),
        top_k=None if top_k is None else torch.as_tensor(top_k), top_p=None if top_p is None else torch.as_tensor(top_p, dtype=torch.float32),
        generators=generators or {}, max_num_logprobs=None,
    )


# ---------------------------------------------------------------- configuration


def test_config_from_environment_and_files(tmp_path):
    assert vp.config_from_env({}) is None
    cfg = vp.config_from_env({"MENTORED_DIVERGENCE": "tv", "MENTORED_BUDGET": "0.25"})
    assert (cfg.divergence, cfg.budget, cfg.zeros) == ("tv", 0.25, "keep")
    cfg = vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": "inf", "MENTORED_ZEROS": "continue"})
    assert cfg.budget == float("inf") and cfg.zeros == "continue"
    with pytest.raises(ValueError, match="both"):
        vp.config_from_env({"MENTORED_BUDGET": "0.1"})
    with pytest.raises(ValueError, match="nonnegative"):
        vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": "-1"})
    with pytest.raises(ValueError):
        vp.config_from_env({"MENTORED_DIVERGENCE": "no_such", "MENTORED_BUDGET": "0.1"})
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"divergence": "hellinger", "budget": 0.1}))
    cfg = vp.config_from_env({"MENTORED_CONFIG": str(j), "MENTORED_DIVERGENCE": "kl"})  # the file wins
    assert (cfg.divergence, cfg.budget) == ("hellinger", 0.1)
    t = tmp_path / "m.toml"
    t.write_text('[mentored]\ndivergence = "js"\nbudget = 0.05\nzeros = "continue"\n')
    cfg = vp.config_from_env({"MENTORED_CONFIG": str(t)})
    assert (cfg.divergence, cfg.budget, cfg.zeros) == ("js", 0.05, "continue")
    j.write_text(json.dumps({"divergence": "kl", "budget": 0.1, "temperature": 2}))
    with pytest.raises(ValueError, match="unknown keys"):
        vp.config_from_env({"MENTORED_CONFIG": str(j)})


def _from_file(path, text):
    path.write_text(text, encoding="utf-8")
    return vp.config_from_env({"MENTORED_CONFIG": str(path)})


def test_a_boolean_budget_is_refused(tmp_path):
    for name, text in (("m.toml", 'divergence = "kl"\nbudget = true\n'), ("m.json", '{"divergence": "kl", "budget": true}')):
        with pytest.raises(TypeError, match=f"{name}, key 'budget': budget must be a number, got True"):
            _from_file(tmp_path / name, text)
    with pytest.raises(TypeError, match="must be a number"):
        vp.MentoredConfig("kl", True)


def test_a_budget_that_overflows_to_inf_is_refused(tmp_path):
    with pytest.raises(ValueError, match="MENTORED_BUDGET='1e400': budget '1e400' overflows"):
        vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": "1e400"})
    for name, text in (("m.toml", 'divergence = "kl"\nbudget = 1e400\n'), ("m.json", '{"divergence": "kl", "budget": 1e400}'),
                       ("n.json", '{"divergence": "kl", "budget": 1' + "0" * 400 + "}")):
        with pytest.raises(ValueError, match=f"{name}, key 'budget': budget 1.* overflows"):
            _from_file(tmp_path / name, text)
    # No bound, written as such, is allowed (as for solve and speculative_step); NaN is not a budget.
    for env in ("inf", "Infinity", " +inf "):
        assert vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": env}).budget == float("inf")
    assert _from_file(tmp_path / "i.toml", 'divergence = "kl"\nbudget = inf\n').budget == float("inf")
    assert _from_file(tmp_path / "i.json", '{"divergence": "kl", "budget": 1e300}').budget == 1e300
    with pytest.raises(ValueError, match="MENTORED_BUDGET='nan'"):
        vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": "nan"})
    with pytest.raises(ValueError, match="key 'budget': budget must be a number, got NaN"):
        _from_file(tmp_path / "nan.toml", 'divergence = "kl"\nbudget = nan\n')


def test_a_file_that_is_not_a_table_is_refused(tmp_path):
    for name, text in (("m.json", '"kl"'), ("l.json", '["kl", 0.1]'), ("m.toml", 'mentored = "kl"\n')):
        with pytest.raises(ValueError, match=f"{name}: expected an? (object|table) with the keys divergence, budget and zeros"):
            _from_file(tmp_path / name, text)
    with pytest.raises(ValueError, match=r"m.json: not valid JSON .*keys given twice: \['budget'\]"):
        _from_file(tmp_path / "m.json", '{"divergence": "kl", "budget": 0.1, "budget": 1}')
    with pytest.raises(ValueError, match=r"outside the \[mentored\] table: \['budget'\]"):
        _from_file(tmp_path / "m.toml", 'budget = 1\n[mentored]\ndivergence = "kl"\nbudget = 0.1\n')
    with pytest.raises(ValueError, match="m.toml: not valid TOML"):
        _from_file(tmp_path / "m.toml", "divergence = kl\n")


def test_upper_case_toml_and_a_byte_order_mark(tmp_path):
    toml = '[mentored]\ndivergence = "tv"\nbudget = 0.25\n'
    for name, text in (("M.TOML", toml), ("m.Toml", toml), ("bom.toml", "\ufeff" + toml), ("bom.json", '\ufeff{"divergence": "tv", "budget": 0.25}')):
        cfg = _from_file(tmp_path / name, text)
        assert (cfg.divergence, cfg.budget) == ("tv", 0.25), name


def test_every_error_names_its_source(tmp_path):
    with pytest.raises(ValueError, match="MENTORED_ZEROS is set without"):
        vp.config_from_env({"MENTORED_ZEROS": "continue"})
    with pytest.raises(ValueError, match="MENTORED_DIVERGENCE='no_such': unknown divergence"):
        vp.config_from_env({"MENTORED_DIVERGENCE": "no_such", "MENTORED_BUDGET": "0.1"})
    with pytest.raises(ValueError, match="MENTORED_ZEROS='drop': zeros must be"):
        vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": "0.1", "MENTORED_ZEROS": "drop"})
    with pytest.raises(ValueError, match="MENTORED_BUDGET='0.1x': budget must be a number"):
        vp.config_from_env({"MENTORED_DIVERGENCE": "kl", "MENTORED_BUDGET": "0.1x"})
    with pytest.raises(TypeError, match="m.toml, key 'divergence': divergence must be a name"):
        _from_file(tmp_path / "m.toml", "divergence = 3\nbudget = 0.1\n")
    with pytest.raises(ValueError, match="m.json, key 'zeros': zeros must be"):
        _from_file(tmp_path / "m.json", '{"divergence": "kl", "budget": 0.1, "zeros": true}')
    with pytest.raises(ValueError, match="m.json, key 'budget': budget must be nonnegative"):
        _from_file(tmp_path / "m.json", '{"divergence": "kl", "budget": -0.5}')


def test_register_does_nothing_without_configuration(monkeypatch):
    for k in ("MENTORED_CONFIG", "MENTORED_DIVERGENCE", "MENTORED_BUDGET"):
        monkeypatch.delenv(k, raising=False)
    import sys

    had = "vllm" in sys.modules
    vp.register()  # returns before importing vLLM
    assert ("vllm" in sys.modules) == had


def test_entry_point_is_declared():
    import tomllib
    from pathlib import Path

    data = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert data["project"]["entry-points"]["vllm.general_plugins"] == {"mentored": "mentored.integrations.vllm_plugin:register"}


# ---------------------------------------------------------------- target probabilities as vLLM computes them


def _reference_probs(logits, n, temperature, top_k, top_p):
    """Row by row in numpy: temperature (greedy: 1), top-k (ties with the k-th kept), top-p (smallest top set of mass ≥ p)."""
    out = []
    req = np.repeat(np.arange(len(n)), n)
    for row, b in zip(logits, req):
        t = temperature[b] if temperature[b] >= 1e-5 else 1.0
        z = row / t  # vLLM masks greedy rows too (temperature 1): their argmax is always kept
        if top_k is not None:
            kth = np.sort(z)[::-1][min(top_k[b], len(z)) - 1]
            z = np.where(z < kth, -np.inf, z)
        if top_p is not None:
            order = np.argsort(-z, kind="stable")
            pr = np.exp(z[order] - z[order][0])
            pr /= pr.sum()
            keep = np.cumsum(pr) - pr < top_p[b]  # mass before this token < p: kept
            drop = order[~keep]
            z = z.copy()
            z[drop] = -np.inf
        e = np.exp(z - z.max())
        out.append(e / e.sum())
    return np.array(out)


def test_target_probs_temperature_top_k_top_p_and_greedy(rng):
    n = [2, 3, 1, 2]
    V = 50
    logits = torch.tensor(rng.normal(size=(sum(n), V)) * 3, dtype=torch.float32)
    temperature = np.array([0.7, 0.0, 1.3, 1.0], dtype=np.float32)
    top_k = np.array([5, 50, 10, 50])
    top_p = np.array([1.0, 0.5, 0.8, 0.9], dtype=np.float32)
    probs, greedy = vp.compute_target_probs(logits, n, _sampling(temperature, top_k, top_p))
    assert_array_equal(greedy.numpy(), [False, True, False, False])
    ref = _reference_probs(logits.double().numpy(), n, temperature, top_k, top_p)
    assert_array_equal(probs.numpy() == 0, ref == 0)  # the same tokens masked
    assert_allclose(probs.numpy(), ref, atol=1e-6)
    # all greedy: softmax of the raw logits (only its argmax is used)
    probs, greedy = vp.compute_target_probs(logits, n, _sampling(np.zeros(4)))
    assert greedy.all() and torch.equal(probs.argmax(-1), logits.argmax(-1))


# ---------------------------------------------------------------- the module


def _sampler(div="kl", budget=0.0, zeros="keep"):
    return vp.MentoredRejectionSampler(config=vp.MentoredConfig(div, budget, zeros))


def test_forward_equals_rejection_sample_on_the_computed_probabilities(rng):
    n = [3, 0, 2, 4]
    V = 40
    T = sum(n)
    logits = torch.tensor(rng.normal(size=(T, V)) * 2, dtype=torch.float32)
    q = torch.tensor(rng.dirichlet(np.ones(V), size=T), dtype=torch.float32)
    draft = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(1))[:, 0]
    bonus = torch.tensor(rng.integers(0, V, (4, 1)))
    sm = _sampling([0.8, 1.0, 0.0, 1.2], top_k=[10, 40, 40, 20], top_p=[0.9, 1.0, 1.0, 0.95])
    for div, budget in (("kl", 0.0), ("tv", 0.2), ("js", 0.1)):
        sm.generators = {b: torch.Generator().manual_seed(b) for b in range(4)}
        out = _sampler(div, budget)(_meta(draft, n), q, logits, bonus, sm)
        probs, greedy = vp.compute_target_probs(logits, n, sm)
        gens = {b: torch.Generator().manual_seed(b) for b in range(4)}
        ref = rejection_sample(draft, n, q, probs, bonus, divergence=div, budget=budget, is_greedy=greedy.numpy(), generators=gens)
        assert out.dtype == torch.int32 and out.shape == (4, 5)
        assert_array_equal(out.numpy(), ref.numpy())


def test_vllm_semantics_at_budget_zero_greedy_cases():
    """vLLM's greedy cases through the module: perfect match with bonus, early mismatch, k = 0."""
    V = 8
    n = [3, 3, 0]
    draft = [1, 2, 3, 1, 5, 3]
    logits = torch.full((6, V), -5.0)
    for t, tok in enumerate([1, 2, 3, 1, 4, 3]):  # the target's argmax per position
        logits[t, tok] = 5.0
    bonus = torch.tensor([[7], [6], [0]])
    out = _sampler("kl", 0.0)(_meta(draft, n), None, logits, bonus, _sampling([0.0, 0.0, 0.0]))
    assert_array_equal(out.numpy(), [[1, 2, 3, 7], [1, 4, -1, -1], [0, -1, -1, -1]])


def test_top_k_masked_tokens_are_never_emitted_with_keep(rng):
    V, N = 12, 400
    logits = torch.tensor(rng.normal(size=(1, V)), dtype=torch.float32).repeat(N, 1)
    allowed = set(torch.topk(logits[0], 3).indices.tolist())
    q = torch.full((N, V), 1.0 / V)
    draft = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(0))[:, 0]
    sm = _sampling(np.ones(N), top_k=np.full(N, 3))
    torch.manual_seed(0)
    out = _sampler("tv", 0.5, "keep")(_meta(draft, [1] * N), q, logits, torch.zeros((N, 1), dtype=torch.int64), sm)
    emitted = set(out[:, 0].tolist())
    assert emitted <= allowed
    torch.manual_seed(0)
    out = _sampler("tv", 0.5, "continue")(_meta(draft, [1] * N), q, logits, torch.zeros((N, 1), dtype=torch.int64), sm)
    assert set(out[:, 0].tolist()) - allowed  # the problem as stated does emit them at this budget


def test_against_vllm_classes(rng, monkeypatch):
    """Real SpecDecodeMetadata, SamplingMetadata, Sampler and RejectionSampler (vLLM's later forward)."""
    pytest.importorskip("vllm", reason="vLLM is not installed here (it was tried in a throwaway venv: docs/serving.md)")
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    monkeypatch.setenv("MENTORED_DIVERGENCE", "kl")
    monkeypatch.setenv("MENTORED_BUDGET", "0.1")
    import vllm.v1.sample.rejection_sampler as rs

    original = rs.RejectionSampler
    try:
        vp.register()
        vp.register()  # idempotent
        cls = rs.RejectionSampler
        assert cls is not original and issubclass(cls, original) and cls._mentored
        sampler = cls(Sampler())
        assert sampler.mentored_config.budget == 0.1
        drafts = [[1, 2], [], [3, 4, 5]]
        meta = SpecDecodeMetadata.make_dummy(drafts, torch.device("cpu"))
        T, B, V = 5, 3, 16
        meta.target_logits_indices = torch.tensor([0, 1, 3, 4, 5])
        meta.bonus_logits_indices = torch.tensor([2, 6, 7])
        logits = torch.tensor(rng.normal(size=(T + B, V)), dtype=torch.float32)
        q = torch.softmax(torch.tensor(rng.normal(size=(T, V)), dtype=torch.float32), -1)
        sm = _real_sampling_metadata(B, V)
        out = sampler(meta, q, logits, sm)
        tokens = out.sampled_token_ids
        assert tokens.dtype == torch.int32 and tokens.shape == (B, 4)
        assert tokens[1, 0] >= 0 and (tokens[1, 1:] == -1).all()  # no drafts: the bonus token alone
    finally:
        rs.RejectionSampler = original


def _real_sampling_metadata(B, V):
    import dataclasses

    from vllm.v1.sample.metadata import SamplingMetadata

    fields = {f.name for f in dataclasses.fields(SamplingMetadata)}
    kw = dict(
        temperature=torch.ones(B), all_greedy=False, all_random=True, top_p=None, top_k=None, generators={},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.zeros(B),
        presence_penalties=torch.zeros(B), repetition_penalties=torch.ones(B), output_token_ids=[[] for _ in range(B)],
        allowed_token_ids_mask=None, bad_words_token_ids={},
    )
    if "logitsprocs" in fields:
        from vllm.v1.sample.logits_processor import LogitsProcessors

        kw["logitsprocs"] = LogitsProcessors()
    return SamplingMetadata(**{k: v for k, v in kw.items() if k in fields})
