"""The IVF code index: an inverted-file faiss index (binary ``IndexBinaryIVF`` or float ``IndexIVFFlat``) for
collections whose token vectors do not fit a flat index in memory (MS MARCO passage: about 600M tokens).

Built from the encoded shards without holding them all: the coarse quantizer is trained on a seeded sample
of the shards' vectors (:data:`TRAIN_PER_LIST` per list), then the shards are added one by one, and their
vectors are written once more, in document order, into ``vectors.npy`` (the exact MaxSim of the candidates
reads its rows). At search time both are memory-mapped from disk (``IO_FLAG_MMAP``): only the probed lists
and the candidates' rows are read. ``nprobe`` lists are visited per query token: recall against the flat
index grows with it (``benchmarks/code_index_scaling.py``, SCALING.md).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.core.errors import PipelineError

from .options import CodeOptions

#: the stored vectors / codes of an IVF index, in document order (memory-mapped at search time)
VECTORS_FILE = "vectors.npy"
#: training vectors per inverted list (faiss warns below 39)
TRAIN_PER_LIST = 64


def list_count(total: int, requested: int = 0) -> int:
    """``requested`` lists, or ``4 sqrt(total)`` (faiss's rule of thumb), never more than the training
    sample can support (``total / TRAIN_PER_LIST``) and at least 1."""
    count = requested or int(4 * math.sqrt(total))
    return max(1, min(count, total // TRAIN_PER_LIST or 1))


def new_ivf_index(options: CodeOptions, lists: int):
    """An untrained IVF index of ``options``' kind (Hamming for codes, inner product for float vectors)."""
    import faiss

    if options.binary:
        return faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(options.dim), options.dim, lists)
    return faiss.IndexIVFFlat(faiss.IndexFlatIP(options.dim), options.dim, lists, faiss.METRIC_INNER_PRODUCT)


def _shard_vectors(shard: Path) -> np.ndarray:
    with np.load(shard, allow_pickle=False) as stored:
        return stored["vectors"]


def assemble(shards: Sequence[Path], counts: Sequence[int], options: CodeOptions, folder: Path, index_file: str,
             seed: int = 0) -> int:
    """Train an IVF index on a sample of the ``shards``' vectors (``counts`` per shard), add every shard, write
    the index to ``folder / index_file`` and the vectors to ``folder / VECTORS_FILE``; returns the lists."""
    import faiss

    total = int(sum(counts))
    if total == 0:
        raise PipelineError("no token vectors to index")
    lists = list_count(total, options.ivf_nlist)
    width = options.dim // 8 if options.binary else options.dim
    dtype = np.uint8 if options.binary else np.float32
    rng = np.random.default_rng(seed)
    wanted = min(total, lists * TRAIN_PER_LIST)
    chosen = np.sort(rng.choice(total, size=wanted, replace=False))
    sample, offset = [], 0
    for shard, count in zip(shards, counts):
        inside = chosen[(chosen >= offset) & (chosen < offset + count)] - offset
        if len(inside):
            sample.append(_shard_vectors(shard)[inside])
        offset += count
    index = new_ivf_index(options, lists)
    index.train(np.ascontiguousarray(np.concatenate(sample).astype(dtype)))
    stored = np.lib.format.open_memmap(folder / VECTORS_FILE, mode="w+", dtype=dtype, shape=(total, width))
    offset = 0
    for shard, count in zip(shards, counts):
        vectors = np.ascontiguousarray(_shard_vectors(shard).astype(dtype))
        index.add(vectors)
        stored[offset:offset + count] = vectors
        offset += count
    stored.flush()
    del stored
    (faiss.write_index_binary if options.binary else faiss.write_index)(index, str(folder / index_file))
    return lists


def open_index(folder: Path, index_file: str, binary: bool, nprobe: int, mmap: bool = True):
    """``(index, vectors)`` of an IVF index: both memory-mapped from disk when ``mmap``; ``nprobe`` lists
    are visited per query vector."""
    import faiss

    flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
    reader = faiss.read_index_binary if binary else faiss.read_index
    index = reader(str(folder / index_file), flags)
    index.nprobe = max(1, min(nprobe, index.nlist))
    vectors = np.load(folder / VECTORS_FILE, mmap_mode="r" if mmap else None)
    return index, vectors
