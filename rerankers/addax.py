"""ADDAX: adaptive feature discrimination and denoising for asymmetric text matching (Li, Li and Guo).

Reference: Yan Li, Chenliang Li and Junjun Guo. "Adaptive Feature Discrimination and Denoising for
Asymmetric Text Matching." Proceedings of the 29th International Conference on Computational Linguistics
(COLING 2022), ACL Anthology (no DOI or arXiv version). Spec: Sec. 3.2 for the model, eq. 1-14; Sec. 3.3
for the loss, eq. 15; Sec. 4.1 for the hyper-parameters; Table 3 for the ablations. Equation numbers
below refer to that paper.

The model, per (query Q, document D) pair:

* Shared context encoder (eq. 1-2): one pre-trained transformer (default the packaged MiniLM; the paper
  uses BERT-base) encodes Q and D separately into ``U_Q`` [l, d] and ``V_D`` [t, d].
* MAGS (eq. 3-13): a query-side and a document-side MAG cell with the same structure and their own
  parameters. Cross-attention ``S = U V^T`` (eq. 3), reference representations ``R = softmax(S) V``
  (eq. 4), divergence ``D = U - R``, an element-wise gate ``E = sigmoid(S W1 + b1)`` (eq. 5-7) and a
  per-token gate ``p = sigmoid(S w1 + b1)`` (eq. 8) mixing ``p F(r) (+) (1-p) F(d)`` (eq. 9), then a
  highway network and a projection back to d (eq. 10-13) give ``H^Q`` and ``H^D``.
* Locality-constrained hashing denoiser on the document side: a three-layer MLP encoder ``B = F_en(H^D)``,
  codes ``B^D = tanh(alpha B)`` (alpha = 5), the quantisation loss ``L1 = ||B^D - sgn(B)||_F^2``, a
  three-layer MLP decoder and the reconstruction loss ``L2 = ||F_de(B^D) - H^D||_F^2``. The query side
  gets one MLP layer to h dimensions (h = 300).
* MaxSim (eq. 14): ``f(Q, D) = sum_i max_j cos(h_i^Q, b_j^D)``.
* Loss (eq. 15): hinge ``L3 = max(0, 1 - f(Q, D) + f(Q, D-))`` plus ``delta L1 + gamma L2``
  (delta = 1e-6, gamma = 0.003). The hinge loss is the Trainer's ``hinge`` (margin 1.0, ADDAX's default);
  the module stores L1 and L2 of the pairs it just scored in training mode and
  :meth:`AddaxReranker.auxiliary_loss` hands them, weighted, to the Trainer (see
  :class:`~rerankers.training.auxiliary.AuxiliaryLossTrainer`).

Ablations (Table 3), each a registered name that only flips config defaults (so ``--set`` can flip them
too): ``addax-no-mags`` (``mags=false``: ``H^Q = U_Q``, ``H^D = V_D``), ``addax-no-hw`` (``highway=false``:
the two gated signals are added, ``p F(r) + (1-p) F(d)``, instead of eq. 9-13), ``addax-no-hd``
(``hashing=false``: no denoiser, no query MLP, MaxSim on ``H^Q``/``H^D`` in d dimensions, no L1/L2) and
``addax-att-mags`` (``hashing=false, attention_only=true``: MAGS keeps only its cross-attention,
``H = R``, eq. 3-4).

Choices where the paper is vague (each is an option where that is cheap):

* Tokens (eq. 1-2). The encoder sees ``[CLS] text [SEP]``; the positions that MAGS and MaxSim use are
  ``[CLS]`` and the text's word pieces, not the trailing ``[SEP]`` (eq. 1-2 write ``[CLS] q1..ql``; BERT
  needs its ``[SEP]``). Keeping ``[CLS]`` also gives an empty text one position.
* Similarity scale (eq. 3). ``S = U V^T`` unscaled, as written (``similarity_scale=1``); with MiniLM,
  entries reach ~100, so softmax (eq. 4) is nearly a hard argmax, which is the "blind search for the most
  similar token" the paper describes. ``similarity_scale`` multiplies S (e.g. ``1/sqrt(d)``).
* Attention-pattern gates (eq. 5, 8). ``W1`` is [t, d] and ``w1`` [t, 1]: one row per counterpart
  *position*, so the counterpart's length is capped: ``max_doc_length + 1`` rows for the query-side cell and
  ``max_query_length + 1`` for the document-side one (the +1 is ``[CLS]``). A shorter counterpart uses the
  first rows; its padded columns of S are zeroed, so padding never changes a gate. ``B1`` (written
  ``R^{t x d}``, which cannot add to ``S W1`` in ``R^{l x d}``) is a bias vector in ``R^d`` broadcast over
  positions, and ``b1`` a scalar.
* Dropout (0.1, Sec. 4.1) is applied to the encoder outputs U and V before MAGS (the encoder's own
  dropout acts inside it); none elsewhere.
* Hashing MLPs. Encoder: ``d -> m`` (tanh), ``m -> m`` (ReLU: "the second layer"), ``m -> h`` (tanh: "others
  are tanh"), so ``B`` is in (-1, 1) before ``tanh(alpha B)``; ``m = hash_hidden`` (300). Decoder ("encoder
  transpose"): the mirrored architecture ``h -> m`` (tanh), ``m -> m`` (ReLU), ``m -> d`` (linear: ``H^D`` is
  unbounded), with its own weights (not tied).
* Query MLP: "a single MLP layer" is ``Linear(d, h)`` then tanh (codes live in (-1, 1) too).
* L1, L2 (eq. 15). The paper calls them MSE losses but writes squared Frobenius norms; we take the norms
  as written (``aux_reduction="sum"``: sum over a document's real positions and features), which is the
  reading under which delta = 1e-6 is not negligible; ``aux_reduction="mean"`` averages instead. They are
  computed for every scored pair (positives and negatives), and the Trainer gets
  ``(delta sum L1 + gamma sum L2) / units`` per batch, i.e. eq. 15's sum over the triplets of a batch
  divided like the hinge loss by the number of triplets (the Trainer averages). Gradients of L2 flow into
  ``H^D`` (end to end, as the paper trains).
* Scoring uses the continuous codes ``tanh(alpha B)`` as in training (no ``sgn`` at inference).
* Without the denoiser (``hashing=false``) the query MLP, whose only stated purpose is to match the
  denoiser's dimension, is dropped too.
* Optimiser: Adam at 1e-5 (wikiQA), batches of 32 triplets (``batch_size=64`` pairs), 18 epochs with the
  Trainer's early stopping, gradient clipping at 1.0 (not in the paper; usual for fine-tuning).
* Padding. Everything is batched with masks; the position-wise layers (eq. 5-13, the MLPs) run on the
  real positions only (:func:`positionwise`), which saves the work on padding without changing a score.
* Document cache (not in the paper; it is what makes a two-tower model fast at re-ranking): ``V_D``
  (eq. 2) does not depend on the query, so in evaluation mode without gradients the encoder output of a
  document seen before is reused (an LRU of ``doc_cache_size`` documents, keyed by id and text). Any
  training-mode forward, ``fit`` and ``load`` clear it. ``U_Q`` (eq. 1) likewise does not depend on the
  document: within one scoring call (``score_many``, whose batches mix queries) each query is encoded once
  (a cache that every scoring call starts afresh, also bounded by ``doc_cache_size``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.core.errors import PipelineError
from pipeline.core.records import Doc, Query

from .blocks.gating import MAGCell
from .blocks.hashing import HashingDenoiser
from .blocks.layers import cached_states, positionwise
from infra.maxsim import maxsim as late_interaction
from .hf_export import ADDAX_CONFIG_FILE, ADDAX_HEAD_FILE
from .lru import LRUCache
from .transformer_base import TransformerReranker, pad_ids, unique_rows

__all__ = [
    "AddaxConfig", "AddaxModel", "MAGCell", "HashingDenoiser", "maxsim", "positionwise",
    "AddaxReranker", "AddaxNoMAGSReranker", "AddaxNoHighwayReranker", "AddaxNoHashingReranker",
    "AddaxAttentionMAGSReranker",
]

AUX_REDUCTIONS = ("sum", "mean")


@dataclass
class AddaxConfig:
    """Hyper-parameters of ADDAX; defaults follow Sec. 4.1 (each can be set with ``--set name=value``).

    Attributes:
        hidden_dim: h, the dimension of the hash codes and of the query MLP's output (300).
        hash_hidden: m, width of the inner layers of the denoiser's encoder and decoder MLPs.
        alpha: the hashing slope in ``B^D = tanh(alpha B)`` (5).
        delta: weight of the quantisation loss L1 in eq. 15 (1e-6).
        gamma: weight of the reconstruction loss L2 in eq. 15 (0.003).
        dropout: on the encoder outputs before MAGS (0.1).
        similarity_scale: factor on ``S = U V^T`` (eq. 3; 1 as written).
        aux_reduction: ``"sum"`` (squared Frobenius norms as written) or ``"mean"`` (per element).
        mags: use MAGS (eq. 3-13); false is Table 3's "w/o MAGS".
        highway: fuse the gated signals with eq. 9-13; false is "w/o HW" (add them).
        hashing: use the hashing denoiser and the query MLP; false is "w/o HD".
        attention_only: MAGS keeps only its cross-attention (eq. 3-4); with ``hashing=false`` this is
            "Att-MAGS". Ignored when ``mags`` is false.
    """

    hidden_dim: int = 300
    hash_hidden: int = 300
    alpha: float = 5.0
    delta: float = 1e-6
    gamma: float = 0.003
    dropout: float = 0.1
    similarity_scale: float = 1.0
    aux_reduction: str = "sum"
    mags: bool = True
    highway: bool = True
    hashing: bool = True
    attention_only: bool = False

    def __post_init__(self):
        if self.hidden_dim < 1 or self.hash_hidden < 1:
            raise PipelineError("hidden_dim and hash_hidden must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise PipelineError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.aux_reduction not in AUX_REDUCTIONS:
            raise PipelineError(f"aux_reduction must be one of {', '.join(AUX_REDUCTIONS)}, got {self.aux_reduction!r}")
        if self.delta < 0 or self.gamma < 0:
            raise PipelineError("delta and gamma must be >= 0")


# ------------------------------------------------------------------------------------------ blocks
# positionwise and cached_states (encoder states kept per text): rerankers.blocks.layers; MAGCell (eq. 3-13):
# rerankers.blocks.gating; HashingDenoiser (Sec. 3.2): rerankers.blocks.hashing


def maxsim(queries: torch.Tensor, query_mask: torch.Tensor, docs: torch.Tensor, doc_mask: torch.Tensor) -> torch.Tensor:
    """Eq. 14: ``f(Q, D) = sum_i max_j cos(h_i^Q, b_j^D)`` over real positions.

    Args:
        queries: ``[B, l, h]``; query_mask: ``[B, l]`` bool (True = real position).
        docs: ``[B, t, h]``; doc_mask: ``[B, t]`` bool.

    Returns:
        ``[B]`` scores in ``[-l, l]``.
    """
    return late_interaction(F.normalize(queries, dim=-1, eps=1e-8), query_mask,
                            F.normalize(docs, dim=-1, eps=1e-8), doc_mask)


class AddaxModel(nn.Module):
    """The ADDAX network around a pre-trained ``encoder`` (see the module docstring).

    ``context`` is eq. 1-2 (shared by both texts); ``match`` is eq. 3-14 on encoder states; ``forward``
    does both for a batch whose unique queries and documents are encoded once and gathered per pair by
    ``query_index``/``doc_index``. In training mode (with gradients) ``last_auxiliary`` holds the pairs'
    ``(L1, L2)`` ``[B]`` each, or ``None`` without the denoiser.
    """

    def __init__(self, encoder: nn.Module, config: AddaxConfig, query_positions: int, doc_positions: int):
        super().__init__()
        self.config = config
        self.encoder = encoder
        dim = encoder.config.hidden_size
        self.dropout = nn.Dropout(config.dropout)
        if config.mags:
            self.query_mag = MAGCell(dim, doc_positions, config.attention_only, config.highway)
            self.doc_mag = MAGCell(dim, query_positions, config.attention_only, config.highway)
        if config.hashing:
            self.query_mlp = nn.Sequential(nn.Linear(dim, config.hidden_dim), nn.Tanh())
            self.denoiser = HashingDenoiser(dim, config.hash_hidden, config.hidden_dim, config.alpha,
                                            config.aux_reduction)
        self.last_auxiliary: tuple[torch.Tensor, torch.Tensor] | None = None

    def context(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """Eq. 1-2: word-level contextual states ``[N, L, d]`` of texts ``ids`` ``[N, L]``."""
        return self.encoder(input_ids=ids, attention_mask=attention.long()).last_hidden_state

    def match(self, query_states, query_positions, query_index, doc_states, doc_positions, doc_index):
        """Eq. 3-14: scores ``[B]`` of pairs ``(query_index[b], doc_index[b])`` of the unique texts' states.

        ``*_positions`` (bool, True = a position MAGS and MaxSim use) start at column 0 and are contiguous;
        columns past the longest are trimmed (they hold only ``[SEP]`` and padding).
        """
        query_width = int(query_positions.sum(dim=1).max())
        doc_width = int(doc_positions.sum(dim=1).max())
        u = self.dropout(query_states[:, :query_width])[query_index]                  # U_Q [B, l, d]
        v = self.dropout(doc_states[:, :doc_width])[doc_index]                        # V_D [B, t, d]
        q_mask = query_positions[:, :query_width][query_index]
        d_mask = doc_positions[:, :doc_width][doc_index]
        if self.config.mags:
            similarity = self.config.similarity_scale * (u @ v.transpose(1, 2))       # S (eq. 3) [B, l, t]
            h_query = self.query_mag(u, v, d_mask, similarity, q_mask)                # H^Q
            h_doc = self.doc_mag(v, u, q_mask, similarity.transpose(1, 2), d_mask)    # H^D
        else:
            h_query, h_doc = u, v
        self.last_auxiliary = None
        if self.config.hashing:
            with_losses = self.training and torch.is_grad_enabled()
            h_query = positionwise(self.query_mlp, q_mask, h_query)                   # H^Q = MLP(H^Q)
            codes, quantization, reconstruction = self.denoiser(h_doc, d_mask, with_losses)
            h_doc = codes                                                             # B^D
            if with_losses:
                self.last_auxiliary = (quantization, reconstruction)
        return maxsim(h_query, q_mask, h_doc, d_mask)                                 # eq. 14

    def forward(self, query_ids, query_attention, query_positions, query_index,
                doc_ids, doc_attention, doc_positions, doc_index):
        query_states = self.context(query_ids, query_attention)
        doc_states = self.context(doc_ids, doc_attention)
        return self.match(query_states, query_positions, query_index, doc_states, doc_positions, doc_index)


# --------------------------------------------------------------------------------------- re-rankers


class AddaxReranker(TransformerReranker):
    """``addax``: the full model (MAGS, highway, hashing denoiser); ablations below flip its defaults."""

    name = "addax"
    model_config_class = AddaxConfig
    # save_pretrained: the encoder in Hugging Face's layout, MAGS / denoiser / query MLP beside it
    pretrained_config_file = ADDAX_CONFIG_FILE
    pretrained_head_file = ADDAX_HEAD_FILE
    train_defaults = {
        "loss": "hinge", "margin": 1.0, "optimizer": "adam", "learning_rate": 1e-5, "weight_decay": 0.0,
        "batch_size": 64, "negatives": 4, "epochs": 18, "patience": 3, "grad_clip": 1.0, "score_batch_size": 64,
    }

    def __init__(self, *args, **kwargs):
        """
        Args:
            *args: as :class:`~rerankers.transformer_base.TransformerReranker` takes them.
            **kwargs: as :class:`~rerankers.transformer_base.TransformerReranker` takes them.
        """
        super().__init__(*args, **kwargs)
        self._doc_states = LRUCache(self.encoder_config.doc_cache_size)
        self._query_states = LRUCache(self.encoder_config.doc_cache_size)

    def build_module(self, encoder):
        """A fresh :class:`AddaxModel` around ``encoder``, sized for the query and document lengths.

        Args:
            encoder: the pre-trained ``AutoModel``.

        Returns:
            The module.
        """
        prefix = self.special.prefix_length
        return AddaxModel(encoder, self.model_config, self.encoder_config.max_query_length + prefix,
                          self.encoder_config.max_doc_length + prefix)

    def clear_cache(self) -> None:
        """Forget every cached document and query encoding (and apply the current ``doc_cache_size``)."""
        self._doc_states = LRUCache(self.encoder_config.doc_cache_size)
        self._query_states = LRUCache(self.encoder_config.doc_cache_size)

    def before_scoring(self, docs: Sequence[Doc], queries: Sequence[Query] = ()) -> None:
        """Tokenize the call's texts, and start its query-encoding cache afresh.

        Within one call, whose batches mix queries (``score_many``), a query is encoded once; the document
        cache persists.

        Args:
            docs: the call's distinct documents.
            queries: the call's distinct queries.
        """
        super().before_scoring(docs, queries)
        self._query_states = LRUCache(self.encoder_config.doc_cache_size)

    @property
    def doc_cache(self) -> LRUCache:
        """The document-encoding cache (for inspection: ``len``, ``hits``, ``misses``)."""
        return self._doc_states

    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """The unique queries and documents of ``pairs`` as padded ids.

        Args:
            pairs: ``(query, doc)`` pairs.

        Returns:
            ``*_ids``, ``*_attention`` (real tokens, specials included), ``*_positions`` (``[CLS]`` and the
            text), ``*_index`` ``[B]`` mapping pairs to them, and ``doc_keys``/``query_keys`` (the unique
            texts' cache keys).
        """
        self._require_prepared()
        query_keys_all = [self.query_key(q) for q, _ in pairs]
        query_firsts, query_index = unique_rows(query_keys_all)
        doc_keys_all = [self.doc_key(d) for _, d in pairs]
        doc_firsts, doc_index = unique_rows(doc_keys_all)
        queries = self.query_ids([pairs[i][0] for i in query_firsts])
        docs = self.doc_ids([pairs[i][1] for i in doc_firsts])
        pad = self.tokenizer.pad_token_id or 0
        prefix = self.special.prefix_length
        batch = {}
        for side, texts, index in (("query", queries, query_index), ("doc", docs, doc_index)):
            ids, attention = pad_ids([self.special.single(t) for t in texts], pad)
            kept = torch.tensor([prefix + len(t) for t in texts])
            batch[f"{side}_ids"] = ids
            batch[f"{side}_attention"] = attention
            batch[f"{side}_positions"] = torch.arange(ids.shape[1])[None, :] < kept[:, None]
            batch[f"{side}_index"] = torch.tensor(index, dtype=torch.long)
        batch["doc_keys"] = [doc_keys_all[i] for i in doc_firsts]
        batch["query_keys"] = [query_keys_all[i] for i in query_firsts]
        return batch

    def forward(self, batch):
        """Scores of an encoded batch.

        In evaluation mode without gradients, document (and, within a scoring call, query) states come from
        the caches and only the uncached texts go through the encoder; a training-mode call clears the caches.

        Args:
            batch: what :meth:`encode` returned.

        Returns:
            A ``[B]`` tensor of scores.
        """
        module = self.module
        if module.training:
            self.clear_cache()  # the weights are about to change
        if module.training or torch.is_grad_enabled() or self.encoder_config.doc_cache_size <= 0:
            return module(**self.tensors(batch))
        tensors = self.tensors(batch)
        query_states = cached_states(module.context, self._query_states, batch["query_keys"],
                                     tensors["query_ids"], tensors["query_attention"])
        doc_states = cached_states(module.context, self._doc_states, batch["doc_keys"], tensors["doc_ids"],
                                   tensors["doc_attention"])
        return module.match(query_states, tensors["query_positions"], tensors["query_index"],
                            doc_states, tensors["doc_positions"], tensors["doc_index"])

    def auxiliary_loss(self, units: int):
        """Eq. 15's ``delta L1 + gamma L2`` of the pairs just scored in training mode; consumes what the
        module stored.

        Args:
            units: the batch's training units (triplets for the hinge loss).

        Returns:
            The loss divided by ``units`` like the Trainer's mean loss; ``None`` when the denoiser is off or
            nothing was stored.
        """
        stored = self.module.last_auxiliary if self.module is not None else None
        if stored is None:
            return None
        self.module.last_auxiliary = None
        quantization, reconstruction = stored
        config = self.model_config
        return (config.delta * quantization.float().sum() + config.gamma * reconstruction.float().sum()) / max(1, units)


class AddaxNoMAGSReranker(AddaxReranker):
    """``addax-no-mags``: Table 3's w/o MAGS (encoder states go straight to the denoiser and query MLP)."""

    name = "addax-no-mags"
    model_defaults = {"mags": False}


class AddaxNoHighwayReranker(AddaxReranker):
    """``addax-no-hw``: Table 3's w/o HW (the gated signals are added instead of eq. 9-13)."""

    name = "addax-no-hw"
    model_defaults = {"highway": False}


class AddaxNoHashingReranker(AddaxReranker):
    """``addax-no-hd``: Table 3's w/o HD (no hashing denoiser, no query MLP, no L1/L2)."""

    name = "addax-no-hd"
    model_defaults = {"hashing": False}


class AddaxAttentionMAGSReranker(AddaxReranker):
    """``addax-att-mags``: Table 3's Att-MAGS (w/o HD, and MAGS keeps only its cross-attention)."""

    name = "addax-att-mags"
    model_defaults = {"hashing": False, "attention_only": True}
