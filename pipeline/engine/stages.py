"""The two steps of a pipeline as functions: :func:`retrieve` (a first stage) and :func:`rerank` (a re-ranker
over its candidates), with :func:`head` and :func:`append_tail` for re-ranking only the top of each list."""
from __future__ import annotations

import logging
import math
from typing import Sequence

from pipeline.core.progress import progress_switch, tqdm

from indexes import make_first_stage

from infra import distributed

from ..core.datasets import Dataset
from ..core.errors import ConfigError, PipelineError
from ..core.records import Query, Run, ScoredDoc
from ..core.runtime import native_bf16, resolve_device, resolve_precision
from ..core.records import ranked as ranked_hits

log = logging.getLogger("pipeline.engine.stages")


def retrieve(dataset: Dataset, first_stage: str = "auto", k: int = 1000, queries: Sequence[Query] | None = None,
             settings=None) -> Run:
    """Run the first stage (see :func:`indexes.make_first_stage`) for ``queries`` (default: all)."""
    retriever = make_first_stage(first_stage, dataset, settings)
    return retriever.search(queries if queries is not None else dataset.queries.values(), k)


#: pairs per ``score_many`` call in :func:`rerank`: many scoring batches' worth, so that each batch is filled
#: with pairs of about one length, and few enough that the progress bar moves
RERANK_CHUNK_PAIRS = 4096


def rerank(reranker, dataset: Dataset, first: Run, batch_queries: bool = True, batch_size: int | None = None,
           progress: bool = True) -> Run:
    """Re-score every query's first-stage candidates with ``reranker`` (``None`` returns ``first`` unchanged).

    The result holds exactly the first stage's candidates for each query, with the re-ranker's scores.
    With ``batch_queries`` and a re-ranker that has ``score_many``, the queries are scored together, in
    chunks of about :data:`RERANK_CHUNK_PAIRS` pairs, each chunk's pairs batched across its queries (full
    batches of pairs of about one length instead of one batch per query); otherwise query by query.
    ``batch_size`` is the scoring batch in pairs (default: the model's ``score_batch_size``); it changes the
    speed and memory of scoring, not the scores, and is not part of any model. ``progress=False`` shows no
    progress bar (PyTerrier's ``verbose=False``).
    """
    if reranker is None:
        return first
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"the scoring batch size must be at least 1, got {batch_size}")
    store = dataset.doc_store()
    for query_id, hits in first.items():
        missing = [h.doc_id for h in hits if h.doc_id not in store]
        if missing:
            raise PipelineError(f"query {query_id!r}: first-stage doc {missing[0]!r} is not in {dataset.name!r}")
    score_many = getattr(reranker, "score_many", None)
    if score_many is None and batch_size:
        log.info("%s scores query by query; the scoring batch size %d does not apply", reranker.name, batch_size)
    limit = max(RERANK_CHUNK_PAIRS, 8 * (batch_size or 0)) if batch_queries and score_many is not None else 0
    chunks: list[list[str]] = [[]]
    pairs = 0
    for query_id, hits in first.items():
        if chunks[-1] and pairs + len(hits) > limit:
            chunks.append([])
            pairs = 0
        chunks[-1].append(query_id)
        pairs += len(hits)
    result: Run = {}
    # under torchrun, chunk i is scored by rank i % world: each chunk exactly as one process scores it
    chunks = [chunk for chunk in chunks if chunk]
    mine = chunks[distributed.rank()::distributed.world_size()]
    with tqdm(total=sum(map(len, mine)), desc=f"re-ranking with {reranker.name}", unit="query",
              **progress_switch(progress)) as bar:
        for chunk in mine:
            items = [(dataset.queries[q], [store[h.doc_id] for h in first[q]]) for q in chunk]
            if score_many is None:
                scored = [reranker.score(query, docs) for query, docs in items]
            else:
                scored = score_many(items) if batch_size is None else score_many(items, batch_size=batch_size)
            for query_id, scores in zip(chunk, scored):
                hits = first[query_id]
                if len(scores) != len(hits):
                    raise PipelineError(f"{reranker.name} returned {len(scores)} scores for {len(hits)} candidates")
                values = [float(s) for s in scores]
                bad = next((h.doc_id for h, v in zip(hits, values) if not math.isfinite(v)), None)
                if bad is not None:  # e.g. a damaged checkpoint: never rank by NaN
                    raise PipelineError(f"{reranker.name} gave a non-finite score to doc {bad!r} of query "
                                        f"{query_id!r}; its weights are damaged or diverged (retrain with --retrain)")
                result[query_id] = [ScoredDoc(query_id, h.doc_id, v) for h, v in zip(hits, values)]
            bar.update(len(chunk))
    if distributed.is_distributed():
        scored = {q: hits for part in distributed.gather_to_all(result) for q, hits in part.items()}
        result = {q: scored[q] for chunk in chunks for q in chunk}  # the first stage's query order
    return result


