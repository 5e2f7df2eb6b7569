"""The base of the transformer re-rankers (ADDAX, the cross-encoder).

A model file subclasses :class:`TransformerReranker` and writes only what is specific to it: its config
dataclass (``model_config_class``), ``build_module(encoder)`` returning a torch module around a fresh
pre-trained encoder (:func:`infra.encoders.load_encoder`), ``encode(pairs)`` (a batch of tensors) and,
if scoring is more than ``module(**tensors)``, ``forward(batch)``.

This class does the rest, the same way for both models, and offers what :class:`rerankers.training.loop.Trainer`
expects of a trainable re-ranker (``module``, ``prepare``, ``encode``, ``forward``, ``pair_length``):

* Tokenization with the encoder's own tokenizer (word-piece ids, no special tokens), truncated to
  ``max_query_length`` / ``max_doc_length`` and cached per query text and per document (bounded LRU;
  :mod:`rerankers.transformer_inputs`).
  ``prepare(train, dataset)`` therefore needs no vocabulary of the collection; it only loads the encoder
  and builds a fresh module (seeded: the same seed gives the same heads, so the same scores).
* Special tokens are added from templates probed once from the tokenizer (``[CLS] a [SEP]``,
  ``[CLS] a [SEP] b [SEP]`` for BERT, ``<s> a </s></s> b </s>`` for RoBERTa), so any Hugging Face encoder
  name or local directory works.
* Training with the project's :class:`~rerankers.training.loop.Trainer`, through a subclass
  (:class:`~rerankers.training.auxiliary.AuxiliaryLossTrainer`) whose ``loss`` adds the re-ranker's
  :meth:`TransformerReranker.auxiliary_loss` (``None`` by default): a model with extra training objectives
  (ADDAX's hashing losses, eq. 15) stores them during ``forward`` and returns them there, and the Trainer
  itself stays generic.
* Self-describing checkpoints written atomically: re-ranker name and class, the three configs, the
  encoder's name, its architecture and a fingerprint of its tokenizer's vocabulary, library versions and
  the whole ``state_dict`` (fine-tuned encoder included). Anything that does not match is a
  :class:`~pipeline.core.errors.CheckpointError` naming the file.

Training defaults suit fine-tuning a pre-trained encoder (a small learning rate, gradient clipping at
1.0), a constant learning rate unless ``schedule``/``warmup`` are set (:class:`~rerankers.training.config.TrainConfig`);
``head_learning_rate`` gives the layers around the encoder (parameters outside ``encoder.``) their own step.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Query

from infra.checkpoints import load_checkpoint, save_checkpoint
from infra.encoders import load_encoder
from .hf_export import library_versions
from .hf_export.pretrained import PretrainedExport
from .lru import LRUCache
from .precision import TransformerPrecision
from .torch_base import TorchReranker
from .training.auxiliary import AuxiliaryLossTrainer
from .training.config import TrainConfig
from .transformer_inputs import CachedWordPieces, EncoderConfig
from .wordpieces import SpecialTokens, pad_ids, tokenizer_fingerprint, unique_rows  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
CHECKPOINT_KIND = "transformer"
#: encoder-config fields that must agree between a checkpoint and the encoder it is rebuilt on
_ARCHITECTURE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "vocab_size", "max_position_embeddings", "type_vocab_size")


class TransformerReranker(TransformerPrecision, PretrainedExport, CachedWordPieces, TorchReranker):
    """Re-ranker fine-tuning a pre-trained transformer encoder: see the module docstring. Scoring precision
    (a bfloat16 copy of the module, or int8): :class:`~rerankers.precision.TransformerPrecision`; Hugging Face
    directories: :class:`~rerankers.hf_export.pretrained.PretrainedExport`."""

    name: ClassVar[str] = "transformer"
    model_config_class: ClassVar[type] = object
    #: names of the pre-trained encoder's parameters in ``module`` start with these (``head_learning_rate``)
    pretrained_prefixes: ClassVar[tuple[str, ...]] = ("encoder.",)
    #: defaults of this model's options (ablation subclasses flip model ones); all overridable with --set
    model_defaults: ClassVar[Mapping[str, Any]] = {}
    encoder_defaults: ClassVar[Mapping[str, Any]] = {}
    train_defaults: ClassVar[Mapping[str, Any]] = {
        "learning_rate": 2e-5, "optimizer": "adamw", "weight_decay": 0.01, "grad_clip": 1.0,
        "batch_size": 32, "epochs": 5, "patience": 2, "score_batch_size": 64,
    }
    #: ``fit`` adds :meth:`auxiliary_loss` to the Trainer's loss
    trainer_class: ClassVar[type] = AuxiliaryLossTrainer

    def __init__(self, model_config=None, encoder_config: EncoderConfig | None = None, train_config=None,
                 seed: int = 42):
        """
        Args:
            model_config: the model's hyper-parameters (default: ``model_config_class(**model_defaults)``).
            encoder_config: the encoder and input lengths (default: ``EncoderConfig(**encoder_defaults)``).
            train_config: training settings (default: :meth:`default_train_config`).
            seed: the random seed of the heads' initialisation and of training.
        """
        self.model_config = model_config if model_config is not None else self.model_config_class(**self.model_defaults)
        self.encoder_config = encoder_config or EncoderConfig(**self.encoder_defaults)
        self.train_config = train_config if train_config is not None else self.default_train_config()
        self.seed = seed
        self.tokenizer = None
        self.special: SpecialTokens | None = None
        self.module = None
        self.device = None
        self.encoder_description: dict | None = None
        self._query_tokens = LRUCache(8192)
        self._doc_tokens = LRUCache(131072)
        self._threads_set = False

    # -- construction ------------------------------------------------------------------------------
    def option_configs(self) -> list:
        """Model, encoder and training configs (the targets of ``--set``).

        Returns:
            ``[model_config, encoder_config, train_config]``.
        """
        return [self.model_config, self.encoder_config, self.train_config]

    def build_module(self, encoder):
        """The model's torch module around ``encoder`` (subclasses implement).

        Args:
            encoder: the pre-trained model :meth:`load_pretrained` gave.

        Returns:
            A fresh ``torch.nn.Module``.
        """
        raise NotImplementedError

    def load_pretrained(self):
        """The pre-trained tokenizer and model that :meth:`build_module` receives.

        Returns:
            ``(tokenizer, model)``: by default the encoder's ``AutoModel`` (:func:`~infra.encoders.load_encoder`);
            a subclass may load the same checkpoint with a head.
        """
        return load_encoder(self.encoder_config.encoder)

    def prepare(self, train=None, dataset=None) -> None:
        """Load the encoder and its tokenizer and build a fresh module.

        Args:
            train: not needed (a transformer brings its own vocabulary); accepted for the Trainer's protocol.
            dataset: not needed either.

        Raises:
            PipelineError: the encoder cannot be loaded or its inputs would exceed its positions.
        """
        self._build()
        log.info("%s: encoder %s (%d parameters)", self.name, self.encoder_config.encoder,
                 sum(p.numel() for p in self.module.parameters()))

    def _build(self) -> None:
        import torch

        tokenizer, encoder = self.load_pretrained()
        self.tokenizer = tokenizer
        self.special = SpecialTokens(tokenizer)
        config = encoder.config
        needed = self.max_input_length()
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and needed > limit:
            raise PipelineError(f"{self.name}: inputs of up to {needed} tokens do not fit encoder "
                                f"{self.encoder_config.encoder!r} (max_position_embeddings {limit}); lower "
                                f"max_query_length/max_doc_length")
        self.encoder_description = {
            "name": self.encoder_config.encoder,
            "architecture": {key: getattr(config, key, None) for key in _ARCHITECTURE_KEYS},
            "tokenizer": tokenizer_fingerprint(tokenizer),
        }
        self._query_tokens.clear()
        self._doc_tokens.clear()
        torch.manual_seed(self.seed)  # the heads built next are the same for the same seed
        self.module = self.build_module(encoder)
        self.clear_cache()

    def max_input_length(self) -> int:
        """The longest input the encoder sees, checked against the encoder.

        Returns:
            The longer of the query and document limits plus the special tokens.
        """
        config = self.encoder_config
        return max(config.max_query_length, config.max_doc_length) + self.special.extra(pair=False)

    # -- tokens ------------------------------------------------------------------------------------
    def _require_prepared(self) -> None:
        if self.module is None or self.tokenizer is None:
            raise PipelineError(f"{self.name} is not prepared: call prepare() or load a checkpoint")

    def pair_length(self, query: Query, doc: Doc) -> int:
        """Padded length that matters for batching: the document's word pieces (capped).

        Args:
            query: the pair's query.
            doc: the pair's document.

        Returns:
            The number of the document's word pieces, at most ``max_doc_length``.
        """
        self._require_prepared()
        return len(self.doc_ids([doc])[0])

    # -- tensors -----------------------------------------------------------------------------------
    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """A batch of tensors for ``pairs`` (subclasses implement).

        Args:
            pairs: ``(query, doc)`` pairs.

        Returns:
            Input name -> tensor (and other entries, e.g. keys, that :meth:`tensors` drops).
        """
        raise NotImplementedError

    def _device(self):
        return self.device or next(self.module.parameters()).device

    def tensors(self, batch: Mapping[str, Any]) -> dict:
        """The tensor entries of ``batch`` on the module's device.

        Args:
            batch: what :meth:`encode` returned.

        Returns:
            Its tensors, moved; other entries (e.g. keys) are dropped.
        """
        import torch

        device = self._device()
        return {k: v.to(device) for k, v in batch.items() if torch.is_tensor(v)}

    def forward(self, batch: Mapping[str, Any]):
        """Scores ``[B]`` for an encoded batch.

        Args:
            batch: what :meth:`encode` returned.

        Returns:
            A ``[B]`` tensor of scores.
        """
        return self.module(**self.tensors(batch))

    def auxiliary_loss(self, units: int):
        """Extra training loss of the batch just scored in training mode.

        Args:
            units: the number of training units in the batch.

        Returns:
            The loss, already weighted and averaged over the units; ``None`` when the model has none.
        """
        return None

    def clear_cache(self) -> None:
        """Forget cached encoder outputs (after the weights change). Token caches stay valid."""

    # -- protocol ----------------------------------------------------------------------------------
    def before_scoring(self, docs: Sequence[Doc], queries: Sequence[Query] = ()) -> None:
        """Tokenize the scoring call's uncached documents in one tokenizer call, and its queries in another.

        Args:
            docs: the call's distinct documents.
            queries: the call's distinct queries.
        """
        self.doc_ids(docs)
        self.query_ids(queries)

    # -- checkpoints -------------------------------------------------------------------------------
    def describe(self) -> dict:
        """What a checkpoint (:meth:`save`) and an export
        (:meth:`~rerankers.hf_export.pretrained.PretrainedExport.save_pretrained`) both record.

        Returns:
            Name, class, the three configs, seed and the encoder it was trained on (name, architecture,
            tokenizer fingerprint), as plain values.
        """
        return {
            "reranker": self.name,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "model_config": dataclasses.asdict(self.model_config),
            "encoder_config": dataclasses.asdict(self.encoder_config),
            "train_config": dataclasses.asdict(self.train_config),
            "seed": self.seed,
            "encoder": dict(self.encoder_description or {}),
        }

    @classmethod
    def from_description(cls, where, description: Mapping[str, Any]) -> "TransformerReranker":
        """A new, unbuilt re-ranker with the configs and seed that :meth:`describe` recorded.

        Args:
            where: the file or directory the description came from, for messages.
            description: what :meth:`describe` returned.

        Returns:
            The re-ranker, not yet built (no encoder loaded).

        Raises:
            CheckpointError: configs this version cannot read; the message names ``where``.
        """
        try:
            model_config = cls.model_config_class(**description["model_config"])
            encoder_config = EncoderConfig(**description["encoder_config"])
            train_config = TrainConfig(**description["train_config"])
        except (TypeError, KeyError, PipelineError, ValueError) as error:
            raise CheckpointError(f"{where}: config does not match this version of {cls.name} ({error})") from None
        return cls(model_config, encoder_config, train_config, description.get("seed", 42))

    def save(self, path) -> None:
        """Write name, class, configs, encoder description, versions and weights to ``path`` atomically.

        Args:
            path: the checkpoint file (replaced if it exists).

        Raises:
            PipelineError: nothing to save (not prepared), or the model is int8-quantized (scoring only).
        """
        if self.module is None:
            raise PipelineError(f"{self.name}: nothing to save (not prepared)")
        self._require_float("save")
        payload = {
            "format": CHECKPOINT_FORMAT,
            "kind": CHECKPOINT_KIND,
            **self.describe(),
            "state_dict": {k: v.detach().cpu() for k, v in self.module.state_dict().items()},
            "versions": library_versions(),
        }
        save_checkpoint(path, payload)

    @classmethod
    def load(cls, path) -> "TransformerReranker":
        """Read a checkpoint written by :meth:`save`, or a directory written by
        :meth:`~rerankers.hf_export.pretrained.PretrainedExport.save_pretrained`.

        Args:
            path: the checkpoint file or export directory.

        Returns:
            The re-ranker, in eval mode, ready to score.

        Raises:
            CheckpointError: a wrong model, format, encoder or weights; the message names ``path``.

        Example:
            >>> reranker = CrossEncoderReranker.load("cross-encoder.pt")   # doctest: +SKIP
        """

        path = Path(path)
        if path.is_dir():
            return cls.from_pretrained(path)
        payload = load_checkpoint(path)
        if payload.get("format") != CHECKPOINT_FORMAT or payload.get("kind") != CHECKPOINT_KIND:
            found = (payload.get("format"), payload.get("kind"))
            raise CheckpointError(f"{path}: not a transformer re-ranker checkpoint (format/kind {found!r})")
        if payload.get("reranker") != cls.name:
            raise CheckpointError(f"{path}: holds a {payload.get('reranker')!r} model, not {cls.name!r}")
        reranker = cls.from_description(path, payload)
        encoder_config = reranker.encoder_config
        try:
            reranker._build()
        except PipelineError as error:
            raise CheckpointError(f"{path}: cannot rebuild its encoder {encoder_config.encoder!r} ({error})") from None
        saved = payload.get("encoder") or {}
        current = reranker.encoder_description
        for key in ("architecture", "tokenizer"):
            if saved.get(key) != current.get(key):
                raise CheckpointError(f"{path}: encoder {encoder_config.encoder!r} as found now does not match the "
                                      f"one it was trained with ({key}: saved {saved.get(key)!r}, found "
                                      f"{current.get(key)!r})")
        try:
            reranker.module.load_state_dict(payload["state_dict"])
        except (RuntimeError, KeyError) as error:
            raise CheckpointError(f"{path}: weights do not fit {cls.name} with the saved config ({error})") from None
        reranker.module.eval()
        reranker.clear_cache()
        return reranker
