"""Building a code index: documents encoded into resumable shards, assembled into a faiss index in a
temporary directory renamed into place (:mod:`.directory`: where it lives, its metadata and files)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.filecheck import describe, file_sha256
from pipeline.core.locks import build_once, exclusive
from infra import distributed

from ..shards import encode_shards, prepare_shards
from . import ivf as ivf_index
from .directory import VERIFIED_FILES, DocIds, index_path, index_size_bytes, is_complete
from .encoders import load_encoder_checkpoint, obtain_encoder, save_encoder
from .hashing import center_sample, centring_summary, recentre
from .model import _autocast, _set_threads, pack_codes, tokenize
from .options import (
    CodeOptions, DOC_OFFSETS_FILE, ENCODER_FILE, FAISS_FILE, INDEX_FORMAT, META_FILE, SHARD_MANIFEST, code_index_root,
)
from .training import TrainingSource, resolve_training

log = logging.getLogger(__name__)

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
    return build_once(path, is_complete, lambda: _build(dataset, options, root, force, source, path, encoder), force)


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
    # a run of consecutive shards per rank: the blocks, merged in file-name order (rank, then block), hold the
    # rows in increasing order, as the re-scoring's search of a row in its inverted list needs (ivf.merge)
    mine = np.array_split(np.arange(len(shard_files)), world)[rank].tolist()
    ivf_index.add_blocks(trained, [shard_files[n] for n in mine], [int(firsts[n]) for n in mine], options.binary,
                         folder, prefix=f"rank{rank:03d}")
    distributed.barrier()  # every rank's blocks are written
    return trained, sorted(folder.glob("rank*.index")), lists


def _build(dataset: Dataset, options: CodeOptions, root: Path, force: bool, source: TrainingSource,
           path: Path, encoder: tuple[Path, dict]) -> Path:
    """:func:`build_code_index`'s work, under the cache lock, with the encoder's ``(checkpoint, metadata)``."""
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
    if main:
        prepare_shards(shards, manifest, SHARD_MANIFEST, force)
    distributed.barrier()

    def encode(chunk) -> dict:
        vectors, lengths = encode_documents(model, tokenizer, [doc.text for doc in chunk], options, device)
        return {"lengths": lengths, "vectors": vectors}

    shard_files, _ = encode_shards(dataset, shards, options.shard_size, encode,
                                   f"encoding {dataset.name} docs ({options.kind})", options.progress,
                                   rank=rank, world=world)
    distributed.barrier()  # every rank's shards are written
    ivf = options.index_type == "ivf"
    if ivf and distributed.is_distributed():  # every rank adds its own shards to the quantizer rank 0 trains
        blocks = _ivf_blocks(shard_files, options, shards, main, rank, world)
    if not main:  # rank 0 assembles the index once
        distributed.barrier()
        return path

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
        version, ivf_files = ivf_index.layout(temp) if ivf else (INDEX_FORMAT, ())
        meta = {
            "format": version, "kind": options.kind, "dataset": dataset.name, "source": dataset.source, "fingerprint": dataset.fingerprint,
            "encoder": options.encoder, "options": options.key_fields(), "train": {
                "dataset": source.dataset.name, "description": source.description,
                "fingerprint": source.dataset.fingerprint, "queries": len(source.query_ids),
                "report": encoder_meta.get("training")},
            "documents": len(doc_ids), "vectors": vector_count, "index_bytes": index_size_bytes(temp),
            "files": describe(temp, VERIFIED_FILES + ivf_files),
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


