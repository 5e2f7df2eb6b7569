"""What every torch re-ranker shares, word-level (:mod:`rerankers.neural`) and transformer
(:mod:`rerankers.transformer_base`): options, training, batched scoring and its precision."""
from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

from pipeline.core.errors import PipelineError
from pipeline.core.options import apply_overrides
from pipeline.core.records import Doc, Query
from pipeline.core.runtime import set_threads

from .precision import ScoringPrecision
from .training.config import TrainConfig
from .training.loop import Trainer

__all__ = ["TorchReranker"]


class TorchReranker(ScoringPrecision):
    """What every torch re-ranker shares (word-level and transformer): ``--set`` options applied to its
    config dataclasses, ``fit`` with the project's Trainer, batched, length-sorted scoring without gradients,
    and the scoring precision (:class:`~rerankers.precision.ScoringPrecision`: float32, or bfloat16 after
    ``score_in_bf16``).

    A subclass provides ``option_configs()``, ``pair_length``, ``encode``, ``forward`` and ``module``
    (and may override ``before_scoring`` to prepare a scoring call's documents and queries in one go, and
    ``trainer_class`` to train with a subclass of the Trainer).
    """

    name: ClassVar[str] = "torch"
    #: what :meth:`fit` trains with (a transformer's adds its auxiliary losses)
    trainer_class: ClassVar[type] = Trainer

    def option_configs(self) -> list:
        """The config dataclasses ``--set``/``--config`` options apply to.

        Returns:
            The config instances, in the order a name is looked up in them.
        """
        raise NotImplementedError

    @classmethod
    def default_train_config(cls):
        """The training settings this model starts from.

        Returns:
            A :class:`~rerankers.training.config.TrainConfig` with this model's ``train_defaults`` applied.
        """
        config = TrainConfig()
        for key, value in getattr(cls, "train_defaults", {}).items():
            setattr(config, key, value)
        return config

    @classmethod
    def from_options(cls, options: Mapping[str, Any], seed: int = 42):
        """A new, untrained instance with ``--set``/``--config`` options applied to its configs.

        Args:
            options: option name -> value (e.g. ``{"epochs": 3}``), each applied to the config that has it.
            seed: the random seed of initialisation and training.

        Returns:
            The re-ranker, not yet prepared or trained.

        Raises:
            ConfigError: an option no config has, or a value of the wrong type.

        Example:
            >>> from rerankers.knrm import KNRMReranker
            >>> KNRMReranker.from_options({"n_kernels": 21}).model_config.n_kernels
            21
        """
        reranker = cls(seed=seed)
        apply_overrides(reranker.option_configs(), options)
        return reranker

    def before_scoring(self, docs: Sequence[Doc], queries: Sequence[Query] = ()) -> None:
        """Hook run once per scoring call (:meth:`score` or :meth:`score_many`) before batching.

        A subclass can prepare the call's documents and queries in one go (default: nothing). It may cache
        what it prepares but must not rely on finding it again: a bounded cache can forget.

        Args:
            docs: the call's distinct documents.
            queries: the call's distinct queries.
        """

    def clear_cache(self) -> None:
        """Forget cached model outputs (after the weights or the arithmetic change; default: nothing cached)."""

    def fit(self, train, dev=None, state_path=None):
        """Train with :attr:`trainer_class` (the project's :class:`~rerankers.training.loop.Trainer`); call
        ``prepare`` first.

        Args:
            train: the training set (queries, candidates, judgments).
            dev: the dev set for early stopping (``None``: train every epoch).
            state_path: where the per-epoch training state is kept so that an interrupted fit resumes.

        Returns:
            The training report (losses and dev scores per epoch).

        Raises:
            PipelineError: ``prepare`` was not called, or the model is int8-quantized (scoring only).
        """
        if self.module is None:
            raise PipelineError(f"{self.name}: call prepare(train, dataset) before fit()")
        self._require_float("train")
        self.clear_cache()
        try:
            return self.trainer_class(self, self.train_config, self.seed).fit(train, dev, state_path)
        finally:
            self.clear_cache()  # the Trainer restores the best epoch's weights: cached outputs are stale

    def score(self, query: Query, docs: Sequence[Doc], batch_size: int | None = None) -> list[float]:
        """Scores of ``docs`` for ``query``: the one-query case of :meth:`score_many`.

        Args:
            query: the query.
            docs: its candidate documents.
            batch_size: pairs per forward pass (default: the model's ``score_batch_size``).

        Returns:
            One float per document, in the order given (higher = more relevant).

        Raises:
            PipelineError: the model was neither fitted nor loaded.

        Example:
            >>> reranker = KNRMReranker.load("knrm.pt")          # doctest: +SKIP
            >>> reranker.score(Query("q1", "cheap flights"), [Doc("d1", "flights to Rome")])  # doctest: +SKIP
            [0.734...]
        """
        return self.score_many([(query, docs)], batch_size)[0]

    def score_many(self, items: Sequence[tuple[Query, Sequence[Doc]]],
                   batch_size: int | None = None) -> list[list[float]]:
        """Scores of every ``(query, docs)`` item, each list in its docs' order (eval mode, no gradients).

        All (query, doc) pairs of all items are sorted by ``pair_length`` (then document id, so that the
        pairs of a document shared by several queries sit together, where a model that caches per document
        reuses its work at once) and scored in batches of ``batch_size`` pairs (default: the model's
        ``score_batch_size``) filled across queries: a batch pads only to pairs of about its own length, and
        short candidate lists no longer make small batches. Padding is masked, so a pair's score does not
        depend on the batch it lands in (up to float rounding).

        Args:
            items: ``(query, docs)`` pairs.
            batch_size: pairs per forward pass (default: the model's ``score_batch_size``).

        Returns:
            One list of scores per item, each in its docs' order.

        Raises:
            PipelineError: the model was neither fitted nor loaded.
        """
        import torch

        if self.module is None:
            raise PipelineError(f"{self.name} has no trained model: fit() or load() first")
        items = [(query, list(docs)) for query, docs in items]
        scores = [[0.0] * len(docs) for _, docs in items]
        pairs = [(item, index) for item, (_, docs) in enumerate(items) for index in range(len(docs))]
        if not pairs:
            return scores
        if not self._threads_set:
            set_threads()
            self._threads_set = True
        self.module.eval()
        size = max(1, batch_size or self.train_config.score_batch_size)
        with torch.inference_mode(), self._arithmetic():
            # inside the arithmetic's context: a model that encodes its documents here caches them in it
            self.before_scoring(list(dict.fromkeys(doc for _, docs in items for doc in docs)),
                                list(dict.fromkeys(query for query, _ in items)))
            keys = [(self.pair_length(items[i][0], items[i][1][j]), items[i][1][j].doc_id) for i, j in pairs]
            order = sorted(range(len(pairs)), key=keys.__getitem__)
            for start in range(0, len(order), size):
                chunk = [pairs[p] for p in order[start : start + size]]
                batch = self.encode([(items[i][0], items[i][1][j]) for i, j in chunk])
                values = self.forward(batch).float().cpu().tolist()
                for (i, j), value in zip(chunk, values):
                    scores[i][j] = value
        return scores
