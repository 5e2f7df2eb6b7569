"""Trained models cached on disk: one checkpoint per (dataset, re-ranker, options, training queries, seed,
candidates). :func:`fold_models` loads the cached models of a protocol and trains the missing ones; it is
the one training path of ``python -m pipeline.train`` and of :func:`pipeline.engine.obtain.obtain_model`, through which
every command gets its model (:func:`obtain_reranker` and :func:`trained_reranker` remain for scripts).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from indexes import FirstStageSettings, first_stage_options
from indexes.options import changed_options
from rerankers import reranker_class

from .config import RunConfig
from .context import FirstStageContext
from ..core.home import model_root
from ..core.datasets import Dataset, load_dataset
from ..core.errors import ConfigError
from ..core.filenames import safe_name
from ..core.records import Run
from .fitting import train_fold
from .protocols import Fold, PerQueryReranker, make_protocol
from .resolve import candidate_depth, first_stage_name, model_options, run_split
from .stacking_rules import STACK

log = logging.getLogger("pipeline.engine.model_cache")


def model_dir() -> Path:
    """Where trained models are cached: ``PIPELINE_MODEL_DIR``, else ``<home>/models`` (:mod:`pipeline.core.home`)."""
    return model_root()


def checkpoint_path(dataset: Dataset, name: str, options: Mapping[str, Any], fold: Fold, seed: int,
                    first_stage: str, k: int) -> Path:
    """Cache key of one trained model: dataset, re-ranker, options, training/dev queries, seed, candidates."""
    key = json.dumps({"dataset": dataset.fingerprint, "reranker": name, "options": dict(sorted(options.items())),
                      "train": sorted(fold.train), "dev": sorted(fold.dev), "seed": seed,
                      "first_stage": first_stage, "k": k}, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return model_dir() / safe_name(dataset.name) / f"{safe_name(f'{name}-{fold.name}')}-seed{seed}-{digest}.pt"


def cached_checkpoint(path: str | Path) -> Path | None:
    """The saved model of the training that :func:`checkpoint_path` ``path`` names, or ``None``.

    That is ``path`` itself, else a checkpoint with the same digest saved under another test split's name:
    the digest covers everything the training depends on, and the split named in the file does not enter
    it when two test splits share their training and dev queries (WikiQA's ``test`` and ``test-filtered``),
    so a model trained for one is the model of the other, and is loaded instead of trained again.
    """
    path = Path(path)
    if path.is_file():
        return path
    digest = path.stem.rsplit("-", 1)[-1]
    same = sorted(path.parent.glob(f"*-{digest}.pt")) if path.parent.is_dir() else []
    return same[0] if same else None


@dataclass(frozen=True)
class TrainingPlan:
    """The models of one protocol: re-ranker ``reranker`` built with ``options``, one per fold, trained on
    ``first_stage``'s top ``k`` candidates (built with ``settings``) with ``seed``; ``retrain`` ignores
    cached models. Everything here but ``settings`` and ``retrain`` enters the models' cache keys."""

    reranker: str
    folds: Sequence[Fold]
    options: Mapping[str, Any]
    seed: int
    first_stage: str
    k: int
    settings: FirstStageSettings
    retrain: bool = False
    #: the re-ranker's class, looked up once by the run plan (``None``: looked up from ``reranker`` when needed)
    cls: type | None = field(default=None, compare=False, repr=False)


def training_plan(config: RunConfig, dataset: Dataset, split: str | None = None,
                  folds: Sequence[Fold] | None = None, options: Mapping[str, Any] | None = None,
                  first_stage: str | None = None, k: int | None = None, cls: type | None = None) -> TrainingPlan:
    """The :class:`TrainingPlan` of ``config`` on ``dataset``: the protocol for test split ``split`` (default:
    ``--split``, else the recipe's) unless ``folds`` are given, the checked model options, the first stage
    and the candidate depth (each settled here unless the caller, such as :func:`pipeline.engine.plan.plan_run`,
    already settled it, with the re-ranker's class ``cls``). Bad options are a :class:`ConfigError`; nothing is
    retrieved or trained."""
    if not config.reranking:
        raise ConfigError("--reranker: choose a re-ranker to train; 'none' has nothing to train")
    if options is None:
        cls = cls or reranker_class(config.reranker)
        options = model_options(config, dataset, cls)
    if folds is None:
        folds = make_protocol(dataset, split or run_split(config, dataset), config.seed, config.folds)
    return TrainingPlan(config.reranker, list(folds), options, config.seed,
                        first_stage or first_stage_name(config, dataset),
                        k if k is not None else candidate_depth(config, dataset), config.first_stage_settings(),
                        config.retrain, cls)


def candidates_key(plan: TrainingPlan) -> str:
    """The first stage as a model's cache key holds it: its name, and the options that differ from its
    defaults (``--fs-set``, ``--k1``, ...), since they change the candidates, hence the training examples.
    With every option at its default this is the name alone, so caches keyed before options existed stay valid."""
    if plan.first_stage.startswith("run:"):  # a run file: no options
        return plan.first_stage
    changed = changed_options(first_stage_options(plan.first_stage, plan.settings))
    return plan.first_stage if not changed else f"{plan.first_stage}:{json.dumps(changed, sort_keys=True, default=str)}"


@dataclass
class FoldModel:
    """One fold's model: where it is cached, the re-ranker (``None`` when a cached one was not loaded), the
    checkpoint it was loaded from when cached, and the report of its ``fit`` when trained now."""

    fold: Fold
    path: Path
    reranker: Any | None
    cached: Path | None = None
    report: Any = None


def training_candidates(plan: TrainingPlan, dataset: Dataset, context: FirstStageContext | None = None) -> Run:
    """The first stage's top ``plan.k`` for every training and dev query of the plan's folds, from the run's
    ``context`` (its first stage built once, each query retrieved once) or a new one."""
    context = context or FirstStageContext(dataset, plan.first_stage, plan.settings)
    wanted = sorted({q for fold in plan.folds for q in [*fold.train, *fold.dev]})
    return context.search([dataset.queries[q] for q in wanted], plan.k)


def fold_models(plan: TrainingPlan, dataset: Dataset, load_cached: bool = True,
                context: FirstStageContext | None = None) -> Iterator[FoldModel]:
    """Each fold's model, fold by fold: the cached checkpoint (loaded unless ``load_cached`` is false), else
    a model trained now on the plan's candidates (retrieved once, at the first fold that needs them, through
    the run's ``context`` when given) and saved where the cache will find it."""
    cls = plan.cls or reranker_class(plan.reranker)
    candidates: Run | None = None
    trained_on = candidates_key(plan)
    missing = [fold.name for fold in plan.folds
               if plan.retrain or cached_checkpoint(checkpoint_path(dataset, plan.reranker, plan.options, fold,
                                                                    plan.seed, trained_on, plan.k)) is None]
    if missing:
        log.info("%s: %d of %d folds to train (%s); each logs its examples per epoch and a time estimate after "
                 "its first batches", plan.reranker, len(missing), len(plan.folds), ", ".join(missing))
    for fold in plan.folds:
        path = checkpoint_path(dataset, plan.reranker, plan.options, fold, plan.seed, trained_on, plan.k)
        cached = None if plan.retrain else cached_checkpoint(path)
        if cached is not None:
            reranker = None
            if load_cached:
                reranker = cls.load(cached)
                log.info("loaded %s", cached)
            yield FoldModel(fold, path, reranker, cached=cached)
            continue
        if candidates is None:
            candidates = training_candidates(plan, dataset, context)
        log.info("training %s on %s (%d train, %d dev queries) -> %s", plan.reranker, fold.name,
                    len(fold.train), len(fold.dev), path)
        reranker, report = train_fold(plan.reranker, dataset, fold, candidates, plan.options, plan.seed, path,
                                      cls=cls)
        yield FoldModel(fold, path, reranker, report=report)


def transferred_model(config: RunConfig) -> FoldModel:
    """The model ``--train-dataset`` names: ``config.reranker`` with ``config``'s options, seed and depth trained
    on every judged query of ``config.train_dataset`` but a held-out share for early stopping (the one fold of
    ``--folds 1``, exactly what ``pipeline.train --dataset <it> --folds 1`` trains and caches), loaded from the
    model cache when there.

    Args:
        config: a run's config with ``train_dataset`` set.

    Returns:
        the fold's :class:`FoldModel` (its ``cached`` or ``path`` is the checkpoint to give as ``--model``).

    Example:
        >>> transferred_model(RunConfig(dataset="nfcorpus", reranker="bi-encoder", train_dataset="nfcorpus-dev",
        ...                             overrides=("amp=true",))).fold.name  # doctest: +SKIP
        'all'
    """
    source = load_dataset(config.train_dataset, config.mirror)
    training = replace(config, dataset=config.train_dataset, split=None, folds=1, train_dataset=None,
                       zero_shot_base=None, zero_shot_rule=STACK, interpolate=None)
    trained, = fold_models(training_plan(training, source), source)
    return trained


def trained_reranker(plan: TrainingPlan, dataset: Dataset, context: FirstStageContext | None = None):
    """The plan's re-ranker, cached models loaded and missing ones trained (candidates from the run's
    ``context`` when given): the model itself for one fold, else a :class:`PerQueryReranker` sending each test
    query to the model trained without it."""
    models = list(fold_models(plan, dataset, context=context))
    if len(models) == 1:
        return models[0].reranker
    return PerQueryReranker(plan.reranker, {q: model.reranker for model in models for q in model.fold.test})


def obtain_reranker(config: RunConfig | argparse.Namespace, dataset: Dataset, folds: Sequence[Fold] | None = None,
                    split: str | None = None):
    """A trained ``config.reranker`` for test split ``split`` (default ``--split``, else the dataset recipe's)
    of ``dataset``: cached checkpoints are loaded, missing ones trained (on the protocol's training queries,
    or ``folds``, with candidates from the same first stage and depth) and saved. Training options are the
    dataset recipe's, then ``--config``, then ``--set``. With several folds, returns a
    :class:`PerQueryReranker`. A parsed command line (``argparse.Namespace``) is accepted for one release."""
    if isinstance(config, str):
        raise TypeError("obtain_reranker(config, dataset, ...): the re-ranker's name is config.reranker "
                        "(the name-first form is gone)")
    if isinstance(config, argparse.Namespace):
        config = RunConfig.from_namespace(config)
    return trained_reranker(training_plan(config, dataset, split, folds), dataset)
