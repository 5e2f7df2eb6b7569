"""The base of every word-level neural re-ranker (HCAN, Match-SRNN, MV-LSTM, IASM, KNRM, ...).

A model file subclasses :class:`WordReranker` and writes only what is specific to its paper: its config
dataclass (``model_config_class``), ``build_module(embedding_weights)`` returning a torch module whose
``forward(query_ids, query_mask, doc_ids, doc_mask, **features)`` gives one score per pair, and, if the
model needs more than token ids, ``features(query_tokens, query_length)``.

This class does the rest, the same way for every model: tokenization (:mod:`pipeline.core.vocabulary`), the
vocabulary and IDF statistics of the collection, embeddings (:mod:`rerankers.embeddings`; prepared and kept
on disk by :mod:`rerankers.word_inputs`), padding and masks, batching, training
(:class:`rerankers.training.loop.Trainer`), scoring and checkpoints.

Classic baselines. The choices shared by the four classic baselines (KNRM, Conv-KNRM, DRMM, MatchPyramid), beyond what
the papers fix (:data:`PAIRWISE_DEFAULTS` holds their training defaults):

* Embeddings are the framework's (GloVe 6B 50d by default; the papers trained their own word2vec). KNRM, Conv-KNRM
  and MatchPyramid fine-tune them unless ``--set freeze_embeddings=true``, as KNRM and Conv-KNRM do
  end to end. DRMM always keeps them fixed: the paper uses fixed pre-trained embeddings, and its
  histogram is piecewise constant in the similarities, so no gradient could reach them anyway.
* Every out-of-vocabulary word (beyond ``max_vocabulary``) shares the framework's OOV row, so two
  different OOV words count as an exact match for all four models.
* Training defaults: pairwise hinge loss with margin 1 (the KNRM, Conv-KNRM and DRMM papers' loss; see
  :class:`rerankers.matchpyramid.MatchPyramidReranker` for MatchPyramid) and Adam with lr 1e-3 (KNRM and Conv-KNRM use Adam),
  except DRMM, whose 162 weights get lr 1e-2 (our choice).
* KNRM/Conv-KNRM multiply every log soft-TF by ``log_scale = 0.01``, as the authors' released code does
  (the papers have no factor): unscaled, a kernel nothing falls into adds ``log(1e-10) = -23`` per query
  term, which saturates the ranking ``tanh`` from the first step.
"""
from __future__ import annotations

import dataclasses
import logging
import platform
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

from pipeline.core.errors import CheckpointError, ConfigError, PipelineError
from pipeline.core.records import Doc, Query
from pipeline.core.vocabulary import PAD_ID, IDFStatistics, Vocabulary, tokenize

from infra.checkpoints import load_checkpoint, project_version, save_checkpoint
from .lru import LRUCache
from .torch_base import TorchReranker
from .training.config import TrainConfig
from .word_inputs import PreparedVocabulary, TextConfig

#: documents whose tokens a word-level re-ranker keeps (a collection of abstracts fits; MS MARCO does not)
DOC_TOKEN_CACHE = 200_000

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1

#: the classic baselines' training defaults (KNRM, Conv-KNRM, DRMM, MatchPyramid): pairwise hinge loss
#: (margin 1) with Adam; ``batch_size`` counts scored documents, so 64 is 32 (positive, negative) pairs per step
PAIRWISE_DEFAULTS = {"loss": "hinge", "margin": 1.0, "epochs": 10, "batch_size": 64, "learning_rate": 1e-3}

#: ``text_defaults`` of the models whose authors kept the word vectors fixed (MV-LSTM, IASM); a checkpoint or
#: ``--set freeze_embeddings=false`` can differ
FROZEN_EMBEDDINGS = {"freeze_embeddings": True}


