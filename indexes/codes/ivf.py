"""The IVF code index: an inverted-file faiss index (binary ``IndexBinaryIVF`` or float ``IndexIVFFlat``) for
collections whose token vectors do not fit a flat index in memory (MS MARCO passage: about 600M tokens).

Built from the encoded shards without holding them all: the coarse quantizer is trained (k-means, on the
GPU when faiss sees one) on a seeded sample of the shards' vectors (:data:`TRAIN_PER_LIST` per list, at most
:data:`MAX_TRAIN` vectors; the default number of lists is ``4 sqrt(vectors)``, at most 32,768), each shard
is added to its own copy of the trained index (a block of inverted lists; under torchrun each rank adds its
own run of consecutive shards), and faiss merges the blocks' lists on disk into :data:`DATA_FILE`
(``OnDiskInvertedLists.merge_from_multiple``, what ``faiss.contrib.ondisk.merge_ondisk`` does for float
indexes). The lists are the only copy of the vectors: the exact MaxSim of the candidates
reads a document's vectors out of them. faiss lays a merged list out as its codes, then its ids (int64, the
vectors' row numbers), ``capacity`` entries each (capacity = size after a merge); :data:`LISTS_FILE` records
each list's byte offset, size and capacity.

Finding a row in the lists: the merge keeps every list's ids in increasing row order (rows are added in row
order, the blocks are merged in row order, and a list found out of order is sorted), so a row's position in its
list is a binary search of the row among the list's ids, memory-mapped, given the row's list number.
:data:`BUCKETS_FILE` narrows the search: for every list and every run of ``2^shift`` rows (about
:data:`BUCKET_ENTRIES` x lists rows), where in the list that run's rows begin (uint32), so a row is searched
among about 33 ids of an average list (at most 8 halving steps on the real-code indexes of SCALING.md)
instead of its whole list (11-13 steps there, about 17 at MS MARCO's list lengths): 4 bytes per ~33 vectors,
0.12 byte per vector. The lookup is vectorised over all the rows asked for at once: one gather of ids per
halving step.

Where a row's list number is kept:

- Format 4 (what a build writes): in the faiss ids. faiss stores an int64 id beside every code; a row number
  needs far fewer bits (33 for 8.6 billion vectors), so the id carries, beside the row (its high bits), the
  list numbers of two other rows, ``b = ceil(log2(lists))`` bits each (:func:`list_bits`): every run of
  :data:`TREE_ROWS` consecutive rows is a binary tree in heap order (row ``j`` of the run has the rows
  ``2j + 1`` and ``2j + 2`` of the run below it), and a row's id is ``row << 2b | list(2j + 1) << b |
  list(2j + 2)``. Only each run's first row's list is stored apart (:data:`ROOTS_FILE`, 2 bytes per 32 rows);
  the lookup walks the trees of the rows asked for level by level from their roots (6 levels), every row of
  a level at once, each level's rows found by the binary search above with the list numbers the level above
  read out of its ids. The kNN step's labels are these ids: the row is ``label >> 2b``
  (:meth:`ListVectors.rows_of`). Up to 2^(63 - 2b) vectors (8.6 billion at 32,768 lists); beyond, a
  build writes format 3.
- Format 3: each row's list number in :data:`ASSIGN_FILE`, uint16 while there are at most 65,536 lists
  (uint8 up to 256, uint32 beyond); the faiss id is the row.
- Format 2 stored each row's position in list order instead (:data:`RANKS_FILE`, uint32, 4 bytes).
  Formats 2 and 3 are still read.

Bytes per 512-bit code (format 4): 64 of code and 8 of faiss id (faiss stores an int64 id per entry: the
lists alone cannot be smaller than 72), plus 0.06 of roots, 0.12 of buckets and the lists' table: 72.2
(format 3: 74.2, its list numbers 2 bytes per vector; format 2: 76, its positions 4; format 1 stored the
codes a second time in ``vectors.npy``: 136). The index also stores per document its offset and its id (1.2
bytes per vector on the shipped collections, 29 vectors per document; SCALING.md). At search time the lists are
memory-mapped (faiss's on-disk lists): only the probed lists and the candidates' vectors are read. ``nprobe``
lists are visited per query token: recall against the flat index grows with it
(``benchmarks/code_index_scaling.py``, SCALING.md).
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.core.errors import PipelineError

from .options import CodeOptions

log = logging.getLogger(__name__)

#: format 1: the stored vectors / codes of an IVF index, in document order (a second copy of the lists')
VECTORS_FILE = "vectors.npy"
#: format 2: the merged inverted lists (codes and faiss ids), memory-mapped by faiss and by the re-scoring
DATA_FILE = "ivf.data"
#: format 2 only: each stored vector's position in list order (uint32; int64 beyond 2^32 vectors)
RANKS_FILE = "ivf_ranks.npy"
#: format 3: each stored vector's inverted list (:func:`list_dtype`: uint16 up to 65,536 lists)
ASSIGN_FILE = "ivf_assign.npy"
#: format 4: the inverted list of every :data:`TREE_ROWS`-th row (each tree's root; :func:`list_dtype`)
ROOTS_FILE = "ivf_roots.npy"
#: format 4: consecutive rows per tree of list numbers carried in the faiss ids (a power of two: 6 levels)
TREE_ROWS = 32
#: format 3: ``[lists, buckets + 1]`` uint32: where in list ``l`` the rows from ``b * 2^shift`` on begin (the
#: number of its ids below ``b * 2^shift``); ``shift``: :func:`bucket_shift` of the number of lists
BUCKETS_FILE = "ivf_buckets.npy"
#: the rows of one bucket are about this many entries of a list (a power of two of rows per bucket above it)
BUCKET_ENTRIES = 32
#: each inverted list's byte offset in :data:`DATA_FILE`, its length and (format 3) its capacity: int64
#: ``[lists, 3]`` (format 2: ``[lists, 2]``, capacity = length)
LISTS_FILE = "ivf_lists.npy"
#: the files of an IVF index besides the faiss index file (format 4)
FILES = (DATA_FILE, ROOTS_FILE, BUCKETS_FILE, LISTS_FILE)
#: the files of a format-3 IVF index besides the faiss index file
FORMAT_3_FILES = (DATA_FILE, ASSIGN_FILE, BUCKETS_FILE, LISTS_FILE)
#: the files of a format-2 IVF index besides the faiss index file
FORMAT_2_FILES = (DATA_FILE, RANKS_FILE, LISTS_FILE)
#: the trained, empty index the blocks are copies of (beside the blocks while building)
TRAINED_FILE = "trained.index"
#: vectors per block of inverted lists before it is written and a new one started (each is held in memory)
BLOCK_VECTORS = 1 << 24
#: training vectors per inverted list (faiss warns below 39)
TRAIN_PER_LIST = 64
#: at most this many training vectors (k-means on a binary index runs on their bits as floats: 2M 512-bit
#: codes are 4 GiB), so at most ``MAX_TRAIN / TRAIN_PER_LIST`` = 32,768 lists
MAX_TRAIN = 1 << 21


def list_count(total: int, requested: int = 0) -> int:
    """``requested`` lists, or ``4 sqrt(total)`` (faiss's rule of thumb), never more than the training
    sample can support (``min(total, MAX_TRAIN) / TRAIN_PER_LIST``) and at least 1."""
    count = requested or int(4 * math.sqrt(total))
    return max(1, min(count, min(total, MAX_TRAIN) // TRAIN_PER_LIST or 1))


def list_dtype(lists: int) -> np.dtype:
    """The smallest unsigned integer type that numbers ``lists`` inverted lists (:data:`ASSIGN_FILE`)."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if lists <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def list_bits(lists: int) -> int:
    """Bits that number ``lists`` inverted lists in a format-4 faiss id (at least 1)."""
    return max(1, int(lists - 1).bit_length())


def row_shift(lists: int) -> int:
    """Where the row begins in a format-4 faiss id: above two list numbers of :func:`list_bits`."""
    return 2 * list_bits(lists)


def tree_ids_fit(total: int, lists: int) -> bool:
    """Whether ``total`` row numbers and two list numbers of :func:`list_bits` fit a non-negative int64 id
    (format 4); if not, a build writes format 3."""
    return total <= 1 << (63 - row_shift(lists))


def tree_ids(rows: np.ndarray, assign: np.ndarray, lists: int) -> np.ndarray:
    """The format-4 faiss ids of ``rows`` (int64): ``row << 2b | list(left child) << b | list(right child)``,
    the children in the row's tree of :data:`TREE_ROWS` rows (0 where a child is past the tree or the last
    row); ``assign``: every row's list, ``b``: :func:`list_bits`."""
    bits, total = list_bits(lists), len(assign)
    tree, node = np.divmod(rows, TREE_ROWS)
    ids = rows.astype(np.int64) << row_shift(lists)
    for slot, shift in ((1, bits), (2, 0)):
        child = tree * TREE_ROWS + 2 * node + slot
        inside = (2 * node + slot < TREE_ROWS) & (child < total)
        ids[inside] |= assign[child[inside]].astype(np.int64) << shift
    return ids


def bucket_shift(lists: int) -> int:
    """log2 of the rows per bucket of :data:`BUCKETS_FILE`: the least power of two that puts about
    :data:`BUCKET_ENTRIES` entries of an average list in a bucket (``BUCKET_ENTRIES x lists`` rows)."""
    return max(0, int(BUCKET_ENTRIES * max(1, lists) - 1).bit_length())


def new_ivf_index(options: CodeOptions, lists: int):
    """An untrained IVF index of ``options``' kind (Hamming for codes, inner product for float vectors)."""
    import faiss

    if options.binary:
        return faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(options.dim), options.dim, lists)
    return faiss.IndexIVFFlat(faiss.IndexFlatIP(options.dim), options.dim, lists, faiss.METRIC_INNER_PRODUCT)


