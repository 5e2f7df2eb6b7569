"""A built code index's directory: where it lives in the cache, its metadata, the files a search reads back
(document ids, offsets) and their verification. :mod:`.build` writes it."""

from __future__ import annotations

import json
from collections import abc
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.core import filecheck
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.filecheck import check, damaged
from pipeline.core.filenames import safe_name

from . import ivf as ivf_index
from .options import (
    CodeOptions, DOC_ID_BYTES_FILE, DOC_ID_OFFSETS_FILE, DOC_IDS_FILE, DOC_OFFSETS_FILE, ENCODER_FILE, FAISS_FILE,
    META_FILE, READ_FORMATS, TOKEN_DOCS_FILE, _digest, code_index_root,
)
from .training import TrainingSource

#: the index files whose size and SHA-256 the metadata records (the encoder checkpoint carries its own digest)
VERIFIED_FILES = (FAISS_FILE, DOC_OFFSETS_FILE, DOC_ID_BYTES_FILE, DOC_ID_OFFSETS_FILE)
#: the files of a format-1 index (a JSON list of ids, one document number per vector)
FORMAT_1_FILES = (FAISS_FILE, TOKEN_DOCS_FILE, DOC_IDS_FILE)
#: written beside them after a verification: each file's size and modification time
VERIFIED_STAMP = "pipeline-verified.json"


def index_path(dataset: Dataset, options: CodeOptions, source: TrainingSource, root: Path | None = None) -> Path:
    """The cache directory of ``dataset``'s code index with ``options`` and training data ``source``."""
    digest = _digest({"dataset": dataset.fingerprint, "options": options.key_fields(), "training": source.key()})
    return (root or code_index_root()) / f"{safe_name(dataset.name, fallback='dataset')}-{options.kind}-{digest}"


def is_complete(path: Path) -> bool:
    """True when ``path`` holds a finished code index (its metadata file is written last)."""
    return filecheck.is_complete(path, META_FILE)


def verify_code_index(path: Path) -> None:
    """Raise :class:`~pipeline.core.errors.CorruptCacheError` unless the index files at ``path`` are the ones
    its build wrote (sizes always; SHA-256 digests when they changed since the last verification; indexes
    built before digests were recorded are checked for presence only). The encoder checkpoint checks itself
    (:mod:`infra.checkpoints`)."""
    meta = index_metadata(path)
    check_format(path, meta)
    recorded = meta.get("files") or {name: None for name in FORMAT_1_FILES}
    if all(facts is not None for facts in recorded.values()):
        check(path, recorded, VERIFIED_STAMP, "code index")
        return
    missing = [name for name in (*recorded, ENCODER_FILE) if not (Path(path) / name).is_file()]
    if missing:
        raise damaged(Path(path), "code index", f"{', '.join(missing)} missing")


def index_metadata(path: Path) -> dict:
    """The metadata a finished build wrote into ``path`` (an unreadable file is a damaged index)."""
    return filecheck.read_metadata(path, META_FILE, "code index")


def index_size_bytes(path: Path) -> int:
    """Size of the faiss index: its file (the codes / vectors and, for HNSW, the graph) and, for a format-2
    IVF index, its inverted lists on disk."""
    lists = Path(path) / ivf_index.DATA_FILE
    return (Path(path) / FAISS_FILE).stat().st_size + (lists.stat().st_size if lists.is_file() else 0)


def storage_bytes(path: Path) -> int:
    """Bytes of everything a search reads from an index directory (the faiss index, an IVF index's vectors,
    the document offsets and ids), the encoder checkpoint and the metadata excepted."""
    meta = index_metadata(path)
    names = meta.get("files") or {name: None for name in FORMAT_1_FILES}
    return sum((Path(path) / name).stat().st_size for name in names)


def check_format(path: Path, meta: dict) -> int:
    """The layout version of the index at ``path`` (one of :data:`READ_FORMATS`, the newest ``INDEX_FORMAT``,
    what a build writes); an index written by a newer version of this code is refused with a message to
    rebuild it."""
    version = int(meta.get("format", 1))
    if version not in READ_FORMATS:
        raise PipelineError(f"{path}: code index format {version}, this version reads formats "
                            f"{', '.join(map(str, READ_FORMATS))}; "
                            f"rebuild it with python -m pipeline.index --force (same options)")
    return version


class DocIds(abc.Sequence):
    """The document ids of an index, memory-mapped: their UTF-8 bytes concatenated (:data:`DOC_ID_BYTES_FILE`)
    and each id's start (:data:`DOC_ID_OFFSETS_FILE`), so that no process holds the collection's ids as
    Python strings (format 1 indexes: their JSON list, read whole).

    Example:
        >>> ids = DocIds.open(path, index_metadata(path))  # doctest: +SKIP
        >>> ids[0], len(ids)  # doctest: +SKIP
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data, self.offsets = data, offsets

    @classmethod
    def open(cls, path: Path, meta: dict) -> "DocIds | list[str]":
        """The ids of the index at ``path`` (``meta``: its metadata)."""
        path = Path(path)
        if check_format(path, meta) == 1:
            return json.loads((path / DOC_IDS_FILE).read_text(encoding="utf-8"))
        return cls(np.load(path / DOC_ID_BYTES_FILE, mmap_mode="r"), np.load(path / DOC_ID_OFFSETS_FILE, mmap_mode="r"))

    @staticmethod
    def write(folder: Path, ids: Sequence[str]) -> None:
        """Write ``ids`` in this layout into ``folder``."""
        encoded = [doc_id.encode("utf-8") for doc_id in ids]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        np.save(folder / DOC_ID_BYTES_FILE, np.frombuffer(b"".join(encoded), dtype=np.uint8))
        np.save(folder / DOC_ID_OFFSETS_FILE, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, number):
        if isinstance(number, slice):
            return [self[i] for i in range(*number.indices(len(self)))]
        if number < 0:
            number += len(self)
        if not 0 <= number < len(self):
            raise IndexError(f"document number {number} out of range ({len(self)} documents)")
        return bytes(self.data[self.offsets[number] : self.offsets[number + 1]]).decode("utf-8")


def doc_offsets(path: Path, meta: dict, documents: int) -> np.ndarray:
    """``[documents + 1]`` int64: document ``d``'s vectors are the stored rows ``offsets[d]:offsets[d + 1]``
    (format 1: counted from its per-vector document numbers, read memory-mapped)."""
    path = Path(path)
    if check_format(path, meta) == 1:
        lengths = np.bincount(np.load(path / TOKEN_DOCS_FILE, mmap_mode="r"), minlength=documents)
        return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.load(path / DOC_OFFSETS_FILE)


def find_code_index(dataset: Dataset, kind: str, root: Path | None = None) -> Path | None:
    """The most recently built complete ``kind`` index of ``dataset`` (same fingerprint) in the cache, if any."""
    root = root or code_index_root()
    if not root.is_dir():
        return None
    found = []
    for path in root.glob(f"{safe_name(dataset.name, fallback='dataset')}-{kind}-*"):
        if is_complete(path):
            meta = index_metadata(path)
            if meta.get("fingerprint") == dataset.fingerprint and meta.get("kind") == kind:
                found.append(((path / META_FILE).stat().st_mtime_ns, path))
    return max(found)[1] if found else None
