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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch.nn as nn

from pipeline.errors import PipelineError
from pipeline.records import Doc, Query

from .transformer_base import TransformerReranker, pad_ids

__all__ = ["CrossEncoderConfig", "CrossEncoderModel", "CrossEncoderReranker"]


@dataclass
class CrossEncoderConfig:
    """Options of the cross-encoder's head (``--set dropout=...``)."""

    dropout: float = 0.1

    def __post_init__(self):
        if not 0.0 <= self.dropout < 1.0:
            raise PipelineError(f"dropout must be in [0, 1), got {self.dropout}")


class CrossEncoderModel(nn.Module):
    """Encoder over the joint input, dropout and a linear head on the first (``[CLS]``) position."""

    def __init__(self, encoder: nn.Module, config: CrossEncoderConfig):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """Relevance logits ``[B]`` of the pairs in ``input_ids [B, L]`` (``attention_mask`` True = real)."""
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask.long(), **extra).last_hidden_state
        return self.head(self.dropout(states[:, 0])).squeeze(-1)


class CrossEncoderReranker(TransformerReranker):
    """``cross-encoder``: ``[CLS] q [SEP] d [SEP]`` through the encoder, a linear head on ``[CLS]``."""

    name = "cross-encoder"
    model_config_class = CrossEncoderConfig
    train_defaults = {
        "loss": "pointwise", "learning_rate": 2e-5, "optimizer": "adamw", "weight_decay": 0.01,
        "grad_clip": 1.0, "batch_size": 32, "epochs": 5, "patience": 2, "negatives": 4, "score_batch_size": 64,
    }

    def build_module(self, encoder):
        return CrossEncoderModel(encoder, self.model_config)

    def max_input_length(self) -> int:
        config = self.encoder_config
        return config.max_query_length + config.max_doc_length + self.special.extra(pair=True)

    def pair_length(self, query: Query, doc: Doc) -> int:
        """Padded length that matters for batching: query plus document word pieces."""
        self._require_prepared()
        return len(self.query_ids([query])[0]) + len(self.doc_ids([doc])[0])

    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """``input_ids``, ``attention_mask`` (bool) and, for encoders with token types, ``token_type_ids``."""
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
