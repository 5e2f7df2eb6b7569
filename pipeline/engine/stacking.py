"""``--zero-shot-base``: a trained re-ranker combined on top of the zero-shot combination, not of the first stage.

The zero-shot bi-encoder (a sentence encoder that saw none of the collection) combined with the first stage
is the strongest pipeline measured on most collections, and a trained model combined with the first stage
alone rarely beats it (BENCHMARKS.md, "Trained pipelines against the zero-shot combination"). Stacking the
two keeps both: per fold of the protocol,

1. the zero-shot model is combined with the first stage, its weight chosen by the safe rule
   (:func:`~pipeline.engine.fusion.choose_weight`) on the fold's training and dev queries: the zero-shot model
   never saw them, so every query but the fold's test queries may tune it (what ``--model`` does);
2. the trained re-ranker is combined with that two-way ranking, standing where the first stage stood, its
   weight chosen by the safe rule on the fold's dev queries (the model was trained on the others): it enters
   only when its held-out gain over the two-way ranking is proven, else the two-way ranking stays.

On Microblog 2014 (QL top 1000, the cross-encoder trained on 2011-2013) this took AP from the zero-shot
combination's .4435 to .4803, significant in each of 3 seeds
(``benchmarks/results/microblog/2014-three-way-bi-encoder-cross-encoder.json``). The zero-shot model scores
each query once, whatever the number of folds.

``--zero-shot-rule fallback`` (:data:`FALLBACK`) is the other way to keep both, for a re-ranker that refines the
zero-shot model itself (the bi-encoder fine-tuned from it): step 2 combines the trained re-ranker with the
*first stage*, as a plain ``--interpolate auto`` run would, and takes that combination only when its gain over
the first stage is proven on the dev queries (:data:`~pipeline.engine.fusion.KEPT`); otherwise the fold keeps
the zero-shot combination of step 1, not the first stage and not a shrunk weight. Why: the trained model's
weight can be tuned on the few dev queries only (it was trained on the rest), the zero-shot model's on every
non-test query, so where the dev queries are too few to prove the trained combination, the zero-shot
combination is the better proven ranking to fall back to. A fine-tuned model is close to the zero-shot one,
so stacking it on top of it rarely proves an added gain (on Cranfield it entered 1 of 5 folds), while its own
combination can be proven against the first stage.

``--zero-shot-rule anchor`` (:data:`ANCHOR`) is the third, also for the bi-encoder fine-tuned from the zero-shot
model: step 2 combines the fine-tuned model with the first stage at step 1's weight, the zero-shot model's, and
tunes nothing of its own. Why: the fine-tuned model refines the zero-shot one (same encoder, same score scale
after the per-query min-max of :func:`~pipeline.engine.fusion.interpolate`), and training already chose it on the
dev queries against its starting weights (``dev_at_start``: where no epoch beat the checkpoint on dev, the
checkpoint is kept and the fold's ranking is the zero-shot combination itself). So the one number still to choose,
the first stage's share, is best chosen where the evidence is largest: on every non-test query with the
checkpoint, not on the few dev queries with the fine-tuned model (27 on a Cranfield fold against 180; 16 on DL19
against 107), where the safe rule shrinks the share towards the first stage for want of proof. Replayed on the
recorded measurements (``benchmarks/anchor_rule_replay.py``, docs/bi-encoder-fine-tuning.md) the fine-tuned
bi-encoder combined this way is above the zero-shot combination on Cranfield in each of 3 seeds (AP .3428 vs .3349,
p .0007 / .03 / .01), level with it on Vaswani, NFCorpus, DL19 and DL20 (above in one DL21 seed), never below it
or the first stage.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from ..core.datasets import Dataset
from ..core.records import Run
from .context import FirstStageContext
from .fusion import KEPT, WeightChoice, check_tunable, choose_weight, interpolate, tuning_queries
from .stacking_rules import ANCHOR, FALLBACK, RULES, STACK
from .stages import rerank

log = logging.getLogger("pipeline.engine.stacking")

__all__ = ["ANCHOR", "FALLBACK", "RULES", "STACK", "StackedRuns", "stack_on_zero_shot"]


@dataclass
class StackedRuns:
    """What :func:`stack_on_zero_shot` produced for the test queries of every fold."""

    #: first stage + zero-shot model (step 1)
    zero_shot_combined: Run
    #: that ranking + the trained re-ranker (step 2): the run's result
    final: Run
    #: fold name -> ``(step 1's choice, step 2's choice)``; under :data:`FALLBACK` step 2's weight is the first
    #: stage's in the trained model's combination, applied only when its verdict is ``KEPT``; under :data:`ANCHOR`
    #: step 2's choice is step 1's
    choices: dict[str, tuple[WeightChoice, WeightChoice]]
    #: :data:`STACK`, :data:`FALLBACK` or :data:`ANCHOR`
    rule: str = STACK


def stack_on_zero_shot(folds: Sequence, zero_shot, reranker, dataset: Dataset, context: FirstStageContext,
                       depth: int, top: Run, reranked: Run, metric: str, given_model: bool = False,
                       zero_scores: Run | None = None, rule: str = STACK) -> StackedRuns:
    """The stacked combination of the module docstring over ``folds``.

    Args:
        folds: the run plan's folds (each with train, dev and test query ids).
        zero_shot: the zero-shot re-ranker (e.g. the bi-encoder with ``all-MiniLM-L6-v2``).
        reranker: the trained re-ranker: one model, or a per-query one holding each fold's (``.models``).
        dataset: the dataset (queries, qrels, documents).
        context: the run's first stage; the tuning queries' candidates come from it.
        depth: candidates per query that are re-ranked (the plan's ``depth or k``).
        top: the test queries' candidates, as re-ranked.
        reranked: ``reranker``'s scores of ``top``.
        metric: the main metric the weights are chosen by.
        given_model: ``reranker`` is a given checkpoint that saw none of the collection: step 2 tunes on
            the fold's training queries too.
        zero_scores: the zero-shot model's scores of every test and tuning query's candidates, when the
            caller has them (a benchmark's score cache); ``None``: ``zero_shot`` scores them here.
        rule: :data:`STACK` (step 2 on top of the zero-shot combination), :data:`FALLBACK` (step 2 on top of
            the first stage, the zero-shot combination where that is not proven) or :data:`ANCHOR` (step 2 on top
            of the first stage at step 1's weight); see the module docstring.

    Returns:
        a :class:`StackedRuns` over the test queries of ``folds``.

    Example:
        >>> stacked = stack_on_zero_shot(plan.folds, bi_encoder, cross_encoder, dataset, context, 1000,
        ...                              top, reranked, "AP")  # doctest: +SKIP
    """
    if rule not in RULES:
        raise ValueError(f"unknown stacking rule {rule!r}: expected one of {', '.join(RULES)}")
    check_tunable(folds)
    tuning = {fold.name: tuning_queries(fold, given_model=True) for fold in folds}
    needed = sorted({q for fold in folds for q in tuning[fold.name]} - set(top))
    candidates = {**context.search([dataset.queries[q] for q in needed], depth), **top} if needed else dict(top)
    if zero_scores is None:
        zero_scores = rerank(zero_shot, dataset, candidates)  # every query once, whatever the number of folds
    zero_combined: Run = {}
    final: Run = {}
    choices: dict[str, tuple[WeightChoice, WeightChoice]] = {}
    for fold in folds:
        queries = tuning[fold.name]
        base = choose_weight({q: candidates[q] for q in queries}, {q: zero_scores[q] for q in queries},
                             dataset.qrels, metric)
        tested = [q for q in fold.test if q in top]
        two_way = interpolate({q: top[q] for q in tested}, {q: zero_scores[q] for q in tested}, base.weight)
        zero_combined.update(two_way)
        if rule == ANCHOR:  # nothing to tune: the trained model takes the zero-shot model's share
            stacked = base
            final.update(interpolate({q: top[q] for q in tested}, {q: reranked[q] for q in tested}, base.weight))
            choices[fold.name] = (base, stacked)
            log.info("fold %s: zero-shot model %.2f (%s); trained re-ranker with the first stage at that weight",
                     fold.name, base.weight, base.describe())
            continue
        model = reranker.models[fold.test[0]] if hasattr(reranker, "models") else reranker
        seed_queries = tuning_queries(fold, given_model)
        seed_first = {q: candidates[q] for q in seed_queries}
        seeded = rerank(model, dataset, seed_first)
        if rule == STACK:
            two_way_tuning = interpolate(seed_first, {q: zero_scores[q] for q in seed_queries}, base.weight)
            stacked = choose_weight(two_way_tuning, seeded, dataset.qrels, metric)
            # weight 1 (the trained model did not prove a gain) keeps the two-way ranking as it is
            final.update(interpolate(two_way, {q: reranked[q] for q in tested}, stacked.weight))
            where = "on top"
        else:
            stacked = choose_weight(seed_first, seeded, dataset.qrels, metric)
            final.update(interpolate({q: top[q] for q in tested}, {q: reranked[q] for q in tested}, stacked.weight)
                         if stacked.verdict == KEPT else two_way)
            where = "with the first stage" if stacked.verdict == KEPT else "unproven, zero-shot combination kept"
        choices[fold.name] = (base, stacked)
        log.info("fold %s: zero-shot model %.2f (%s); trained re-ranker %s %.2f (%s)", fold.name,
                 base.weight, base.describe(), where, stacked.weight, stacked.describe())
    return StackedRuns(zero_combined, final, choices, rule)
