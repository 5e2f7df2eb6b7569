"""Searching a code index (:class:`CodeRetriever`): per-token kNN in faiss, then exact MaxSim over the
candidates' token vectors; the ``codes`` and ``colbert`` first-stage factories."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from infra.onnx_runtime import QUERY_RUNTIMES, OnnxEncoder, choose_runtime, onnx_or_fallback, sample_batches
from pipeline.core.progress import progress_switch
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.records import Query, Run, ScoredDoc

from ..base import BM25Settings

from .build import build_code_index
from .directory import (
    DocIds, check_format, doc_offsets, find_code_index, index_metadata, index_size_bytes, is_complete, verify_code_index,
)
from . import ivf as ivf_index
from .encoders import load_encoder_checkpoint
from .model import QueryVectors, _autocast, _set_threads, pack_codes, tokenize, unpack_codes
from .options import (
    CodeOptions, ENCODER_FILE, FAISS_FILE, GPU_MAX_K, QUERY_PRECISION, QUERY_PRECISIONS, QUERY_RUNTIME, RESCORE_DEPTH,
)

log = logging.getLogger(__name__)

#: how far below the last exactly scored document the first estimated one of the tail is placed
TAIL_GAP = 1e-3


def _gpu_index(index, binary: bool):
    """``index`` on the first GPU when faiss sees one and supports the index type there, else ``index``."""
    import faiss

    try:
        if not getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
            return index
        resources = faiss.StandardGpuResources()
        if binary:
            if isinstance(index, faiss.IndexBinaryFlat) and hasattr(faiss, "GpuIndexBinaryFlat"):
                gpu = faiss.GpuIndexBinaryFlat(resources, index)
                gpu.referenced_objects = [resources]
                return gpu
            return index
        if isinstance(index, faiss.IndexFlat):
            gpu = faiss.index_cpu_to_gpu(resources, 0, index)
            gpu.referenced_objects = [resources]  # keep the resources alive with the index
            return gpu
    except Exception as error:  # noqa: BLE001 - a GPU problem must not break CPU search
        log.warning("faiss GPU unavailable for this index (%s); searching on the CPU", error)
    return index


def _stored_vectors(index, binary: bool, count: int, width: int) -> np.ndarray:
    """A numpy view (no copy) of the vectors / codes inside a CPU flat or HNSW faiss index."""
    import faiss

    if binary:
        storage = index if isinstance(index, faiss.IndexBinaryFlat) else faiss.downcast_IndexBinary(index.storage)
        pointer = storage.xb.data()
    else:
        storage = index if isinstance(index, faiss.IndexFlat) else faiss.downcast_index(index.storage)
        pointer = storage.get_xb()
    return faiss.rev_swig_ptr(pointer, count * width).reshape(count, width)


def _quantize_query_encoder(model, device) -> str:
    """Make ``model``'s transformer int8 (``torch.ao.quantization.quantize_dynamic`` on its ``nn.Linear``
    layers: int8 weights, each input quantized at run time) for encoding queries on the CPU; the projection
    stays float. Why: a query is a handful of tokens, so the forward pass reads the transformer's weights
    more than it computes, and int8 weights are a quarter of the bytes. Returns the precision in effect
    (``float32`` on a GPU, where quantized kernels do not exist)."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    if torch.device(device).type != "cpu":
        log.info("query_precision int8 is a CPU path; queries are encoded in float on %s", device)
        return "float32"
    with warnings.catch_warnings():  # torch 2.13 announces eager quantization's move to torchao (not installed)
        warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=DeprecationWarning)
        model.transformer = quantize_dynamic(model.transformer, {torch.nn.Linear}, dtype=torch.qint8)
    return "int8"


