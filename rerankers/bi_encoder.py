"""Bi-encoder re-ranker: query and document embedded apart, scored by cosine similarity.

The sentence-transformers recipe (Reimers and Gurevych, "Sentence-BERT: Sentence Embeddings using Siamese
BERT-Networks", EMNLP 2019, arXiv:1908.10084): each text goes through the encoder alone, its token states
are mean-pooled over the real tokens and L2-normalised, and the score is the cosine of the two vectors.
Fine-tuning uses the project's ``in_batch`` loss (:mod:`rerankers.training.losses`) on ``scale * cosine``:
each training query's softmax runs over its positive, ``negatives`` hard negatives sampled from its
first-stage (BM25) candidates, and every other document of the batch, which is sentence-transformers'
MultipleNegativesRankingLoss with hard negatives (van den Oord et al.'s InfoNCE, arXiv:1807.03748; DPR's
in-batch plus BM25 negatives, arXiv:2004.04906). The bi-encoder embeds each distinct query and document of
a batch once, so the in-batch negatives cost no encoding. ``--set loss=softmax`` keeps the group's own
negatives only.

Why it is here: the default encoder, all-MiniLM-L6-v2, was trained by the sentence-transformers authors as
exactly this bi-encoder, on about a billion sentence pairs that include MS MARCO; used this way it ranks
well before any training on the user's collection (its model card lists the training data), while the
cross-encoder and ADDAX put fresh layers on top of it that must be learnt from the collection's few
judged queries. See BENCHMARKS.md for what that is worth on each collection.

Choices:

* Mean pooling and normalisation as the packaged model was trained (its ``1_Pooling`` config says mean).
* ``scale`` (20, sentence-transformers' default for that loss) multiplies the cosine in training and in
  scoring; it changes no ranking, only the temperature of the softmax.
* Document vectors are cached in evaluation mode (an LRU of ``doc_cache_size`` documents, keyed by id and
  text), so re-ranking encodes each document once; a training step clears the cache (unless only the
  query side is trained, below).
* Training keeps the pre-trained weights when no epoch beats them on the dev queries
  (``dev_at_start``, on by default here): fine-tuning on a few dozen queries can make a good encoder worse.
* ``--set train_side=query`` fine-tunes the query encoder only, against a frozen copy of the pre-trained
  encoder for the documents: DensePhrases' query-side fine-tuning (Lee et al., "Learning Dense
  Representations of Phrases at Scale", ACL 2021, arXiv:2012.12624, section 4.3), which adapts a dense
  retriever to a new collection without re-encoding it. Here it also makes training cheap: a document is
  encoded once, without gradients, and its vector is reused by every later batch and by the dev scoring
  (the cache is not cleared when the weights change, since the document side never does); only the short
  queries go through the backward pass. The document vectors stay exactly the pre-trained model's, so the
  fine-tuned scores stay on the zero-shot model's scale (``--zero-shot-rule anchor``). The model holds
  both encoders; ``save_pretrained`` writes the query encoder as the export's encoder and the document
  encoder to ``bi_encoder_documents.safetensors``.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Query

from infra.encoders import pretrained_config
from .lru import LRUCache
from .transformer_base import TransformerReranker, pad_ids, unique_rows

__all__ = ["BiEncoderConfig", "BiEncoderModel", "BiEncoderReranker", "TRAIN_SIDES"]

log = logging.getLogger(__name__)

#: what fine-tuning changes: both sides (one shared encoder), or the query side only (documents frozen)
TRAIN_SIDES = ("both", "query")
#: the export file of a query-side model's frozen document encoder
DOCUMENT_ENCODER_FILE = "bi_encoder_documents.safetensors"


@dataclass
class BiEncoderConfig:
    """Options of the bi-encoder (``--set scale=...``)."""

    scale: float = 20.0
    train_side: str = "both"

    def __post_init__(self):
        if self.scale <= 0:
            raise PipelineError(f"scale must be > 0, got {self.scale}")
        if self.train_side not in TRAIN_SIDES:
            raise PipelineError(f"train_side must be one of {', '.join(TRAIN_SIDES)}, got {self.train_side!r}")


class BiEncoderModel(nn.Module):
    """Encoder, mean pooling over real tokens, L2 normalisation; ``forward`` scores pairs by scaled cosine.

    With ``train_side="query"`` the documents go through ``doc_encoder``, a frozen copy of the encoder as
    it was built (no gradients, always in eval mode); otherwise ``doc_encoder`` is ``None`` and both sides
    share ``encoder``.
    """

    def __init__(self, encoder: nn.Module, config: BiEncoderConfig):
        super().__init__()
        self.encoder = encoder
        self.scale = config.scale
        self.doc_encoder = None
        if config.train_side == "query":
            self.doc_encoder = copy.deepcopy(encoder).requires_grad_(False).eval()

    def train(self, mode: bool = True):
        """Set training mode, except for a frozen document encoder, which stays in eval mode (no dropout:
        its vectors are cached across training steps)."""
        super().train(mode)
        if self.doc_encoder is not None:
            self.doc_encoder.eval()
        return self

    @staticmethod
    def _pooled(encoder: nn.Module, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        states = encoder(input_ids=ids, attention_mask=attention.long()).last_hidden_state
        weights = attention.unsqueeze(-1).to(states.dtype)
        pooled = (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return F.normalize(pooled, dim=-1)

    def embed(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """Unit vectors ``[N, d]`` of query texts ``ids [N, L]`` (``attention`` True = real token); with both
        sides trained, of any text."""
        return self._pooled(self.encoder, ids, attention)

    def embed_docs(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """Unit vectors ``[N, d]`` of document texts: by the frozen document encoder (without gradients)
        where there is one, else as :meth:`embed`."""
        if self.doc_encoder is None:
            return self.embed(ids, attention)
        with torch.no_grad():
            return self._pooled(self.doc_encoder, ids, attention)

    def match(self, queries: torch.Tensor, query_index: torch.Tensor, docs: torch.Tensor,
              doc_index: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of pairs (``query_index``/``doc_index`` pick each pair's rows)."""
        # float32 also under autocast: the product is the score, and bfloat16 would tie close documents
        return self.scale * (queries[query_index].float() * docs[doc_index].float()).sum(dim=-1)

    def forward(self, query_ids, query_attention, query_index, doc_ids, doc_attention, doc_index):
        """Scores ``[B]`` of the pairs of unique queries and documents."""
        return self.match(self.embed(query_ids, query_attention), query_index,
                          self.embed_docs(doc_ids, doc_attention), doc_index)


