"""A zero-shot dense first stage: one pooled vector per document from a pre-trained sentence encoder (the
packaged all-MiniLM-L6-v2 by default, the bi-encoder re-ranker's model) in a FAISS index; nothing is trained.

A text's vector is the encoder's last hidden states pooled over its real tokens (mean, as MiniLM was trained,
or the [CLS] state: ``pooling=auto`` reads a sentence-transformers directory's ``1_Pooling/config.json``) and
L2-normalised, so the inner product the index searches is the cosine of the ``bi-encoder`` re-ranker used
zero-shot (``--reranker bi-encoder --model all-MiniLM-L6-v2`` scores the same vectors, times its scale).
Indexes: ``flat`` (exact inner product, the default), ``hnsw`` (a graph, approximate) or ``ivf`` (k-means
lists, approximate; ``ivf_nprobe`` lists visited per query). Arithmetic is float32 throughout.

Caching: an index lives in ``<root>/<dataset>-dense-<key>``, ``<root>`` being ``PIPELINE_INDEX_DIR`` or
``<home>/indexes/cache/dense`` (:func:`pipeline.core.home.index_root`); the key hashes the dataset's
fingerprint, the options that change the vectors or the index (:meth:`DenseOptions.key_fields`) and the
encoder's identity (its name, or for a directory its ``config.json`` digest and weight file sizes). One
process builds an entry at a time (:func:`pipeline.core.locks.exclusive`, a lock per entry); documents are
encoded into shards ``<root>/.<entry>.shards/shard-NNNNN.npz`` (each written atomically), so an interrupted
build resumes after its last finished shard; the index is assembled in a temporary directory renamed into
place (:func:`pipeline.core.atomic.atomic_directory`), with the sizes and SHA-256 of its files recorded in
its metadata and checked when it is opened (:mod:`pipeline.core.filecheck`): a damaged index is an error
naming the command that clears it, never different rankings.

The text encoder is :mod:`indexes.dense_encoder`; the resumable shards, shared with the code indexes,
:mod:`indexes.shards`. torch, transformers and faiss are imported inside the functions that use them: the
command line imports this module to check ``--dense-set`` options.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from infra.onnx_runtime import QUERY_RUNTIMES
from pipeline.core import filecheck
from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.home import index_root
from pipeline.core.locks import build_once
from pipeline.core.filenames import safe_name
from pipeline.core.progress import progress_switch
from pipeline.core.records import Query, Run, ScoredDoc

from .base import check_choice, settings_options
from .dense_encoder import TextEncoder, encoder_identity, resolve_pooling, set_threads
from .options import FirstStageOptions, FirstStageSettings

log = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "hnsw", "ivf")
POOLINGS = ("auto", "mean", "cls")
META_FILE = "dense-index.json"
FAISS_FILE = "faiss.index"
DOC_IDS_FILE = "doc_ids.json"
SHARD_MANIFEST = "manifest.json"
#: the index files whose size and SHA-256 the metadata records
VERIFIED_FILES = (FAISS_FILE, DOC_IDS_FILE)
#: written beside them after a verification: each file's size and modification time
VERIFIED_STAMP = "pipeline-verified.json"
#: bumped when the layout or the arithmetic of an index changes (part of the cache key)
FORMAT = 1
#: vectors k-means sees when training the IVF quantizer (faiss samples 256 per list at most anyway)
IVF_TRAIN_SAMPLE = 262_144


def dense_option(default, help: str, compare: bool = True, cli: bool = True):
    """A :class:`DenseOptions` field with its help (``--dense-set NAME=VALUE`` sets it); ``compare=False``:
    changes neither the vectors nor the index, so it is not part of the cache key."""
    return field(default=default, compare=compare, metadata={"help": help, "group": "dense first stage", "cli": cli})


@dataclass(frozen=True)
class DenseOptions(FirstStageOptions):
    """Options of the ``dense`` first stage (and of the dense half of ``hybrid``); ``--fs-set NAME=VALUE``
    sets them (``--dense-set`` is its older alias)."""

    encoder: str = dense_option("all-MiniLM-L6-v2", "sentence-transformers model name or local directory "
                                "(default: the packaged all-MiniLM-L6-v2)")
    pooling: str = dense_option("auto", "auto (the model's 1_Pooling/config.json, else mean) | mean | cls")
    normalize: bool = dense_option(True, "L2-normalise the vectors (inner product = cosine)")
    max_query_length: int = dense_option(64, "word pieces of a query, [CLS]/[SEP] included")
    max_doc_length: int = dense_option(256, "word pieces of a document, [CLS]/[SEP] included (sentence-"
                                       "transformers' max_seq_length of MiniLM)")
    index_type: str = dense_option("flat", "flat (exact) | hnsw | ivf")
    hnsw_m: int = dense_option(32, "hnsw: neighbours per graph node")
    hnsw_ef_construction: int = dense_option(200, "hnsw: candidate list while building the graph")
    ivf_nlist: int = dense_option(0, "ivf: lists (default 0: 4 x sqrt(documents), at most documents / 39)")
    seed: int = dense_option(42, "ivf: seed of k-means")
    # not part of the cache key
    hnsw_ef_search: int = dense_option(256, "hnsw: candidate list while searching (at least k)", compare=False)
    ivf_nprobe: int = dense_option(16, "ivf: lists visited per query", compare=False)
    query_runtime: str = dense_option("auto", "what runs the query encoder: auto | torch | onnx (ONNX Runtime, CPU: "
                                      "same vectors within 1e-5, faster; auto: onnx when installed and possible)",
                                      compare=False)
    batch_size: int = dense_option(32, "texts per encoding batch", compare=False)
    shard_size: int = dense_option(2048, "documents per resumable shard", compare=False)
    device: str = dense_option("auto", "auto | cpu | cuda", compare=False)
    threads: int | None = dense_option(None, "torch and faiss CPU threads (None: their defaults)", compare=False)
    progress: bool = dense_option(True, "progress bars while encoding", compare=False, cli=False)

    def __post_init__(self):
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("index type", self.index_type, INDEX_TYPES)
        check_choice("query runtime", self.query_runtime, QUERY_RUNTIMES)
        for name in ("max_query_length", "max_doc_length", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search",
                     "ivf_nprobe", "batch_size", "shard_size"):
            if getattr(self, name) < 1:
                raise PipelineError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_query_length < 2 or self.max_doc_length < 2:
            raise PipelineError("max_query_length and max_doc_length count [CLS] and [SEP]: at least 2")
        if self.ivf_nlist < 0:
            raise PipelineError(f"ivf_nlist must be >= 0 (0: automatic), got {self.ivf_nlist}")
        if self.threads is not None and self.threads < 1:
            raise PipelineError(f"threads must be at least 1 (or None), got {self.threads}")

    def key_fields(self) -> dict:
        """The fields that change the vectors or the index (those with ``compare=True``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.compare}


