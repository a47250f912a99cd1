"""The shipped models' files: the :class:`Pair` a loader returns and the SHA-256 checks of a model folder."""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["Pair", "verify_checksums", "write_checksums", "MODELS_DIR", "SMOLLM_DRAFTER_DIR"]

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"  # mentored/models: the character-level pair
SMOLLM_DRAFTER_DIR = Path(__file__).resolve().parent.parent / "smollm2_drafter"  # the drafter for SmolLM2 (smollm.py)


@dataclass(frozen=True)
class Pair:
    """A target and a drafter sharing a tokenizer: the shipped character-level pair
    (:func:`mentored.hf.load_pair`) or SmolLM2 with its drafter (:func:`mentored.hf.load_smollm`); docs/neural.md."""

    target: object
    drafter: object
    tokenizer: object  # the character pair's CharTokenizer (mentored.integrations.corpus), or SmolLM2's HF tokenizer
    results: dict  # the drafter's training results: sizes, FLOPs per token, held-out bits


# A line as sha256sum writes it: 64 hex digits (either case), then "  name" (text mode) or " *name" (binary).
_SUM_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_checksums(directory: Path) -> None:
    """Write ``directory/SHA256SUMS`` for every other file under it, as ``sha256sum`` would."""
    files = sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.relative_to(directory).as_posix() != "SHA256SUMS")
    (Path(directory) / "SHA256SUMS").write_text("".join(f"{_sha256(p)}  {p.relative_to(directory).as_posix()}\n" for p in files))


def verify_checksums(directory=None) -> dict:
    """Check the files under ``directory`` (default: the package's ``mentored/models``) against its
    ``SHA256SUMS``; return ``{name: sha256}``.

    ``SHA256SUMS`` is read as ``sha256sum`` writes it (``<digest>  <name>`` or ``<digest> *<name>``,
    digests in either case). Every file in the folder but ``SHA256SUMS`` itself must have exactly one
    line, and every line must name a file inside the folder that exists and has that digest: a
    missing or empty ``SHA256SUMS`` raises ``FileNotFoundError`` or ``ValueError``; a malformed or
    repeated line, a name outside the folder (absolute, ``..``, or through a link), a missing file,
    an unlisted file and a mismatch raise ``ValueError`` naming the line or the file.
    """
    directory = Path(directory) if directory is not None else MODELS_DIR
    sums = directory / "SHA256SUMS"
    if not sums.is_file():
        raise FileNotFoundError(f"no SHA256SUMS in {directory}: the shipped models are missing (retrain: python -m mentored.integrations.train)")
    root = directory.resolve()
    listed = {}
    try:
        text = sums.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{sums} is not UTF-8 text (byte {exc.start})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _SUM_LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"{sums}, line {number}: expected '<64 hex digits>  <name>' or '<64 hex digits> *<name>', got {line!r}")
        digest, name = match[1].lower(), match[2]
        relative = PurePosixPath(posixpath.normpath(name))
        if relative.is_absolute() or relative.parts[:1] == ("..",) or not (root / relative).resolve().is_relative_to(root):
            raise ValueError(f"{sums}, line {number}: {name!r} lies outside {directory}")
        key = relative.as_posix()
        if key in listed:
            raise ValueError(f"{sums}, line {number}: {name!r} is listed twice")
        if key == "SHA256SUMS":
            raise ValueError(f"{sums}, line {number}: SHA256SUMS cannot hold its own checksum")
        listed[key] = digest
    if not listed:
        raise ValueError(f"{sums} lists no files: every file in {directory} needs a checksum")
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir()} - {"SHA256SUMS"}
    unlisted = sorted(present - set(listed))
    if unlisted:
        raise ValueError(f"not listed in {sums}: {', '.join(unlisted)} (every file in {directory} needs a checksum)")
    for name, digest in listed.items():
        path = directory / name
        if not path.is_file():
            raise ValueError(f"{path} is listed in SHA256SUMS but {'not a file' if path.exists() else 'missing'}")
        actual = _sha256(path)
        if actual != digest:
            raise ValueError(f"checksum mismatch for {path}: {actual} != {digest} (SHA256SUMS)")
    return listed
