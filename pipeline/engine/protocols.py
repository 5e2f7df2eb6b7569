"""Evaluation protocols: which queries train, validate and test each model (a dataset's own splits, a named
protocol such as Microblog's leave-one-year-out, or k folds by query), and :class:`PerQueryReranker`, which
sends each test query to the model trained without it."""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..core.datasets import Dataset
from ..core.errors import ConfigError, PipelineError
from ..core.records import Doc, Query

log = logging.getLogger(__name__)


@dataclass
class Fold:
    """Which queries train, validate (early stopping) and get re-ranked by one model."""

    name: str
    train: list[str]
    dev: list[str]
    test: list[str]


def hold_out(query_ids: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Split ``query_ids`` into (kept, held out), reproducibly for a seed.

    Args:
        query_ids: the queries.
        fraction: the share held out (at least one query when there are two or more).
        seed: the shuffle's seed.

    Returns:
        ``(kept, held_out)``, each sorted.

    Example:
        >>> hold_out(["q1", "q2", "q3", "q4"], 0.25, seed=1)
        (['q1', 'q2', 'q3'], ['q4'])
    """
    ordered = sorted(query_ids)
    random.Random(seed).shuffle(ordered)
    count = max(1, round(len(ordered) * fraction)) if len(ordered) > 1 else 0
    return sorted(ordered[count:]), sorted(ordered[:count])


#: the name of the one fold of ``--folds 1``: every query trains (or validates) one model, none is tested
ALL_QUERIES = "all"


def kfold(query_ids: Sequence[str], k: int, seed: int, dev_fraction: float = 0.15) -> list[Fold]:
    """``k`` folds by query; each fold's model trains on the other folds minus ``dev_fraction`` held out.

    ``k = 1`` is one model trained on every query but the ``dev_fraction`` held out for early stopping, testing
    none (the fold :data:`ALL_QUERIES`): what ``pipeline.train --folds 1`` trains for ``--model`` on another
    collection, e.g. NFCorpus's dev queries for its test queries (docs/bi-encoder-fine-tuning.md).

    Args:
        query_ids: the queries.
        k: the number of folds (at least 1, at most the number of queries).
        seed: the shuffle's seed.
        dev_fraction: the share of each fold's training queries held out for early stopping.

    Returns:
        The folds, ``fold1ofK`` .. ``foldKofK``; every query is tested in exactly one (``k = 1``: the one fold
        :data:`ALL_QUERIES`, testing none).

    Raises:
        ConfigError: ``k`` < 1 or fewer queries than folds.

    Example:
        >>> [(f.name, len(f.train), len(f.dev), len(f.test)) for f in kfold([f"q{i}" for i in range(20)], 1, seed=1)]
        [('all', 17, 3, 0)]
    """
    if k < 1 or len(query_ids) < k:
        raise ConfigError(f"--folds: k-fold needs k >= 1 and at least k queries (k={k}, {len(query_ids)} queries)")
    if k == 1:
        train, dev = hold_out(query_ids, dev_fraction, seed)
        return [Fold(ALL_QUERIES, train, dev, [])]
    ordered = sorted(query_ids)
    random.Random(seed).shuffle(ordered)
    folds = []
    for index in range(k):
        test = sorted(ordered[index::k])
        rest = [q for q in ordered if q not in set(test)]
        train, dev = hold_out(rest, dev_fraction, seed + index)
        folds.append(Fold(f"fold{index + 1}of{k}", train, dev, test))
    return folds


def make_protocol(dataset: Dataset, test_split: str | None, seed: int, folds: int = 5,
                  dev_fraction: float = 0.15) -> list[Fold]:
    """The folds of :func:`split_protocol`, with topics that have no judgment left out of training and of
    the dev queries (they teach nothing and would drag early stopping and the tuned combination weight
    towards 0); they stay test queries. How many were left out is logged.

    Args:
        dataset: the dataset.
        test_split: the split re-ranked (``None``: all queries).
        seed: the seed of the splits.
        folds: k of k-fold cross-validation (datasets without splits).
        dev_fraction: the share of training queries held out for early stopping.

    Returns:
        The folds.

    Raises:
        ConfigError: ``test_split`` is not one of the dataset's splits, or too few queries for the folds.
    """
    protocol = split_protocol(dataset, test_split, seed, folds, dev_fraction)
    judged = {qrel.query_id for qrel in dataset.qrels}
    if not judged:
        return protocol
    left_out = {q for fold in protocol for q in (*fold.train, *fold.dev) if q not in judged}
    if left_out:
        log.info("%d of %d topics of %s have no judgments: left out of training and of the dev queries (%s)",
                 len(left_out), len(dataset.queries), dataset.name, ", ".join(sorted(left_out)[:10])
                 + (" ..." if len(left_out) > 10 else ""))
    return [Fold(fold.name, [q for q in fold.train if q in judged], [q for q in fold.dev if q in judged], fold.test)
            for fold in protocol]


def split_protocol(dataset: Dataset, test_split: str | None, seed: int, folds: int = 5,
                   dev_fraction: float = 0.15) -> list[Fold]:
    """The folds for ``dataset`` when re-ranking ``test_split`` (``None``: all queries).

    * a dataset with a ``train`` split: train on it; validate on ``dev`` (or the ``*-dev`` split matching
      ``raw-``/``clean-`` test splits), else on ``dev_fraction`` of train; test on ``test_split``
      (default ``test``);
    * a dataset whose splits are peers (Microblog years): test on ``test_split``, train on the other
      splits with ``dev_fraction`` of their queries held out for validation (HCAN's protocol);
    * no splits (Cranfield, Vaswani, NFCorpus): ``folds``-fold cross-validation by query.

    Args:
        dataset: the dataset.
        test_split: the split re-ranked (``None``: all queries).
        seed: the seed of the splits.
        folds: k of k-fold cross-validation.
        dev_fraction: the share of training queries held out for early stopping.

    Returns:
        The folds.

    Raises:
        ConfigError: ``test_split`` is not one of the dataset's splits, or too few queries for the folds.
    """
    splits = dataset.splits
    if "train" in splits:
        test_name = test_split or ("test" if "test" in splits else None)
        if test_name is None or test_name not in splits:
            raise ConfigError(f"--split: dataset {dataset.name!r}: choose a test split ({', '.join(splits)})")
        if test_name == "train":
            raise ConfigError("--split train: cannot test on the training split")
        prefix = test_name.split("-")[0] + "-" if "-" in test_name else ""
        # never the test split itself: the dev queries choose epochs and interpolation weights
        dev_name = next((n for n in (f"{prefix}dev", "dev") if n in splits and n != test_name), None)
        if dev_name:
            train, dev = splits["train"], splits[dev_name]
        else:
            train, dev = hold_out(splits["train"], dev_fraction, seed)
        return [Fold(test_name, list(train), list(dev), list(splits[test_name]))]
    if splits and test_split:
        if test_split not in splits:
            raise ConfigError(f"--split: dataset {dataset.name!r} has no split {test_split!r} ({', '.join(splits)})")
        rest = [q for name, qids in splits.items() if name != test_split for q in qids]
        if not rest:
            return kfold(splits[test_split], folds, seed, dev_fraction)
        train, dev = hold_out(rest, dev_fraction, seed)
        return [Fold(test_split, train, dev, list(splits[test_split]))]
    query_ids = list(dataset.queries) if not test_split else dataset.splits.get(test_split, [])
    return kfold(query_ids, folds, seed, dev_fraction)


class PerQueryReranker:
    """Dispatches each query to the model trained without it (k-fold): ``score`` looks up the query id.

    Args:
        name: the re-ranker's name.
        models: query id -> the model that did not see that query.
    """

    def __init__(self, name: str, models: Mapping[str, Any]):
        self.name = name
        self.models = dict(models)

    def _model(self, query: Query):
        if query.query_id not in self.models:
            raise PipelineError(f"no model was trained for query {query.query_id!r}'s fold")
        return self.models[query.query_id]

    def score(self, query: Query, docs: Sequence[Doc], batch_size: int | None = None):
        """Scores of ``docs`` for ``query`` by the model that did not see ``query``.

        Args:
            query: the query.
            docs: its candidates.
            batch_size: pairs per forward pass (default: each model's).

        Returns:
            One float per document, in the order given.

        Raises:
            PipelineError: no model was trained for the query's fold.
        """
        return self.score_many([(query, docs)], batch_size)[0]

    def score_many(self, items: Sequence[tuple[Query, Sequence[Doc]]],
                   batch_size: int | None = None) -> list[list[float]]:
        """Scores of every ``(query, docs)`` item: the items are grouped by the model that did not see their
        query, and each model scores its group in one ``score_many`` call (batches filled across queries);
        a model without ``score_many`` scores query by query.

        Args:
            items: ``(query, docs)`` pairs.
            batch_size: pairs per forward pass (default: each model's).

        Returns:
            One list of scores per item, in the items' order.

        Raises:
            PipelineError: no model was trained for a query's fold.
        """
        groups: dict[int, list[int]] = {}
        models: dict[int, Any] = {}
        for position, (query, _) in enumerate(items):
            model = self._model(query)
            groups.setdefault(id(model), []).append(position)
            models[id(model)] = model
        scores: list[list[float]] = [[] for _ in items]
        for key, positions in groups.items():
            model, group = models[key], [items[p] for p in positions]
            if hasattr(model, "score_many"):
                scored = model.score_many(group, batch_size)
            else:
                scored = [model.score(query, docs) for query, docs in group]
            for position, values in zip(positions, scored):
                scores[position] = list(values)
        return scores

    def _each_model(self, method: str, refusal: str, *args) -> "PerQueryReranker":
        """Call ``method`` on every fold's model once; a model without it is a
        :class:`~pipeline.core.errors.PipelineError` saying ``refusal``."""
        for model in {id(m): m for m in self.models.values()}.values():
            if not hasattr(model, method):
                raise PipelineError(f"{self.name}: {refusal}")
            getattr(model, method)(*args)
        return self

    def score_in_bf16(self, enabled: bool = True) -> "PerQueryReranker":
        """Every fold's model scores in bfloat16 (see ``TorchReranker.score_in_bf16``); a model that cannot is
        a :class:`~pipeline.core.errors.PipelineError`.

        Args:
            enabled: ``False`` scores in float32 again.

        Returns:
            This object.
        """
        return self._each_model("score_in_bf16", "bfloat16 scoring is for the torch re-rankers", enabled)

    def quantize_int8(self) -> "PerQueryReranker":
        """Quantize every fold's model for int8 CPU scoring (see ``TransformerReranker.quantize_int8``); a
        model that cannot be quantized is a :class:`~pipeline.core.errors.PipelineError`.

        Returns:
            This object.
        """
        return self._each_model("quantize_int8", "int8 scoring is for the transformer re-rankers")