def dense_index_root() -> Path:
    """Where dense indexes live: ``PIPELINE_INDEX_DIR``, else ``<home>/indexes/cache/dense``."""
    return index_root("dense")


def _digest(value) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------------- building


def dense_index_path(dataset: Dataset, options: DenseOptions, root: Path | None = None) -> Path:
    """The cache directory of ``dataset``'s dense index with ``options``."""
    digest = _digest({"dataset": dataset.fingerprint, "options": options.key_fields(), "format": FORMAT,
                      "pooling": resolve_pooling(options), "encoder": encoder_identity(options.encoder)})
    return (Path(root) if root is not None else dense_index_root()) / (
        f"{safe_name(dataset.name, fallback='dataset')}-dense-{digest}")


def is_complete(path: Path) -> bool:
    """True when ``path`` holds a finished dense index (its metadata file is written last)."""
    return filecheck.is_complete(path, META_FILE)


def index_metadata(path: Path) -> dict:
    """The metadata a finished build wrote into ``path`` (an unreadable file is a damaged index)."""
    return filecheck.read_metadata(path, META_FILE, "dense index", required=("files", "documents", "dim"))


def verify_dense_index(path: Path) -> None:
    """Raise :class:`~pipeline.core.errors.CorruptCacheError` unless the files at ``path`` are the ones its
    build wrote (sizes always, SHA-256 when they changed since the last verification)."""
    filecheck.check(path, index_metadata(path)["files"], VERIFIED_STAMP, "dense index")


def index_size_bytes(path: Path) -> int:
    """Bytes of the index on disk: the faiss file (vectors, and the graph or lists) and the document ids."""
    return sum((Path(path) / name).stat().st_size for name in VERIFIED_FILES)