class BiEncoderReranker(TransformerReranker):
    """``bi-encoder``: mean-pooled, normalised encoder outputs of query and document, cosine score."""

    name = "bi-encoder"
    model_config_class = BiEncoderConfig
    #: fine-tuning that keeps what the pre-trained encoder knew: a small step warmed up and decayed, one epoch
    #: (a pass over the training queries' positives), the starting weights kept unless the dev metric improves;
    #: a batch of 64 documents is 16 queries, each with its positive and 3 BM25 negatives (BENCHMARKS.md, DL)
    train_defaults = {
        "loss": "in_batch", "learning_rate": 2e-5, "optimizer": "adamw", "weight_decay": 0.01, "grad_clip": 1.0,
        "batch_size": 64, "negatives": 3, "epochs": 1, "patience": 1, "score_batch_size": 128,
        "schedule": "linear", "warmup": 0.1, "dev_at_start": True,
    }

    def __init__(self, *args, **kwargs):
        """
        Args:
            *args: as :class:`~rerankers.transformer_base.TransformerReranker` takes them.
            **kwargs: as :class:`~rerankers.transformer_base.TransformerReranker` takes them.
        """
        super().__init__(*args, **kwargs)
        self._doc_vectors = LRUCache(self.encoder_config.doc_cache_size)

    def build_module(self, encoder):
        """A fresh :class:`BiEncoderModel` around ``encoder``.

        Args:
            encoder: the pre-trained ``AutoModel``.

        Returns:
            The module.
        """
        return BiEncoderModel(encoder, self.model_config)

    def clear_cache(self) -> None:
        """Forget cached document vectors (after the weights change)."""
        self._doc_vectors = LRUCache(self.encoder_config.doc_cache_size)

    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """The unique queries and documents of ``pairs`` as padded ids with special tokens.

        Args:
            pairs: ``(query, doc)`` pairs.

        Returns:
            ``*_ids`` and ``*_attention`` of the unique texts, ``*_index`` ``[B]`` mapping the pairs to them,
            and ``doc_keys`` (the unique documents' cache keys).
        """
        self._require_prepared()
        query_firsts, query_index = unique_rows([self.query_key(q) for q, _ in pairs])
        doc_keys = [self.doc_key(d) for _, d in pairs]
        doc_firsts, doc_index = unique_rows(doc_keys)
        pad = self.tokenizer.pad_token_id or 0
        batch: dict = {"doc_keys": [doc_keys[i] for i in doc_firsts]}
        sides = (("query", self.query_ids([pairs[i][0] for i in query_firsts]), query_index),
                 ("doc", self.doc_ids([pairs[i][1] for i in doc_firsts]), doc_index))
        for side, texts, index in sides:
            ids, attention = pad_ids([self.special.single(t) for t in texts], pad)
            batch[f"{side}_ids"], batch[f"{side}_attention"] = ids, attention
            batch[f"{side}_index"] = torch.tensor(index, dtype=torch.long)
        return batch

    @property
    def pretrained_head_file(self) -> str | None:
        """The export file of the weights outside the (query) encoder: the frozen document encoder of a
        query-side model, none otherwise."""
        return DOCUMENT_ENCODER_FILE if self.model_config.train_side == "query" else None

    def forward(self, batch):
        """Scores of an encoded batch. Document vectors come from the cache where present whenever they
        carry no gradient: without gradients, and always for a query-side model (its documents are frozen).

        Args:
            batch: what :meth:`encode` returned.

        Returns:
            A ``[B]`` tensor of cosine scores.
        """
        module = self.module
        tensors = self.tensors(batch)
        frozen_docs = module.doc_encoder is not None
        if not frozen_docs and (module.training or torch.is_grad_enabled()
                                or self.encoder_config.doc_cache_size <= 0):
            if module.training:
                self.clear_cache()  # the weights are about to change
            return module(**tensors)
        queries = module.embed(tensors["query_ids"], tensors["query_attention"])
        return module.match(queries, tensors["query_index"], self._cached_doc_vectors(batch, tensors),
                            tensors["doc_index"])

    def _cached_doc_vectors(self, batch, tensors) -> torch.Tensor:
        """``[D, d]`` vectors of the batch's unique documents (float32), encoding only those not cached."""
        module = self.module
        keys = batch["doc_keys"]
        vectors = [self._doc_vectors.get(key) for key in keys]
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        if missing:
            rows = torch.tensor(missing, device=tensors["doc_ids"].device)
            attention = tensors["doc_attention"][rows]
            width = int(attention.sum(dim=1).max())
            fresh = module.embed_docs(tensors["doc_ids"][rows, :width], attention[:, :width]).float()
            for row, i in enumerate(missing):
                vectors[i] = fresh[row]
                self._doc_vectors.put(keys[i], fresh[row])
        return torch.stack(vectors)

    @classmethod
    def load(cls, path) -> "BiEncoderReranker":
        """A checkpoint written by :meth:`save`, a directory written by :meth:`save_pretrained`, or, for a
        path that is neither, the pre-trained sentence encoder of that name or directory used as it is
        (``--model all-MiniLM-L6-v2``: zero-shot, nothing trained). A directory that is none of these (no
        export description, no ``config.json``) is a :class:`~pipeline.core.errors.CheckpointError` naming it.

        Args:
            path: a checkpoint file, an export directory, or an encoder's name or directory.

        Returns:
            The re-ranker, in eval mode, ready to score.

        Raises:
            CheckpointError: a damaged checkpoint, or a directory that is none of these.

        Example:
            >>> reranker = BiEncoderReranker.load("all-MiniLM-L6-v2")   # zero-shot  # doctest: +SKIP
        """
        from .hf_export import CONFIG_FILES

        location = Path(path)
        if location.is_file():
            return super().load(path)
        if location.is_dir():
            if any((location / name).is_file() for name in CONFIG_FILES):
                return cls.from_pretrained(location)
            if not (location / "config.json").is_file():
                raise CheckpointError(f"{path}: a directory without config.json, so neither an export written by "
                                      f"save_pretrained() nor a Hugging Face encoder directory")
        reranker = cls()
        config = reranker.encoder_config
        config.encoder = str(path)
        # --model takes no --set options: texts are cut to what the encoder's positions hold (with [CLS]/[SEP])
        limit = getattr(pretrained_config(config.encoder), "max_position_embeddings", None)
        if limit is not None and max(config.max_query_length, config.max_doc_length) + 2 > limit:
            config.max_doc_length = min(config.max_doc_length, limit - 2)
            config.max_query_length = min(config.max_query_length, limit - 2)
            log.warning("%s: texts cut to %d word pieces to fit %s", cls.name, config.max_doc_length, config.encoder)
        reranker.prepare()
        reranker.module.eval()
        return reranker
