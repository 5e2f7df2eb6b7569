"""Interpolating a re-ranker's scores with the first stage's.

Neural re-rankers trained on little data often know *what* matters (soft matches, context) but not how
much exact-match evidence is worth; the first stage (QL, BM25) knows the latter. The usual remedy
(Birch, Yang et al. 2019; the BERT row of HCAN's Table 3 comes from it) is a per-query linear
interpolation of the two score lists after normalising each to [0, 1]::

    score(d) = w * minmax(first_stage)(d) + (1 - w) * minmax(reranker)(d)

``w = 0`` is the re-ranker alone and ``w = 1`` the first stage. :func:`tune_weight` picks ``w`` on held-out
queries (never the ones it is applied to). ``--interpolate auto`` uses :func:`choose_weight`, which keeps the
tuned weight only when tuning's gain over the first stage, cross-validated inside the tuning queries, clears
its own noise, moves only half-way from ``w = 1`` towards it when that gain is positive but unproven, and
otherwise falls back to ``w = 1`` (docs/recommendations.md).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from .context import FirstStageContext
from ..core.errors import ConfigError, PipelineError
from ..core.records import Qrel, Run, ScoredDoc, minmax, ranked
from .stages import rerank

log = logging.getLogger("pipeline.engine.fusion")

#: weights tried by :func:`tune_weight`: 0, 0.05, ..., 1
DEFAULT_GRID = tuple(round(i * 0.05, 2) for i in range(21))


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
    Where ``w = 1`` and the re-ranker scored no document the first run lacks, the query keeps the first run's
    ranking with its own scores: the same order as the formula's, but min-max rescaling could bring two scores
    within float32 precision of each other, and trec_eval reads scores as float32 and breaks ties by doc id
    (rescaled scores 2e-8 apart near 1 changed a DL21 query's nDCG@10 by .03 with the same ranking).
    """
    result: Run = {}
    unmatched = 0
    for query_id, hits in reranked.items():
        if query_id not in first:
            raise PipelineError(f"interpolation: query {query_id!r} is re-ranked but not in the first-stage run")
        w = weight[query_id] if isinstance(weight, Mapping) else weight
        if not 0.0 <= w <= 1.0:
            raise ConfigError(f"interpolation weight must be in [0, 1], got {w} (query {query_id!r})")
        first_docs, reranked_docs = {h.doc_id for h in first[query_id]}, {h.doc_id for h in hits}
        unmatched += len(first_docs ^ reranked_docs)
        if w == 1.0 and reranked_docs <= first_docs:
            result[query_id] = ranked(first[query_id])
        else:
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


#: one-sided level at which the held-out gain of tuning must beat the first stage for ``--interpolate auto``
#: to keep the re-ranker's weight (otherwise the first stage alone, ``w = 1``, is kept)
SAFE_LEVEL = 0.05
#: fewest judged tuning queries with which a tuned weight can be kept at all (fewer: the first stage)
MIN_TUNING_QUERIES = 5
#: fraction of the way from the first stage (w = 1) towards the tuned weight that a positive but not
#: significant held-out gain earns (:func:`decide_weight`; 0 would fall back to the first stage)
SHRINK = 0.5


def per_query_values(first: Run, reranked: Run, qrels: Iterable[Qrel], metric: str = "AP",
                     grid: Sequence[float] = DEFAULT_GRID) -> dict[float, dict[str, float]]:
    """``weight -> {query_id -> metric}`` of the interpolation at every weight of ``grid``, over the judged
    queries of ``reranked`` (a judged query the metric skips counts 0).

    Example:
        >>> values = per_query_values(first, reranked, dataset.qrels, "AP")
        >>> values[1.0]["q1"]  # the first stage's AP on q1
    """
    import ir_measures

    measure = ir_measures.parse_measure(metric)
    judged = [q for q in qrels if q.query_id in reranked]
    if not judged:
        raise PipelineError("cannot tune the interpolation weight: no judged queries among the held-out ones")
    queries = sorted({q.query_id for q in judged})
    qrels_list = [ir_measures.Qrel(q.query_id, q.doc_id, q.relevance) for q in judged]
    for query_id in queries:
        if query_id not in first:
            raise PipelineError(f"interpolation: query {query_id!r} is re-ranked but not in the first-stage run")
    # each query's two min-max normalisations once, the weighted sum of :func:`interpolate` per weight (the
    # order of the scored documents does not matter to the evaluation)
    normalised = {q: (minmax(first[q]), minmax(reranked[q])) for q in queries}
    values: dict[float, dict[str, float]] = {}
    for w in grid:
        scored = [ir_measures.ScoredDoc(q, doc_id, w * base.get(doc_id, 0.0) + (1 - w) * model.get(doc_id, 0.0))
                  for q, (base, model) in normalised.items() for doc_id in dict.fromkeys([*base, *model])]
        found = {m.query_id: m.value for m in ir_measures.iter_calc([measure], qrels_list, scored)}
        values[w] = {q: float(found.get(q, 0.0)) for q in queries}
    return values


