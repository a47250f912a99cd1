"""The vLLM plugin: configuration, vLLM's target probabilities, and the sampler's forward.

vLLM's metadata objects are duck-typed here (SimpleNamespace with the attributes the plugin reads),
so that the suite runs without vLLM. ``test_against_vllm_classes`` runs where vLLM is importable
(it was run in a throwaway venv with vLLM 0.33.0, CPU only; docs/serving.md).
"""

from __future__ import annotations

import json
import math
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


# ---------------------------------------------------------------- both runners, fail closed (vLLM duck-typed)


def _fake_vllm(monkeypatch, runner_first: bool):
    """vLLM's two rejection-sampler modules and the runners that import their names, as modules with
    the constructors of vLLM 0.33.0 (v1: (sampler, spec_config=None, device=None); v2: (sampler,
    spec_config, device, *, watermark_key=None)). ``runner_first``: the v2 runner imported its name
    before register() runs."""
    import sys
    import types

    class V1(torch.nn.Module):
        def __init__(self, sampler, spec_config=None, device=None):
            super().__init__()
            self.sampler = sampler

    class V2:
        def __init__(self, sampler, spec_config, device, *, watermark_key=None):
            self.sampler, self.num_speculative_steps = sampler, spec_config.num_speculative_tokens

    mods = {}
    for name in ("vllm", "vllm.v1", "vllm.v1.sample", "vllm.v1.worker", "vllm.v1.worker.gpu", "vllm.v1.worker.gpu.spec_decode"):
        mods[name] = types.ModuleType(name)
    mods["vllm.v1.sample.rejection_sampler"] = types.SimpleNamespace(RejectionSampler=V1)
    mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"] = types.SimpleNamespace(RejectionSampler=V2)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    runner = types.SimpleNamespace(RejectionSampler=V2)
    if runner_first:
        monkeypatch.setitem(sys.modules, "vllm.v1.worker.gpu.model_runner", runner)
    return V1, V2, runner, mods


def _registered(monkeypatch, runner_first: bool, divergence: str = "kl"):
    """``_fake_vllm``'s modules with the plugin configured (``divergence``, budget 0.1) and registered."""
    monkeypatch.setenv("MENTORED_DIVERGENCE", divergence)
    monkeypatch.setenv("MENTORED_BUDGET", "0.1")
    fake = _fake_vllm(monkeypatch, runner_first)
    vp.register()
    return fake


@pytest.mark.parametrize("runner_first", [True, False])
def test_register_swaps_both_runners_samplers(monkeypatch, runner_first):
    V1, V2, runner, mods = _registered(monkeypatch, runner_first)
    vp.register()  # idempotent
    v1 = mods["vllm.v1.sample.rejection_sampler"].RejectionSampler
    v2 = mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"].RejectionSampler
    assert issubclass(v1, V1) and v1 is not V1 and issubclass(v2, V2) and v2 is not V2
    assert v1.__bases__[-1] is V1 and v2.__bases__ == (V2,)
    if runner_first:  # the runner's own name is the v2 class, never the v1 one (which it would call with watermark_key=)
        assert runner.RejectionSampler is v2
    spec = SimpleNamespace(num_speculative_tokens=3, rejection_sample_method="standard", enable_adaptive_verification=False)
    built = v2(object(), spec, torch.device("cpu"), watermark_key=None)  # as the v2 runner builds it
    assert built.mentored_config.divergence == "kl" and built.mentored_config.budget == 0.1


@pytest.mark.parametrize("method", ["synthetic", "fly"])  # "block" is honoured: tests/test_vllm_plugin_block.py
def test_another_rejection_method_refuses_to_start(monkeypatch, method):
    _, _, _, mods = _registered(monkeypatch, True)
    spec = SimpleNamespace(num_speculative_tokens=2, rejection_sample_method=method, enable_adaptive_verification=False)
    for module, args in (("vllm.v1.worker.gpu.spec_decode.rejection_sampler", (object(), spec, torch.device("cpu"))),
                         ("vllm.v1.sample.rejection_sampler", (object(), spec, None))):
        with pytest.raises(vp.MentoredRefusal, match=f"rejection_sample_method='{method}'.*'standard'"):
            mods[module].RejectionSampler(*args)
    ok = SimpleNamespace(num_speculative_tokens=2, rejection_sample_method="standard", enable_adaptive_verification=False)
    with pytest.raises(vp.MentoredRefusal, match="watermark"):
        mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"].RejectionSampler(object(), ok, torch.device("cpu"), watermark_key=7)
    adaptive = SimpleNamespace(num_speculative_tokens=2, rejection_sample_method="standard", enable_adaptive_verification=True)
    with pytest.raises(vp.MentoredRefusal, match="adaptive"):
        mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"].RejectionSampler(object(), adaptive, torch.device("cpu"))


