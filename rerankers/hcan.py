"""HCAN: Hybrid Co-Attention Network (Rao et al., EMNLP 2019).

Reference: Jinfeng Rao, Linqing Liu, Yi Tay, Wei Yang, Peng Shi and Jimmy
Lin. "Bridging the Gap Between Relevance Matching and Semantic Matching for
Short Text Similarity Modeling." EMNLP-IJCNLP 2019, pp. 5370-5381.
doi:10.18653/v1/D19-1540. Spec: Sec. 2 for the model, Sec. 3.2 for the
hyper-parameters. Section numbers and equation
numbers below refer to that paper. Where the paper is silent or ambiguous we
follow the authors' released Keras code (github.com/jinfengr/hcan,
``attention_model.py`` / ``encoders.py``), and every such choice is written
down where it is made. Summary of the choices:

* Layers. Relevance matching (RM, Sec. 2.2) runs on the word embeddings
  ("layer 0") and on each of the N encoder layers (N+1 levels, matching the
  IDF tensor layout); semantic matching (SM, Sec. 2.3) runs on the N encoder
  layers only, as in the released code and the ``l = 1..N`` of Sec. 2.4.
* Convolution padding. Output position i of a CNN layer covers the phrase
  that *starts* at token i (zero padding on the right only). For k=2 this is
  exactly Keras ``padding='same'`` that the authors used; for the wider wide-
  encoder windows it is our choice (Keras would centre them), made so every
  level's phrase at i starts at i and the caller's IDF lookup is uniform.
* RM softmax axis. Eq. 1's text normalises each query phrase's scores over
  the context (``rm_softmax_over="context"``). Then the Mean feature is
  identically ``1/m`` (m = real document length), and Max is near 1 whether
  or not the phrase occurs (the softmax always crowns some best match) while a
  phrase occurring three times gets Max 1/3. The released code normalises
  over the query axis for each context position (``rm_softmax_over="query"``),
  which keeps both features informative and ranks clearly better (RM only,
  Microblog 2013: BENCHMARKS.md, HCAN section). The default
  is therefore ``"query"``: the authors' results come from that code.
* IDF weights are applied at every level (the released code applies them to
  levels 0-1 only; the paper says the weights change with the layer).
* Co-attention (Sec. 2.3): ``softmax_col`` normalises over the query axis
  (context-to-query, as in BiDAF and the released code); the
  query-to-context weights are ``softmax_over_context(max_over_query(A))`` of
  the *unnormalised* scores, as in BiDAF and the released code (the paper's
  ``max_col(A) U_c`` leaves the normalisation implicit).
* SM output (eq. 2): "the last hidden state (with dimension d)": a BiLSTM with
  ``d/2`` units per direction whose final forward and backward states are
  concatenated, so ``O_SM`` is in R^d (``sm_pooling="last"``). The released
  code instead max- and mean-pools all BiLSTM outputs
  (``sm_pooling="maxmean"``, giving 2d features).
* Final layer (Sec. 2.4): ``Linear(features, d) -> ReLU -> Linear(d, 1)``.
  The single output is the log-odds of relevance: training it with
  ``binary_cross_entropy_with_logits`` is the paper's two-class softmax NLL.
* Dropout: channel (spatial) dropout on the embeddings and dropout after every
  encoder layer and on the SM BiLSTM input, as in the released code; none in
  the MLP. No highway layer (off by default in the released code).
* RM features are laid out per query position, so the MLP input has a fixed
  ``query_slots`` positions per level; shorter queries leave zeros there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
import torch.nn as nn

from pipeline.core.errors import ConfigError
from rerankers.blocks import (
    BilinearInteraction,
    MaskedBiLSTM,
    MaskedConv1d,
    SpatialDropout1d,
    bidaf_coattention,
    build_embedding,
    cosine_matrix,
    dot_matrix,
    feed_forward,
    interaction_mask,
    masked_fill_padding,
    masked_max,
    masked_mean,
    masked_softmax,
)

__all__ = [
    "HCANConfig",
    "HCANModel",
    "hcan_phrase_lengths",
    "hcan_query_phrases",
    "relevance_matching_features",
    "SemanticMatching",
    "DeepEncoder",
    "WideEncoder",
    "ContextualEncoder",
]

ENCODERS = ("deep", "wide", "contextual")
MATCHINGS = ("rm", "sm", "full")
RM_NORMALISATIONS = ("query", "context", "none")


@dataclass
class HCANConfig:
    """Hyper-parameters of HCAN; defaults follow Sec. 3.2.

    Attributes:
        encoder: ``"deep"`` (N stacked CNNs of width k), ``"wide"`` (N parallel
            CNNs of widths k..k+N-1) or ``"contextual"`` (N stacked BiLSTMs),
            Sec. 2.1.
        matching: ``"rm"`` (relevance matching only), ``"sm"`` (semantic
            matching only) or ``"full"`` (both; the HCAN of Tables 2-4).
        num_layers: N, encoder layers (4 in Sec. 3.2).
        kernel_size: k, CNN window size (2 in Sec. 3.2).
        num_filters: F, CNN filters, also the BiLSTM-encoder output size
            (tuned in {128, 256, 512}).
        hidden_dim: d, size of ``O_SM`` and of the MLP hidden layer (150).
        dropout: dropout rate (tuned in [0.1, 0.5]).
        query_slots: query positions the MLP has RM inputs for (the text's
            ``max_query_length`` is capped to it); longer queries must be
            truncated by the caller. Called ``max_query_len`` before, a name
            checkpoints of that time still carry (``RENAMED``).
        rm_softmax_over: ``"context"`` (eq. 1 as written) or ``"query"``
            (released code); see the module docstring. ``"none"`` (neither):
            Max and Mean of the *cosine* matrix, unnormalised, so an exact
            match reads 1 whatever else the text holds (what DRMM, KNRM and
            MatchPyramid read); ``benchmarks/exact_match_probe.py`` measures
            the three.
        rm_null_logit: add a learned "no match" logit (one per level,
            initialised at 0) to the RM softmax, so the normalised similarity
            is measured against an absolute reference as well as against the
            other phrases; see the module docstring.
        sm_pooling: ``"last"`` (eq. 2: final BiLSTM states, d features) or
            ``"maxmean"`` (released code: max+mean over positions, 2d).
    """

    encoder: str = "deep"
    matching: str = "full"
    num_layers: int = 4
    kernel_size: int = 2
    num_filters: int = 256
    hidden_dim: int = 150
    dropout: float = 0.1
    query_slots: int = 20
    rm_softmax_over: str = "query"
    rm_null_logit: bool = False
    sm_pooling: str = "last"

    #: earlier option names, read from older checkpoints
    RENAMED: ClassVar[dict[str, str]] = {"max_query_len": "query_slots"}

    def __post_init__(self) -> None:
        if self.encoder not in ENCODERS:
            raise ConfigError(f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        if self.matching not in MATCHINGS:
            raise ConfigError(f"matching must be one of {MATCHINGS}, got {self.matching!r}")
        if self.rm_softmax_over not in RM_NORMALISATIONS:
            raise ConfigError(f"rm_softmax_over must be one of {RM_NORMALISATIONS}, got {self.rm_softmax_over!r}")
        if self.rm_null_logit and self.rm_softmax_over == "none":
            raise ConfigError("rm_null_logit takes part in the RM softmax: it needs rm_softmax_over 'query' or 'context'")
        if self.sm_pooling not in ("last", "maxmean"):
            raise ConfigError("sm_pooling must be 'last' or 'maxmean'")
        if self.num_layers < 1 or self.kernel_size < 1 or self.query_slots < 1:
            raise ConfigError("num_layers, kernel_size and query_slots must be >= 1")
        if self.hidden_dim % 2:
            raise ConfigError("hidden_dim must be even (split over the two BiLSTM directions)")
        if self.encoder == "contextual" and self.num_filters % 2:
            raise ConfigError("num_filters must be even for the contextual (BiLSTM) encoder")


def hcan_phrase_lengths(config: HCANConfig) -> list[int]:
    """n-gram length represented at each of the N+1 levels (embeddings first).

    Position i of level l represents the query tokens ``i .. i+n_l-1`` (cut at
    the query end), where ``n_l`` is:

    * level 0 (word embeddings): 1;
    * deep encoder, layer l: ``l*(k-1)+1``, the receptive field of l stacked
      width-k convolutions padded on the right (k=2: 2, 3, 4, 5);
    * wide encoder, layer l: ``k+l-1``, the width of that parallel convolution
      (k=2: 2, 3, 4, 5);
    * contextual encoder: 1 at every layer (the BiLSTM output at i is the
      contextualised word i; its IDF is the word's).

    Args:
        config: the model configuration.

    Returns:
        ``[n_0, n_1, ..., n_N]``.
    """
    k, n = config.kernel_size, config.num_layers
    if config.encoder == "deep":
        per_layer = [layer * (k - 1) + 1 for layer in range(1, n + 1)]
    elif config.encoder == "wide":
        per_layer = [k + layer - 1 for layer in range(1, n + 1)]
    else:
        per_layer = [1] * n
    return [1] + per_layer


def hcan_query_phrases(tokens: Sequence[str], config: HCANConfig) -> list[list[tuple[str, ...]]]:
    """The query phrase whose IDF goes into ``query_idf[l, i]``.

    A reference for callers building ``query_idf``: the phrase at level l,
    position i is ``tuple(tokens[i : i + n_l])`` with ``n_l`` from
    :func:`hcan_phrase_lengths`, truncated at the end of the query.

    Args:
        tokens: the real (unpadded) query tokens.
        config: the model configuration.

    Returns:
        ``phrases[l][i]`` for ``l = 0..N`` and ``i = 0..len(tokens)-1``.
    """
    return [
        [tuple(tokens[i : i + length]) for i in range(len(tokens))]
        for length in hcan_phrase_lengths(config)
    ]


# --------------------------------------------------------------------------
# Hybrid encoders (Sec. 2.1)
# --------------------------------------------------------------------------


class DeepEncoder(nn.Module):
    """Deep encoder, Sec. 2.1: ``U^h = CNN^h(U^{h-1})``, h = 1..N, width k, F filters, ReLU.

    Each layer is padded on the right, so position i of layer h covers tokens
    ``i .. i+h(k-1)`` of the input. Parameters are shared by query and context.
    """

    def __init__(self, input_dim: int, config: HCANConfig) -> None:
        """
        Args:
            input_dim: embedding size L.
            config: uses num_layers, kernel_size, num_filters, dropout.
        """
        super().__init__()
        dims = [input_dim] + [config.num_filters] * config.num_layers
        self.convs = nn.ModuleList(
            MaskedConv1d(dims[i], dims[i + 1], config.kernel_size, padding_side="right")
            for i in range(config.num_layers)
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """``[B, L, E]``, ``[B, L]`` -> N tensors ``[B, L, F]`` (zeros at padding)."""
        outputs = []
        for conv in self.convs:
            # The released code feeds the dropped-out tensor both to the next
            # layer and to the matching modules.
            x = self.dropout(conv(x, mask))
            outputs.append(x)
        return outputs


class WideEncoder(nn.Module):
    """Wide encoder, Sec. 2.1: N parallel CNNs over the embeddings, widths ``k .. k+N-1``.

    Layer l (1-based) has width ``k+l-1`` and is padded on the right, so
    position i covers tokens ``i .. i+k+l-2``.
    """

    def __init__(self, input_dim: int, config: HCANConfig) -> None:
        """
        Args:
            input_dim: embedding size L.
            config: uses num_layers, kernel_size, num_filters, dropout.
        """
        super().__init__()
        self.convs = nn.ModuleList(
            MaskedConv1d(input_dim, config.num_filters, config.kernel_size + i, padding_side="right")
            for i in range(config.num_layers)
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """``[B, L, E]``, ``[B, L]`` -> N tensors ``[B, L, F]`` (zeros at padding)."""
        return [self.dropout(conv(x, mask)) for conv in self.convs]


class ContextualEncoder(nn.Module):
    """Contextual encoder, Sec. 2.1: ``U^h = BiLSTM^h(U^{h-1})``, h = 1..N.

    F/2 units per direction so every layer outputs F features like the CNN
    encoders (as in the released code). Sequences are packed, so padding
    never leaks into the backward direction.
    """

    def __init__(self, input_dim: int, config: HCANConfig) -> None:
        """
        Args:
            input_dim: embedding size L.
            config: uses num_layers, num_filters, dropout.
        """
        super().__init__()
        half = config.num_filters // 2
        dims = [input_dim] + [config.num_filters] * config.num_layers
        self.lstms = nn.ModuleList(MaskedBiLSTM(dims[i], half) for i in range(config.num_layers))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """``[B, L, E]``, ``[B, L]`` -> N tensors ``[B, L, F]`` (zeros at padding)."""
        outputs = []
        for lstm in self.lstms:
            x, _ = lstm(x, mask)
            x = self.dropout(x)
            outputs.append(x)
        return outputs


# --------------------------------------------------------------------------
# Relevance matching (Sec. 2.2, eq. 1)
# --------------------------------------------------------------------------


def relevance_matching_features(
    u_q: torch.Tensor,
    u_c: torch.Tensor,
    q_mask: torch.Tensor,
    d_mask: torch.Tensor,
    idf: torch.Tensor,
    softmax_over: str = "context",
    null_logit: torch.Tensor | None = None,
) -> torch.Tensor:
    """IDF-weighted max and mean of the normalised similarity matrix, eq. 1.

    ``S = U_q U_c^T``; ``S~`` = S softmax-normalised over the context
    (``softmax_over="context"``, for each query phrase) or over the query (for
    each context phrase, the released code); then for each query phrase i
    ``Max_i = max_j S~_ij`` and ``Mean_i = mean_j S~_ij`` over the real context
    phrases j, and ``o_RM = {wgt(q) * Max, wgt(q) * Mean}``.

    Args:
        u_q: ``[B, Lq, F]`` query phrase vectors of one level.
        u_c: ``[B, Ld, F]`` context phrase vectors of the same level.
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.
        idf: ``[B, Lq]`` weights of the query phrases of this level.
        softmax_over: ``"context"``, ``"query"`` or ``"none"`` (the cosine
            matrix itself, no softmax; ``null_logit`` must then be None).
        null_logit: optional scalar logit of an extra "no match" entry that
            takes part in every softmax (and is dropped afterwards).

    Returns:
        ``[B, 2, Lq]``: weighted Max then weighted Mean; 0 at query padding.
    """
    cells = interaction_mask(q_mask, d_mask)
    norm_dim = 2 if softmax_over == "context" else 1
    if softmax_over == "none":
        norm_sim = cosine_matrix(u_q, u_c, q_mask, d_mask)
    elif null_logit is None:
        sim = dot_matrix(u_q, u_c)
        norm_sim = masked_softmax(sim, cells, dim=norm_dim)
    else:
        sim = dot_matrix(u_q, u_c)
        # One extra slot along the normalised axis, always real, holding the null logit.
        shape = list(sim.shape)
        shape[norm_dim] = 1
        null = null_logit.to(sim.dtype).expand(shape)
        slot_mask = torch.ones(shape, dtype=torch.bool, device=sim.device)
        extended = masked_softmax(torch.cat([sim, null], norm_dim), torch.cat([cells, slot_mask], norm_dim), norm_dim)
        norm_sim = extended.narrow(norm_dim, 0, sim.shape[norm_dim]) * cells.to(sim.dtype)
    max_sim = masked_max(norm_sim, cells, dim=2)
    mean_sim = masked_mean(norm_sim, cells, dim=2)
    weights = idf.masked_fill(~q_mask, 0.0)
    return torch.stack([weights * max_sim, weights * mean_sim], dim=1)


# --------------------------------------------------------------------------
# Semantic matching (Sec. 2.3, eq. 2)
# --------------------------------------------------------------------------


class SemanticMatching(nn.Module):
    """Co-attention + enhanced concatenation + BiLSTM for one encoder layer, eq. 2.

    ``A = REP(U_q W_q) + REP(U_c W_c) + U_q W_b U_c^T``;
    ``U~_q = softmax_col(A)^T U_q`` (query-aware context, [m, F]);
    ``U~_c = REP(softmax(max_col(A)) U_c)`` (context summary, repeated m times);
    ``H = [U_c; U~_q; U_c * U~_q; U~_c * U~_q]`` ([m, 4F]);
    ``O_SM = BiLSTM(H)``.
    """

    def __init__(self, num_filters: int, hidden_dim: int, dropout: float, pooling: str) -> None:
        """
        Args:
            num_filters: F, size of the layer's phrase vectors.
            hidden_dim: d; the BiLSTM has d/2 units per direction.
            dropout: dropout on H before the BiLSTM.
            pooling: ``"last"`` (final states, d features) or ``"maxmean"``
                (max and mean over real positions, 2d features).
        """
        super().__init__()
        self.attention = BilinearInteraction(num_filters, num_filters, linear_terms=True)
        self.lstm = MaskedBiLSTM(4 * num_filters, hidden_dim // 2)
        self.dropout = nn.Dropout(dropout)
        self.pooling = pooling
        self.output_size = hidden_dim if pooling == "last" else 2 * hidden_dim

    #: scoring (eval, no gradients) projects the two attention-weighted blocks of H per query token
    #: (:meth:`_scoring_gates`); ``False`` runs the LSTM on H itself (the same values to float rounding)
    factored_scoring: bool = True

    def _scoring_gates(self, scores, u_q, u_c, q_aware_c, c_summary, q_mask, d_mask) -> torch.Tensor:
        """The BiLSTM's input projections ``H W_ih^T + b`` ``[B, m, 8H]`` of both directions, computed from
        H's structure instead of from H (scoring only: in training, dropout on H breaks the structure).

        ``H = [U_c; U~_q; U_c * U~_q; U~_c * U~_q]`` with ``U~_q = S^T U_q`` (``S`` the attention weights over
        the query, ``[B, n, m]``) and ``U~_c`` one vector per pair; so with ``W = [W_1 W_2 W_3 W_4]``,
        ``U~_q W_2^T = S^T (U_q W_2^T)`` and ``(U~_c * U~_q) W_4^T = S^T ((U~_c * U_q) W_4^T)``: those two blocks
        are projected at the n query positions (n ~ 10) instead of the m document positions (64), and H is
        never built. Per pair this is ``m 2F + n 2F + m n`` multiply-adds per gate instead of ``m 4F``.
        """
        lstm = self.lstm.lstm
        width = u_c.shape[-1]
        weight = torch.cat([lstm.weight_ih_l0, lstm.weight_ih_l0_reverse])             # [8H, 4F]
        bias = torch.cat([lstm.bias_ih_l0 + lstm.bias_hh_l0, lstm.bias_ih_l0_reverse + lstm.bias_hh_l0_reverse])
        w_c, w_q, w_cq, w_sq = weight.split(width, dim=1)
        if torch.is_autocast_enabled(u_c.device.type):  # --bf16: autocast casts the products' inputs
            linear = nn.functional.linear
            gates = linear(u_c, w_c, bias) + linear(u_c * q_aware_c, w_cq)
            per_query_token = linear(u_q, w_q) + linear(c_summary * u_q, w_sq)
        else:
            batch, length, _ = u_c.shape
            # each block's product added into the previous one by the matrix product itself (no extra pass)
            gates = torch.addmm(bias, u_c.reshape(-1, width), w_c.t())
            gates.addmm_((u_c * q_aware_c).reshape(-1, width), w_cq.t())
            gates = gates.view(batch, length, -1)
            per_query_token = torch.mm(u_q.reshape(-1, width), w_q.t())
            per_query_token.addmm_((c_summary * u_q).reshape(-1, width), w_sq.t())
            per_query_token = per_query_token.view(batch, u_q.shape[1], -1)
        # the same weights as bidaf_coattention's (softmax over the real query positions of each column)
        weights = masked_softmax(scores, interaction_mask(q_mask, d_mask), dim=1)
        return torch.baddbmm(gates, weights.transpose(1, 2).to(per_query_token.dtype), per_query_token)

    def forward(
        self, u_q: torch.Tensor, u_c: torch.Tensor, q_mask: torch.Tensor, d_mask: torch.Tensor
    ) -> torch.Tensor:
        """
        Args:
            u_q: ``[B, Lq, F]``.
            u_c: ``[B, Ld, F]``.
            q_mask: ``[B, Lq]`` bool.
            d_mask: ``[B, Ld]`` bool.

        Returns:
            ``[B, output_size]`` = ``O_SM``.
        """
        scores = self.attention(u_q, u_c)
        q_aware_c, c_summary = bidaf_coattention(scores, u_q, u_c, q_mask, d_mask)
        c_summary = c_summary.unsqueeze(1)  # REP over the m context positions by broadcasting
        if self.factored_scoring and not (self.training or torch.is_grad_enabled()):
            gates = self._scoring_gates(scores, u_q, u_c, q_aware_c, c_summary, q_mask, d_mask)
            outputs, last = self.lstm.forward_from_gates(gates, d_mask)
        else:
            if self.training or torch.is_grad_enabled():
                enhanced = torch.cat(
                    [u_c, q_aware_c, u_c * q_aware_c, c_summary * q_aware_c], dim=-1
                )
                enhanced = masked_fill_padding(self.dropout(enhanced), d_mask)
            else:
                enhanced = _enhanced_for_scoring(u_c, q_aware_c, c_summary)
            outputs, last = self.lstm(enhanced, d_mask)
        if self.pooling == "last":
            return last
        return torch.cat(
            [masked_max(outputs, d_mask, dim=1), masked_mean(outputs, d_mask, dim=1)], dim=-1
        )


def _enhanced_for_scoring(u_c: torch.Tensor, q_aware_c: torch.Tensor, c_summary: torch.Tensor) -> torch.Tensor:
    """``H = [U_c; U~_q; U_c * U~_q; U~_c * U~_q]`` ``[B, m, 4F]`` for scoring (eval, no gradients).

    The same values as the training path's concatenation, written once into a time-major buffer (the
    returned tensor is its ``[B, m, 4F]`` view), which the LSTM reads without a transposing copy; at ``B``
    pairs of 64 tokens and F = 256 each copy of H is 64 MB per 256 pairs. Padding positions are left as
    computed, not zeroed: :class:`~rerankers.blocks.MaskedBiLSTM` never lets them reach a real position
    (dropout, the only other step between, is the identity in eval mode).
    """
    batch, length, width = u_c.shape
    enhanced = u_c.new_empty(length, batch, 4 * width).transpose(0, 1)
    enhanced[..., :width] = u_c
    enhanced[..., width : 2 * width] = q_aware_c
    torch.mul(u_c, q_aware_c, out=enhanced[..., 2 * width : 3 * width])
    torch.mul(c_summary, q_aware_c, out=enhanced[..., 3 * width :])
    return enhanced


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------


class HCANModel(nn.Module):
    """HCAN scorer (Sec. 2, Figure 1): hybrid encoder -> RM + SM at every layer -> MLP.

    Inputs (vocabulary row 0 = padding, row 1 = OOV; the paper initialises OOV
    vectors uniformly in [0, 0.1], which is up to whoever builds the matrix):

    * ``query_ids`` ``[B, Lq]`` long, ``query_mask`` ``[B, Lq]`` bool (True =
      real token, real tokens first);
    * ``doc_ids`` ``[B, Ld]`` long, ``doc_mask`` ``[B, Ld]`` bool;
    * ``query_idf`` ``[B, N+1, Lq]`` float: ``query_idf[b, l, i]`` is the IDF
      of the query phrase of tokens ``i .. i+n_l-1`` (``n_l`` from
      :func:`hcan_phrase_lengths`, see :func:`hcan_query_phrases`), the IDF
      of the truncated phrase where it would run past the query end, and 0 at
      padding. Concretely, position i at level l covers:

      - level 0, every encoder: the word i;
      - deep: tokens ``i .. i+l(k-1)`` (receptive field ``l(k-1)+1``
        starting at i, because each convolution pads on the right only);
      - wide: tokens ``i .. i+k+l-2`` (width ``k+l-1`` starting at i);
      - contextual: the word i.

      Unused (may be None) when ``matching == "sm"``.

    Output: ``[B]`` scores, the log-odds of relevance. Padding never changes a
    score: the same pair scores the same (up to float rounding) alone or
    padded inside a batch, in eval mode.
    """

    def __init__(
        self,
        config: HCANConfig,
        embedding_weights: torch.Tensor,
        freeze_embeddings: bool = False,
    ) -> None:
        """
        Args:
            config: hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors (copied).
            freeze_embeddings: keep them fixed (the paper trains them).
        """
        super().__init__()
        self.config = config
        self.embedding = build_embedding(embedding_weights, freeze=freeze_embeddings, padding_idx=0)
        self.embedding_dropout = SpatialDropout1d(config.dropout)
        embed_dim = embedding_weights.shape[1]
        encoder_cls = {"deep": DeepEncoder, "wide": WideEncoder, "contextual": ContextualEncoder}
        self.encoder = encoder_cls[config.encoder](embed_dim, config)

        self.use_rm = config.matching in ("rm", "full")
        self.use_sm = config.matching in ("sm", "full")
        self.rm_null_logits = (
            nn.Parameter(torch.zeros(config.num_layers + 1)) if self.use_rm and config.rm_null_logit else None
        )
        feature_size = 0
        if self.use_rm:
            feature_size += (config.num_layers + 1) * 2 * config.query_slots
        self.semantic = nn.ModuleList()
        if self.use_sm:
            self.semantic = nn.ModuleList(
                SemanticMatching(config.num_filters, config.hidden_dim, config.dropout, config.sm_pooling)
                for _ in range(config.num_layers)
            )
            feature_size += sum(sm.output_size for sm in self.semantic)
        self.feature_size = feature_size
        self.classifier = feed_forward([feature_size, config.hidden_dim, 1])

    def _fit_query_length(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, query_idf: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        # RM features have one MLP slot per query position, so columns past
        # query_slots may only be padding (dropped here); real tokens there
        # would have no slot.
        max_len = self.config.query_slots
        if query_ids.shape[1] <= max_len:
            return query_ids, query_mask, query_idf
        if query_mask[:, max_len:].any():
            raise ValueError(
                f"query has real tokens beyond query_slots={max_len}; truncate queries "
                "(and their IDF rows) to config.query_slots before scoring"
            )
        query_idf = query_idf[..., :max_len] if query_idf is not None else None
        return query_ids[:, :max_len], query_mask[:, :max_len], query_idf

    def forward(
        self,
        query_ids: torch.Tensor,
        query_mask: torch.Tensor,
        doc_ids: torch.Tensor,
        doc_mask: torch.Tensor,
        query_idf: torch.Tensor | None,
    ) -> torch.Tensor:
        """Score a batch of (query, document) pairs.

        Args:
            query_ids: ``[B, Lq]`` long.
            query_mask: ``[B, Lq]`` bool.
            doc_ids: ``[B, Ld]`` long.
            doc_mask: ``[B, Ld]`` bool.
            query_idf: ``[B, N+1, Lq]`` float (see class docstring), or None
                when ``matching == "sm"``.

        Returns:
            ``[B]`` relevance logits.
        """
        cfg = self.config
        query_mask = query_mask.bool()
        doc_mask = doc_mask.bool()
        if self.use_rm:
            expected = (query_ids.shape[0], cfg.num_layers + 1, query_ids.shape[1])
            if query_idf is None or tuple(query_idf.shape) != expected:
                got = None if query_idf is None else tuple(query_idf.shape)
                raise ValueError(f"query_idf must have shape {expected}, got {got}")
        query_ids, query_mask, query_idf = self._fit_query_length(query_ids, query_mask, query_idf)

        q_levels = self._levels(query_ids, query_mask)
        d_levels = self._levels(doc_ids, doc_mask)

        features = []
        if self.use_rm:
            pad_slots = cfg.query_slots - query_ids.shape[1]
            for level, (u_q, u_c) in enumerate(zip(q_levels, d_levels)):
                rm = relevance_matching_features(
                    u_q, u_c, query_mask, doc_mask, query_idf[:, level].to(u_q.dtype), cfg.rm_softmax_over,
                    None if self.rm_null_logits is None else self.rm_null_logits[level],
                )
                # Fixed-size slots: shorter queries leave zeros, exactly what a
                # padded query position would have produced.
                features.append(nn.functional.pad(rm, (0, pad_slots)).flatten(1))
        if self.use_sm:
            for sm, u_q, u_c in zip(self.semantic, q_levels[1:], d_levels[1:]):
                features.append(sm(u_q, u_c, query_mask, doc_mask))
        return self.classifier(torch.cat(features, dim=-1)).squeeze(-1)

    def _embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_fill_padding(self.embedding_dropout(self.embedding(ids)), mask)

    def _levels(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The N+1 levels (embeddings, then each encoder layer) of texts ``ids`` ``[B, L]``.

        In eval mode each distinct row is encoded once and shared by the pairs that hold it: a query
        repeated over its candidates, a document under several queries when batches mix queries (its pairs
        sit together in length-sorted scoring batches). The embedding and the encoders see one text at a
        time, so sharing changes no value; in training each pair keeps its own dropout.
        """
        if not self.training and ids.shape[0] > 1:
            width = ids.shape[1]
            rows, inverse = torch.unique(torch.cat([ids, mask.long()], dim=1), dim=0, return_inverse=True)
            if rows.shape[0] < ids.shape[0]:
                return [level[inverse] for level in self._levels(rows[:, :width], rows[:, width:].bool())]
        levels = [self._embed(ids, mask)]
        return levels + self.encoder(levels[0], mask)