def scoring_precision(config, reranker=None) -> str:
    """The precision ``config`` scores ``reranker`` (an instance or class; ``None``: a torch re-ranker) in:
    ``float32``, ``bf16`` or ``int8`` (:func:`pipeline.core.runtime.resolve_precision`). ``--precision auto``
    (the default) is ``bf16`` for a torch re-ranker on a CPU or GPU with native bfloat16, else ``float32``.
    ``config`` is a :class:`~pipeline.engine.config.RunConfig` or any object with ``bf16``/``int8`` (and optionally
    ``precision``) attributes, such as the serving CLI's options.

    Example:
        >>> from pipeline.engine.config import RunConfig
        >>> scoring_precision(RunConfig(precision="float32"))
        'float32'
    """
    supports_bf16 = reranker is None or hasattr(reranker, "score_in_bf16")
    return resolve_precision(getattr(config, "precision", "auto") or "auto", bool(getattr(config, "bf16", False)),
                             bool(getattr(config, "int8", False)), supports_bf16)


def set_scoring_arithmetic(reranker, config) -> str:
    """Apply ``config``'s precision (``--precision``, or its shortcuts ``--int8`` / ``--bf16``) to a trained
    or loaded re-ranker before it scores, and return the precision applied (:func:`scoring_precision`; an
    explicit choice was checked against the re-ranker by :func:`pipeline.engine.resolve.check_scoring_arithmetic`).
    ``auto`` picks bfloat16 only where it is native; an explicit bfloat16 on a CPU without bfloat16 matrix
    instructions is allowed, with a warning that it will be slower."""
    precision = scoring_precision(config, reranker)
    if precision == "int8":
        reranker.quantize_int8()
    elif precision == "bf16":
        if resolve_device().type == "cpu" and not native_bf16():
            log.warning("--bf16: this CPU has no bfloat16 matrix instructions (AMX or AVX512-BF16); torch "
                        "emulates them, so scoring will be slower than in float32")
        reranker.score_in_bf16()
    return precision


def head(first: Run, depth: int) -> Run:
    """Each query's top ``depth`` first-stage candidates (``depth`` 0: all of them)."""
    return first if depth <= 0 else {query_id: hits[:depth] for query_id, hits in first.items()}


def append_tail(reranked: Run, first: Run) -> Run:
    """``reranked`` (each query's re-scored head) followed by the rest of that query's first-stage
    candidates in first-stage order, scored strictly below the head, so a run re-ranked to depth D still
    holds all k candidates (MAP over the full depth stays comparable with the first stage's)."""
    result: Run = {}
    for query_id, hits in reranked.items():
        ranked = ranked_hits(hits)
        seen = {h.doc_id for h in ranked}
        floor = min((h.score for h in ranked), default=0.0)
        tail = [h for h in first.get(query_id, []) if h.doc_id not in seen]
        result[query_id] = ranked + [ScoredDoc(query_id, h.doc_id, floor - 1.0 - rank)
                                     for rank, h in enumerate(tail)]
    return result
