"""Every decision of a pipeline run, taken and checked before any work: :func:`plan_run` settles a
:class:`~pipeline.engine.config.RunConfig` against the loaded dataset (split, queries, protocol, depth, metrics,
interpolation, first stage, model options, run names) and raises a
:class:`~pipeline.core.errors.ConfigError` for a bad option before anything is retrieved or trained."""
from __future__ import annotations

import logging

from dataclasses import dataclass
from typing import Sequence

from indexes import FirstStageSettings
from rerankers import reranker_class

from .config import RunConfig
from ..core.datasets import Dataset, select_queries
from ..core.errors import ConfigError
from ..core.records import Query
from .fusion import check_tunable
from .model_cache import TrainingPlan, training_plan
from .naming import run_names
from .presets import resolve_auto
from .protocols import Fold, make_protocol
from .resolve import candidate_depth, check_scoring_arithmetic, first_stage_name, interpolation, metric_list, model_options, run_split

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """What one run does, every value settled (see :func:`plan_run`)."""

    config: RunConfig
    #: the re-ranker's class (``None``: no re-ranking, the first stage's run is the result)
    reranker_class: type | None
    #: the split whose queries are run (``None``: all of them)
    split: str | None
    #: the queries retrieved, re-ranked and evaluated: with a trained or tuned re-ranker, the protocol's test
    #: queries (a model only scores queries it was not trained on, and weights are tuned on dev queries only)
    queries: Sequence[Query]
    #: the protocol (``None`` when nothing is trained or tuned)
    folds: Sequence[Fold] | None
    #: candidates per query from the first stage
    k: int
    #: re-rank only each query's top ``depth`` candidates (0: all ``k``)
    depth: int
    #: ir-measures names, ``{k}`` replaced; the first is the main one
    metrics: str
    #: ``"auto"``, a fixed weight, or ``None`` (the re-ranker's own scores)
    interpolation: str | float | None
    #: the first stage's name (``auto`` settled) and its options
    first_stage: str
    settings: FirstStageSettings
    #: the models to load or train (``None`` without a re-ranker or with ``--model``)
    training: TrainingPlan | None
    #: the result run's name and, when interpolating, the re-ranker's own run's name
    name: str
    alone_name: str | None

    @property
    def main_metric(self) -> str:
        """The first metric: interpolation weights are tuned on it."""
        return self.metrics.split()[0]


#: first stages that rank the shipped candidates themselves, not an index built over the dataset's documents
FIXED_RANKINGS = ("shipped",)


def searches_a_pool(dataset: Dataset, first_stage: str) -> bool:
    """True (with a warning) when ``first_stage`` would index and search ``dataset``'s documents while they
    are only a pool of a larger collection (:attr:`~pipeline.core.datasets.Recipe.pooled`): its numbers are not
    the collection's."""
    pooled = dataset.recipe.pooled
    if not pooled or first_stage in FIXED_RANKINGS or ":" in first_stage:  # run:PATH, bm25:INDEX
        return False
    log.warning("%s holds %s: --first-stage %s searches that pool, not the collection, and its numbers are not "
                "comparable with %s over the full collection; the run is named '-pool'", dataset.name, pooled,
                first_stage, first_stage)
    return True


def plan_run(config: RunConfig, dataset: Dataset) -> RunPlan:
    """The :class:`RunPlan` of ``config`` on ``dataset``. Loads the re-ranker's class (not a model) and builds
    its configs to check the model options; reads no documents, retrieves and trains nothing. ``--reranker
    auto`` is settled here (:func:`pipeline.engine.presets.resolve_auto`): the plan's config names the chosen model."""
    config = resolve_auto(config, dataset)
    cls = reranker_class(config.reranker)
    check_scoring_arithmetic(config, cls)
    # also with --model: an unknown option is a mistake either way
    options = model_options(config, dataset, cls) if cls is not None else None
    split = run_split(config, dataset)
    k = candidate_depth(config, dataset)
    metrics = metric_list(config, dataset, k)
    weight = interpolation(config, dataset)
    if config.zero_shot_base and weight != "auto":
        raise ConfigError(f"--zero-shot-base needs the tuned combination (--interpolate auto); {dataset.name}'s "
                          f"recipe or the command gives --interpolate {weight if weight is not None else 'none'}")
    first_stage = first_stage_name(config, dataset)
    folds, training = None, None
    if cls is None or (config.model and weight != "auto"):
        # no training and no tuning: every query of the split (a given checkpoint never saw this collection)
        queries = select_queries(dataset, split)
    else:
        folds = make_protocol(dataset, split, config.seed, config.folds)
        tested = {q for fold in folds for q in fold.test}
        if not tested and config.folds == 1:
            raise ConfigError("--folds 1 trains one model on every judged query and re-ranks none (python -m "
                              "pipeline.train, then --model on another collection); a run needs --folds 2 or more, "
                              "so that each query is re-ranked by a model that never saw it")
        queries = [q for qid, q in dataset.queries.items() if qid in tested]
        if weight == "auto":
            check_tunable(folds, dataset.qrels)
        if not config.model:
            training = training_plan(config, dataset, split, folds, options, first_stage, k, cls)
    depth = 0 if config.rerank_depth >= k else config.rerank_depth
    pool = searches_a_pool(dataset, first_stage)
    # a dataset with splits run on all its queries says so: it is not the test split's run
    shown_split = split or ("all" if dataset.splits and not cls else None)
    name, alone = run_names(config, dataset.name, first_stage + ("-pool" if pool else ""), shown_split, weight,
                            depth)
    return RunPlan(config, cls, split, queries, folds, k, depth, metrics, weight, first_stage,
                   config.first_stage_settings(), training, name, alone)