# --------------------------------------------------------------------------
# Re-ranker: HCAN on the word-level framework (rerankers.neural)
# --------------------------------------------------------------------------

from rerankers.neural import WordReranker  # noqa: E402  (the model above stays importable on its own)


class HCANReranker(WordReranker):
    """``--reranker hcan``: :class:`HCANModel` with the project's tokenizer, vocabulary, IDF and trainer.

    ``query_idf`` rows come from the collection's document frequencies (:class:`pipeline.core.text.IDFStatistics`)
    of the phrase each level represents (:func:`hcan_query_phrases`); the paper computes IDF "from the
    training corpus" (Sec. 3.2), and the collection the model is prepared on is that corpus here.
    Training is pointwise (binary cross-entropy on the logit, = the paper's two-class NLL of Sec. 2.4).
    Differences from Sec. 3.2, chosen for a 2-core CPU and offline data: Adam (lr 1e-3) instead of SGD
    with lr in {0.05, 0.02, 0.01}; GloVe 6B 50d (or ``--set embeddings=word2vec``) instead of 300d
    word2vec trained on tweets; F = 256.
    """

    name = "hcan"
    model_config_class = HCANConfig
    train_defaults = {"loss": "pointwise", "epochs": 10, "batch_size": 64, "learning_rate": 1e-3}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._idf_rows: dict[tuple[str, ...], list[list[float]]] = {}

    @property
    def phrase_lengths(self) -> tuple[int, ...]:
        return tuple(sorted(set(hcan_phrase_lengths(self.model_config))))

    def build_module(self, embedding_weights):
        if self.text_config.max_query_length > self.model_config.query_slots:
            self.text_config.max_query_length = self.model_config.query_slots
        return HCANModel(self.model_config, embedding_weights.float(), self.text_config.freeze_embeddings)

    def _query_idf(self, tokens: Sequence[str]) -> list[list[float]]:
        key = tuple(tokens)
        rows = self._idf_rows.get(key)
        if rows is None:
            rows = [[self.idf.idf(p) for p in level] for level in hcan_query_phrases(tokens, self.model_config)]
            self._idf_rows[key] = rows
        return rows

    def features(self, query_tokens: Sequence[Sequence[str]], query_length: int) -> dict:
        """``query_idf`` ``[B, N+1, Lq]`` (0 at padding)."""
        levels = self.model_config.num_layers + 1
        idf = torch.zeros(len(query_tokens), levels, query_length)
        for row, tokens in enumerate(query_tokens):
            if tokens:
                idf[row, :, : len(tokens)] = torch.tensor(self._query_idf(tokens))
        return {"query_idf": idf}