def test_register_refuses_a_vllm_without_a_known_sampler(monkeypatch):
    import sys

    monkeypatch.setenv("MENTORED_DIVERGENCE", "kl")
    monkeypatch.setenv("MENTORED_BUDGET", "0.1")
    for name in ("vllm.v1.sample.rejection_sampler", "vllm.v1.worker.gpu.spec_decode.rejection_sampler"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails
    with pytest.raises(vp.MentoredRefusal, match="neither rejection sampler"):
        vp.register()


def _v2_batch(rng, n, V, *, greedy=(), dense=True, seeds=None):
    """Inputs of verify_logits for requests with n[r] drafts (request-state index r + 2, to read through idx_mapping)."""
    B = len(n)
    cu = np.concatenate([[0], np.cumsum(np.asarray(n) + 1)])
    L = int(cu[-1])
    logits = torch.as_tensor(rng.normal(size=(L, V)) * 2, dtype=torch.float32)
    draft_logits = torch.as_tensor(rng.normal(size=(B + 2, max(n + [1]), V)) * 2, dtype=torch.float32) if dense else None
    draft_sampled = torch.as_tensor(rng.integers(0, V, L))
    temp = torch.ones(B + 2)
    for r in greedy:
        temp[r + 2] = 0.0
    seed = torch.as_tensor(seeds if seeds is not None else rng.integers(0, 2**62, B + 2))
    return dict(logits=logits, draft_logits=draft_logits, draft_sampled=draft_sampled, cu_num_logits=torch.as_tensor(cu),
                pos=torch.arange(L) + 5, idx_mapping=torch.arange(B) + 2, temperature=temp, seeds=seed, num_speculative_steps=max(n + [1]))


def _vllm_v2_rule(b, u):
    """vLLM 0.33.0's standard rule (v1/worker/gpu/spec_decode/rejection_sampler_utils.py, _rejection_kernel),
    ported to Python with explicit uniforms: accept a random request's draft iff log p(x) > log u0 + log q(x)
    (q = δ_x without draft logits), a greedy one's iff x = argmax p; a placeholder stops a random request.
    At the first rejection the residual (p − q)+ (p without x for token-only drafts) is drawn, here by its
    inverse CDF at u1 (vLLM: Gumbel-max, the same law); all accepted: the bonus row's draw."""
    cu = b["cu_num_logits"].tolist()
    out = []
    for r in range(len(cu) - 1):
        s, e = cu[r], cu[r + 1]
        state = int(b["idx_mapping"][r])
        temp = float(b["temperature"][state])
        row = []
        for i in range(e - s - 1):
            x = int(b["draft_sampled"][s + i + 1])
            p = torch.softmax(b["logits"][s + i].double(), -1)
            if b["draft_logits"] is not None:
                q = torch.softmax(b["draft_logits"][state, i].double() / (temp if temp > 0 else 1.0), -1)
            else:
                q = torch.nn.functional.one_hot(torch.tensor(max(x, 0)), p.numel()).double()
            u0, u1 = (float(v) for v in u[s + i])
            if temp == 0:
                if x >= 0 and int(p.argmax()) == x:
                    row.append(x)
                    continue
                row.append(int(p.argmax()))
                break
            if x >= 0 and float(p[x].log()) > math.log(u0) + float(q[x].log()):  # log 0 = −inf: a token of one side only
                row.append(x)
                continue
            res = (p - q).clamp(min=0) if x >= 0 else p
            cdf = res.cumsum(0)
            row.append(int(torch.searchsorted(cdf, u1 * cdf[-1], right=True).clamp(max=p.numel() - 1)))
            break
        else:
            pb = torch.softmax(b["logits"][e - 1].double(), -1)
            cdf = pb.cumsum(0)
            ub = float(u[e - 1][1])
            row.append(int(pb.argmax()) if temp == 0 else int(torch.searchsorted(cdf, ub * cdf[-1], right=True).clamp(max=pb.numel() - 1)))
        out.append(row)
    return out


@pytest.mark.parametrize("dense", [True, False])
def test_v2_layout_at_budget_zero_is_vllms_rule(rng, dense):
    """Budget 0, given the same uniforms: every accept/reject decision, and each emitted token, as vLLM's rule."""
    cfg = vp.MentoredConfig("kl", 0.0)
    for trial in range(40):
        n = list(rng.integers(0, 4, 3))
        b = _v2_batch(rng, n, 12, greedy=[1] if trial % 2 else [], dense=dense)
        if trial % 5 == 0 and sum(n):  # a placeholder
            b["draft_sampled"][1 + int(np.argmax(n))] = -1
        if dense and trial % 3 == 0:  # make acceptances likely: the drafter near the target
            for r, state in enumerate(b["idx_mapping"].tolist()):
                s = int(b["cu_num_logits"][r])
                for i in range(n[r]):
                    b["draft_logits"][state, i] = b["logits"][s + i] + 0.1 * torch.randn(12)
                    b["draft_sampled"][s + i + 1] = int(b["logits"][s + i].argmax())
        u = rng.random((sum(n) + len(n), 2)) * 0.999 + 1e-4  # one pair per logits row
        sampled, num = vp.verify_logits(**b, config=cfg, uniforms=u)
        want = _vllm_v2_rule(b, u)
        assert [sampled[r, : int(num[r])].tolist() for r in range(len(n))] == want, (trial, n)


def test_v2_layout_emits_pi_and_accepts_greedy_drafts_at_m_star(rng):
    """Budget > 0: the first position's token has law π (dense drafts); a token-only draft is accepted
    with probability π_x = m*(p_x, ε); a token the runner masked (logit −inf) is never emitted."""
    from scipy import stats

    import mentored
    from mentored.verify.serving import onehot_acceptance

    V, N = 6, 1500
    cfg = vp.MentoredConfig("kl", 0.2)
    base = _v2_batch(rng, [1], V, seeds=[0, 0, 0])
    base["logits"][0, 5] = -torch.inf  # top-k removed token 5 at the first position
    p = torch.softmax(base["logits"][0].double(), -1).numpy()
    q = torch.softmax(base["draft_logits"][2, 0].double(), -1).numpy()
    pi = mentored.solve(p, q, divergence="kl", budget=0.2).pi
    pi[5] = 0.0  # zeros="keep": π has no mass where p has none
    pi /= pi.sum()
    counts = np.zeros(V)
    for i in range(N):
        base["seeds"] = torch.tensor([0, 0, i])
        base["draft_sampled"][1] = int(rng.choice(V, p=q))  # the draft drawn from q
        sampled, num = vp.verify_logits(**base, config=cfg)
        counts[int(sampled[0, 0])] += 1
    assert counts[5] == 0
    assert stats.chisquare(counts[:5], N * pi[:5] / pi[:5].sum()).pvalue > 1e-4
    # token-only drafts (vLLM's draft_sample_method="greedy"): acceptance m*(p_x, ε)
    tok = dict(base, draft_logits=None)
    tok["draft_sampled"] = base["draft_sampled"].clone()
    tok["draft_sampled"][1] = 2
    a = float(onehot_acceptance(np.array([p[2]]), 0.2, divergence="kl")[0])
    hits = 0
    for i in range(N):
        tok["seeds"] = torch.tensor([0, 0, i])
        sampled, num = vp.verify_logits(**tok, config=cfg)
        hits += int(num[0]) == 2
    assert abs(hits / N - a) < 4 * math.sqrt(a * (1 - a) / N) + 1e-9, (hits / N, a)


@pytest.mark.parametrize("fill", [math.nan, math.inf, -math.inf])
def test_v2_layout_gives_ids_in_range_for_rows_without_a_law(rng, fill):
    """vLLM's own v2 test (test_all_nan_target_logits_in_range) asks this of all-NaN logits: every id
    in [0, V), on dense and token-only drafts, greedy and random requests."""
    V = 10
    for dense in (True, False):
        b = _v2_batch(rng, [3, 2], V, greedy=[1], dense=dense)
        b["logits"][:] = fill
        with pytest.raises(ValueError, match="NaN"):  # validated: refused
            vp.verify_logits(**b, config=vp.MentoredConfig("kl", 0.1))
        sampled, num = vp.verify_logits(**b, config=vp.MentoredConfig("kl", 0.1), validate=False)  # the plugin's mode
        assert bool((num >= 1).all())
        for r in range(2):
            got = sampled[r, : int(num[r])]
            assert bool(((got >= 0) & (got < V)).all()), (dense, fill, sampled)


@pytest.mark.parametrize("dense", [True, False])
def test_v2_layout_reads_nothing_back_from_the_device(rng, monkeypatch, dense, host_reads):
    """Given vLLM's host copies (cu_num_logits_np, temperature.np, idx_mapping_np), verify_logits on the
    device algorithm (the one a GPU runs; here on CPU tensors) without validation (the plugin's mode)
    reads no tensor back to the host: the
    uniforms come from position_uniforms on the device, p_x from the logit. Given the layout as a
    tensor instead, it must read it (the case that shows the check sees reads)."""
    import mentored.backends

    from mentored.backends import torch as torch_backend

    monkeypatch.setattr(mentored.backends, "CPU_SOLVER", "torch")
    monkeypatch.setattr(torch_backend, "_host_reads", lambda x: False)  # the device's code, on these CPU tensors
    b = _v2_batch(rng, [3, 0, 2], 16, greedy=[1], dense=dense)
    cfg = vp.MentoredConfig("kl", 0.1)
    want = vp.verify_logits(**b, config=cfg)
    host = dict(b, cu_num_logits=b["cu_num_logits"].numpy(), temperature=b["temperature"].numpy(), idx_mapping_np=b["idx_mapping"].numpy())
    with host_reads() as mode:
        got = vp.verify_logits(**host, config=cfg, validate=False)
    assert mode.reads == []
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    with host_reads() as mode:
        vp.verify_logits(**b, config=cfg, validate=False)
    assert mode.reads


def test_position_uniforms_are_uniform_and_keyed_by_seed_and_position():
    """53-bit uniforms in [0, 1): uniform (Kolmogorov-Smirnov), the two columns and neighbouring
    positions uncorrelated, equal for equal (seed, position), different when either changes."""
    from scipy import stats

    pos = torch.arange(20000)
    seeds = torch.full((20000,), 7, dtype=torch.int64)
    u = vp.position_uniforms(seeds, pos)
    assert u.dtype == torch.float64 and tuple(u.shape) == (20000, 2)
    assert bool(((u >= 0) & (u < 1)).all())
    for col in (u[:, 0], u[:, 1]):
        assert stats.kstest(col.numpy(), "uniform").pvalue > 1e-4
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.03
    assert abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.03
    assert torch.equal(vp.position_uniforms(seeds[:5], pos[:5]), u[:5])
    other = vp.position_uniforms(torch.full((5,), 8), pos[:5])
    assert not bool((other == u[:5]).any())
    neg = vp.position_uniforms(torch.full((5,), -(2**62)), pos[:5])  # any int64 seed, vLLM's included
    assert bool(((neg >= 0) & (neg < 1)).all()) and not torch.equal(neg, u[:5])


def test_v2_sampler_verifies_each_chunk_from_vllms_host_layout(rng, monkeypatch, host_reads):
    """The v2 sampler in vLLM's call order: _verify_in_chunks splits the batch into request chunks and
    hands each _verify the device copy of its layout; the subclass takes the chunk's layout from
    input_batch.cu_num_logits_np and the temperatures from temperature.np instead, reading nothing
    back from the device, and decides each chunk as verify_logits decides it alone."""
    import mentored.backends

    from mentored.backends import torch as torch_backend

    monkeypatch.setattr(mentored.backends, "CPU_SOLVER", "torch")
    monkeypatch.setattr(torch_backend, "_host_reads", lambda x: False)  # the device's code, on these CPU tensors
    monkeypatch.setenv("MENTORED_DIVERGENCE", "kl")
    monkeypatch.setenv("MENTORED_BUDGET", "0.1")
    _, V2, _, mods = _fake_vllm(monkeypatch, False)
    b = _v2_batch(rng, [2, 1, 3, 0], 12, greedy=[2], dense=False)
    cu_np = b["cu_num_logits"].numpy()
    chunks = [(0, 2), (2, 4)]

    def _verify_in_chunks(self, logits, input_batch, draft_logits, draft_sampled, pos):  # vLLM's order, reduced to what it hands _verify
        out = []
        for s, e in chunks:
            lo, hi = int(input_batch.cu_num_logits_np[s]), int(input_batch.cu_num_logits_np[e])
            out.append(self._verify(logits[lo:hi], draft_logits, draft_sampled[lo:hi], pos[lo:hi], input_batch.cu_num_logits[s : e + 1] - lo,
                                    input_batch.idx_mapping[s:e], input_batch.idx_mapping_np[s:e], None, None, None, draft_sampled[lo:hi]))
        return out

    V2._verify_in_chunks = _verify_in_chunks
    vp.register()
    states = SimpleNamespace(temperature=SimpleNamespace(np=b["temperature"].numpy(), gpu=b["temperature"]), seeds=SimpleNamespace(gpu=b["seeds"]))
    sampler = SimpleNamespace(sampling_states=states, apply_sampling_params=lambda logits, *a: logits)
    spec = SimpleNamespace(num_speculative_tokens=3, rejection_sample_method="standard", enable_adaptive_verification=False)
    built = mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"].RejectionSampler(sampler, spec, torch.device("cpu"))
    batch = SimpleNamespace(cu_num_logits=b["cu_num_logits"], cu_num_logits_np=cu_np, idx_mapping=b["idx_mapping"],
                            idx_mapping_np=b["idx_mapping"].numpy())
    with host_reads() as mode:
        got = built._verify_in_chunks(b["logits"], batch, None, b["draft_sampled"], b["pos"])
    assert mode.reads == []
    assert built._layout is None
    for (s, e), (_, sampled, num) in zip(chunks, got):
        lo, hi = cu_np[s], cu_np[e]
        want = vp.verify_logits(b["logits"][lo:hi], None, b["draft_sampled"][lo:hi], cu_np[s : e + 1] - lo, b["pos"][lo:hi],
                                b["idx_mapping"][s:e], b["temperature"], b["seeds"], 3, built.mentored_config)
        assert torch.equal(sampled, want[0]) and torch.equal(num, want[1])


def _pad(x, width, value):
    return torch.nn.functional.pad(x, (0, width - x.shape[-1]), value=value)


def _accepting(rng, b, n):
    """Draft rows near the target's and drafts at its argmax, so that positions past the first are reached."""
    V = b["draft_logits"].shape[-1]
    for r, state in enumerate(b["idx_mapping"].tolist()):
        s = int(b["cu_num_logits"][r])
        for i in range(n[r]):
            b["draft_logits"][state, i] = b["logits"][s + i, :V] + torch.as_tensor(rng.normal(size=V) * 0.3, dtype=torch.float32)
            b["draft_sampled"][s + i + 1] = int(b["logits"][s + i, :V].argmax())


def test_v2_narrower_draft_rows_are_q_zero_past_the_drafters_vocabulary(rng):
    """Draft rows of V' < V entries (a target head padded past the drafter's): column j is target token
    j, and q = 0 on the tokens from V' on. Budget 0 is vLLM's rule on the rows padded with −inf (the
    target's whole vocabulary, its last tokens emitted too), decision for decision, given the uniforms."""
    V, Vd = 12, 8
    cfg = vp.MentoredConfig("kl", 0.0)
    emitted = set()
    for trial in range(30):
        n = [int(k) for k in rng.integers(0, 4, 3)]
        b = _v2_batch(rng, n, V, greedy=[1] if trial % 3 == 0 else [])
        b["logits"][:, Vd:] += 2.0  # mass on the tokens the drafter lacks
        b["draft_logits"] = b["draft_logits"][..., :Vd].contiguous()
        b["draft_sampled"] = b["draft_sampled"] % Vd
        if trial % 2:
            _accepting(rng, b, n)
        u = rng.random((sum(n) + len(n), 2)) * 0.999 + 1e-4
        sampled, num = vp.verify_logits(**b, config=cfg, uniforms=u)
        got = [sampled[r, : int(num[r])].tolist() for r in range(len(n))]
        assert got == _vllm_v2_rule(dict(b, draft_logits=_pad(b["draft_logits"], V, -torch.inf)), u), (trial, n)
        emitted.update(t for row in got for t in row)
    assert emitted & set(range(Vd, V))  # the target's tokens past the drafter's head are emitted


def test_v2_wider_draft_rows_keep_the_targets_vocabulary_or_are_refused(rng):
    """Draft rows of V' > V entries (a padded draft head): the target has p = 0 on the tokens from V on.
    With zeros="keep" budget 0 is vLLM's rule on the target padded with −inf: a draft past V is
    rejected and no id past V is emitted. With zeros="continue", refused, naming both widths."""
    V, Vd = 8, 12
    cfg = vp.MentoredConfig("tv", 0.0)
    drafted_past = 0
    for trial in range(30):
        n = [int(k) for k in rng.integers(0, 4, 3)]
        b = _v2_batch(rng, n, Vd, greedy=[1] if trial % 3 == 0 else [])
        if trial % 2:
            _accepting(rng, b, n)
        b["logits"] = b["logits"][:, :V].contiguous()
        drafted_past += int((b["draft_sampled"] >= V).sum())
        u = rng.random((sum(n) + len(n), 2)) * 0.999 + 1e-4
        sampled, num = vp.verify_logits(**b, config=cfg, uniforms=u)
        got = [sampled[r, : int(num[r])].tolist() for r in range(len(n))]
        assert got == _vllm_v2_rule(dict(b, logits=_pad(b["logits"], Vd, -torch.inf)), u), (trial, n)
        assert all(0 <= t < V for row in got for t in row)
    assert drafted_past
    for cont in (vp.MentoredConfig("tv", 0.3, "continue"), vp.MentoredConfig("kl", 0.0, "continue")):
        with pytest.raises(ValueError, match=f"draft_logits rows have {Vd} entries and the target's logits {V}.*zeros='keep'"):
            vp.verify_logits(**b, config=cont, uniforms=u)


@pytest.mark.parametrize("device_code", [False, True])
def test_v2_draft_ids_out_of_range_are_refused_or_decided_as_placeholders(rng, monkeypatch, device_code):
    """A draft id past the vocabulary or below −1: refused (ValueError naming the id, the request and
    the range) with validation; without it (the plugin's mode) decided as the placeholder −1, with
    nothing indexed out of range, on the core and on the device algorithm."""
    if device_code:
        import mentored.backends

        from mentored.backends import torch as torch_backend

        monkeypatch.setattr(mentored.backends, "CPU_SOLVER", "torch")
        monkeypatch.setattr(torch_backend, "_host_reads", lambda x: False)
    V = 10
    cfg = vp.MentoredConfig("kl", 0.2)
    for dense in (True, False):
        b = _v2_batch(rng, [3, 2], V, greedy=[1], dense=dense)
        u = rng.random((7, 2))
        for bad, row in ((V, 2), (V + 1000, 5), (-3, 1)):  # logits rows 2 and 5 draft for request 0 and 1; row 1 for request 0
            odd = dict(b, draft_sampled=b["draft_sampled"].clone())
            odd["draft_sampled"][row + 1] = bad
            with pytest.raises(ValueError, match=rf"draft_sampled holds the draft {bad} of request {int(row >= 4)} .*outside \[0, {V}\)"):
                vp.verify_logits(**odd, config=cfg, uniforms=u)
            held = dict(b, draft_sampled=odd["draft_sampled"].clone())
            held["draft_sampled"][row + 1] = -1
            got = vp.verify_logits(**odd, config=cfg, uniforms=u, validate=False)
            want = vp.verify_logits(**held, config=cfg, uniforms=u, validate=False)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), (dense, bad)


