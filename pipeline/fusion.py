"""Interpolating a re-ranker's scores with the first stage's.

Neural re-rankers trained on little data often know *what* matters (soft matches, context) but not how
much exact-match evidence is worth; the first stage (QL, BM25) knows the latter. The usual remedy
(Birch, Yang et al. 2019; the BERT row of HCAN's Table 3 comes from it) is a per-query linear
interpolation of the two score lists after normalising each to [0, 1]::

    score(d) = w * minmax(first_stage)(d) + (1 - w) * minmax(reranker)(d)

``w = 0`` is the re-ranker alone and ``w = 1`` the first stage. :func:`tune_weight` picks ``w`` on held-out
queries (never the ones it is applied to).
"""
from __future__ import annotations

import logging
from typing import Iterable, Mapping, Sequence

from .core.errors import ConfigError, PipelineError
from .core.records import Qrel, Run, ScoredDoc, ranked
from .stages import rerank, retrieve

log = logging.getLogger("pipeline.fusion")

#: weights tried by :func:`tune_weight`: 0, 0.05, ..., 1
DEFAULT_GRID = tuple(round(i * 0.05, 2) for i in range(21))


def minmax(hits: Sequence[ScoredDoc]) -> dict[str, float]:
    """``doc_id -> score`` rescaled to [0, 1] within one query (all 0 when every score is equal)."""
    if not hits:
        return {}
    low = min(h.score for h in hits)
    span = max(h.score for h in hits) - low
    return {h.doc_id: (h.score - low) / span if span > 0 else 0.0 for h in hits}


def weighted_sum(runs: Sequence[Sequence[ScoredDoc]], weights: Sequence[float], query_id: str) -> list[ScoredDoc]:
    """One query's fusion of several rankings: ``sum_i weights[i] * minmax(runs[i])(d)`` over the union of
    their documents, a document missing from a ranking counting 0 there (after its min-max), as ranx's
    ``fuse(norm="min-max", method="wsum")``; ranked by the fused score."""
    normalised = [minmax(hits) for hits in runs]
    union = dict.fromkeys(doc_id for scores in normalised for doc_id in scores)
    return ranked([ScoredDoc(query_id, doc_id, sum(w * scores.get(doc_id, 0.0) for w, scores in zip(weights, normalised)))
                   for doc_id in union])


def interpolate(first: Run, reranked: Run, weight: float | Mapping[str, float]) -> Run:
    """The interpolated run (see the module docstring), ranked by the new score.

    ``weight`` is one number or a ``query_id -> weight`` mapping (one per fold). Each query of ``reranked``
    must be in ``first``; their candidates may differ: the union is ranked, a document missing from one run
    scoring 0 there after the min-max (as ranx's ``fuse`` does), and the number of such documents is logged.
    """
    result: Run = {}
    unmatched = 0
    for query_id, hits in reranked.items():
        if query_id not in first:
            raise PipelineError(f"interpolation: query {query_id!r} is re-ranked but not in the first-stage run")
        w = weight[query_id] if isinstance(weight, Mapping) else weight
        if not 0.0 <= w <= 1.0:
            raise ConfigError(f"interpolation weight must be in [0, 1], got {w} (query {query_id!r})")
        unmatched += len({h.doc_id for h in first[query_id]} ^ {h.doc_id for h in hits})
        result[query_id] = weighted_sum([first[query_id], hits], [w, 1 - w], query_id)
    if unmatched:
        log.info("interpolation: %d document(s) are in only one of the two runs; each scores 0 (after min-max) "
                 "in the run that lacks it", unmatched)
    return result


def tune_weight(first: Run, reranked: Run, qrels: Iterable[Qrel], metric: str = "AP",
                grid: Sequence[float] = DEFAULT_GRID) -> tuple[float, dict[float, float]]:
    """The weight of ``grid`` with the best mean ``metric`` (ir-measures name) over ``reranked``'s queries,
    and every weight's value. Ties go to the smaller weight (more of the re-ranker)."""
    import ir_measures

    measure = ir_measures.parse_measure(metric)
    judged = [q for q in qrels if q.query_id in reranked]
    if not judged:
        raise PipelineError("cannot tune the interpolation weight: no judged queries among the held-out ones")
    qrels_list = [ir_measures.Qrel(q.query_id, q.doc_id, q.relevance) for q in judged]
    values: dict[float, float] = {}
    for w in grid:
        run = interpolate(first, reranked, w)
        scored = [ir_measures.ScoredDoc(h.query_id, h.doc_id, h.score) for hits in run.values() for h in hits]
        values[w] = ir_measures.calc_aggregate([measure], qrels_list, scored)[measure]
    best = max(grid, key=lambda w: (values[w], -w))
    return best, values


def check_tunable(folds, qrels: Iterable[Qrel] | None = None) -> None:
    """A :class:`ConfigError` unless every fold has dev queries to tune its interpolation weight on (judged
    ones, when ``qrels`` are given)."""
    judged = None if qrels is None else {q.query_id for q in qrels}
    for fold in folds:
        if not fold.dev or (judged is not None and not judged.intersection(fold.dev)):
            raise ConfigError(f"--interpolate auto: fold {fold.name!r} has no judged dev queries to tune the "
                              f"interpolation weight on; give a fixed weight (--interpolate 0.5)")


def fold_weights(folds, reranker, dataset, first_stage: str, k: int, settings=None, metric: str = "AP"
                 ) -> dict[str, float]:
    """``query_id -> weight`` for every test query of ``folds``: each fold's weight is tuned on that fold's
    dev queries (re-ranked by the fold's own model), so no weight is chosen on the queries it scores."""
    check_tunable(folds)
    weights: dict[str, float] = {}
    for fold in folds:
        model = reranker.models[fold.test[0]] if hasattr(reranker, "models") else reranker
        dev_first = retrieve(dataset, first_stage, k, [dataset.queries[q] for q in fold.dev], settings)
        best, _ = tune_weight(dev_first, rerank(model, dataset, dev_first), dataset.qrels, metric)
        log.info("fold %s: interpolation weight %.2f (best dev %s over %d queries)", fold.name, best, metric,
                    len(fold.dev))
        weights.update({q: best for q in fold.test})
    return weights
