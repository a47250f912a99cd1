r"""The SmolLM2 drafter as a plain ``LlamaForCausalLM`` of the full vocabulary, for vLLM's ``draft_model``.

The shipped drafter :math:`q` (:class:`~mentored.integrations.smollm.SubVocabLlama`) covers a
sub-vocabulary :math:`S` of the target :math:`p`'s 49,152 tokens: its head has a row per token of
:math:`S` and its logits are :math:`-\infty` elsewhere, so :math:`q_i = 0` for :math:`i \notin S`.
vLLM's ``draft_model`` speculative decoding with probabilistic drafts
(``draft_sample_method="probabilistic"``, the draft's probabilities passed to the rejection sampler)
wants a draft of the target's vocabulary size, and its Llama head is a matrix without bias: no row
gives :math:`-\infty`. :func:`export_drafter` writes a Llama that computes the same :math:`q`.

**The construction.** The drafter's residual stream (width :math:`d = 256`) is widened by
:data:`PAD` coordinates. Every embedding row holds the drafter's embedding of that id (the row of
the id on :math:`S`, the shared "other" row elsewhere) followed by a constant :math:`c` and zeros.
Every layer reads nothing from the new coordinates and writes nothing to them, so they stay
:math:`(c, 0, \dots, 0)` through the network. What they change is RMSNorm's mean square, taken over
:math:`d' = d + \mathrm{PAD}` coordinates; with the exported :math:`\varepsilon' = (\varepsilon d -
c^2)/d'` and every norm weight scaled by :math:`s = \sqrt{d/d'}`,

.. math:: \frac{\sum_{k \le d} x_k^2 + c^2}{d'} + \varepsilon' = s^2 \Big(\frac{1}{d}\sum_{k \le d} x_k^2 + \varepsilon\Big),

so each norm's output on the first :math:`d` coordinates is the drafter's, exactly in real
arithmetic, and the layers compute what the drafter's do. The final norm passes the constant on as
:math:`h_c = c / \mathrm{rms}'(x) > 0`. The head's rows on :math:`S` are the drafter's; every row
off :math:`S` is :math:`\bar w - K e_c`, with :math:`\bar w` the mean of the drafter's head rows,
so its logit is

.. math:: \bar w \cdot h - K h_c \;\le\; \max_{j \in S} w_j \cdot h - K h_c,

a mean being at most the largest of the logits it averages. :math:`h_c` has a lower bound over all
inputs, not only over data: every attention output is a convex combination of value vectors of
normed inputs (norm below :math:`\|\gamma\|_\infty \sqrt d`), every MLP output is bounded through
:math:`|\mathrm{silu}(t)| \le |t|`, so spectral norms of the weights bound the residual stream
(:func:`residual_bound`). :math:`K` is set so that :math:`K h_c \ge` :data:`MARGIN` for every input:
each logit off :math:`S` is at least :data:`MARGIN` (1024) below the largest, and the softmax gives
those tokens exactly 0 in float32 and in float64 (:math:`e^{-1024}` underflows both).

**What is exact and what is not.** In real arithmetic the exported model's logits on :math:`S`
equal the drafter's and :math:`q_i = 0` off :math:`S`, for every input. In floating point the
exported model rounds differently (norm weights times :math:`s`, sums over :math:`d'` terms,
another kernel), so :math:`q` on :math:`S` agrees to float32 rounding, not bit for bit; the
margin off :math:`S` is 1024 up to relative rounding of :math:`K h_c`, far more than the 104
below which float32's softmax underflows. ``tests/test_vllm_export.py`` measures both on held-out
text. The exported config differs from the drafter's in ``hidden_size`` (:math:`d'`) and
``rms_norm_eps`` (:math:`\varepsilon'`); rope, heads and layers are the drafter's.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch

__all__ = ["export_drafter", "residual_bound", "PAD", "MARGIN", "CONSTANT"]

PAD = 16  # coordinates added to the residual stream: the constant and 15 zeros (keeps the width a multiple of 16 for vectorised kernels)
CONSTANT = 2.0 ** -6  # c: c² must stay below ε·d so that ε' > 0 (ε·d = 2.56e-3 for the shipped drafter)
MARGIN = 1024.0  # guaranteed logit gap off the sub-vocabulary: e^-1024 underflows to 0 in float32 and float64
MARKER = "mentored_export.json"  # names a folder as this function's output (what may be overwritten)
_TARGET_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
_FORMAT = 1


def _spectral(matrix: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(matrix.double(), ord=2))


@torch.no_grad()
def residual_bound(drafter) -> float:
    r"""An upper bound on the Euclidean norm of the drafter's residual stream after its last layer,
    for every input sequence (float64, rounded up by 1 %).

    ``‖x_L‖ ≤ max_i ‖E_i‖ + Σ_l (A_l + M_l)``, where, with :math:`n = \gamma \odot z` a norm's output
    (:math:`\|z\| < \sqrt d`):

    * attention: each head outputs a convex combination of its values :math:`W_v^h n`, so
      :math:`A_l = \|W_o\|_2 \sqrt{\sum_h \|W_v^{h} \mathrm{diag}\,\gamma\|_2^2}\,\sqrt d`;
    * MLP: :math:`\|\mathrm{silu}(Gn) \odot Un\| \le \|Gn\|_\infty \|Un\|`, since
      :math:`|\mathrm{silu}(t)| \le |t|`, so :math:`M_l = \|W_d\|_2 \max_i \|G_i\,\mathrm{diag}\,\gamma\| \,
      \|U\,\mathrm{diag}\,\gamma\|_2\, d`.
    """
    config = drafter.config
    d = config.hidden_size
    head_dim = getattr(config, "head_dim", None) or d // config.num_attention_heads
    group = config.num_attention_heads // config.num_key_value_heads
    bound = float(drafter.model.embed_tokens.weight.double().norm(dim=1).max())
    for layer in drafter.model.layers:
        g_attn = layer.input_layernorm.weight.double()
        wv = layer.self_attn.v_proj.weight.double() * g_attn  # columns scaled: W_v diag γ
        per_kv = [_spectral(wv[h * head_dim:(h + 1) * head_dim]) for h in range(config.num_key_value_heads)]
        values = math.sqrt(sum(group * v * v for v in per_kv))  # each kv head serves `group` query heads
        bound += _spectral(layer.self_attn.o_proj.weight) * values * math.sqrt(d)
        g_mlp = layer.post_attention_layernorm.weight.double()
        gate = layer.mlp.gate_proj.weight.double() * g_mlp
        up = layer.mlp.up_proj.weight.double() * g_mlp
        bound += _spectral(layer.mlp.down_proj.weight) * float(gate.norm(dim=1).max()) * _spectral(up) * d
    return bound * 1.01


def _shipped_drafter():
    from .smollm import DRAFTER_DIR, SubVocabLlama
    from .weights import verify_checksums

    verify_checksums(DRAFTER_DIR)
    return SubVocabLlama.from_pretrained(DRAFTER_DIR, dtype=torch.float32, local_files_only=True).eval()


def _target_folder() -> Path:
    """The converted SmolLM2 target's folder, found and checked as ``load_smollm`` does."""
    from . import smollm

    path = smollm.gguf_path()
    digest = smollm._sha256(path)
    if digest != smollm.GGUF_SHA256:
        raise ValueError(f"checksum mismatch for {path}: {digest}, expected {smollm.GGUF_SHA256} (reinstall: {smollm.INSTALL})")
    return smollm._converted(path, digest, None, smollm.CONVERTED_SHA256, strict=smollm._versions() == smollm.CONVERTED_WITH)