def _shard_vectors(shard: Path) -> np.ndarray:
    with np.load(shard, allow_pickle=False) as stored:
        return stored["vectors"]


@contextlib.contextmanager
def _quiet_stdout():
    """faiss's C++ code prints its on-disk bookkeeping ("resizing ...", "updating ondisk filename ...") to
    the process's stdout, where a command line may be writing a run: send it to /dev/null meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _gpu_clustering(index, binary: bool) -> None:
    """Run the k-means of ``index.train`` on the first GPU when faiss sees one (the assignment step is a flat
    L2 search over the centroids, the part that grows with lists x sample)."""
    import faiss

    try:
        if not getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
            return
        resources = faiss.StandardGpuResources()
        dim = index.d
        clustering = faiss.GpuIndexFlatL2(resources, dim)
        clustering.referenced_objects = [resources]
        index.clustering_index = clustering
        index._gpu_clustering = clustering  # the index does not own it: keep it alive with the index
    except Exception as error:  # noqa: BLE001 - a GPU problem must not break the build
        log.warning("faiss GPU k-means unavailable (%s); training the IVF quantizer on the CPU", error)


def train(shards: Sequence[Path], counts: Sequence[int], options: CodeOptions, seed: int = 0):
    """An empty IVF index whose quantizer is trained on a seeded sample of the ``shards``' vectors
    (``counts`` per shard): ``(index, lists)``."""
    total = int(sum(counts))
    if total == 0:
        raise PipelineError("no token vectors to index")
    lists = list_count(total, options.ivf_nlist)
    dtype = np.uint8 if options.binary else np.float32
    rng = np.random.default_rng(seed)
    wanted = min(total, lists * TRAIN_PER_LIST, MAX_TRAIN)
    chosen = np.sort(rng.choice(total, size=wanted, replace=False))
    sample, offset = [], 0
    for shard, count in zip(shards, counts):
        inside = chosen[(chosen >= offset) & (chosen < offset + count)] - offset
        if len(inside):
            sample.append(_shard_vectors(shard)[inside])
        offset += count
    index = new_ivf_index(options, lists)
    _gpu_clustering(index, options.binary)
    index.train(np.ascontiguousarray(np.concatenate(sample).astype(dtype)))
    if hasattr(index, "_gpu_clustering"):
        index.clustering_index = None
    return index, lists


def _write(index, binary: bool, path: Path) -> None:
    import faiss

    (faiss.write_index_binary if binary else faiss.write_index)(index, str(path))


def _read(path: Path, binary: bool, flags: int = 0):
    import faiss

    return (faiss.read_index_binary if binary else faiss.read_index)(str(path), flags)


def add_blocks(trained_file: Path, shards: Sequence[Path], first_rows: Sequence[int], binary: bool, folder: Path,
               prefix: str = "block", block_vectors: int = BLOCK_VECTORS) -> list[Path]:
    """Add ``shards`` (their vectors' row numbers start at ``first_rows``) to copies of the trained index at
    ``trained_file``, a new copy every ``block_vectors`` vectors, and write each copy's inverted lists to
    ``folder / <prefix>-NNNNN.index`` (one rank's share under torchrun); returns the block files."""
    dtype = np.uint8 if binary else np.float32
    blocks, index = [], None

    def flush():
        blocks.append(Path(folder) / f"{prefix}-{len(blocks):05d}.index")
        _write(index, binary, blocks[-1])

    for shard, first in zip(shards, first_rows):
        if index is None:
            index = _read(trained_file, binary)
        vectors = np.ascontiguousarray(_shard_vectors(shard).astype(dtype))
        index.add_with_ids(vectors, np.arange(first, first + len(vectors), dtype=np.int64))
        if index.ntotal >= block_vectors:
            flush()
            index = None
    if index is not None:
        flush()
    return blocks


def merge(trained_file: Path, block_files: Sequence[Path], binary: bool, folder: Path, index_file: str) -> int:
    """Merge the blocks' inverted lists on disk into ``folder / DATA_FILE`` (faiss ``OnDiskInvertedLists``,
    as ``faiss.contrib.ondisk.merge_ondisk``), in the order of ``block_files``, keep every list's ids in
    increasing order (a list the blocks left out of order is sorted in place), write the index to
    ``folder / index_file``, the row lookup (format 4: the list numbers carried in the ids and the trees'
    roots, :data:`ROOTS_FILE`; format 3 where the ids cannot carry them: :data:`ASSIGN_FILE`), the buckets and
    the lists' places (:data:`LISTS_FILE`); returns the number of vectors (:func:`layout` says the format)."""
    import faiss

    index = _read(trained_file, binary)
    blocks, lists = [], faiss.InvertedListsPtrVector()
    for block_file in block_files:
        block = _read(block_file, binary, faiss.IO_FLAG_MMAP)  # its lists stay on disk, paged in by the merge
        blocks.append(block)
        lists.push_back(block.invlists)
    with _quiet_stdout():
        merged = faiss.OnDiskInvertedLists(index.nlist, index.code_size, str(folder / DATA_FILE))
        total = merged.merge_from_multiple(lists.data(), lists.size(), False)
    del lists, blocks  # the blocks (and their memory maps) are released here: their lists were copied out
    table = np.zeros((index.nlist, 3), dtype=np.int64)
    for number in range(index.nlist):
        one = merged.lists.at(number)
        table[number] = one.offset, one.size, one.capacity
    in_ids = tree_ids_fit(total, index.nlist)
    # format 4 needs every row's list only while the ids are written: a scratch file, removed below
    assign_file = folder / (".assign.npy" if in_ids else ASSIGN_FILE)
    assign = np.lib.format.open_memmap(assign_file, mode="w+", shape=(total,), dtype=list_dtype(index.nlist))
    shift = bucket_shift(index.nlist)
    bounds = np.arange(((total - 1) >> shift) + 2, dtype=np.int64) << shift  # the buckets' first rows, and the end
    buckets = np.lib.format.open_memmap(folder / BUCKETS_FILE, mode="w+", shape=(index.nlist, len(bounds)),
                                        dtype=np.uint32 if table[:, 1].max(initial=0) < 2 ** 32 else np.int64)
    sorted_lists = 0
    for number in range(index.nlist):
        size = int(table[number, 1])
        if not size:
            continue
        ids = faiss.rev_swig_ptr(merged.get_ids(number), size).copy()
        if size > 1 and not np.all(ids[1:] > ids[:-1]):
            # blocks merged out of row order (e.g. ranks given interleaved shards): the re-scoring's binary
            # search needs each list in row order, so the list's entries are reordered in place
            order = np.argsort(ids, kind="stable")
            codes = faiss.rev_swig_ptr(merged.get_codes(number), size * index.code_size).copy()
            codes = np.ascontiguousarray(codes.reshape(size, index.code_size)[order])
            ids = np.ascontiguousarray(ids[order])
            merged.update_entries(number, 0, size, faiss.swig_ptr(ids), faiss.swig_ptr(codes))
            sorted_lists += 1
        assign[ids] = number
        buckets[number] = np.searchsorted(ids, bounds)
    buckets.flush()
    del buckets
    if sorted_lists:
        log.info("merge: %d of %d inverted lists were out of row order and were sorted", sorted_lists, index.nlist)
    index.ntotal = total
    index.replace_invlists(merged, True)
    merged.this.disown()
    _write(index, binary, folder / index_file)
    code_size = int(index.code_size)
    del index
    if in_ids:
        _write_tree_ids(folder / DATA_FILE, table, code_size, assign)
        np.save(folder / ROOTS_FILE, np.asarray(assign[::TREE_ROWS]))
        del assign
        assign_file.unlink()
    else:
        assign.flush()
        del assign
        log.warning("merge: %d vectors are too many for list numbers in the faiss ids of %d lists: index "
                    "format 3 (2 more bytes per vector)", total, len(table))
    np.save(folder / LISTS_FILE, table)
    return int(total)


def _stored_ids(data: np.ndarray, table: np.ndarray, code_size: int):
    """``(list number, its ids)`` of every non-empty list of :data:`DATA_FILE` mapped as ``data`` (uint8):
    the ids an int64 view into the mapping (writable where ``data`` is), after the list's ``capacity`` codes."""
    for number, (offset, size, capacity) in enumerate(table):
        if size:
            first = offset + capacity * code_size
            yield number, data[first: first + 8 * size].view(np.int64)


def _write_tree_ids(data_file: Path, table: np.ndarray, code_size: int, assign: np.ndarray) -> None:
    """Replace every list's ids (row numbers, increasing) in ``data_file`` by their format-4 ids
    (:func:`tree_ids`), list by list, in place."""
    data = np.memmap(data_file, dtype=np.uint8, mode="r+")
    for _, stored in _stored_ids(data, table, code_size):
        stored[:] = tree_ids(np.array(stored), assign, len(table))
    data.flush()
    del data


def layout(folder: Path) -> tuple[int, tuple[str, ...]]:
    """``(format, files besides the faiss index file)`` of the on-disk IVF index in ``folder``, told by its
    row-lookup file (format 4: :data:`ROOTS_FILE`, 2: :data:`RANKS_FILE`, else 3)."""
    folder = Path(folder)
    if (folder / ROOTS_FILE).is_file():
        return 4, FILES
    if (folder / RANKS_FILE).is_file():
        return 2, FORMAT_2_FILES
    return 3, FORMAT_3_FILES


def shard_counts(shards: Sequence[Path]) -> list[int]:
    """The number of vectors in each shard."""
    counts = []
    for shard in shards:
        with np.load(shard, allow_pickle=False) as stored:
            counts.append(int(stored["lengths"].sum()))
    return counts


def assemble(shards: Sequence[Path], counts: Sequence[int], options: CodeOptions, folder: Path, index_file: str,
             seed: int = 0) -> int:
    """One process's build: train an IVF index on a sample of the ``shards``' vectors (``counts`` per shard),
    add the shards in blocks (:func:`add_blocks`) and merge the blocks' lists on disk into ``folder``
    (:func:`merge`); returns the lists."""
    index, lists = train(shards, counts, options, seed)
    work = folder / ".blocks"
    work.mkdir()
    trained = work / TRAINED_FILE
    _write(index, options.binary, trained)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    blocks = add_blocks(trained, shards, firsts.tolist(), options.binary, work)
    merge(trained, blocks, options.binary, folder, index_file)
    shutil.rmtree(work)
    return lists


class ListVectors:
    """The stored vectors of a format-2, 3 or 4 IVF index, read by row number out of its memory-mapped
    inverted lists (``vectors[rows]`` -> ``[len(rows), width]``, like the flat index's array).

    Format 4 finds a row's list by walking its tree of list numbers carried in the faiss ids from the tree's
    root (:data:`ROOTS_FILE`), format 3 reads it (:data:`ASSIGN_FILE`); both then binary-search the row among
    that list's ids (increasing, see :func:`merge`), all rows at once. Format 2 reads each row's position in
    list order (:data:`RANKS_FILE`). All give the same vectors.

    Example:
        >>> vectors = ListVectors(index_dir, binary=True, dim=512)  # doctest: +SKIP
        >>> vectors[np.arange(10, 20)].shape  # doctest: +SKIP
        (10, 64)
    """

    def __init__(self, folder: Path, binary: bool, dim: int):
        folder = Path(folder)
        self.folder = folder
        self.width = dim // 8 if binary else dim
        self.dtype = np.dtype(np.uint8 if binary else np.float32)
        self.code_size = self.width * self.dtype.itemsize
        self.data = np.memmap(folder / DATA_FILE, dtype=np.uint8, mode="r")
        self._rows = self._windows(self.code_size)
        table = np.load(folder / LISTS_FILE)
        self.list_offsets = table[:, 0]
        self.list_sizes = table[:, 1]
        self.count = int(self.list_sizes.sum())
        capacities = table[:, 2] if table.shape[1] > 2 else table[:, 1]
        self.id_offsets = self.list_offsets + capacities * self.code_size
        if len(self.data) % 8 == 0 and not np.any(self.id_offsets % 8):
            # every id 8-aligned (codes a multiple of 8 bytes): ids are one int64 gather (a plain ndarray view,
            # no memmap subclass overhead per operation)
            self._ids, self._id_unit = np.asarray(self.data).view(np.int64), 8
        else:  # an id is 8 bytes at any byte offset: gathered as byte windows (slower)
            self._ids, self._id_unit = self._windows(8), 1
        self.ranks = self.assign = self.roots = None
        #: a faiss id (a kNN label) is the row shifted left by this many bits (format 4; 0 before)
        self.label_shift = 0
        version, _ = layout(folder)
        if version == 2:
            self.ranks = np.load(folder / RANKS_FILE, mmap_mode="r")
            self.list_starts = np.concatenate([[0], np.cumsum(self.list_sizes)])
        elif version == 4:
            self.roots = np.asarray(np.load(folder / ROOTS_FILE, mmap_mode="r"))  # mapped: no memmap subclass overhead
            self.bits = list_bits(len(table))
            self.label_shift = row_shift(len(table))
            if len(self.roots) != (self.count + TREE_ROWS - 1) // TREE_ROWS:
                raise PipelineError(f"{folder / ROOTS_FILE}: {len(self.roots)} tree roots do not fit {self.count} "
                                    "vectors: a damaged index, rebuild it with python -m pipeline.index --force "
                                    "(same options)")
        else:
            self.assign = np.load(folder / ASSIGN_FILE, mmap_mode="r")
        self.buckets, self.shift = None, 0
        if self.ranks is None and (folder / BUCKETS_FILE).is_file():
            self.buckets = np.load(folder / BUCKETS_FILE, mmap_mode="r")
            self.shift = bucket_shift(len(table))
            if self.buckets.shape != (len(table), ((max(1, self.count) - 1) >> self.shift) + 2):
                raise PipelineError(f"{folder / BUCKETS_FILE}: shape {self.buckets.shape} does not fit "
                                    f"{self.count} vectors in {len(table)} lists: a damaged index, rebuild "
                                    "it with python -m pipeline.index --force (same options)")
            self._bucket_cells = np.asarray(self.buckets).reshape(-1)  # plain ndarray: no memmap subclass overhead

    def _windows(self, width: int) -> np.ndarray:
        """Row ``i``: the ``width`` bytes of :data:`DATA_FILE` from byte ``i`` (one gather per row, not per byte)."""
        if len(self.data) >= width:
            return np.lib.stride_tricks.sliding_window_view(self.data, width)
        return np.zeros((0, width), dtype=np.uint8)

    def __len__(self) -> int:
        return self.count

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), self.width

    def rows_of(self, labels: np.ndarray) -> np.ndarray:
        """The row numbers of faiss ``labels`` (the kNN step's), -1 (no neighbour) kept."""
        if not self.label_shift:
            return labels
        return np.where(labels >= 0, labels >> self.label_shift, labels)

    def _ids_at(self, lists: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The faiss ids at ``positions`` of the inverted lists ``lists``."""
        return self._gather_ids(self.id_offsets[lists] // self._id_unit, positions)

    def _gather_ids(self, starts: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The faiss ids at ``positions`` of the lists whose ids start at ``starts`` (in units of ``_ids``)."""
        if self._id_unit == 8:
            return self._ids[starts + positions]
        return self._ids[starts + positions * 8].view(np.int64).reshape(len(starts))

    def _positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(list, position in the list)`` of each of ``rows`` (flat int64)."""
        if self.ranks is not None:
            ranks = np.asarray(self.ranks[rows], dtype=np.int64)
            lists = np.searchsorted(self.list_starts, ranks, side="right") - 1
            return lists, ranks - self.list_starts[lists]
        if self.roots is not None:
            return self._tree_positions(rows)
        lists = np.asarray(self.assign[rows], dtype=np.int64)
        return lists, self._search(rows, lists, ASSIGN_FILE)[0]

    def _tree_positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_positions` of format 4: the trees of ``rows`` walked level by level from their roots, each
        level's rows found in the lists the level above named, down to the deepest row asked for per tree."""
        tree_of, nodes = np.divmod(rows, TREE_ROWS)
        trees, which = np.unique(tree_of, return_inverse=True)
        deepest = np.zeros(len(trees), dtype=np.int64)
        np.maximum.at(deepest, which, nodes)
        # one spare column: the last inner node's right child (node TREE_ROWS) lies past the tree
        lists = np.zeros((len(trees), TREE_ROWS + 1), dtype=np.int64)
        positions = np.zeros((len(trees), TREE_ROWS + 1), dtype=np.int64)
        lists[:, 0] = self.roots[trees]
        low = (1 << self.bits) - 1
        first = 0
        while first < TREE_ROWS:  # level by level: nodes first .. 2 first (first = 2^level - 1)
            width = first + 1
            counts = np.clip(deepest - first + 1, 0, width)
            total = int(counts.sum())
            if not total:
                break
            tree = np.repeat(np.arange(len(trees)), counts)
            node = first + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            found, ids = self._search(trees[tree] * TREE_ROWS + node, lists[tree, node], "its tree")
            positions[tree, node] = found
            inner = node < TREE_ROWS // 2  # the children's lists, read out of this level's ids
            if inner.any():
                tree, node, ids = tree[inner], node[inner], ids[inner]
                lists[tree, 2 * node + 1] = (ids >> self.bits) & low
                lists[tree, 2 * node + 2] = ids & low
            first = 2 * first + 1
        return lists[which, nodes], positions[which, nodes]

    def _search(self, rows: np.ndarray, lists: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
        """``(position, faiss id)`` of each of ``rows`` in its inverted list (``lists``, as ``source`` gave
        them): a binary search among the list's ids, narrowed by the buckets."""
        sizes = self.list_sizes[lists]
        starts = self.id_offsets[lists] // self._id_unit
        if self.buckets is not None:  # the row lies among its bucket's entries of its list
            cells = lists * self.buckets.shape[1] + (rows >> self.shift)
            base = self._bucket_cells[cells].astype(np.int64)
            remaining = self._bucket_cells[cells + 1] - base
        else:
            base, remaining = np.zeros(len(rows), dtype=np.int64), sizes.copy()
        # an id carries its row in its high bits (format 4): the ids of a row are those <= this key
        keys = (rows << self.label_shift) | ((1 << self.label_shift) - 1)
        # branchless search, every row at once, of the last id <= the key (the row's own id when the list holds
        # it): the answer lies in [base, base + remaining); ceil(log2(longest range)) gathers, one more to check
        steps = int(remaining.max(initial=1) - 1).bit_length()
        half, probe = np.empty_like(remaining), np.empty_like(remaining)
        below = np.empty(len(rows), dtype=bool)
        for _ in range(steps):  # in place: these arrays are as long as the rows asked for
            np.right_shift(remaining, 1, out=half)
            np.add(base, half, out=probe)
            np.less_equal(self._gather_ids(starts, probe), keys, out=below)
            np.copyto(base, probe, where=below)
            np.subtract(remaining, half, out=remaining)
        ids = np.full(len(rows), -1, dtype=np.int64)
        if len(rows):
            found = (sizes > 0) & (base < sizes)  # an empty list holds no row (its ids may start at the file's end)
            ids[found] = self._gather_ids(starts[found], base[found])
            found &= (ids >> self.label_shift) == rows
            if not found.all():
                row = int(rows[~found][0])
                raise PipelineError(f"{self.folder / DATA_FILE}: row {row} is not in inverted list "
                                    f"{int(lists[~found][0])} ({source} says it is): a damaged index, "
                                    "rebuild it with python -m pipeline.index --force (same options)")
        return base, ids

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows)
        flat = rows.astype(np.int64).ravel()
        if len(flat) and (flat.min() < -len(self) or flat.max() >= len(self)):
            raise IndexError(f"row out of range ({len(self)} stored vectors)")
        flat = np.where(flat < 0, flat + len(self), flat)
        lists, positions = self._positions(flat)
        starts = self.list_offsets[lists] + positions * self.code_size
        raw = self._rows[starts]
        return raw.view(self.dtype).reshape(*rows.shape, self.width)

    def __array__(self, dtype=None, copy=None):
        whole = self[np.arange(len(self))]
        return whole if dtype is None else whole.astype(dtype)


def open_index(folder: Path, index_file: str, binary: bool, nprobe: int, mmap: bool = True, dim: int = 0):
    """``(index, vectors)`` of an IVF index: its inverted lists memory-mapped (formats 2-4: faiss's on-disk
    lists, and the vectors read out of them, :class:`ListVectors`; format 1: the index file and
    ``vectors.npy`` memory-mapped when ``mmap``); ``nprobe`` lists are visited per query vector. The labels
    of ``index.search`` are faiss ids: ``vectors.rows_of(labels)`` are the rows (format 4 packs more into
    an id)."""
    import faiss

    folder = Path(folder)
    if (folder / DATA_FILE).is_file():
        with _quiet_stdout():
            index = _read(folder / index_file, binary, faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY)
        index.nprobe = max(1, min(nprobe, index.nlist))
        return index, ListVectors(folder, binary, dim or index.d)
    flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
    index = _read(folder / index_file, binary, flags)
    index.nprobe = max(1, min(nprobe, index.nlist))
    vectors = np.load(folder / VECTORS_FILE, mmap_mode="r" if mmap else None)
    return index, vectors


def write_layout(folder: Path, target: Path, code_size: int, version: int) -> None:
    """A copy of the format-3 or 4 IVF index in ``folder`` (codes of ``code_size`` bytes) at ``target`` in the
    older ``version`` 2 or 3, on the same lists: the same faiss index file, document files and encoder (hard
    links where the file system allows), the lists copied with plain row numbers as ids, each row's list
    number (:data:`ASSIGN_FILE`, version 3, with the same buckets) or its position in list order
    (:data:`RANKS_FILE`, version 2, the lists' table without capacities), and its own metadata. For comparing
    the layouts on the same lists (tests, ``benchmarks/code_ivf_storage.py``)."""
    import json

    from pipeline.core.atomic import write_text
    from pipeline.core.filecheck import describe

    from .options import ENCODER_FILE, META_FILE

    if version not in (2, 3):
        raise ValueError(f"write_layout writes format 2 or 3, not {version}")
    folder, target = Path(folder), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    lookup = set(FILES) | set(FORMAT_3_FILES)
    names = [name for name in meta["files"] if name not in lookup]
    for name in (*names, ENCODER_FILE):
        try:
            os.link(folder / name, target / name)
        except OSError:
            shutil.copyfile(folder / name, target / name)
    shutil.copyfile(folder / DATA_FILE, target / DATA_FILE)  # its own copy: the ids are rewritten below
    table = np.load(folder / LISTS_FILE)
    shift = row_shift(len(table)) if layout(folder)[0] == 4 else 0
    data = np.memmap(target / DATA_FILE, dtype=np.uint8, mode="r+")
    total = int(table[:, 1].sum())
    if version == 2:
        place = np.lib.format.open_memmap(target / RANKS_FILE, mode="w+", shape=(total,),
                                          dtype=np.uint32 if total < 2 ** 32 else np.int64)
    else:
        place = np.lib.format.open_memmap(target / ASSIGN_FILE, mode="w+", shape=(total,),
                                          dtype=list_dtype(len(table)))
    starts = np.concatenate([[0], np.cumsum(table[:, 1])])  # each list's first position in list order
    for number, stored in _stored_ids(data, table, code_size):
        rows = np.array(stored) >> shift
        stored[:] = rows
        place[rows] = np.arange(starts[number], starts[number + 1]) if version == 2 else number
    data.flush()
    place.flush()
    del data, place
    if version == 2:
        np.save(target / LISTS_FILE, table[:, :2])
        files = (*names, *FORMAT_2_FILES)
    else:
        np.save(target / LISTS_FILE, table)
        shutil.copyfile(folder / BUCKETS_FILE, target / BUCKETS_FILE)
        files = (*names, *FORMAT_3_FILES)
    meta.update(format=version, files=describe(target, files))
    write_text(target / META_FILE, json.dumps(meta, indent=1))  # written last: the copy is complete