def test_v2_a_layout_that_is_not_one_is_refused(rng):
    """cu_num_logits must be 0, then nondecreasing by 1 or more per request (its bonus row), ending at
    the number of logits rows, one entry per request of idx_mapping: anything else is refused by a
    ValueError that names it (not an IndexError, and not token 0 for a request without rows)."""
    b = _v2_batch(rng, [2, 1, 2], 10)  # cu = [0, 3, 5, 8]
    cfg = vp.MentoredConfig("kl", 0.1)
    for cu, why in (([0, 3, 3, 8], "request 1 has 0 rows"), ([0, 3, 2, 8], "request 1 has -1 rows"),
                    ([1, 3, 5, 8], "it must start at 0 and end at the number of logits rows, 8"),
                    ([0, 3, 5, 9], "it must start at 0 and end at the number of logits rows, 8"),
                    ([0, 3, 5, 7], "it must start at 0 and end at the number of logits rows, 8")):
        for as_np in (True, False):
            layout = np.array(cu) if as_np else torch.tensor(cu)
            with pytest.raises(ValueError, match=rf"cu_num_logits \[{', '.join(map(str, cu))}\] is not a layout of the logits: {why}"):
                vp.verify_logits(**dict(b, cu_num_logits=layout), config=cfg, validate=False)
    with pytest.raises(ValueError, match=r"cu_num_logits must be flat .* \(4,\) for the 3 entries of idx_mapping; got shape \(3,\)"):
        vp.verify_logits(**dict(b, cu_num_logits=torch.tensor([0, 3, 8])), config=cfg)
    with pytest.raises(ValueError, match=r"draft_sampled must have one entry per logits row, shape \(8,\), got \(7,\)"):
        vp.verify_logits(**dict(b, draft_sampled=b["draft_sampled"][:7]), config=cfg)
    with pytest.raises(ValueError, match="request 0 has 2 drafts .* num_speculative_steps=1"):
        vp.verify_logits(**dict(b, num_speculative_steps=1), config=cfg)
    with pytest.raises(ValueError, match=r"draft_logits must have shape .* at least 2 steps"):
        vp.verify_logits(**dict(b, draft_logits=b["draft_logits"][:, :1]), config=cfg)
    empty = dict(b, logits=b["logits"][:0], draft_sampled=b["draft_sampled"][:0], pos=b["pos"][:0], cu_num_logits=np.array([0]),
                 idx_mapping=b["idx_mapping"][:0])
    sampled, num = vp.verify_logits(**empty, config=cfg, validate=False)  # no request: nothing to verify
    assert tuple(sampled.shape) == (0, 3) and tuple(num.shape) == (0,)