def _check_folder(folder: Path) -> None:
    """Refuse a folder with files in it unless an earlier export wrote it (its marker says so)."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"cannot export the drafter to {folder}: it is a file, not a folder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    marker = folder / MARKER
    try:
        ok = json.loads(marker.read_text()).get("format") == _FORMAT
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        names = sorted(p.name for p in folder.iterdir())[:5]
        raise FileExistsError(f"cannot export the drafter to {folder}: the folder is not empty ({', '.join(names)}...) and holds no "
                              f"{MARKER} of an earlier export; give an empty or new folder")


def _weights(drafter, k: float) -> tuple[dict, float]:
    """The exported state dict (float32) and ε'."""
    config = drafter.config
    d, vocab = config.hidden_size, config.vocab_size
    wide = d + PAD
    s = math.sqrt(d / wide)
    eps = (config.rms_norm_eps * d - CONSTANT ** 2) / wide
    if eps <= 0:
        raise ValueError(f"CONSTANT² = {CONSTANT ** 2} must stay below rms_norm_eps·hidden_size = {config.rms_norm_eps * d}")
    sub = torch.as_tensor(drafter.config.sub_vocab, dtype=torch.int64)
    f64 = torch.float64

    def norm(weight):  # γ·s on the model's coordinates, 0 on the added ones except the constant's (set by the caller)
        out = torch.zeros(wide, dtype=f64)
        out[:d] = weight.double() * s
        return out

    def reads(weight):  # a projection from the residual stream: the added coordinates are not read
        return torch.cat([weight.double(), torch.zeros(weight.shape[0], PAD, dtype=f64)], dim=1)

    def writes(weight):  # a projection into the residual stream: the added coordinates get 0
        return torch.cat([weight.double(), torch.zeros(PAD, weight.shape[1], dtype=f64)], dim=0)

    rows = drafter.model.embed_tokens.weight.double()  # len(sub) rows, then the shared "other" row
    embed = torch.zeros(vocab, wide, dtype=f64)
    embed[:, :d] = rows[-1]
    embed[sub, :d] = rows[:-1]
    embed[:, d] = CONSTANT
    state = {"model.embed_tokens.weight": embed}
    for i, layer in enumerate(drafter.model.layers):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = norm(layer.input_layernorm.weight)
        state[p + "post_attention_layernorm.weight"] = norm(layer.post_attention_layernorm.weight)
        for name in ("q_proj", "k_proj", "v_proj"):
            state[p + f"self_attn.{name}.weight"] = reads(getattr(layer.self_attn, name).weight)
        state[p + "self_attn.o_proj.weight"] = writes(layer.self_attn.o_proj.weight)
        state[p + "mlp.gate_proj.weight"] = reads(layer.mlp.gate_proj.weight)
        state[p + "mlp.up_proj.weight"] = reads(layer.mlp.up_proj.weight)
        state[p + "mlp.down_proj.weight"] = writes(layer.mlp.down_proj.weight)
    final = norm(drafter.model.norm.weight)
    final[d] = 1.0  # the constant passes the final norm as h_c = c / rms' > 0
    state["model.norm.weight"] = final
    head_rows = drafter.lm_head.weight.double()
    head = torch.zeros(vocab, wide, dtype=f64)
    head[:, :d] = head_rows.mean(dim=0)
    head[:, d] = -k
    head[sub, :d] = head_rows
    head[sub, d] = 0.0
    state["lm_head.weight"] = head
    return {name: t.to(torch.float32).contiguous() for name, t in state.items()}, eps