def build_dense_index(dataset: Dataset, options: DenseOptions = DenseOptions(), root: Path | None = None,
                      force: bool = False) -> Path:
    """Build (or find in the cache) ``dataset``'s dense index; returns its directory.

    Args:
        dataset: the collection to index (its documents; queries are not used).
        options: the encoder and the index (see :class:`DenseOptions`).
        root: the cache root (default :func:`dense_index_root`).
        force: re-encode every document and rebuild even when a finished index exists.

    Returns:
        The index directory, complete and verified when it was built.

    Example:
        >>> path = build_dense_index(load_dataset("cranfield"))  # doctest: +SKIP
    """
    path = dense_index_path(dataset, options, root)
    return build_once(path, is_complete, lambda: _build(dataset, options, path, force), force)


def _build(dataset: Dataset, options: DenseOptions, path: Path, force: bool) -> Path:
    import numpy as np

    from .shards import encode_shards, prepare_shards

    started = time.perf_counter()
    set_threads(options.threads)
    encoder = TextEncoder(options)
    shards = path.parent / f".{path.name}.shards"
    prepare_shards(shards, {"index": path.name, "shard_size": options.shard_size, "format": FORMAT}, SHARD_MANIFEST,
                   force)
    shard_files, _ = encode_shards(
        dataset, shards, options.shard_size,
        lambda chunk: {"vectors": encoder.encode([doc.text for doc in chunk], options.max_doc_length)},
        f"encoding {dataset.name} docs (dense)", options.progress,
        fits=lambda stored: stored["vectors"].shape == (len(stored["doc_ids"]), encoder.dim))

    import faiss

    with atomic_directory(path) as temp:
        doc_ids, parts = [], []
        for shard in shard_files:
            with np.load(shard, allow_pickle=False) as stored:
                doc_ids.extend(stored["doc_ids"].tolist())
                parts.append(stored["vectors"])
        if len(set(doc_ids)) != len(doc_ids):
            raise PipelineError(f"dataset {dataset.name!r}: document ids are not unique")
        vectors = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
        index, nlist = _new_index(options, encoder.dim, vectors)
        index.add(vectors)
        faiss.write_index(index, str(temp / FAISS_FILE))
        with atomic_write(temp / DOC_IDS_FILE) as handle:
            json.dump(doc_ids, handle)
        meta = {
            "kind": "dense", "dataset": dataset.name, "source": dataset.source, "fingerprint": dataset.fingerprint,
            "encoder": encoder_identity(options.encoder), "pooling": encoder.pooling, "dim": encoder.dim,
            "options": options.key_fields(), "format": FORMAT, "documents": len(doc_ids),
            **({"ivf_nlist": nlist} if nlist else {}),
            "index_bytes": (temp / FAISS_FILE).stat().st_size, "files": filecheck.describe(temp, VERIFIED_FILES),
            "seconds": round(time.perf_counter() - started, 2),
        }
        with atomic_write(temp / META_FILE) as handle:
            json.dump(meta, handle, indent=1)
    shutil.rmtree(shards, ignore_errors=True)
    log.info("built %s: %d documents, %d dimensions", path, len(doc_ids), encoder.dim)
    return path