def test_v2_the_bonus_rows_draft_step_is_never_read(rng):
    """A request's bonus row reads no draft row: a step the proposer did not write (vLLM fills the cache
    of some proposers with −inf) leaves the bonus token as it is, here for requests with no drafts
    (their only row is the bonus row) and with fewer drafts than the cache has steps."""
    cfg = vp.MentoredConfig("kl", 0.1)
    b = _v2_batch(rng, [0, 1, 3], 10)
    u = rng.random((7, 2))
    want = vp.verify_logits(**b, config=cfg, uniforms=u)
    unwritten = b["draft_logits"].clone()
    unwritten[2, 0:] = -torch.inf  # request 0 (state 2): no drafts
    unwritten[3, 1:] = -torch.inf  # request 1 (state 3): one draft
    for kw in ({}, {"validate": False}):
        got = vp.verify_logits(**dict(b, draft_logits=unwritten), config=cfg, uniforms=u, **kw)
        assert all(torch.equal(g, w) for g, w in zip(got, want))


_PHILOX_KAT = (  # Random123's kat_vectors, philox4x32 10: counter (4 words), key (2 words), output (4 words)
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
)


def test_position_uniforms_use_the_whole_seed_and_position():
    """Philox4x32-10 keyed by the whole 64-bit seed, counting the whole 64-bit position: seeds equal in
    some 32-bit fold (42 and 5,659,043,997) and positions 2³⁰, 2³² or 2⁶² apart give other uniforms;
    the generator is Random123's (its known answers), so a request's stream is pinned on every device."""
    from scipy import stats

    pos = torch.arange(4096)
    u42 = vp.position_uniforms(torch.full((4096,), 42), pos)
    for seed in (5_659_043_997, 42 + 2**32, 42 - 2**32, 42 - 2**63):  # the last: 42 with the sign bit set
        other = vp.position_uniforms(torch.full((4096,), seed), pos)
        assert not bool((other == u42).all(-1).any()), seed
    for shift in (2**30, 2**32, 2**62):
        assert not bool((vp.position_uniforms(torch.full((4096,), 42), pos + shift) == u42).all(-1).any()), shift
    # deterministic, the same for a row whatever the batch around it
    assert torch.equal(vp.position_uniforms(torch.full((4096,), 42), pos), u42)
    assert torch.equal(vp.position_uniforms(torch.tensor([7, 42, 9]), torch.tensor([0, 17, 5]))[1], u42[17])
    # uniform on [0, 1): chi-square over 64 bins and Kolmogorov-Smirnov on 2 × 65536 draws (fixed seeds)
    u = vp.position_uniforms(torch.tensor([(i * 0x9E3779B97F4A7C15) % 2**63 for i in range(65536)]), torch.arange(65536) + 2**40)
    assert bool(((u >= 0) & (u < 1)).all())
    for col in u.T.numpy():
        assert stats.chisquare(np.bincount((col * 64).astype(int), minlength=64)).pvalue > 1e-4
        assert stats.kstest(col, "uniform").pvalue > 1e-4
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.02
    got = vp._philox4x32(torch.tensor([c for c, _, _ in _PHILOX_KAT]), torch.tensor([k for _, k, _ in _PHILOX_KAT]))
    assert got.tolist() == [list(w) for _, _, w in _PHILOX_KAT]


