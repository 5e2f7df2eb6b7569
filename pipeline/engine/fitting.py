"""Training one re-ranker on one fold of a protocol: a new, untrained model built from its options, prepared
on the dataset, fitted on the fold's training queries (early stopping on its dev queries) and saved."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from infra import distributed
from rerankers import reranker_class
from rerankers.training.data import RankingData

from ..core.datasets import Dataset
from ..core.errors import ConfigError
from ..core.records import Run
from .protocols import Fold


def untrained_reranker(cls: type, options: Mapping[str, Any], seed: int):
    """A new instance of re-ranker class ``cls`` with ``options`` (``--set``/``--config``/recipe options)
    applied: ``cls.from_options(options, seed=seed)`` when the class has it (every built-in re-ranker;
    unknown or bad options are a :class:`ConfigError`), else ``cls()``, which takes no options."""
    if hasattr(cls, "from_options"):
        return cls.from_options(options, seed=seed)
    if options:
        raise ConfigError(f"re-ranker {getattr(cls, 'name', cls.__name__)!r} takes no options (its class has no "
                          f"from_options), got {', '.join(sorted(options))}")
    return cls()


def training_state_path(path: str | Path) -> Path:
    """Where the training of checkpoint ``path`` keeps its per-epoch state
    (see :meth:`~rerankers.training.loop.Trainer.fit`)."""
    path = Path(path)
    return path.with_name(path.name + ".training-state")


def train_fold(name: str, dataset: Dataset, fold: Fold, candidates: Run, options: Mapping[str, Any], seed: int,
               path: Path | None = None, cls: type | None = None):
    """Build, prepare and train re-ranker ``name`` (class ``cls`` when the caller looked it up already) on one
    fold (candidates: a first-stage run holding the fold's training and dev queries); save it to ``path`` when
    given. Returns ``(reranker, report)``, the report being what the re-ranker's ``fit`` returned."""
    reranker = untrained_reranker(cls or reranker_class(name), options, seed)
    train = RankingData.from_dataset(dataset, fold.train, candidates)
    dev = RankingData.from_dataset(dataset, fold.dev, candidates) if fold.dev else None
    if hasattr(reranker, "prepare"):  # vocabulary, embeddings, a fresh module; optional for a plugin
        reranker.prepare(train, dataset)
    # the training state sits beside the checkpoint, so a killed training resumes from its last epoch
    report = reranker.fit(train, dev, state_path=training_state_path(path) if path is not None else None)
    if path is not None and distributed.is_main():  # under torchrun every rank holds the same weights
        reranker.save(path)
    distributed.barrier()
    return reranker, report
