"""Building a code index: documents encoded into resumable shards, assembled into a faiss index in a
temporary directory renamed into place; its cache directory, metadata and completeness."""

from __future__ import annotations

import contextlib
from collections import abc
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.progress import progress_switch
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.names import safe_name
from pipeline.core import filecheck
from pipeline.core.filecheck import check, damaged, describe, file_sha256
from pipeline.core.locks import exclusive
from infra import distributed

from . import ivf as ivf_index
from .encoders import load_encoder_checkpoint, obtain_encoder, save_encoder
from .hashing import center_sample, centring_summary, recentre
from .model import _autocast, _set_threads, pack_codes, tokenize
from .options import (
    CodeOptions, DOC_ID_BYTES_FILE, DOC_ID_OFFSETS_FILE, DOC_IDS_FILE, DOC_OFFSETS_FILE, ENCODER_FILE, FAISS_FILE,
    INDEX_FORMAT, META_FILE, SHARD_MANIFEST, TOKEN_DOCS_FILE, _digest, code_index_root,
)
from .training import TrainingSource, resolve_training

log = logging.getLogger(__name__)

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
    """The layout version of the index at ``path`` (1 or :data:`INDEX_FORMAT`); an index written by a newer
    version of this code is refused with a message to rebuild it."""
    version = int(meta.get("format", 1))
    if version not in (1, INDEX_FORMAT):
        raise PipelineError(f"{path}: code index format {version}, this version reads formats 1 and {INDEX_FORMAT}; "
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


def _chunks(docs: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for doc in docs:
        chunk.append(doc)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def encode_documents(model, tokenizer, texts: Sequence[str], options: CodeOptions, device=None):
    """Token vectors of ``texts``: ``(vectors, lengths)`` with vectors ``[sum(lengths), dim]`` float32 (float
    kind) or ``[sum(lengths), dim / 8]`` packed uint8 codes (binary kind), in document order. Batches are
    formed by token length (less padding)."""
    lengths_in = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=options.max_doc_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (lengths_in[i], i))
    per_doc: list = [None] * len(texts)
    with torch.inference_mode():
        for start in range(0, len(order), options.encode_batch_size):
            rows = order[start : start + options.encode_batch_size]
            ids, att = tokenize(tokenizer, [texts[i] for i in rows], options.max_doc_length, device)
            with _autocast(device):
                vectors, mask, _ = model.encode_docs(ids, att, hard=True)
            vectors, mask = vectors.float().cpu().numpy(), mask.cpu().numpy()
            for row, i in enumerate(rows):
                per_doc[i] = vectors[row][mask[row]]
    width = options.dim // 8 if options.binary else options.dim
    dtype = np.uint8 if options.binary else np.float32
    lengths = np.array([len(v) for v in per_doc], dtype=np.int32)
    stacked = np.concatenate(per_doc) if per_doc and lengths.sum() else np.zeros((0, options.dim), np.float32)
    if options.binary:
        stacked = pack_codes(stacked) if len(stacked) else np.zeros((0, width), dtype)
    return np.ascontiguousarray(stacked, dtype=dtype), lengths


def _new_faiss_index(options: CodeOptions):
    import faiss

    if options.binary:
        if options.index_type == "hnsw":
            return faiss.IndexBinaryHNSW(options.dim, options.hnsw_m)
        return faiss.IndexBinaryFlat(options.dim)
    if options.index_type == "hnsw":
        return faiss.IndexHNSWFlat(options.dim, options.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    return faiss.IndexFlatIP(options.dim)


def build_code_index(
    dataset: Dataset,
    options: CodeOptions = CodeOptions(),
    root: Path | None = None,
    force: bool = False,
    train_dataset: "Dataset | str | None" = None,
    mirror: str | os.PathLike | None = None,
) -> Path:
    """Build (or find in the cache) ``dataset``'s code index; returns its directory.

    ``train_dataset`` (a Dataset or a name) overrides ``options.train_dataset``. ``force`` retrains the
    encoder and re-encodes every document. One process builds in a cache directory at a time
    (:func:`pipeline.core.locks.exclusive`); a second one waits, then finds the index built.
    """
    root = Path(root) if root is not None else code_index_root()
    source = resolve_training(dataset, train_dataset if train_dataset is not None else options.train_dataset, mirror)
    path = index_path(dataset, options, source, root)
    if distributed.is_distributed():  # under torchrun: rank 0 decides and locks, every rank encodes its shards
        if distributed.broadcast(is_complete(path) and not force):
            return path
        encoder = _obtain_encoder_everywhere(options, source, root, force, _prepare(options))
        with exclusive(path) if distributed.is_main() else contextlib.nullcontext():
            return _build(dataset, options, root, force, source, path, encoder)
    if is_complete(path) and not force:
        return path
    # the encoder (and the Lucene index its hard negatives come from) is its own cache entry, obtained before
    # this entry's lock is taken: no lock is held while another entry is built
    encoder = obtain_encoder(options, source, root, force, _prepare(options))
    with exclusive(path):
        if is_complete(path) and not force:  # built by the process we waited for
            return path
        return _build(dataset, options, root, force, source, path, encoder)


def _prepare(options: CodeOptions):
    """Set the thread counts of ``options`` and return the device to train and encode on."""
    from pipeline.core.runtime import resolve_device

    _set_threads(options.threads)
    return resolve_device(options.device)


def _obtain_encoder_everywhere(options: CodeOptions, source: TrainingSource, root: Path, force: bool, device):
    """Under torchrun: rank 0 obtains (maybe trains) the encoder, then the other ranks find it cached."""
    if distributed.is_main():
        encoder = obtain_encoder(options, source, root, force, device)
    distributed.barrier()
    if not distributed.is_main():
        encoder = obtain_encoder(options, source, root, False, device)
    return encoder


def _ivf_blocks(shard_files: list[Path], options: CodeOptions, shards: Path, main: bool, rank: int, world: int):
    """Under torchrun: rank 0 trains the IVF quantizer on a sample of every shard, then each rank adds its
    own shards to copies of it (blocks of inverted lists in ``shards / "ivf-blocks"``) for rank 0 to merge on
    disk. Returns ``(trained index file, every rank's block files, lists)``."""
    folder = shards / "ivf-blocks"
    trained = folder / ivf_index.TRAINED_FILE
    counts = ivf_index.shard_counts(shard_files)
    lists = None
    if main:
        shutil.rmtree(folder, ignore_errors=True)  # blocks of an interrupted build are redone
        folder.mkdir()
        index, lists = ivf_index.train(shard_files, counts, options, options.seed)
        ivf_index._write(index, options.binary, trained)
    lists = distributed.broadcast(lists)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    mine = [number for number in range(len(shard_files)) if number % world == rank]
    ivf_index.add_blocks(trained, [shard_files[n] for n in mine], [int(firsts[n]) for n in mine], options.binary,
                         folder, prefix=f"rank{rank:03d}")
    distributed.barrier()  # every rank's blocks are written
    return trained, sorted(folder.glob("rank*.index")), lists


def _build(dataset: Dataset, options: CodeOptions, root: Path, force: bool, source: TrainingSource,
           path: Path, encoder: tuple[Path, dict]) -> Path:
    """:func:`build_code_index`'s work, under the cache lock, with the encoder's ``(checkpoint, metadata)``."""
    from tqdm.auto import tqdm

    started = time.perf_counter()
    device = _prepare(options)
    main, rank, world = distributed.is_main(), distributed.rank(), distributed.world_size()
    checkpoint, encoder_meta = encoder
    tokenizer, model, _ = load_encoder_checkpoint(checkpoint, device)
    centring = None
    if options.hash_center:  # the center of this collection's tokens, not of the training documents'
        sample, documents = center_sample(model, tokenizer, dataset, options, device)
        recentre(model, sample)
        centring = centring_summary(model, documents, len(sample))

    shards = root / f".{path.name}.shards"
    manifest = {"index": path.name, "encoder_sha256": file_sha256(checkpoint), "shard_size": options.shard_size,
                **({"center": [round(float(x), 6) for x in model.center]} if centring else {})}
    if shards.is_dir() and main:
        try:
            previous = json.loads((shards / SHARD_MANIFEST).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            previous = None
        if force or previous != manifest:
            shutil.rmtree(shards)
    if not shards.is_dir() and main:
        shards.mkdir(parents=True)
        with atomic_write(shards / SHARD_MANIFEST) as handle:
            json.dump(manifest, handle)
    distributed.barrier()

    total = len(dataset._store) if dataset._store is not None else None
    shard_files = []
    resumed = 0
    with tqdm(total=total, desc=f"encoding {dataset.name} docs ({options.kind})", unit="doc",
              **progress_switch(options.progress)) as bar:
        for number, chunk in enumerate(_chunks(dataset.docs_iter(), options.shard_size)):
            shard = shards / f"shard-{number:05d}.npz"
            if number % world != rank:  # another rank's shard (under torchrun)
                shard_files.append(shard)
                continue
            ids = [doc.doc_id for doc in chunk]
            if shard.is_file():
                with np.load(shard, allow_pickle=False) as stored:
                    if stored["doc_ids"].tolist() == ids:
                        shard_files.append(shard)
                        resumed += 1
                        bar.update(len(chunk))
                        continue
                log.warning("%s: documents changed since the interrupted build; re-encoding from here", shard)
                for stale in shards.glob("shard-*.npz"):
                    number_of_stale = int(stale.stem.split("-")[1])
                    if number_of_stale >= number and number_of_stale % world == rank:  # this rank's only
                        stale.unlink()
            vectors, lengths = encode_documents(model, tokenizer, [doc.text for doc in chunk], options, device)
            with atomic_write(shard, "wb") as handle:
                np.savez(handle, doc_ids=np.array(ids, dtype=str), lengths=lengths, vectors=vectors)
            shard_files.append(shard)
            bar.update(len(chunk))
    if not shard_files:
        raise PipelineError(f"dataset {dataset.name!r} has no documents to index")
    distributed.barrier()  # every rank's shards are written
    ivf = options.index_type == "ivf"
    if ivf and distributed.is_distributed():  # every rank adds its own shards to the quantizer rank 0 trains
        blocks = _ivf_blocks(shard_files, options, shards, main, rank, world)
    if not main:  # rank 0 assembles the index once
        distributed.barrier()
        return path
    if resumed:
        log.info("resumed %s: %d of %d shards were already encoded", path.name, resumed, len(shard_files))

    import faiss

    with atomic_directory(path) as temp:
        doc_ids, lengths, parts = [], [], []
        for shard in shard_files:
            with np.load(shard, allow_pickle=False) as stored:
                doc_ids.extend(stored["doc_ids"].tolist())
                lengths.append(stored["lengths"])
                if not ivf:  # an IVF index is assembled shard by shard, never all vectors in memory
                    parts.append(stored["vectors"])
        lengths = np.concatenate(lengths)
        vector_count = int(lengths.sum())
        if vector_count == 0:
            raise PipelineError(f"dataset {dataset.name!r}: no document has a token to index")
        lists = None
        if ivf and distributed.is_distributed():
            trained, block_files, lists = blocks
            ivf_index.merge(trained, block_files, options.binary, temp, FAISS_FILE)
        elif ivf:
            lists = ivf_index.assemble(shard_files, ivf_index.shard_counts(shard_files), options, temp, FAISS_FILE,
                                       seed=options.seed)
        else:
            index = _new_faiss_index(options)
            index.add(np.ascontiguousarray(np.concatenate(parts)))
            if options.binary:
                faiss.write_index_binary(index, str(temp / FAISS_FILE))
            else:
                faiss.write_index(index, str(temp / FAISS_FILE))
        np.save(temp / DOC_OFFSETS_FILE, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]))
        DocIds.write(temp, doc_ids)
        if centring is not None:
            save_encoder(model, options, temp / ENCODER_FILE)
        else:
            try:
                os.link(checkpoint, temp / ENCODER_FILE)
            except OSError:
                shutil.copyfile(checkpoint, temp / ENCODER_FILE)
        meta = {
            "format": INDEX_FORMAT, "kind": options.kind, "dataset": dataset.name, "source": dataset.source, "fingerprint": dataset.fingerprint,
            "encoder": options.encoder, "options": options.key_fields(), "train": {
                "dataset": source.dataset.name, "description": source.description,
                "fingerprint": source.dataset.fingerprint, "queries": len(source.query_ids),
                "report": encoder_meta.get("training")},
            "documents": len(doc_ids), "vectors": vector_count, "index_bytes": index_size_bytes(temp),
            "files": describe(temp, VERIFIED_FILES + (ivf_index.FILES if ivf else ())),
            **({"ivf_lists": lists} if ivf else {}),
            "seconds": round(time.perf_counter() - started, 2),
            **({"hash_center": centring} if centring is not None else {}),
        }
        with atomic_write(temp / META_FILE) as handle:
            json.dump(meta, handle, indent=1)
    shutil.rmtree(shards, ignore_errors=True)
    log.info("built %s: %d documents, %d vectors", path, len(doc_ids), vector_count)
    distributed.barrier()
    return path