def test_v2_a_wider_draft_vocabulary_with_zeros_continue_refuses_to_start(monkeypatch):
    """Where vLLM's configuration tells both vocabulary sizes, the engine refuses at startup what
    verify_logits would refuse at its first step: probabilistic drafts wider than the target with
    zeros='continue'. zeros='keep', equal widths and token-only drafts start."""
    _, _, _, mods = _registered(monkeypatch, False, "tv")
    cls = mods["vllm.v1.worker.gpu.spec_decode.rejection_sampler"].RejectionSampler

    def spec(target, draft, method="probabilistic"):
        return SimpleNamespace(num_speculative_tokens=2, rejection_sample_method="standard", enable_adaptive_verification=False,
                               draft_sample_method=method, target_model_config=SimpleNamespace(get_vocab_size=lambda: target),
                               draft_model_config=SimpleNamespace(get_vocab_size=lambda: draft))

    monkeypatch.setenv("MENTORED_ZEROS", "continue")
    wider = r"draft model's vocabulary \(152064 tokens\) is wider than the target's \(151936\).*MENTORED_ZEROS=keep"
    with pytest.raises(vp.MentoredRefusal, match=wider):
        cls(object(), spec(151936, 152064), torch.device("cpu"))
    for ok in (spec(152064, 151936), spec(151936, 152064, "greedy")):
        cls(object(), ok, torch.device("cpu"))
    monkeypatch.setenv("MENTORED_ZEROS", "keep")
    cls(object(), spec(151936, 152064), torch.device("cpu"))


