"""Cross-encoder baseline (monoBERT-style; Nogueira and Cho, "Passage re-ranking with BERT", 2019).

The query and the document go through the encoder together, ``[CLS] query [SEP] doc [SEP]`` (token types
0 and 1 where the encoder has them; other encoders get their own special tokens, see
:class:`~rerankers.transformer_base.SpecialTokens`), and a linear head on the final ``[CLS]`` vector gives
the relevance logit. Everything is fine-tuned end to end, by default with the pointwise loss (binary
cross-entropy on the logit, monoBERT's two-class softmax in one output) and AdamW.

Choices (the baseline is not specified further by the ADDAX paper, which calls it BERT_base):

* Dropout (``dropout``, 0.1 as in BERT) on the ``[CLS]`` vector before the head.
* Each text is truncated on its own (query to ``max_query_length``, document to ``max_doc_length`` word
  pieces), so a long document never pushes the query out.
* Nothing is cached between calls beyond tokenization: every pair needs a full encoder pass, which is
  what ADDAX's per-document cache is measured against (``benchmarks/addax_speed.py``).

Cross-encoders trained elsewhere (Hugging Face ``...ForSequenceClassification`` models such as
``cross-encoder/ms-marco-MiniLM-L-6-v2``):

* :meth:`CrossEncoderReranker.load` takes, besides a checkpoint file written by ``save()``, such a model's
  hub id or local ``save_pretrained`` directory and re-ranks with it as it is, head included, training
  nothing (``python -m pipeline.run --reranker cross-encoder --model ID_OR_DIR``). Its inputs are the ones
  the model was trained on: ``tokenizer(query, doc)``'s ids and token types, each text truncated as above
  (``max_doc_length`` is lowered when the defaults do not fit the model's positions).
* The score is the logit with one output (sentence-transformers' MS MARCO cross-encoders), and
  ``logit[1] - logit[0]`` with two (monoBERT): the log-odds of the relevant class, monotone in its
  probability. Other numbers of labels (e.g. NLI models) are an error.
* Fine-tuning (``--set encoder=ID_OR_DIR``) starts from such a model's own head (its pooler and
  classifier) rather than a fresh linear one when it has one or two labels (``head=auto``, the default):
  the head was trained for this task, so it ranks before the first step and a new random head would only
  throw that away. The pointwise loss on ``logit[1] - logit[0]`` is exactly the two-class softmax
  cross-entropy monoBERT trains with. The model's own dropout applies (``dropout`` is for the fresh head
  only), and its head counts as pre-trained: it gets ``learning_rate``, and ``head_learning_rate``, which
  is for freshly initialised layers, finds none (the Trainer says so).
  ``head=new`` keeps the fresh linear head on ``[CLS]`` (what plain encoders such as MiniLM always get),
  ``head=pretrained`` insists on the model's head.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch.nn as nn

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Query

from infra.encoders import (
    is_sequence_classifier, load_classifier, load_encoder, pretrained_config, pretrained_tokenizer,
)
from .blocks.first_token import first_token_states, scoring_only, supports_first_token
from .hf_export.classifier import SCORABLE_LABELS, ClassifierExport, PretrainedHeadModel
from .transformer_base import SpecialTokens, TransformerReranker, pad_ids

__all__ = ["CrossEncoderConfig", "CrossEncoderModel", "CrossEncoderReranker", "PretrainedHeadModel"]

log = logging.getLogger(__name__)

HEADS = ("auto", "new", "pretrained")
#: file suffixes that name a checkpoint written by save() (the model cache writes ``.pt``), never a hub id
CHECKPOINT_SUFFIXES = (".pt", ".pth")


@dataclass
class CrossEncoderConfig:
    """Options of the cross-encoder's head (``--set dropout=...``, ``--set head=...``).

    Attributes:
        dropout: dropout on the ``[CLS]`` vector before a fresh linear head.
        head: ``auto`` (the re-ranker's default): the encoder's own sequence-classification head when its
            config has one with 1 or 2 labels, else a fresh linear head; ``new``: always a fresh linear head;
            ``pretrained``: the encoder's own head, an error when it has none.
    """

    dropout: float = 0.1
    # "new" here, "auto" through CrossEncoderReranker.model_defaults: checkpoints written before this option
    # existed lack it, and they all hold a fresh linear head
    head: str = "new"

    def __post_init__(self):
        if not 0.0 <= self.dropout < 1.0:
            raise PipelineError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.head not in HEADS:
            raise PipelineError(f"head must be one of {', '.join(HEADS)}, got {self.head!r}")


class CrossEncoderModel(nn.Module):
    """Encoder over the joint input, dropout and a linear head on the first (``[CLS]``) position."""

    def __init__(self, encoder: nn.Module, config: CrossEncoderConfig):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """Relevance logits ``[B]`` of the pairs in ``input_ids [B, L]`` (``attention_mask`` True = real).
        Scoring (eval mode, no gradients) computes only the ``[CLS]`` output of a BERT encoder
        (:func:`~rerankers.blocks.first_token.first_token_states`); training runs the full forward."""
        if scoring_only(self) and supports_first_token(self.encoder):
            first = first_token_states(self.encoder, input_ids, attention_mask, token_type_ids)
        else:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            first = self.encoder(input_ids=input_ids, attention_mask=attention_mask.long(),
                                 **extra).last_hidden_state[:, 0]
        return self.head(self.dropout(first)).squeeze(-1)


class CrossEncoderReranker(ClassifierExport, TransformerReranker):
    """``cross-encoder``: ``[CLS] q [SEP] d [SEP]`` through the encoder, a linear head on ``[CLS]`` (or the
    encoder's own classification head, see the module docstring)."""

    name = "cross-encoder"
    model_config_class = CrossEncoderConfig
    model_defaults = {"head": "auto"}
    # score_batch_size 32, not 64: length-sorted batches of 32 pad less (BENCHMARKS.md, "Speed": the
    # cross-encoder's ratios with batches of 64 and of 32, benchmarks/cross_encoder_bf16_speed.py)
    train_defaults = {
        "loss": "pointwise", "learning_rate": 2e-5, "optimizer": "adamw", "weight_decay": 0.01,
        "grad_clip": 1.0, "batch_size": 32, "epochs": 5, "patience": 2, "negatives": 4, "score_batch_size": 32,
    }

    def uses_pretrained_head(self) -> bool:
        """Whether the module is built on the encoder's own classification head (see ``head``).

        Returns:
            True when the encoder has a usable head (1 or 2 labels) and ``head`` is not ``new``.

        Raises:
            PipelineError: ``head=pretrained`` and the encoder has no usable head.
        """
        head = self.model_config.head
        if head == "new":
            return False
        name = self.encoder_config.encoder
        config = pretrained_config(name)
        usable = is_sequence_classifier(config) and config.num_labels in SCORABLE_LABELS
        if head == "pretrained" and not usable:
            found = (f"a head with {config.num_labels} labels" if is_sequence_classifier(config)
                     else f"no sequence-classification head (architectures {config.architectures!r})")
            raise PipelineError(f"{self.name}: head=pretrained, but encoder {name!r} has {found}; a relevance "
                                f"score needs a ...ForSequenceClassification model with 1 or 2 labels")
        if head == "auto" and is_sequence_classifier(config) and not usable:
            log.warning("%s: encoder %r has a %d-label classification head; a fresh linear head replaces it",
                        self.name, name, config.num_labels)
        return usable

    def load_pretrained(self):
        """The encoder with its classification head when :meth:`uses_pretrained_head`, else its ``AutoModel``.

        Returns:
            ``(tokenizer, model)``: an ``AutoModelForSequenceClassification`` or an ``AutoModel``.
        """
        if self.uses_pretrained_head():
            return load_classifier(self.encoder_config.encoder)
        return load_encoder(self.encoder_config.encoder)

    def build_module(self, encoder):
        """:class:`PretrainedHeadModel` around a loaded classifier, else :class:`CrossEncoderModel`.

        Args:
            encoder: what :meth:`load_pretrained` gave.

        Returns:
            The module.
        """
        # the loaded class, not the config, tells: an AutoModel read from a classifier keeps its config
        if type(encoder).__name__.endswith("ForSequenceClassification"):
            return PretrainedHeadModel(encoder)
        return CrossEncoderModel(encoder, self.model_config)

    def max_input_length(self) -> int:
        """The longest input the encoder sees: query, document and the pair's special tokens.

        Returns:
            Its length in word pieces.
        """
        config = self.encoder_config
        return config.max_query_length + config.max_doc_length + self.special.extra(pair=True)

    def pair_length(self, query: Query, doc: Doc) -> int:
        """Padded length that matters for batching: query plus document word pieces.

        Args:
            query: the pair's query.
            doc: the pair's document.

        Returns:
            The number of word pieces (both capped).
        """
        self._require_prepared()
        return len(self.query_ids([query])[0]) + len(self.doc_ids([doc])[0])

    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """The pairs joined as ``[CLS] q [SEP] d [SEP]`` and padded.

        Args:
            pairs: ``(query, doc)`` pairs.

        Returns:
            ``input_ids``, ``attention_mask`` (bool) and, for encoders with token types, ``token_type_ids``.
        """
        self._require_prepared()
        queries = self.query_ids([q for q, _ in pairs])
        docs = self.doc_ids([d for _, d in pairs])
        joined = [self.special.pair(q, d) for q, d in zip(queries, docs)]
        ids, mask = pad_ids([j[0] for j in joined], self.tokenizer.pad_token_id or 0)
        batch = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.tokenizer.model_input_names:
            types, _ = pad_ids([j[1] for j in joined], 0)
            batch["token_type_ids"] = types
        return batch

    # -- models trained elsewhere ------------------------------------------------------------------
    @classmethod
    def load(cls, path) -> "CrossEncoderReranker":
        """A ready re-ranker from ``path``: a checkpoint file written by :meth:`save`, or a Hugging Face
        sequence-classification cross-encoder, a local ``save_pretrained`` directory (one holding
        ``config.json``) or a hub model id (anything that is not an existing path, except a name ending in
        ``.pt``/``.pth``, which is a missing checkpoint), used as it is
        (:meth:`from_pretrained`).

        Args:
            path: a checkpoint file, a model directory or a hub model id.

        Returns:
            The re-ranker, in eval mode, ready to score.

        Raises:
            CheckpointError: what cannot be loaded, saying what was tried.

        Example:
            >>> reranker = CrossEncoderReranker.load("cross-encoder/ms-marco-MiniLM-L-6-v2")  # doctest: +SKIP
        """
        location = Path(path)
        # a missing *.pt is a checkpoint path with a typo, not a hub id: no network round trip for it
        if location.is_file() or (not location.exists() and location.suffix in CHECKPOINT_SUFFIXES):
            return super().load(location)
        if location.is_dir():
            if not (location / "config.json").is_file():
                raise CheckpointError(f"{path}: a directory without config.json, so neither a checkpoint file "
                                      f"written by save() nor a Hugging Face model directory (save_pretrained)")
            tried = "as a Hugging Face model directory"
        else:
            tried = "not a file or directory here; as a Hugging Face hub model id"
        try:
            return cls.from_pretrained(str(path))
        except PipelineError as error:
            raise CheckpointError(f"{path}: {tried}: {error}") from None

    @classmethod
    def from_pretrained(cls, name: str, options: Mapping[str, Any] | None = None,
                        seed: int = 42) -> "CrossEncoderReranker":
        """Re-ranker on Hugging Face sequence-classification model ``name`` (hub id or local directory),
        its classification head kept, nothing trained; ``options`` are ``--set``-style options (e.g.
        ``max_query_length``). Without an explicit ``max_doc_length``, the default is lowered, if need be, so
        that query, document and special tokens fit the model's positions.

        A directory written by :meth:`save_pretrained` (it holds ``neural_rerank.json``) comes back as it was
        exported: its configs, seed and head (a linear head on ``[CLS]`` is restored exactly), ``options``
        applied over them.

        Args:
            name: a hub id or local directory of a sequence-classification model, or an export directory.
            options: ``--set``-style options (e.g. ``max_query_length``).
            seed: the random seed (of any further training).

        Returns:
            The re-ranker, in eval mode, ready to score.

        Raises:
            PipelineError: the model has no sequence-classification head with 1 or 2 labels.
        """
        from .hf_export import CONFIG_FILE, export_class, read_description

        location = Path(name)
        if (location / CONFIG_FILE).is_file():
            description = read_description(location, CONFIG_FILE)
            return export_class(location, description, cls)._restore_pretrained(location, description, options)
        options = dict(options or {})
        reranker = cls.from_options({**options, "encoder": name, "head": "pretrained"}, seed=seed)
        config = pretrained_config(name)
        if not is_sequence_classifier(config):
            raise PipelineError(f"not a cross-encoder: its config.json names architectures "
                                f"{config.architectures!r}, none a ...ForSequenceClassification model (to "
                                f"fine-tune a plain encoder, train with --set encoder={name} instead of --model)")
        if config.num_labels not in SCORABLE_LABELS:
            raise PipelineError(f"its classification head has {config.num_labels} labels; a relevance score "
                                f"needs 1 (the logit) or 2 (logit[1] - logit[0])")
        if "max_doc_length" not in options:
            reranker._fit_doc_length(config, pretrained_tokenizer(name, classifier=True))
        reranker._build()
        reranker.module.eval()
        return reranker

    def _fit_doc_length(self, config, tokenizer) -> None:
        """Lower ``max_doc_length`` so that a query, a document and the pair's special tokens fit both the
        model's position embeddings and its tokenizer's ``model_max_length`` (RoBERTa-style models have
        two position rows fewer than ``max_position_embeddings`` says, which the tokenizer's limit tells)."""
        limits = [getattr(config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
        # tokenizers without a known limit report a huge sentinel (int(1e30))
        limits = [int(limit) for limit in limits if isinstance(limit, int) and 0 < limit < 1_000_000]
        if not limits:
            return
        encoder = self.encoder_config
        room = min(limits) - encoder.max_query_length - SpecialTokens(tokenizer).extra(pair=True)
        if 1 <= room < encoder.max_doc_length:
            log.warning("%s: max_doc_length lowered from %d to %d to fit %s's %d positions", self.name,
                        encoder.max_doc_length, room, encoder.encoder, min(limits))
            encoder.max_doc_length = room

    # -- reading back a Hugging Face export (ClassifierExport writes it) ---------------------------
    def _before_restore(self, directory: Path, description: Mapping[str, Any]) -> None:
        """An export's head: the classifier as it is (``head=pretrained``), or the linear head on ``[CLS]``
        read back from it (``head=new`` on the exported encoder, then :meth:`_restore_head`)."""
        from .hf_export.heads import HEAD_KINDS

        kind = (description.get("head") or {}).get("kind")
        if kind not in HEAD_KINDS:
            raise CheckpointError(f"{directory}: export description has head kind {kind!r}, expected one of "
                                  f"{', '.join(HEAD_KINDS)}")
        self.model_config.head = "new" if kind == "linear" else "pretrained"

    def _restore_head(self, directory: Path, description: Mapping[str, Any]) -> None:
        """The linear head's exact weights from the exported classifier's tanh layer (a classifier export
        has nothing outside the model already loaded)."""
        import torch

        from .hf_export.heads import read_linear_head

        if not isinstance(self.module, CrossEncoderModel):
            return
        _, classifier = load_classifier(self.encoder_config.encoder)
        weight, bias = read_linear_head(classifier)
        with torch.no_grad():
            self.module.head.weight.copy_(weight)
            self.module.head.bias.copy_(bias)