def best_weight(values: Mapping[float, Mapping[str, float]], leave_out: str | None = None) -> float:
    """The weight with the best mean over the queries of ``values`` (:func:`per_query_values`), without
    query ``leave_out`` when given; ties go to the smaller weight, as in :func:`tune_weight`."""
    def mean(w: float) -> float:
        kept = [v for q, v in values[w].items() if q != leave_out]
        return sum(kept) / len(kept) if kept else 0.0

    return max(values, key=lambda w: (mean(w), -w))


def held_out_gains(values: Mapping[float, Mapping[str, float]]) -> dict[str, float]:
    """``query_id -> gain`` of the tuning itself, measured on queries it did not see: for each query, the
    weight is tuned on the other queries (leave-one-out) and the gain is that weight's metric on the query
    minus the first stage's (``w = 1``). Their mean estimates what tuning adds on new queries, overfitting
    included, which the best weight's own score on the queries it was chosen on overstates."""
    first_stage = values[1.0]
    sums = {w: sum(per_query.values()) for w, per_query in values.items()}
    count = len(first_stage)
    gains = {}
    for query_id in first_stage:
        if count < 2:
            gains[query_id] = 0.0
            continue
        # leave-one-out best weight from the sums, without re-evaluating (ties to the smaller weight)
        w = max(values, key=lambda g: ((sums[g] - values[g][query_id]) / (count - 1), -g))
        gains[query_id] = values[w][query_id] - first_stage[query_id]
    return gains


def one_sided_p(gains: Sequence[float]) -> float:
    """p-value of a one-sided one-sample t-test that the mean of ``gains`` is above 0 (1.0 for fewer than two
    gains or none above 0; 0.0 when every gain is the same positive number)."""
    from scipy import stats

    if len(gains) < 2 or max(gains) <= 0:
        return 1.0
    mean = sum(gains) / len(gains)
    if all(g == gains[0] for g in gains):
        return 0.0 if mean > 0 else 1.0
    return float(stats.ttest_1samp(list(gains), 0.0, alternative="greater").pvalue)


#: the verdicts of :class:`WeightChoice`
KEPT, SHRUNK, FIRST_STAGE = "kept", "shrunk", "first stage"


@dataclass(frozen=True)
class WeightChoice:
    """What :func:`choose_weight` decided for one fold, and why."""

    #: the weight applied: ``tuned`` when its gain is proven, part of the way towards it from 1.0 when the
    #: gain is positive but unproven, else 1.0 (the first stage alone)
    weight: float
    #: the weight with the best mean metric over all tuning queries (what plain tuning would apply)
    tuned: float
    #: judged tuning queries
    queries: int
    #: mean held-out (leave-one-out) gain of tuning over the first stage, in the metric's units
    held_out_gain: float
    #: one-sided p-value of that gain (paired t-test over the tuning queries)
    p_value: float
    #: :data:`KEPT` (the gain is significant), :data:`SHRUNK` (positive, not significant) or
    #: :data:`FIRST_STAGE` (no positive gain, too few tuning queries, or a shrunk weight that rounds to 1)
    verdict: str = FIRST_STAGE
    #: the one-sided level the gain was tested at
    level: float = SAFE_LEVEL

    @property
    def kept(self) -> bool:
        """Whether the tuned weight was kept (its gain cleared its noise)."""
        return self.verdict == KEPT

    def describe(self) -> str:
        """One line for the log: the weight, whether it was kept, shrunk or fell back, and why.

        Example:
            >>> WeightChoice(0.8, 0.6, 40, 0.02, 0.16, SHRUNK).describe()
            'shrunk to 0.80 (half-way from the first stage to the tuned 0.60): held-out gain +0.0200 over 40 tuning queries, one-sided p = 0.16 >= 0.05 (positive, not significant)'
        """
        evidence = (f"held-out gain {self.held_out_gain:+.4f} over {self.queries} tuning queries, one-sided "
                    f"p = {self.p_value:.3g}")
        if self.verdict == KEPT:
            return f"kept {self.tuned:.2f}: {evidence} < {self.level:g} (significant)"
        if self.verdict == SHRUNK:
            share = "half-way" if SHRINK == 0.5 else f"{SHRINK:g} of the way"
            return (f"shrunk to {self.weight:.2f} ({share} from the first stage to the tuned {self.tuned:.2f}): "
                    f"{evidence} >= {self.level:g} (positive, not significant)")
        why = (f"fewer than {MIN_TUNING_QUERIES} tuning queries" if self.queries < MIN_TUNING_QUERIES else
               "no positive held-out gain" if self.held_out_gain <= 0 else
               f"gain not significant, p >= {self.level:g}" if SHRINK == 0 else
               f"gain not significant, and {SHRINK:g} of the way to it rounds to 1 on the grid")
        return f"first stage alone (tuned {self.tuned:.2f} not kept: {why}): {evidence}"