# ---------------------------------------------------------------- per-request settings


def test_mentored_enable_turns_the_plugin_on_lossless_by_default():
    cfg = vp.config_from_env({"MENTORED_ENABLE": "1"})
    assert (cfg.divergence, cfg.budget, cfg.zeros) == ("kl", 0.0, "keep")
    cfg = vp.config_from_env({"MENTORED_ENABLE": "1", "MENTORED_ZEROS": "continue"})
    assert cfg.zeros == "continue"
    cfg = vp.config_from_env({"MENTORED_ENABLE": "1", "MENTORED_DIVERGENCE": "tv", "MENTORED_BUDGET": "0.2"})
    assert (cfg.divergence, cfg.budget) == ("tv", 0.2)
    for bad in ("yes", "0", "true", ""):
        with pytest.raises(ValueError, match=f"MENTORED_ENABLE={bad!r}: set it to 1"):
            vp.config_from_env({"MENTORED_ENABLE": bad})


def test_request_setting_reads_extra_args_and_names_what_it_refuses():
    default = vp.MentoredConfig("kl", 0.0)
    assert vp.request_setting(None, default) == ("kl", 0.0)
    assert vp.request_setting({"other_plugin": 3}, default) == ("kl", 0.0)  # not ours
    assert vp.request_setting({"mentored_budget": 0.3}, default) == ("kl", 0.3)
    assert vp.request_setting({"mentored_budget": "inf"}, default) == ("kl", math.inf)
    assert vp.request_setting({"mentored_divergence": "tv"}, default) == ("tv", 0.0)
    assert vp.request_setting({"mentored_divergence": "hellinger", "mentored_budget": "0.05"}, vp.MentoredConfig("kl", math.inf)) == ("hellinger", 0.05)
    for extra, said in (({"mentored_budget": -1}, r"extra_args\['mentored_budget'\]: budget must be nonnegative"),
                        ({"mentored_budget": "nan"}, r"extra_args\['mentored_budget'\]: budget must be a number"),
                        ({"mentored_budget": True}, r"extra_args\['mentored_budget'\]: budget must be a number"),
                        ({"mentored_budget": "1e400"}, "overflows"),
                        ({"mentored_divergence": "kll"}, r"extra_args\['mentored_divergence'\]: unknown divergence"),
                        ({"mentored_divergence": 3}, r"extra_args\['mentored_divergence'\]: a divergence name must be a string"),
                        ({"mentored_budgte": 0.1}, r"unknown extra_args keys \['mentored_budgte'\]")):
        with pytest.raises(ValueError, match=said):
            vp.request_setting(extra, default)
    with pytest.raises(ValueError, match="extra_args must be a dict"):
        vp.request_setting([("mentored_budget", 1)], default)


