"""Trained models cached on disk: one checkpoint per (dataset, re-ranker, options, training queries, seed,
candidates); :func:`obtain_reranker` loads the cached ones and trains the missing ones."""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from indexes import make_first_stage, resolve_first_stage
from rerankers import reranker_class
from rerankers.training.data import RankingData

from .core.datasets import Dataset
from .core.options import parse_overrides
from .core.records import Run
from .protocols import Fold, PerQueryReranker, make_protocol

log = logging.getLogger("pipeline.model_cache")
DEFAULT_MODEL_DIR = Path("models")


def model_dir() -> Path:
    """Where trained models are cached: ``PIPELINE_MODEL_DIR`` or ``models/``."""
    return Path(os.environ.get("PIPELINE_MODEL_DIR", DEFAULT_MODEL_DIR))


def checkpoint_path(dataset: Dataset, name: str, options: Mapping[str, Any], fold: Fold, seed: int,
                    first_stage: str, k: int) -> Path:
    """Cache key of one trained model: dataset, re-ranker, options, training/dev queries, seed, candidates."""
    key = json.dumps({"dataset": dataset.fingerprint, "reranker": name, "options": dict(sorted(options.items())),
                      "train": sorted(fold.train), "dev": sorted(fold.dev), "seed": seed,
                      "first_stage": first_stage, "k": k}, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in dataset.name)
    return model_dir() / safe / f"{name}-{fold.name}-seed{seed}-{digest}.pt"


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


def train_fold(name: str, dataset: Dataset, fold: Fold, candidates: Run, options: Mapping[str, Any], seed: int,
               path: Path | None = None):
    """Build, prepare and train re-ranker ``name`` on one fold; save it to ``path`` when given."""
    cls = reranker_class(name)
    reranker = cls.from_options(options, seed=seed)
    train = RankingData.from_dataset(dataset, fold.train, candidates)
    dev = RankingData.from_dataset(dataset, fold.dev, candidates) if fold.dev else None
    reranker.prepare(train, dataset)
    # the training state sits beside the checkpoint, so a killed training resumes from its last epoch
    report = reranker.fit(train, dev, state_path=training_state_path(path) if path is not None else None)
    if path is not None:
        reranker.save(path)
    return reranker, report


def training_state_path(path: str | Path) -> Path:
    """Where the training of checkpoint ``path`` keeps its per-epoch state (see :meth:`Trainer.fit`)."""
    path = Path(path)
    return path.with_name(path.name + ".training-state")


def obtain_reranker(name: str, dataset: Dataset, args, folds: Sequence[Fold] | None = None, settings=None,
                    split: str | None = None):
    """A trained re-ranker for test split ``split`` (default ``args.split``, else the dataset recipe's) of
    ``dataset``: cached checkpoints are loaded, missing ones trained (on the protocol's training queries,
    with candidates from the same first stage and depth ``args.k``) and saved. Training options are the
    dataset recipe's, then ``--config``, then ``--set``. With several folds, returns a
    :class:`PerQueryReranker`."""
    options = {**dataset.recipe.train,
               **parse_overrides(getattr(args, "set", None), getattr(args, "config", None))}
    split = split or getattr(args, "split", None) or dataset.recipe.split
    if folds is None:
        folds = make_protocol(dataset, split, args.seed, getattr(args, "folds", 5))
    first_stage = resolve_first_stage(args.first_stage, dataset)
    candidates: Run | None = None
    cls = reranker_class(name)
    models: dict[str, Any] = {}
    for fold in folds:
        path = checkpoint_path(dataset, name, options, fold, args.seed, first_stage, args.k)
        cached = None if getattr(args, "retrain", False) else cached_checkpoint(path)
        if cached is not None:
            reranker = cls.load(cached)
            log.warning("loaded %s", cached)
        else:
            if candidates is None:
                retriever = make_first_stage(first_stage, dataset, settings)
                wanted = sorted({q for f in folds for q in f.train + f.dev})
                candidates = retriever.search([dataset.queries[q] for q in wanted], args.k)
            log.warning("training %s on %s (%d train, %d dev queries) -> %s", name, fold.name, len(fold.train),
                        len(fold.dev), path)
            reranker, _ = train_fold(name, dataset, fold, candidates, options, args.seed, path)
        if len(folds) == 1:
            return reranker
        models.update({q: reranker for q in fold.test})
    return PerQueryReranker(name, models)