def _scale(drafter) -> tuple[float, float]:
    """``(K, bound)``: the residual bound and the K that makes ``K·h_c ≥ MARGIN`` for every input."""
    d = drafter.config.hidden_size
    bound = residual_bound(drafter)
    # rms' = s·sqrt(‖x‖²/d + ε), and h_c = c / rms' with the final norm's weight 1 on the constant.
    s = math.sqrt(d / (d + PAD))
    rms_max = s * math.sqrt(bound ** 2 / d + drafter.config.rms_norm_eps)
    return MARGIN * rms_max / CONSTANT * 1.001, bound  # 1.001: float32 rounding of K and of h_c


def export_drafter(folder, drafter=None) -> Path:
    r"""Write the drafter :math:`q` as a ``LlamaForCausalLM`` of the full vocabulary into ``folder``
    (created if needed) and return its path.

    Parameters
    ----------
    folder : path
        The output folder: new, empty, or an earlier export (overwritten; the same drafter gives the
        same files). A folder with other files raises ``FileExistsError``.
    drafter : SubVocabLlama or path, optional
        The drafter, or a folder saved by ``python -m mentored.train --target smollm --out`` (its
        checksums are checked); default: the shipped one, loaded as ``load_smollm`` does (float32).

    The folder gets ``model.safetensors`` (float32) and ``config.json`` (``LlamaForCausalLM``,
    ``tie_word_embeddings`` false, the target's vocabulary size), the target :math:`p`'s tokenizer
    files and ``generation_config.json`` (from its converted folder), and ``mentored_export.json``
    (the construction's constants and the residual bound). Load it with
    ``speculative_config={"method": "draft_model", "model": folder, "draft_sample_method":
    "probabilistic", ...}`` in vLLM, or with ``transformers.LlamaForCausalLM.from_pretrained``. The
    module's docstring gives the construction and what is exact: :math:`q_i = 0` off the
    sub-vocabulary for every input, :math:`q` on it equal up to float32 rounding.
    """
    from safetensors.torch import save_file
    from .smollm import SubVocabLlama

    folder = Path(folder)
    _check_folder(folder)
    if drafter is None:
        drafter = _shipped_drafter()
    elif not isinstance(drafter, SubVocabLlama):
        from .weights import verify_checksums

        verify_checksums(Path(drafter))
        drafter = SubVocabLlama.from_pretrained(Path(drafter), dtype=torch.float32, local_files_only=True).eval()
    target = _target_folder()
    target_config = json.loads((target / "config.json").read_text())
    if target_config["vocab_size"] != drafter.config.vocab_size:
        raise ValueError(f"the drafter has {drafter.config.vocab_size} tokens, the target in {target} {target_config['vocab_size']}")

    with torch.no_grad():
        k, bound = _scale(drafter)
        state, eps = _weights(drafter, k)
    base = drafter.config.to_dict()
    keep = ("attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id", "head_dim", "hidden_act",
            "initializer_range", "intermediate_size", "max_position_embeddings", "mlp_bias", "model_type", "num_attention_heads",
            "num_hidden_layers", "num_key_value_heads", "pretraining_tp", "rope_parameters")
    config = {key: base[key] for key in keep if key in base}
    config.update(architectures=["LlamaForCausalLM"], dtype="float32", hidden_size=drafter.config.hidden_size + PAD, rms_norm_eps=eps,
                  tie_word_embeddings=False, use_cache=True, vocab_size=drafter.config.vocab_size)

    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in _TARGET_FILES:
        if (target / name).is_file():
            shutil.copyfile(target / name, folder / name)
    record = {"format": _FORMAT, "what": "mentored SubVocabLlama drafter exported as LlamaForCausalLM (mentored.integrations.vllm_export)",
              "sub_vocab_size": len(drafter.config.sub_vocab), "pad": PAD, "constant": CONSTANT, "margin": MARGIN, "k": k,
              "residual_bound": bound, "rms_norm_eps": eps, "drafter_rms_norm_eps": drafter.config.rms_norm_eps}
    (folder / MARKER).write_text(json.dumps(record, indent=1) + "\n")
    return folder