class _DuckModelRunner:
    """What the v1 sampler reads of vLLM's v1 model runner: the batch's request ids and the requests."""

    def __init__(self, extra_args):
        self.requests = {f"r{b}": SimpleNamespace(sampling_params=SimpleNamespace(extra_args=e)) for b, e in enumerate(extra_args)}
        self.input_batch = SimpleNamespace(req_ids=list(self.requests))
        self.rejection_sampler = vp.MentoredRejectionSampler(config=vp.MentoredConfig("kl", 0.0))  # built in the runner's __init__, as vLLM does


def test_the_v1_sampler_verifies_each_request_with_its_own_budget(rng):
    """Request 0 at inf accepts every draft; requests 1 and 2 are decided as rejection_sample decides
    them at their own settings (the process default 0, and tv 0.2), in one call."""
    n, V = [4, 3, 2], 30
    runner = _DuckModelRunner([{"mentored_budget": "inf"}, None, {"mentored_divergence": "tv", "mentored_budget": 0.2}])
    sampler = runner.rejection_sampler
    assert sampler.mentored_runner() is runner
    logits = torch.tensor(rng.normal(size=(sum(n), V)), dtype=torch.float32)
    q = torch.tensor(rng.dirichlet(np.ones(V), size=sum(n)), dtype=torch.float32)
    draft = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(3))[:, 0]
    bonus = torch.tensor([[5], [6], [7]])
    sm = _sampling([1.0, 1.0, 1.0], generators={b: torch.Generator().manual_seed(b) for b in range(3)})
    out = sampler(_meta(draft, n), q, logits, bonus, sm)
    assert_array_equal(out[0].numpy(), list(draft[:4].numpy()) + [5])
    probs, greedy = vp.compute_target_probs(logits, n, sm)
    gens = {b: torch.Generator().manual_seed(b) for b in range(3)}
    ref = rejection_sample(draft, n, q, probs, bonus, divergence=["kl", "kl", "tv"], budget=[math.inf, 0.0, 0.2], is_greedy=greedy.numpy(), generators=gens)
    assert_array_equal(out.numpy(), ref.numpy())
    # the runner's warm-up calls with dummy requests while its batch is empty: the process default
    ids, runner.input_batch.req_ids = runner.input_batch.req_ids, []
    assert sampler.request_settings(3) == ("kl", 0.0, None)
    runner.input_batch.req_ids = ids
    # a value that slipped past admission is verified losslessly, never with a guess
    runner.requests["r0"].sampling_params.extra_args = {"mentored_budget": -1}
    sampler.__dict__.pop("_settings")
    assert sampler.request_settings(3)[:2] == (["kl", "kl", "tv"], pytest.approx([0.0, 0.0, 0.2]))