def choose_weight(first: Run, reranked: Run, qrels: Iterable[Qrel], metric: str = "AP",
                  grid: Sequence[float] = DEFAULT_GRID, level: float = SAFE_LEVEL) -> WeightChoice:
    """The safe interpolation weight (``--interpolate auto``) over ``reranked``'s judged queries.

    Plain tuning (:func:`tune_weight`) picks the weight with the best mean on the tuning queries; with a few
    dozen of them it also fits their noise and can end below the first stage on new queries. Here the
    tuning itself is cross-validated inside the tuning queries (:func:`held_out_gains`, leave-one-out), and
    :func:`decide_weight` turns that evidence into the weight: the tuned weight when the held-out gain over the
    first stage is positive and significant (one-sided paired t-test, p < ``level``, over at least
    :data:`MIN_TUNING_QUERIES` queries); :data:`SHRINK` (half) of the way from 1.0 towards it when the gain is
    positive but not significant; 1.0, the first stage's ranking, when there is no positive held-out gain.

    Why shrink rather than fall back (the rule until 2026-11-26): a positive leave-one-out gain already has
    tuning's overfitting taken out, only it is not proven; falling back discarded it, and with it real gains
    where the tuning set is small (DL20 DRMM, 14 dev queries; WikiQA Bi-Match-SRNN, p .23 / .16 on 126).
    Half the step is the midpoint between betting all of the unproven gain (plain tuning) and none, fixed, not
    fitted. Replayed on the recorded measurements (``benchmarks/safe_rule_replay.py``: DL19/20/21 DRMM, WikiQA
    Bi-Match-SRNN, Vaswani and NFCorpus KNRM, 3 seeds each) the seeds significantly above / below the first
    stage are 3 / 0 with this rule against 0 / 0 falling back, 4 / 0 with plain tuning, 3 / 0 keeping any
    positive gain whole, 2 / 0 at p < .20, 0 / 0 at p < .10 or shrinking by max(0, 1 - 1/t^2); the rows
    whose every fold had a significant gain (every bi-encoder row) are unchanged. The price: a re-ranker that
    is pure noise gets, where its held-out gain comes out positive by chance, up to half the share plain tuning
    would give it, never the full share.

    Example:
        >>> choice = choose_weight(dev_first, dev_reranked, dataset.qrels, "AP")
        >>> interpolate(test_first, test_reranked, choice.weight)
    """
    values = per_query_values(first, reranked, qrels, metric, grid)
    if 1.0 not in values:
        raise PipelineError("the interpolation grid must hold 1.0 (the first stage alone) to fall back to it")
    tuned = best_weight(values)
    gains = held_out_gains(values)
    mean = sum(gains.values()) / len(gains)
    p = one_sided_p(list(gains.values()))
    return decide_weight(tuned, len(gains), mean, p, grid, level)