def document_rows(offsets: np.ndarray, doc_numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stored rows of the given documents' vectors, in order, and each document's count.

    Args:
        offsets: ``[documents + 1]``: document ``d``'s vectors are the rows ``offsets[d]:offsets[d + 1]``.
        doc_numbers: the documents (int array).

    Returns:
        ``(rows, counts)``: the rows of every document in turn, and how many each has.
    """
    starts, ends = offsets[doc_numbers], offsets[doc_numbers + 1]
    counts = ends - starts
    total = int(counts.sum())
    rows = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(total)
    return rows, counts


class CodeRetriever:
    """Search a code index built by :func:`build_code_index` (``search(queries, k) -> Run``).

    Each query token's ``k_prime`` nearest vectors (Hamming distance between the query's sign pattern and
    the codes, or inner product between normalised vectors) name the candidate documents; the
    ``rescore_depth`` candidates with the best MaxSim estimated from those neighbours are ranked by exact
    MaxSim between the query's real-valued token vectors and all their token vectors, and the rest of the
    top ``k`` follow below them in estimated order. ``query_precision="int8"`` encodes queries with an
    int8 transformer (CPU; faster, scores change slightly). ``query_runtime`` chooses what runs the float
    query encoder: ``auto`` (default) ONNX Runtime on the CPU when installed, else PyTorch; ``torch``;
    ``onnx`` (an error where it cannot run). The two give the same vectors within ~1e-5.
    """

    def __init__(self, path: Path, k_prime: int = 256, batch_size: int = 32, device: str = "auto",
                 threads: int | None = None, gpu: bool = True, nprobe: int = 16, mmap: bool = True,
                 rescore_depth: int = RESCORE_DEPTH, query_precision: str = QUERY_PRECISION,
                 query_runtime: str = QUERY_RUNTIME):
        import faiss

        from pipeline.core.runtime import resolve_device

        path = Path(path)
        if not is_complete(path):
            raise PipelineError(f"{path}: not a finished code index (build it with python -m pipeline.index --kind codes)")
        verify_code_index(path)  # a damaged index is an error, never different rankings
        if k_prime <= 0:
            raise PipelineError(f"k_prime must be positive, got {k_prime}")
        if rescore_depth < 0:
            raise PipelineError(f"rescore_depth must be >= 0 (0: re-score every candidate), got {rescore_depth}")
        if query_precision not in QUERY_PRECISIONS:
            raise PipelineError(f"unknown query_precision {query_precision!r}; expected one of "
                                f"{', '.join(QUERY_PRECISIONS)}")
        if query_runtime not in QUERY_RUNTIMES:
            raise PipelineError(f"unknown query_runtime {query_runtime!r}; expected one of {', '.join(QUERY_RUNTIMES)}")
        _set_threads(threads)
        self.path, self.k_prime, self.batch_size, self.rescore_depth = path, k_prime, batch_size, rescore_depth
        self.meta = index_metadata(path)
        check_format(path, self.meta)
        self.name = self.kind = self.meta["kind"]
        self.binary = self.kind == "codes"
        self.device = resolve_device(device)
        self.tokenizer, self.model, opts = load_encoder_checkpoint(path / ENCODER_FILE, self.device)
        self.query_precision = query_precision
        if query_precision == "int8":
            self.query_precision = _quantize_query_encoder(self.model, self.device)
        self.dim = opts["dim"]
        self.max_query_length = opts["query_max_length"]
        self.query_runtime = choose_runtime(query_runtime, self.device, self.query_precision)
        self._onnx_encoder, self._threads, self._requested_runtime = None, threads, query_runtime
        self.doc_ids = DocIds.open(path, self.meta)
        self.offsets = doc_offsets(path, self.meta, len(self.doc_ids))
        self.index_bytes = index_size_bytes(path)
        if self.meta["options"].get("index_type") == "ivf":
            self._cpu_index, self.vectors = ivf_index.open_index(path, FAISS_FILE, self.binary, nprobe, mmap,
                                                                      self.dim)
            self.index = self._cpu_index  # memory-mapped lists stay on the CPU
        else:
            reader = faiss.read_index_binary if self.binary else faiss.read_index
            self._cpu_index = reader(str(path / FAISS_FILE))
            width = self.dim // 8 if self.binary else self.dim
            self.vectors = _stored_vectors(self._cpu_index, self.binary, int(self._cpu_index.ntotal), width)
            self.index = _gpu_index(self._cpu_index, self.binary) if gpu else self._cpu_index
        if hasattr(self._cpu_index, "hnsw"):
            self._cpu_index.hnsw.efSearch = max(self._cpu_index.hnsw.efSearch, k_prime)

    # query side
    def onnx_encoder(self):
        """The ONNX Runtime runner of the query encoder (:class:`infra.onnx_runtime.OnnxEncoder`), made at the
        first query: exporting a graph not yet cached takes a few seconds, which opening an index should not.
        ``None`` where the graph cannot reproduce PyTorch and ``query_runtime`` is ``auto``: queries are then
        encoded by PyTorch (``query_runtime`` becomes ``torch``)."""
        if self._onnx_encoder is None and self.query_runtime == "onnx":
            sample, probe = sample_batches(self.tokenizer, self.max_query_length)
            self._onnx_encoder = onnx_or_fallback(
                lambda: OnnxEncoder(QueryVectors(self.model), sample, probe, threads=self._threads),
                self._requested_runtime)
            if self._onnx_encoder is None:
                self.query_runtime = "torch"
        return self._onnx_encoder

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each query's token vectors (``[tokens, dim]`` float32, L2-normalised; special tokens dropped)."""
        result = []
        # int8: one query per forward pass, since the dynamic quantization's input scale is the batch's (a
        # query's vectors would depend on the other queries of its batch and on their padding)
        step = 1 if self.query_precision == "int8" else self.batch_size
        with torch.inference_mode():
            for start in range(0, len(texts), step):
                ids, att = tokenize(self.tokenizer, texts[start : start + step], self.max_query_length, self.device)
                runner = self.onnx_encoder() if self.query_runtime == "onnx" else None
                if runner is not None:
                    q, mask = runner(ids.numpy(), att.numpy()), self.model.token_mask(ids, att).numpy()
                    result.extend(q[row][mask[row]] for row in range(len(q)))
                    continue
                with _autocast(self.device):
                    q, mask = self.model.encode_queries(ids, att)
                q, mask = q.float().cpu().numpy(), mask.cpu().numpy()
                result.extend(q[row][mask[row]] for row in range(len(q)))
        return result

    # document side
    def doc_rows(self, doc_numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored rows of the given documents' vectors, in order, and each document's count."""
        return document_rows(self.offsets, doc_numbers)

    def doc_vectors(self, doc_numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All token vectors of the given documents (float32; +-1 for codes) and each document's count."""
        rows, counts = self.doc_rows(doc_numbers)
        vectors = self.vectors[rows]
        if self.binary:
            vectors = unpack_codes(vectors, self.dim)
        return vectors, counts

    def maxsim_scores(self, query_vectors: np.ndarray, doc_numbers: np.ndarray, chunk: int = 256) -> np.ndarray:
        """Exact MaxSim of one query against documents (each must have at least one vector)."""
        plain_codes = self.binary and not self.model.centred
        scale = 1.0 / math.sqrt(self.dim) if plain_codes else 1.0
        scores = np.zeros(len(doc_numbers), dtype=np.float32)
        if len(query_vectors) == 0:
            return scores
        if plain_codes:  # q . (2 bits - 1) = (bits @ 2q) - sum(q): one product with the 0/1 bits, no +-1 copy
            doubled = np.ascontiguousarray(2.0 * query_vectors.T, dtype=np.float32)
            total = query_vectors.sum(axis=1, dtype=np.float32)
        else:
            transposed = np.ascontiguousarray(query_vectors.T, dtype=np.float32)
        for start in range(0, len(doc_numbers), chunk):
            part = doc_numbers[start : start + chunk]
            rows, counts = self.doc_rows(part)
            stored = self.vectors[rows]
            if plain_codes:
                bits = np.unpackbits(stored, axis=-1, count=self.dim, bitorder="little").astype(np.float32)
                sims = bits @ doubled
                sims -= total
            elif self.model.centred:
                sims = self._centred_similarity(unpack_codes(stored, self.dim), query_vectors)
            else:
                sims = stored @ transposed
            bounds = np.concatenate([[0], np.cumsum(counts)[:-1]])
            scores[start : start + len(part)] = np.maximum.reduceat(sims, bounds, axis=0).sum(axis=1) * scale
        return scores

    def _centred_similarity(self, codes: np.ndarray, query_vectors: np.ndarray) -> np.ndarray:
        """:meth:`~indexes.codes.model.TokenCodeEncoder.decoded_similarity` of a centred head, on the model's device."""
        device = self.model.center.device
        with torch.inference_mode():
            sims = self.model.decoded_similarity(torch.from_numpy(codes).to(device),
                                                 torch.from_numpy(np.ascontiguousarray(query_vectors)).to(device))
        return sims.float().cpu().numpy()

    def neighbours(self, query_vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(labels, similarities)``, both ``[tokens, k']``: each query token's ``k_prime`` nearest stored
        vectors (row numbers, -1 where the index has fewer) and their similarity as the kNN step measured it,
        higher is closer (codes: ``1 - 2 hamming / bits``, the cosine of the query's sign pattern and the
        code; float vectors: the inner product)."""
        k = min(self.k_prime, int(self._cpu_index.ntotal))
        if self.index is not self._cpu_index:
            k = min(k, GPU_MAX_K)
        if self.binary:
            if self.model.centred:
                with torch.inference_mode():
                    keys = self.model.hash_unit_vectors(torch.from_numpy(query_vectors).to(self.model.center.device))
                query_vectors = keys.float().cpu().numpy()
            distances, labels = self.index.search(pack_codes(query_vectors), k)
            return self._rows_of(labels), 1.0 - 2.0 * distances.astype(np.float32) / self.dim
        distances, labels = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), k)
        return self._rows_of(labels), distances.astype(np.float32, copy=False)

    def _rows_of(self, labels: np.ndarray) -> np.ndarray:
        """The stored rows of the kNN step's faiss ``labels`` (an IVF index of format 4 packs list numbers
        into its ids beside the row: :meth:`indexes.codes.ivf.ListVectors.rows_of`)."""
        rows_of = getattr(self.vectors, "rows_of", None)
        return labels if rows_of is None else rows_of(labels)

    def docs_of(self, rows: np.ndarray) -> np.ndarray:
        """The document number of each stored vector in ``rows`` (a document's vectors are consecutive rows)."""
        return np.searchsorted(self.offsets, rows, side="right").astype(np.int64) - 1

    def doc_id(self, number: int) -> str:
        """The id of document ``number``."""
        return self.doc_ids[number]

    def candidates(self, query_vectors: np.ndarray) -> np.ndarray:
        """Documents of the ``k_prime`` nearest vectors of each query token (sorted doc numbers)."""
        if len(query_vectors) == 0:
            return np.zeros(0, dtype=np.int64)
        labels, _ = self.neighbours(query_vectors)
        return np.unique(self.docs_of(labels[labels >= 0]))

    def approximate_scores(self, labels: np.ndarray, similarities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(candidates, scores)``: the documents of the kNN results (sorted doc numbers) and each one's
        MaxSim estimated from those results alone, without reading a document's vectors.

        For each query token, a document's term is the best similarity among its vectors that the token
        retrieved; a token that retrieved none of them contributes its ``k'``-th neighbour's similarity
        (its vectors are at most that close in the kNN measure: the imputation of XTR and of ColBERT's
        candidate generation, optimistic, so that a document is never pruned for a token it was not
        searched with). Args: ``labels`` / ``similarities`` of :meth:`neighbours`.
        """
        valid = labels >= 0
        if not valid.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        tokens = np.nonzero(valid)[0]
        docs = self.docs_of(labels[valid])
        found, inverse = np.unique(docs, return_inverse=True)
        floor = np.where(valid, similarities, np.inf).min(axis=1)
        floor[~np.isfinite(floor)] = 0.0  # a token without neighbours adds the same to every document
        best = np.repeat(floor[None, :].astype(np.float32), len(found), axis=0)
        np.maximum.at(best, (inverse.ravel(), tokens), similarities[valid])
        return found.astype(np.int64), best.sum(axis=1)

    def pruned_candidates(self, query_vectors: np.ndarray, depth: int) -> np.ndarray:
        """The kNN candidates, cut to the ``depth`` best by :meth:`approximate_scores` (ties by doc number,
        so a deeper cut always contains a shallower one); ``depth <= 0`` keeps them all. Sorted doc numbers."""
        if len(query_vectors) == 0:
            return np.zeros(0, dtype=np.int64)
        found, approximate = self.approximate_scores(*self.neighbours(query_vectors))
        if depth <= 0 or len(found) <= depth:
            return found
        order = np.lexsort((found, -approximate))[:depth]
        return np.sort(found[order])

    def split_candidates(self, query_vectors: np.ndarray, depth: int, k: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(exact, tail, estimates)``: the ``depth`` best kNN candidates by :meth:`approximate_scores`
        (sorted doc numbers, to be scored exactly; every candidate when ``depth <= 0``), then the next ones
        in estimated order, up to ``k`` candidates in all, and their estimated scores."""
        empty = np.zeros(0, dtype=np.int64)
        if len(query_vectors) == 0:
            return empty, empty, np.zeros(0, dtype=np.float32)
        found, approximate = self.approximate_scores(*self.neighbours(query_vectors))
        if depth <= 0 or len(found) <= depth:
            return found, empty, np.zeros(0, dtype=np.float32)
        order = np.lexsort((found, -approximate))
        tail = order[depth:max(k, depth)]
        return np.sort(found[order[:depth]]), found[tail], approximate[tail]

    def _ranking(self, query: Query, vectors: np.ndarray, docs: np.ndarray, k: int,
                 tail: tuple[np.ndarray, np.ndarray] | None = None) -> list[ScoredDoc]:
        if len(docs) == 0:
            return []
        scores = self.maxsim_scores(vectors, docs)
        top = np.lexsort((docs, -scores))  # doc numbers follow doc id order only by chance: tie-break by id
        if len(top) > k:  # a tie at the cut is settled by doc id, as when every candidate is sorted
            cut = scores[top[k - 1]]
            top = top[scores[top] >= cut]
        hits = sorted(((float(scores[i]), self.doc_id(int(docs[i]))) for i in top), key=lambda h: (-h[0], h[1]))[:k]
        if tail is not None and len(tail[0]) and len(hits) < k:
            # below the last exact score, spaced as their estimates (an estimate and an exact score are on
            # different scales: only the order within the tail is the estimates')
            tail_docs, estimates = tail[0][: k - len(hits)], tail[1][: k - len(hits)]
            below = hits[-1][0] - (float(estimates[0]) - estimates.astype(np.float64)) - TAIL_GAP
            hits += sorted(((float(score), self.doc_id(int(doc))) for score, doc in zip(below, tail_docs)),
                           key=lambda h: (-h[0], h[1]))
        return [ScoredDoc(query.query_id, doc_id, score) for score, doc_id in hits]

    def search(self, queries: Iterable[Query], k: int = 1000, exhaustive: bool = False) -> Run:
        """Top-``k`` documents for every query (score descending, ties by doc id). ``exhaustive`` scores every
        document instead of the kNN candidates (brute-force MaxSim, for checks).

        Only the ``rescore_depth`` candidates with the best :meth:`approximate_scores` are scored exactly
        (``rescore_depth`` 0: every candidate); when that is fewer than ``k``, the next candidates by estimate
        follow below the exactly scored ones (see :meth:`split_candidates`), so the top ``k`` are the same
        documents as with ``rescore_depth = k``, only ordered by estimate below the cut."""
        from tqdm.auto import tqdm

        queries = list(queries)
        run: Run = {}
        depth = self.rescore_depth
        with tqdm(total=len(queries), desc=f"{self.name} search", unit="query",
                  **progress_switch(len(queries) >= 64)) as bar:
            for start in range(0, len(queries), self.batch_size):
                chunk = queries[start : start + self.batch_size]
                for query, vectors in zip(chunk, self.encode_queries([q.text for q in chunk])):
                    tail = None
                    if exhaustive:
                        docs = np.flatnonzero(np.diff(self.offsets) > 0)
                    else:
                        docs, *tail = self.split_candidates(vectors, depth, k)
                    run[query.query_id] = self._ranking(query, vectors, docs, k, tail)
                bar.update(len(chunk))
        return run

    def close(self) -> None:
        """Nothing to release (the index is in memory); for symmetry with BM25Retriever."""


def _code_first_stage(kind: str, dataset: Dataset, settings: BM25Settings) -> "CodeRetriever":
    options = settings.codes
    path = None
    if options is None:
        path = find_code_index(dataset, kind, settings.index_root)
        options = CodeOptions(kind=kind)
    else:  # one CodeOptions serves both kinds; a hash head is a binary-codes option
        binary_only = {"hash_head": "mlp", "hash_seed": None} if kind == "colbert" else {}
        options = dataclasses.replace(options, kind=kind, **binary_only)
    if path is None:
        path = build_code_index(dataset, options, settings.index_root)
    return CodeRetriever(path, k_prime=options.k_prime, device=options.device, threads=options.threads,
                         nprobe=options.ivf_nprobe, mmap=options.mmap, rescore_depth=options.rescore_depth,
                         query_precision=options.query_precision, query_runtime=options.query_runtime)


def codes_first_stage(dataset: Dataset, settings: BM25Settings) -> "CodeRetriever":
    """``codes``: binary per-token codes in a faiss binary index (options from ``settings.codes``; without
    them, the dataset's most recent index of this kind, or one built with the default options)."""
    return _code_first_stage("codes", dataset, settings)


def colbert_first_stage(dataset: Dataset, settings: BM25Settings) -> "CodeRetriever":
    """``colbert``: L2-normalised float token vectors in a faiss float index (see :func:`codes_first_stage`)."""
    return _code_first_stage("colbert", dataset, settings)