def test_the_v2_sampler_records_each_requests_setting_by_slot(monkeypatch):
    monkeypatch.delenv("MENTORED_CONFIG", raising=False)
    calls = []

    class Base:
        def __init__(self, sampler, spec_config, device, *, watermark_key=None):
            self.sampler = sampler

    sampler = SimpleNamespace(add_request=lambda idx, params: calls.append(idx))
    cls = vp._make_v2_class(Base)
    rs = cls(sampler, SimpleNamespace(rejection_sample_method="standard"), "cpu", config=vp.MentoredConfig("kl", 0.0))
    sampler.add_request(3, SimpleNamespace(extra_args={"mentored_budget": 0.5}))
    sampler.add_request(0, SimpleNamespace(extra_args=None))
    assert calls == [3, 0]  # vLLM's own add_request still runs
    assert rs.request_settings(np.array([0])) is None  # all at the default: one setting for the call
    divs, budgets, prices = rs.request_settings(np.array([3, 0]))
    assert divs == ["kl", "kl"] and prices is None
    assert_array_equal(budgets, [0.5, 0.0])
    sampler.add_request(3, SimpleNamespace(extra_args={"mentored_divergence": "tv"}))  # the slot reused by another request
    divs, budgets, prices = rs.request_settings(np.array([3]))
    assert divs == ["tv"] and prices is None
    assert_array_equal(budgets, [0.0])
