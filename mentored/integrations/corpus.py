"""The text the package's models are trained on, and their tokenizer.

The documentation CPython ships (:mod:`pydoc_data.topics`) and the docstrings of a fixed list of
standard-library modules, split 80/10/10 by a seed, and a character tokenizer built on the training
split. The demo's n-gram models (:mod:`mentored.demo.textlm`) and the shipped transformer pair
(:mod:`mentored.integrations.train`, :func:`mentored.integrations.hf.load_pair`) both read it: it sits below them, so that the
library never imports its demo.
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import NamedTuple

import numpy as np

__all__ = ["CharTokenizer", "Splits", "corpus", "splits", "sources", "grouped_documents", "split_documents"]

# Standard-library modules whose docstrings join pydoc_data.topics in the corpus (import-safe, stable).
_DOC_MODULES = (
    "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "collections", "contextlib", "copy", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "gzip", "hashlib",
    "heapq", "html", "http", "inspect", "io", "ipaddress", "itertools", "json", "logging", "math", "operator",
    "os", "pathlib", "pickle", "pprint", "queue", "random", "re", "shlex", "shutil", "socket", "sqlite3",
    "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "time",
    "timeit", "typing", "unittest", "urllib", "uuid", "warnings", "weakref", "xml", "zipfile",
)


def corpus() -> list[str]:
    """The documents: pydoc topics (sorted by name), then module, class and function docstrings."""
    from pydoc_data.topics import topics

    docs = [topics[k] for k in sorted(topics)]
    # Reading module attributes can warn (typing.io, deprecated aliases): the text is all we want.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in _DOC_MODULES:
            docs.append(_module_doc(name))
    return [d for d in docs if d]


def sources() -> list[tuple[str, str]]:
    """``(path, text)`` of the Python source files of the same standard-library modules (a package's
    every ``.py`` file but its tests), in a fixed order. Built-in modules (written in C) have none."""
    return [pair for name in _DOC_MODULES for pair in _module_sources(name)]


def grouped_documents() -> list[list[str]]:
    """The documents of :func:`corpus` and :func:`sources` in groups that a split keeps together: each
    pydoc topic alone, and each module's docstrings with its source files (the docstrings are read
    from those sources: split apart, held-out text would be in the training text)."""
    from pydoc_data.topics import topics

    groups = [[topics[k]] for k in sorted(topics) if topics[k]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in _DOC_MODULES:
            group = [d for d in [_module_doc(name)] if d] + [text for _, text in _module_sources(name)]
            if group:
                groups.append(group)
    return groups


def _module_sources(name: str) -> list[tuple[str, str]]:
    import importlib
    from pathlib import Path

    try:
        mod = importlib.import_module(name)
    except ImportError:
        return []
    origin = getattr(mod, "__file__", None)
    if not origin or not origin.endswith(".py"):
        return []
    path = Path(origin)
    if path.name == "__init__.py":
        files = sorted(f for f in path.parent.rglob("*.py") if not {"test", "tests", "idle_test"} & set(f.relative_to(path.parent).parts))
    else:
        files = [path]
    base = path.parent.parent if path.name == "__init__.py" else path.parent
    return [(f.relative_to(base).as_posix(), f.read_text(encoding="utf-8")) for f in files]


def split_documents(docs: list, seed: int = 0) -> tuple[list, list, list]:
    """``docs`` shuffled with ``seed`` and split 80/10/10 by document: ``(train, valid, test)``, each in
    the documents' original order."""
    order = np.random.default_rng(seed).permutation(len(docs))
    n_valid = n_test = max(1, len(docs) // 10)
    pick = lambda idx: [docs[i] for i in sorted(idx)]  # noqa: E731
    return pick(order[n_valid + n_test :]), pick(order[:n_valid]), pick(order[n_valid : n_valid + n_test])


def _module_doc(name: str) -> str:
    import importlib
    import inspect

    try:
        mod = importlib.import_module(name)
    except ImportError:  # a stripped-down Python: fewer documents, same code path
        return ""
    parts = [inspect.getdoc(mod) or ""]
    for attr in sorted(vars(mod)):
        obj = getattr(mod, attr)
        if not attr.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj)):
            if getattr(obj, "__module__", None) == mod.__name__:
                parts.append(inspect.getdoc(obj) or "")
    return "\n\n".join(p for p in parts if p)


class CharTokenizer:
    """Characters to ids; rare characters (seen < ``min_count`` times) share the id ``unk``."""

    def __init__(self, text: str, min_count: int = 5):
        counts = Counter(text)
        chars = sorted(c for c, n in counts.items() if n >= min_count)
        self.vocab = ["\ufffd"] + chars  # id 0: unknown
        self.unk = 0
        self._index = {c: i for i, c in enumerate(self.vocab)}
        self.V = len(self.vocab)

    @classmethod
    def from_vocab(cls, vocab) -> "CharTokenizer":
        """The tokenizer with this vocabulary (``vocab[0]`` the unknown character), e.g. the shipped
        models' ``vocab.json``."""
        tok = cls.__new__(cls)
        tok.vocab = list(vocab)
        tok.unk = 0
        tok._index = {c: i for i, c in enumerate(tok.vocab)}
        tok.V = len(tok.vocab)
        return tok

    def encode(self, text: str) -> np.ndarray:
        get = self._index.get
        return np.fromiter((get(c, 0) for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids if int(i) >= 0)


class Splits(NamedTuple):
    """The corpus split by a seed: the tokenizer of the training text, and each split as ids and text."""

    tokenizer: CharTokenizer
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    train_text: str
    valid_text: str
    test_text: str


@functools.lru_cache(maxsize=4)
def splits(seed: int = 0) -> Splits:
    """Documents shuffled with ``seed`` and split 80/10/10 (cached: treat as read-only)."""
    train_docs, valid_docs, test_docs = split_documents(corpus(), seed)
    train_text, valid_text, test_text = ("\n\n".join(d) for d in (train_docs, valid_docs, test_docs))
    tok = CharTokenizer(train_text)
    train, valid, test = (tok.encode(t) for t in (train_text, valid_text, test_text))
    return Splits(tok, train, valid, test, train_text, valid_text, test_text)