def _new_index(options: DenseOptions, dim: int, vectors):
    """The empty (trained, for IVF) faiss index of ``options`` and its list count (0 unless IVF)."""
    import faiss
    import numpy as np

    if options.index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, options.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = options.hnsw_ef_construction
        return index, 0
    if options.index_type == "ivf":
        count = len(vectors)
        # faiss wants >= 39 training points per list; fewer lists than that would be noise
        nlist = options.ivf_nlist or max(1, min(int(4 * math.sqrt(count)), count // 39))
        if nlist > count:
            raise PipelineError(f"ivf_nlist {nlist} exceeds the {count} documents to index")
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        sample = vectors
        if count > IVF_TRAIN_SAMPLE:
            rows = np.sort(np.random.default_rng(options.seed).choice(count, IVF_TRAIN_SAMPLE, replace=False))
            sample = np.ascontiguousarray(vectors[rows])
        index.cp.seed = options.seed
        index.train(sample)  # faiss's Python wrapper keeps the quantizer alive with the index
        return index, nlist
    return faiss.IndexFlatIP(dim), 0


# ----------------------------------------------------------------------------------------- searching


class DenseRetriever:
    """Search a dense index built by :func:`build_dense_index` (``search(queries, k) -> Run``).

    Args:
        path: the index directory (verified before use).
        options: the options it was built with (their encoder encodes the queries; search-time fields apply).

    Example:
        >>> retriever = DenseRetriever(build_dense_index(dataset), DenseOptions())  # doctest: +SKIP
        >>> run = retriever.search(dataset.queries.values(), k=100)  # doctest: +SKIP
    """

    name = "dense"

    def __init__(self, path: Path, options: DenseOptions = DenseOptions()):
        import faiss

        path = Path(path)
        if not is_complete(path):
            raise PipelineError(f"{path}: not a finished dense index (it is built by --first-stage dense)")
        verify_dense_index(path)  # a damaged index is an error, never different rankings
        self.path, self.options, self.meta = path, options, index_metadata(path)
        set_threads(options.threads)
        self.encoder = TextEncoder(options)
        from infra.onnx_runtime import choose_runtime

        self.query_runtime = choose_runtime(options.query_runtime, self.encoder.device)
        if self.encoder.dim != self.meta["dim"] or self.encoder.pooling != self.meta.get("pooling"):
            raise PipelineError(f"{path}: built with {self.meta['dim']}-dimensional {self.meta.get('pooling')} "
                                f"vectors, but encoder {options.encoder!r} gives {self.encoder.dim}-dimensional "
                                f"{self.encoder.pooling} ones")
        try:
            self.doc_ids: list[str] = json.loads((path / DOC_IDS_FILE).read_text(encoding="utf-8"))
            self.index = faiss.read_index(str(path / FAISS_FILE))
        except (OSError, ValueError, RuntimeError) as error:
            raise filecheck.damaged(path, "dense index", f"cannot be read: {error}") from None
        if self.index.ntotal != len(self.doc_ids):
            raise filecheck.damaged(path, "dense index", f"{self.index.ntotal} vectors for {len(self.doc_ids)} ids")
        if self.meta["options"].get("index_type") == "ivf":
            faiss.extract_index_ivf(self.index).nprobe = options.ivf_nprobe
        self.index_bytes = index_size_bytes(path)

    def encode_queries(self, texts: Sequence[str]):
        """The query vectors of ``texts``.

        Args:
            texts: query texts.

        Returns:
            ``[len(texts), dim]`` float32 vectors.
        """
        vectors = self.encoder.encode(texts, self.options.max_query_length, runtime=self.query_runtime)
        if self.query_runtime == "onnx" and self.encoder.onnx_encoder() is None:
            self.query_runtime = "torch"  # the graph could not reproduce PyTorch (warned): PyTorch encoded them
        return vectors

    def search_vectors(self, vectors, k: int):
        """The ``k`` nearest documents of each vector.

        Args:
            vectors: ``[n, dim]`` float32 query vectors.
            k: documents per vector.

        Returns:
            faiss's ``(scores, rows)``, each ``[n, k]`` (rows -1: none).
        """
        if hasattr(self.index, "hnsw"):
            self.index.hnsw.efSearch = max(self.options.hnsw_ef_search, k)
        return self.index.search(vectors, min(k, int(self.index.ntotal)))

    def search(self, queries: Iterable[Query], k: int = 1000) -> Run:
        """Top-``k`` documents for every query by inner product (cosine with ``normalize``).

        Args:
            queries: the queries.
            k: documents per query.

        Returns:
            ``{query_id: [ScoredDoc, ...]}``, score descending, ties by doc id.
        """
        from tqdm.auto import tqdm

        queries = list(queries)
        run: Run = {}
        batch = self.options.batch_size
        with tqdm(total=len(queries), desc="dense search", unit="query",
                  **progress_switch(self.options.progress and len(queries) >= 64)) as bar:
            for start in range(0, len(queries), batch):
                chunk = queries[start : start + batch]
                scores, rows = self.search_vectors(self.encode_queries([q.text for q in chunk]), k)
                for query, row_scores, row_ids in zip(chunk, scores.tolist(), rows.tolist()):
                    hits = sorted(((-s, self.doc_ids[r]) for s, r in zip(row_scores, row_ids) if r >= 0))
                    run[query.query_id] = [ScoredDoc(query.query_id, doc_id, -negative) for negative, doc_id in hits]
                bar.update(len(chunk))
        return run

    def close(self) -> None:
        """Nothing to release (the index is in memory); for symmetry with BM25Retriever."""


def dense_first_stage(dataset: Dataset, settings: FirstStageSettings) -> DenseRetriever:
    """``dense``: the pooled encoder vectors of the documents in a faiss index, built on first use.

    Args:
        dataset: the collection to search.
        settings: options (:class:`DenseOptions`) and the index cache.

    Returns:
        A :class:`DenseRetriever` on the index, encoding queries with the documents' encoder.
    """
    options = settings_options(settings, DenseOptions)
    return DenseRetriever(build_dense_index(dataset, options, settings.index_root), options)


dense_first_stage.Options = DenseOptions