def shrink_towards_first_stage(tuned: float, factor: float, grid: Sequence[float] = DEFAULT_GRID) -> float:
    """The weight ``factor`` of the way from the first stage (1.0) towards ``tuned``, on ``grid``: a point off
    the grid goes to the grid weight next to it on the first stage's side, so the weight is never further from
    1 than ``factor`` says (``factor`` 1: ``tuned``; 0: 1.0).

    Example:
        >>> shrink_towards_first_stage(0.4, 0.5)
        0.7
    """
    target = 1.0 - max(0.0, min(1.0, factor)) * (1.0 - tuned)
    return min(w for w in (*grid, 1.0) if w >= target - 1e-9)


def decide_weight(tuned: float, queries: int, held_out_gain: float, p_value: float,
                  grid: Sequence[float] = DEFAULT_GRID, level: float = SAFE_LEVEL) -> WeightChoice:
    """The weight :func:`choose_weight` applies, from tuning's evidence alone (``benchmarks/safe_rule_replay.py``
    replays recorded measurements with it).

    Args:
        tuned: the weight with the best mean over the tuning queries.
        queries: judged tuning queries.
        held_out_gain: mean leave-one-out gain of tuning over the first stage.
        p_value: its one-sided p-value.
        grid: the weights tried (must hold 1.0).
        level: the one-sided level the gain must clear to keep ``tuned``.

    Returns:
        The choice, saying whether ``tuned`` was kept, shrunk towards the first stage, or the first stage taken.

    Example:
        >>> decide_weight(0.4, 30, 0.02, 0.01).weight  # significant: kept
        0.4
        >>> decide_weight(0.4, 30, 0.02, 0.2).weight  # positive, not significant: half-way from 1
        0.7
        >>> decide_weight(0.4, 30, -0.01, 0.8).weight  # no gain: the first stage
        1.0
    """
    if queries < MIN_TUNING_QUERIES or held_out_gain <= 0:
        return WeightChoice(1.0, tuned, queries, held_out_gain, p_value, FIRST_STAGE, level)
    if p_value < level:
        return WeightChoice(tuned, tuned, queries, held_out_gain, p_value, KEPT, level)
    weight = shrink_towards_first_stage(tuned, SHRINK, grid)
    return WeightChoice(weight, tuned, queries, held_out_gain, p_value, SHRUNK if weight < 1.0 else FIRST_STAGE,
                        level)


def tuning_queries(fold, given_model: bool = False) -> list[str]:
    """The queries a fold's weight is tuned on: its dev queries, or with a given checkpoint (``--model``, a
    model that saw none of this collection's queries) every query that is not the fold's test query."""
    return [*fold.train, *fold.dev] if given_model else list(fold.dev)


def fold_choices(folds, reranker, dataset, first_stage: str, k: int, settings=None, metric: str = "AP",
                 given_model: bool = False, level: float = SAFE_LEVEL, context=None) -> dict[str, WeightChoice]:
    """``fold name -> WeightChoice`` (:func:`choose_weight`) for every fold, each tuned on that fold's
    :func:`tuning_queries` re-ranked by the fold's own model, so no weight is chosen on the queries it scores.
    The tuning queries' candidates come from the run's ``context`` (:class:`pipeline.engine.context.FirstStageContext`:
    the first stage built once, each query retrieved once) or a new one."""
    check_tunable(folds)
    context = context or FirstStageContext(dataset, first_stage, settings)
    choices: dict[str, WeightChoice] = {}
    for fold in folds:
        model = reranker.models[fold.test[0]] if hasattr(reranker, "models") else reranker
        tuning = tuning_queries(fold, given_model)
        tuning_first = context.search([dataset.queries[q] for q in tuning], k)
        choice = choose_weight(tuning_first, rerank(model, dataset, tuning_first), dataset.qrels, metric,
                               level=level)
        log.info("fold %s: interpolation weight %.2f (%s, %s)", fold.name, choice.weight, metric, choice.describe())
        choices[fold.name] = choice
    return choices


def fold_weights(folds, reranker, dataset, first_stage: str, k: int, settings=None, metric: str = "AP",
                 given_model: bool = False, context=None) -> dict[str, float]:
    """``query_id -> weight`` for every test query of ``folds``: each fold's safe weight
    (:func:`fold_choices`), 1.0 (the first stage) where tuning did not prove a gain."""
    choices = fold_choices(folds, reranker, dataset, first_stage, k, settings, metric, given_model, context=context)
    return {q: choices[fold.name].weight for fold in folds for q in fold.test}