def require(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``condition`` (a model config's checks).

    Args:
        condition: what must hold.
        message: the error's text, naming the option and the value found.

    Raises:
        ValueError: ``condition`` is false.
    """
    if not condition:
        raise ValueError(message)


def check_choices(config, **choices: Sequence[str]) -> None:
    """Refuse the first option of ``config`` whose value is not one of its choices.

    A model config's ``__post_init__`` checks.

    Args:
        config: a model config dataclass.
        **choices: option name -> the values it may take.

    Raises:
        ConfigError: an option's value is not among its choices; the message lists them.

    Example:
        >>> check_choices(HCANConfig(), encoder=("deep", "wide", "contextual"))  # doctest: +SKIP
    """
    for name, allowed in choices.items():
        value = getattr(config, name)
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {tuple(allowed)}, got {value!r}")


class WordReranker(PreparedVocabulary, TorchReranker):
    """Word-level neural re-ranker: see the module docstring for what a subclass provides."""

    name: ClassVar[str] = "word"
    model_config_class: ClassVar[type] = object
    #: n-gram lengths whose IDF the model uses (``features`` can look them up in ``self.idf``)
    phrase_lengths: ClassVar[tuple[int, ...]] = (1,)
    #: pad queries to ``max_query_length`` always (models whose layers have fixed query slots)
    fixed_query_length: ClassVar[bool] = False
    #: default training and text options for this model (overridable with --set)
    train_defaults: ClassVar[Mapping[str, Any]] = {}
    text_defaults: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, model_config=None, text_config: TextConfig | None = None, train_config=None, seed: int = 42):
        """
        Args:
            model_config: the model's hyper-parameters (default: ``model_config_class()``).
            text_config: how texts become tensors (default: ``TextConfig(**text_defaults)``).
            train_config: training settings (default: :meth:`default_train_config`).
            seed: the random seed of initialisation and training.
        """
        self.model_config = model_config if model_config is not None else self.model_config_class()
        self.text_config = text_config or TextConfig(**self.text_defaults)
        self.train_config = train_config if train_config is not None else self.default_train_config()
        self.seed = seed
        self.vocab: Vocabulary | None = None
        self.idf: IDFStatistics | None = None
        self.module = None
        self.device = None
        self.embedding_shape: tuple[int, int] | None = None
        # keyed by id and text: a client of pipeline.serve may send another text under a known id
        self._doc_cache = LRUCache(DOC_TOKEN_CACHE)
        self._threads_set = False

    # -- construction ------------------------------------------------------------------------------
    def option_configs(self) -> list:
        """Model, text and training configs (the targets of ``--set``).

        Returns:
            ``[model_config, text_config, train_config]``.
        """
        return [self.model_config, self.text_config, self.train_config]

    #: the torch module the default :meth:`build_module` builds
    module_class: ClassVar[type | None] = None

    def build_module(self, embedding_weights):
        """The model's torch module: ``module_class(model_config, embedding_weights, freeze_embeddings)``.

        A subclass whose module takes other arguments overrides this.

        Args:
            embedding_weights: ``[V, E]`` initial word vectors.

        Returns:
            A fresh ``torch.nn.Module``.
        """
        if self.module_class is None:
            raise NotImplementedError(f"{type(self).__name__} sets no module_class and has no build_module")
        return self.module_class(self.model_config, embedding_weights.float(), self.text_config.freeze_embeddings)

    def features(self, query_tokens: Sequence[Sequence[str]], query_length: int) -> dict:
        """Extra forward inputs beyond token ids (subclasses override; default none).

        Args:
            query_tokens: each pair's query tokens, truncated to ``max_query_length``.
            query_length: the padded query length of the batch.

        Returns:
            Input name -> tensor, merged into the batch :meth:`encode` returns.
        """
        return {}

    # -- tensors -----------------------------------------------------------------------------------
    def _tokens(self, doc: Doc) -> list[str]:
        key = (doc.doc_id, doc.text)
        cached = self._doc_cache.get(key)
        if cached is None:
            cached = tokenize(doc.text)
            self._doc_cache.put(key, cached)
        return cached

    def pair_length(self, query: Query, doc: Doc) -> int:
        """Padded length that matters for batching (the document's, capped).

        Args:
            query: the pair's query.
            doc: the pair's document.

        Returns:
            The document's token count, at most ``max_doc_length``.
        """
        return min(len(self._tokens(doc)), self.text_config.max_doc_length)

    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """Pad a batch of pairs into id tensors and masks (True = real token), plus model features.

        Args:
            pairs: ``(query, doc)`` pairs.

        Returns:
            ``query_ids``, ``query_mask``, ``doc_ids``, ``doc_mask`` and the tensors of :meth:`features`.

        Raises:
            PipelineError: the re-ranker is not prepared.
        """
        import torch

        if self.vocab is None:
            raise PipelineError(f"{self.name} is not prepared: call prepare() or load a checkpoint")
        config = self.text_config
        query_tokens = [tokenize(q.text)[: config.max_query_length] for q, _ in pairs]
        doc_tokens = [self._tokens(d)[: config.max_doc_length] for _, d in pairs]
        # an empty text still gets one (OOV) token so every row has a real position to pool over
        query_ids = [self.vocab.encode(t) or [1] for t in query_tokens]
        doc_ids = [self.vocab.encode(t) or [1] for t in doc_tokens]
        query_length = config.max_query_length if self.fixed_query_length else max(map(len, query_ids))
        doc_length = max(map(len, doc_ids))
        query = torch.full((len(pairs), query_length), PAD_ID, dtype=torch.long)
        doc = torch.full((len(pairs), doc_length), PAD_ID, dtype=torch.long)
        for row, ids in enumerate(query_ids):
            query[row, : len(ids)] = torch.tensor(ids)
        for row, ids in enumerate(doc_ids):
            doc[row, : len(ids)] = torch.tensor(ids)
        batch = {"query_ids": query, "query_mask": query != PAD_ID, "doc_ids": doc, "doc_mask": doc != PAD_ID}
        batch.update(self.features(query_tokens, query_length))
        return batch

    def forward(self, batch: Mapping[str, Any]):
        """Scores ``[B]`` for an encoded batch (moved to the module's device).

        Args:
            batch: what :meth:`encode` returned.

        Returns:
            A ``[B]`` tensor of scores.
        """
        device = self.device or next(self.module.parameters()).device
        return self.module(**{k: v.to(device) for k, v in batch.items()})

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write config, vocabulary, IDF statistics, weights and versions to ``path`` atomically.

        Args:
            path: the checkpoint file (replaced if it exists).

        Raises:
            PipelineError: nothing to save (not prepared).
        """
        import torch

        if self.module is None:
            raise PipelineError(f"{self.name}: nothing to save (not prepared)")
        payload = {
            "format": CHECKPOINT_FORMAT,
            "reranker": self.name,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "model_config": dataclasses.asdict(self.model_config),
            "text_config": dataclasses.asdict(self.text_config),
            "train_config": dataclasses.asdict(self.train_config),
            "seed": self.seed,
            "vocab": self.vocab.tokens,
            "embedding_shape": list(self.embedding_shape),
            "idf": self.idf.to_json() if self.idf else None,
            "state_dict": {k: v.detach().cpu() for k, v in self.module.state_dict().items()},
            "versions": {"project": project_version(), "torch": str(torch.__version__),
                         "python": platform.python_version()},
        }
        save_checkpoint(path, payload)

    @classmethod
    def load(cls, path) -> "WordReranker":
        """Read a checkpoint written by :meth:`save`.

        Args:
            path: the checkpoint file.

        Returns:
            The re-ranker, in eval mode, ready to score.

        Raises:
            CheckpointError: the file is missing or damaged, or holds another model, format or weights.

        Example:
            >>> reranker = KNRMReranker.load("knrm.pt")   # doctest: +SKIP
        """
        import torch

        path = Path(path)
        payload = load_checkpoint(path)
        if payload.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path}: unknown checkpoint format {payload.get('format')!r}")
        if payload.get("reranker") != cls.name:
            raise CheckpointError(f"{path}: holds a {payload.get('reranker')!r} model, not {cls.name!r}")
        try:
            renamed = getattr(cls.model_config_class, "RENAMED", {})
            model_config = cls.model_config_class(**{renamed.get(k, k): v for k, v in payload["model_config"].items()})
            text_config = TextConfig(**payload["text_config"])
            train_config = TrainConfig(**payload["train_config"])
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{path}: config does not match this version of {cls.name} ({error})") from None
        reranker = cls(model_config, text_config, train_config, payload.get("seed", 42))
        reranker.vocab = Vocabulary(list(payload["vocab"]))
        reranker.idf = IDFStatistics.from_json(payload["idf"]) if payload.get("idf") else None
        reranker.embedding_shape = tuple(payload["embedding_shape"])
        if reranker.embedding_shape[0] != len(reranker.vocab):
            raise CheckpointError(f"{path}: embedding rows {reranker.embedding_shape[0]} != vocabulary {len(reranker.vocab)}")
        reranker.module = reranker.build_module(torch.zeros(reranker.embedding_shape))
        try:
            reranker.module.load_state_dict(payload["state_dict"])
        except RuntimeError as error:
            raise CheckpointError(f"{path}: weights do not fit {cls.name} with the saved config ({error})") from None
        reranker.module.eval()
        return reranker
