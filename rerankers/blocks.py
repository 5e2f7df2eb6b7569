"""Shared neural building blocks for the word-level re-rankers.

Every model of the project (HCAN, Match-SRNN, MV-LSTM/aMV-LSTM, IASM, KNRM,
Conv-KNRM, DRMM, MatchPyramid) works on padded batches, so everything here is
batched and masked and never loops over tokens or matrix cells in Python.

Conventions shared by all functions:

* sequences are channel-last: ``[B, L, D]``;
* masks are ``BoolTensor``s with ``True`` on real tokens, ``[B, L]`` for a
  sequence and ``[B, Lq, Ld]`` for an interaction matrix;
* padding must never change what a real position sees, so every helper either
  ignores masked entries or writes exact zeros into them.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = [
    "lengths_from_mask",
    "interaction_mask",
    "masked_fill_padding",
    "masked_softmax",
    "masked_max",
    "masked_mean",
    "masked_sum",
    "dot_matrix",
    "cosine_matrix",
    "bilinear_matrix",
    "BilinearInteraction",
    "bidaf_coattention",
    "kmax_pooling",
    "kernel_mus_sigmas",
    "gaussian_kernel_pooling",
    "matching_histogram",
    "build_embedding",
    "SpatialDropout1d",
    "MaskedConv1d",
    "MaskedBiLSTM",
    "feed_forward",
]


# --------------------------------------------------------------------------
# Masks and masked reductions
# --------------------------------------------------------------------------


def lengths_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Number of real tokens per row.

    Args:
        mask: ``[B, L]`` bool, True on real tokens.

    Returns:
        ``[B]`` int64 lengths.
    """
    return mask.long().sum(dim=-1)


def interaction_mask(q_mask: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor:
    """Mask of the real cells of a query x document interaction matrix.

    Args:
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.

    Returns:
        ``[B, Lq, Ld]`` bool, True where both the query and the document token are real.
    """
    return q_mask.unsqueeze(-1) & d_mask.unsqueeze(-2)


def masked_fill_padding(x: torch.Tensor, mask: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Set the padding positions of a sequence tensor to ``value`` (default 0).

    Args:
        x: ``[B, L, ...]`` any trailing dims.
        mask: ``[B, L]`` bool, True on real tokens.
        value: what padding positions get.

    Returns:
        Tensor shaped like ``x`` (out of place, differentiable).
    """
    expanded = mask.reshape(mask.shape + (1,) * (x.dim() - mask.dim()))
    return x.masked_fill(~expanded, value)


def _broadcast_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    # Callers pass masks missing the trailing feature dims (e.g. [B, L] for
    # [B, L, D]); append singleton dims so broadcasting lines up on the left.
    if mask.dim() < like.dim():
        mask = mask.reshape(mask.shape + (1,) * (like.dim() - mask.dim()))
    return mask.expand_as(like)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives masked entries exactly 0.

    A row whose entries are all masked returns all zeros (never NaN, and its
    gradient is zero too), which is what attention over an empty document or
    an all-padding query position must produce.

    Args:
        scores: any shape.
        mask: bool, broadcastable to ``scores`` (trailing singleton dims are
            added when it has fewer dims), True on entries that take part.
        dim: the axis to normalise over.

    Returns:
        Tensor shaped like ``scores``; each row sums to 1 over its real
        entries, or to 0 when it has none.
    """
    mask = _broadcast_mask(mask, scores)
    # finfo.min instead of -inf: a fully masked row then becomes a uniform
    # softmax (finite) that the final multiplication turns into zeros.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(filled, dim=dim)
    return probs * mask.to(probs.dtype)


def masked_max(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim`` ignoring masked entries; 0 where everything is masked.

    Args:
        x: any shape.
        mask: bool, broadcastable to ``x`` (trailing singleton dims added).
        dim: axis to reduce.
        keepdim: keep the reduced axis as size 1.

    Returns:
        ``x`` reduced over ``dim``.
    """
    mask = _broadcast_mask(mask, x)
    filled = x.masked_fill(~mask, torch.finfo(x.dtype).min)
    values = filled.amax(dim=dim, keepdim=keepdim)
    any_real = mask.any(dim=dim, keepdim=keepdim)
    return values.masked_fill(~any_real, 0.0)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Sum over ``dim`` of the unmasked entries (0 where everything is masked)."""
    mask = _broadcast_mask(mask, x)
    return (x * mask.to(x.dtype)).sum(dim=dim, keepdim=keepdim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Mean over ``dim`` of the unmasked entries; 0 where everything is masked.

    Args:
        x: any shape.
        mask: bool, broadcastable to ``x`` (trailing singleton dims added).
        dim: axis to reduce.
        keepdim: keep the reduced axis as size 1.

    Returns:
        ``x`` reduced over ``dim``; the divisor is the number of real entries,
        so padding never dilutes the mean.
    """
    mask = _broadcast_mask(mask, x)
    total = (x * mask.to(x.dtype)).sum(dim=dim, keepdim=keepdim)
    count = mask.sum(dim=dim, keepdim=keepdim).clamp_min(1).to(x.dtype)
    return total / count


# --------------------------------------------------------------------------
# Interaction matrices
# --------------------------------------------------------------------------


def _float32_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``bmm(a, b)`` in float32, also under bfloat16 autocast (scoring with ``--bf16``): similarity matrices
    decide exact matches (K-NRM's exact-match kernel is 1e-3 wide, DRMM gives similarity 1 a histogram bin
    of its own), which 8 significant bits would blur; they are a small part of any model's cost."""
    with torch.autocast(a.device.type, enabled=False):
        return torch.bmm(a.float(), b.float())


def score_heads(module: nn.Module) -> list[nn.Linear]:
    """The score heads of ``module``: its linear layers with one output (the layer that outputs a score)."""
    return [layer for layer in module.modules() if isinstance(layer, nn.Linear) and layer.out_features == 1]


def score_heads_in_float32(module: nn.Module, enabled: bool = True) -> None:
    """Make every score head of ``module`` (an ``nn.Linear`` with one output) compute in float32 also under
    bfloat16 autocast (``enabled=False`` undoes it). A head's output is the score: rounded to bfloat16's 8
    significant bits, documents a ranking should separate would tie. The heads are tiny, so this costs
    nothing; their weights, state dict and checkpoints are unchanged (only the instance's ``forward``)."""
    for layer in score_heads(module):
        if enabled and "forward" not in layer.__dict__:
            layer.forward = _float32_linear(layer)
        elif not enabled:
            layer.__dict__.pop("forward", None)


def _float32_linear(layer: nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(x.float(), layer.weight.float(), None if layer.bias is None else layer.bias.float())
    return forward


def dot_matrix(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Dot-product interaction matrix ``S = Q D^T`` (float32 even under autocast).

    Args:
        q: ``[B, Lq, D]``.
        d: ``[B, Ld, D]``.

    Returns:
        ``[B, Lq, Ld]``. Padding cells are 0 when the padding vectors are 0.
    """
    return _float32_bmm(q, d.transpose(1, 2))


def cosine_matrix(
    q: torch.Tensor,
    d: torch.Tensor,
    q_mask: torch.Tensor | None = None,
    d_mask: torch.Tensor | None = None,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Cosine-similarity interaction matrix (MatchPyramid, KNRM, DRMM, ...), float32 even under autocast.

    Args:
        q: ``[B, Lq, D]``.
        d: ``[B, Ld, D]``.
        q_mask: optional ``[B, Lq]`` bool.
        d_mask: optional ``[B, Ld]`` bool.
        eps: guards the norm of all-zero vectors (their rows become 0).

    Returns:
        ``[B, Lq, Ld]`` in [-1, 1]; cells whose query or document token is
        padding are exactly 0.
    """
    q, d = q.float(), d.float()
    q_unit = q / q.norm(dim=-1, keepdim=True).clamp_min(eps)
    d_unit = d / d.norm(dim=-1, keepdim=True).clamp_min(eps)
    sim = _float32_bmm(q_unit, d_unit.transpose(1, 2))
    if q_mask is not None:
        sim = sim.masked_fill(~q_mask.unsqueeze(-1), 0.0)
    if d_mask is not None:
        sim = sim.masked_fill(~d_mask.unsqueeze(-2), 0.0)
    return sim


def bilinear_matrix(q: torch.Tensor, d: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Bilinear interaction ``q_i^T W d_j`` for every cell, one or several channels.

    Args:
        q: ``[B, Lq, Dq]``.
        d: ``[B, Ld, Dd]``.
        weight: ``[Dq, Dd]`` (one matrix) or ``[C, Dq, Dd]`` (a tensor layer,
            as in MV-LSTM / Match-SRNN, one matrix per output channel).

    Returns:
        ``[B, Lq, Ld]`` for a 2-D weight, ``[B, C, Lq, Ld]`` for a 3-D one.
    """
    if weight.dim() == 2:
        return torch.bmm(q @ weight, d.transpose(1, 2))
    if weight.dim() == 3:
        return torch.einsum("bip,cpq,bjq->bcij", q, weight, d)
    raise ValueError(f"weight must be 2-D or 3-D, got shape {tuple(weight.shape)}")


class BilinearInteraction(nn.Module):
    """Learned bilinear score matrix, optionally with per-side linear terms.

    ``A = REP(Q w_q) + REP(D w_d) + Q W_b D^T (+ b)``; with the linear terms on,
    this is exactly the co-attention score of HCAN (Sec. 2.3, first equation),
    and with ``channels > 1`` it is the tensor layer of MV-LSTM / Match-SRNN.
    """

    def __init__(
        self,
        q_dim: int,
        d_dim: int,
        channels: int | None = None,
        linear_terms: bool = False,
        bias: bool = False,
    ) -> None:
        """
        Args:
            q_dim: query feature size ``Dq``.
            d_dim: document feature size ``Dd``.
            channels: ``None`` for a single ``[B, Lq, Ld]`` matrix, or ``C`` for
                a ``[B, C, Lq, Ld]`` stack.
            linear_terms: add the rank-one ``Q w_q`` and ``D w_d`` terms.
            bias: add a learned scalar (per channel).
        """
        super().__init__()
        c = 1 if channels is None else channels
        self.channels = channels
        self.weight = nn.Parameter(torch.empty(c, q_dim, d_dim))
        self.q_linear = nn.Parameter(torch.empty(c, q_dim)) if linear_terms else None
        self.d_linear = nn.Parameter(torch.empty(c, d_dim)) if linear_terms else None
        self.bias = nn.Parameter(torch.zeros(c)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform init (what the HCAN and MV-LSTM Keras code used)."""
        nn.init.xavier_uniform_(self.weight)
        for vec in (self.q_linear, self.d_linear):
            if vec is not None:
                bound = math.sqrt(6.0 / (vec.shape[1] + 1))
                nn.init.uniform_(vec, -bound, bound)

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """
        Args:
            q: ``[B, Lq, Dq]``.
            d: ``[B, Ld, Dd]``.

        Returns:
            ``[B, Lq, Ld]`` (``channels is None``) or ``[B, C, Lq, Ld]``. Padding
            cells are not masked: mask them in whatever consumes the scores.
        """
        scores = torch.einsum("bip,cpq,bjq->bcij", q, self.weight, d)
        if self.q_linear is not None:
            scores = scores + torch.einsum("bip,cp->bci", q, self.q_linear).unsqueeze(-1)
            scores = scores + torch.einsum("bjq,cq->bcj", d, self.d_linear).unsqueeze(-2)
        if self.bias is not None:
            scores = scores + self.bias.view(1, -1, 1, 1)
        return scores.squeeze(1) if self.channels is None else scores


def bidaf_coattention(
    scores: torch.Tensor,
    q: torch.Tensor,
    d: torch.Tensor,
    q_mask: torch.Tensor,
    d_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-direction co-attention of BiDAF (Seo et al., 2017), masked.

    * query-aware document ("context-to-query"): for each document position j,
      a softmax over the real query positions of ``scores[:, :, j]`` weights the
      query vectors: ``Q~ = softmax_col(A)^T Q`` -> ``[B, Ld, Dq]``;
    * document summary ("query-to-context"): the max over real query positions
      of each document column, softmaxed over the real document positions,
      weights the document vectors -> ``[B, Dd]`` (callers repeat it over Ld).

    Args:
        scores: ``[B, Lq, Ld]`` unnormalised attention scores.
        q: ``[B, Lq, Dq]``.
        d: ``[B, Ld, Dd]``.
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.

    Returns:
        ``(q_aware_d [B, Ld, Dq] with zero rows at document padding, d_summary [B, Dd])``.
    """
    cells = interaction_mask(q_mask, d_mask)
    q_weights = masked_softmax(scores, cells, dim=1)  # normalised over the query axis
    q_aware_d = torch.bmm(q_weights.transpose(1, 2), q)
    best_per_doc_pos = masked_max(scores, cells, dim=1)  # [B, Ld]
    d_weights = masked_softmax(best_per_doc_pos, d_mask, dim=-1)
    d_summary = torch.bmm(d_weights.unsqueeze(1), d).squeeze(1)
    return q_aware_d, d_summary


# --------------------------------------------------------------------------
# Pooling over interaction matrices
# --------------------------------------------------------------------------


def kmax_pooling(
    x: torch.Tensor, k: int, dim: int = -1, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Keep the ``k`` largest values along ``dim``, sorted descending (MV-LSTM, PACRR).

    Masked entries are never selected while real ones remain. When a slice
    has fewer than ``k`` real values (or ``dim`` is shorter than ``k``), the
    real values come first, in descending order, and the remaining slots are
    0, so the output always has size ``k`` along ``dim`` whatever the padding.

    Args:
        x: any shape.
        k: number of values to keep (>= 1).
        dim: axis to pool.
        mask: optional bool broadcastable to ``x`` (trailing singleton dims added).

    Returns:
        ``x`` with ``dim`` replaced by size ``k``.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    dim = dim % x.dim()
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    else:
        mask = _broadcast_mask(mask, x)
    size = x.shape[dim]
    if size < k:
        # Pad with masked slots so topk can always return k entries.
        pad_shape = list(x.shape)
        pad_shape[dim] = k - size
        x = torch.cat([x, x.new_zeros(pad_shape)], dim=dim)
        mask = torch.cat([mask, mask.new_zeros(pad_shape)], dim=dim)
    filled = x.masked_fill(~mask, float("-inf"))
    values, idx = filled.topk(k, dim=dim, largest=True, sorted=True)
    picked_real = mask.gather(dim, idx)
    return values.masked_fill(~picked_real, 0.0)


def kernel_mus_sigmas(
    n_kernels: int, sigma: float = 0.1, exact_sigma: float = 1e-3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel centres and widths of K-NRM (Xiong et al., SIGIR 2017, Sec. 3.2).

    The first kernel is the exact-match kernel (mu=1, sigma=``exact_sigma``);
    the other ``n_kernels-1`` centres split [-1, 1] into equal bins and sit in
    the middle of each: for 11 kernels, mu = 1, 0.9, 0.7, ..., -0.9.

    Args:
        n_kernels: total number of kernels, exact-match one included (>= 2).
        sigma: width of the soft-match kernels.
        exact_sigma: width of the exact-match kernel.

    Returns:
        ``(mus [K], sigmas [K])`` float32 tensors.
    """
    if n_kernels < 2:
        raise ValueError("n_kernels must be >= 2 (exact match + at least one soft kernel)")
    bin_size = 2.0 / (n_kernels - 1)
    mus = [1.0] + [1.0 - bin_size / 2 - i * bin_size for i in range(n_kernels - 1)]
    sigmas = [exact_sigma] + [sigma] * (n_kernels - 1)
    return torch.tensor(mus), torch.tensor(sigmas)


def gaussian_kernel_pooling(
    sim_matrix: torch.Tensor,
    q_mask: torch.Tensor,
    d_mask: torch.Tensor,
    mus: torch.Tensor,
    sigmas: torch.Tensor,
    min_soft_tf: float = 1e-10,
    scale: float = 1.0,
) -> torch.Tensor:
    """K-NRM kernel pooling -> soft-TF log-sum features (Xiong et al. 2017, eq. 4-5).

    ``K_k(M_i) = sum_j exp(-(M_ij - mu_k)^2 / (2 sigma_k^2))`` over real document
    positions j, and the feature is ``phi_k = sum_i scale * log(max(K_k(M_i), min_soft_tf))``
    over real query positions i.

    Args:
        sim_matrix: ``[B, Lq, Ld]`` (typically cosine similarities).
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.
        mus: ``[K]`` kernel centres.
        sigmas: ``[K]`` kernel widths.
        min_soft_tf: floor before the log, so a kernel nothing falls into adds
            log(min_soft_tf) instead of -inf.
        scale: multiplier on each log term (the original K-NRM code used 0.01
            to keep the initial logits small; the paper has none, so 1.0 here).

    Returns:
        ``[B, K]`` features.
    """
    mus = mus.to(sim_matrix).view(1, 1, 1, -1)
    sigmas = sigmas.to(sim_matrix).view(1, 1, 1, -1)
    kernel_values = torch.exp(-((sim_matrix.unsqueeze(-1) - mus) ** 2) / (2 * sigmas**2))
    soft_tf = masked_sum(kernel_values, d_mask.unsqueeze(1), dim=2)  # [B, Lq, K]
    log_tf = torch.log(soft_tf.clamp_min(min_soft_tf)) * scale
    return masked_sum(log_tf, q_mask, dim=1)


def matching_histogram(
    sim: torch.Tensor,
    q_mask: torch.Tensor,
    d_mask: torch.Tensor,
    bins: int,
    mode: str = "lch",
    exact_tol: float = 1e-6,
) -> torch.Tensor:
    """DRMM matching histogram per query term (Guo et al., CIKM 2016, Sec. 3.1).

    The range [-1, 1) is split into ``bins - 1`` equal bins and the last bin
    holds exact matches only (sim >= 1 - ``exact_tol``, since the cosine of a
    vector with itself is 1 only up to rounding). E.g. ``bins=5``:
    [-1,-0.5), [-0.5,0), [0,0.5), [0.5,1), [1,1].

    Args:
        sim: ``[B, Lq, Ld]`` similarities in [-1, 1].
        q_mask: ``[B, Lq]`` bool; padded query rows get an all-zero histogram.
        d_mask: ``[B, Ld]`` bool; padded document cells are not counted.
        bins: number of bins, exact-match bin included (>= 2).
        mode: ``"ch"`` raw counts, ``"nh"`` counts / document length,
            ``"lch"`` log(1 + count) (the paper's best, log-count histogram).
        exact_tol: tolerance that sends near-1 similarities to the exact bin.

    Returns:
        ``[B, Lq, bins]`` float.
    """
    if bins < 2:
        raise ValueError("bins must be >= 2")
    soft_bins = bins - 1
    idx = torch.floor((sim.clamp(-1.0, 1.0) + 1.0) / 2.0 * soft_bins).long().clamp(0, soft_bins - 1)
    idx = torch.where(sim >= 1.0 - exact_tol, torch.full_like(idx, bins - 1), idx)
    cells = interaction_mask(q_mask, d_mask).to(sim.dtype)
    counts = sim.new_zeros(sim.shape[:2] + (bins,))
    counts.scatter_add_(2, idx, cells)
    if mode == "ch":
        return counts
    if mode == "nh":
        doc_len = d_mask.sum(dim=-1).clamp_min(1).to(sim.dtype).view(-1, 1, 1)
        return counts / doc_len
    if mode == "lch":
        return torch.log1p(counts)
    raise ValueError(f"unknown histogram mode {mode!r} (use 'ch', 'nh' or 'lch')")


# --------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------


def build_embedding(weights: torch.Tensor, freeze: bool, padding_idx: int = 0) -> nn.Embedding:
    """Embedding layer initialised from pretrained vectors.

    Row ``padding_idx`` is set to zeros and receives no gradient, so padding
    tokens contribute nothing to dot products even before masking.

    Args:
        weights: ``[V, E]`` float tensor (copied, the caller's tensor is untouched).
        freeze: True keeps the vectors fixed during training.
        padding_idx: vocabulary row used for padding.

    Returns:
        ``nn.Embedding(V, E)``.
    """
    if weights.dim() != 2:
        raise ValueError(f"embedding weights must be [V, E], got {tuple(weights.shape)}")
    table = weights.detach().clone().float()
    table[padding_idx] = 0.0
    return nn.Embedding.from_pretrained(table, freeze=freeze, padding_idx=padding_idx)


class SpatialDropout1d(nn.Module):
    """Dropout of whole feature channels of a ``[B, L, D]`` sequence (Keras' SpatialDropout1D).

    Dropping a channel at every position at once regularises embeddings more
    than element-wise dropout, where neighbouring positions leak the value.
    """

    def __init__(self, p: float) -> None:
        """
        Args:
            p: probability of dropping a channel.
        """
        super().__init__()
        self.dropout = nn.Dropout1d(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, L, D]`` -> ``[B, L, D]``."""
        return self.dropout(x.transpose(1, 2)).transpose(1, 2)


class MaskedConv1d(nn.Module):
    """Length-preserving 1-D convolution over a padded, channel-last sequence.

    Padding positions are zeroed before the convolution (so whatever sits
    there, e.g. ``relu(bias)`` from a previous layer, is invisible) and after
    it (so the next layer starts clean). Because the implicit border padding
    is zeros too, a real position sees exactly the same input whether the
    sequence is followed by 0 or by 100 padding tokens.

    ``padding_side`` decides which neighbours output position i covers:

    * ``"right"``: tokens ``i .. i+k-1`` (phrase starting at i; Keras
      ``'same'`` for k=2);
    * ``"left"``: tokens ``i-k+1 .. i`` (causal);
    * ``"center"``: tokens ``i-(k-1)//2 .. i+k-1-(k-1)//2`` (Keras ``'same'``).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        padding_side: str = "right",
        activation: nn.Module | None = None,
    ) -> None:
        """
        Args:
            in_channels: input feature size.
            out_channels: number of filters.
            kernel_size: window width k.
            padding_side: ``"right"``, ``"left"`` or ``"center"`` (see class doc).
            activation: applied before re-masking (ReLU if None; pass
                ``nn.Identity()`` for a linear convolution).
        """
        super().__init__()
        if padding_side not in ("right", "left", "center"):
            raise ValueError(f"padding_side must be right/left/center, got {padding_side!r}")
        total = kernel_size - 1
        if padding_side == "right":
            self.pad = (0, total)
        elif padding_side == "left":
            self.pad = (total, 0)
        else:
            self.pad = (total // 2, total - total // 2)
        self.kernel_size = kernel_size
        self.padding_side = padding_side
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)
        self.activation = nn.ReLU() if activation is None else activation

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x: ``[B, L, C_in]``.
            mask: ``[B, L]`` bool.

        Returns:
            ``[B, L, C_out]`` with zeros at padding positions.
        """
        x = masked_fill_padding(x, mask)
        y = self.conv(F.pad(x.transpose(1, 2), self.pad))
        y = self.activation(y.transpose(1, 2))
        return masked_fill_padding(y, mask)


class MaskedBiLSTM(nn.Module):
    """Bidirectional LSTM whose padding never reaches real positions.

    The backward direction of a plain LSTM would start in the padding and carry
    it into every real position; packing with the true lengths avoids that,
    and makes the final states those of the last real token.

    Without gradients (scoring), a one-layer LSTM skips packing and computes the
    same thing on the padded batch: the forward direction reads position t
    after positions < t only, so right padding changes no real position; the
    backward direction runs forwards over each row reversed within its length
    (its padding stays at the end) and is reversed back. The CPU then runs each
    direction as one fused (oneDNN) kernel, where packed rows of mixed lengths
    fall back to one small matrix product per time step, and no sort or packing
    copies are made; a batch without padding runs the module as it is.
    Training keeps the packed path.
    """

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int = 1, dropout: float = 0.0
    ) -> None:
        """
        Args:
            input_size: feature size of the input.
            hidden_size: hidden size per direction (outputs are ``2 * hidden_size``).
            num_layers: stacked layers inside the one module.
            dropout: dropout between stacked layers (as in ``nn.LSTM``).
        """
        super().__init__()
        self.hidden_size = hidden_size
        self.lstm = nn.LSTM(
            input_size,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )

    @property
    def output_size(self) -> int:
        """Feature size of the outputs and of the final state: ``2 * hidden_size``."""
        return 2 * self.hidden_size

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Args:
            x: ``[B, L, D]`` (a transposed view of a time-major ``[L, B, D]``
                tensor is read without a copy).
            mask: ``[B, L]`` bool; real tokens must form a prefix of each row.

        Returns:
            ``(outputs [B, L, 2H], last [B, 2H])``: per-position outputs with
            zeros at padding, and ``[forward state after the last real token;
            backward state after the first token]`` of the top layer. Rows with
            no real token get zeros in both.
        """
        lengths = lengths_from_mask(mask)
        if x.shape[0] and x.shape[1] and self.lstm.num_layers == 1 and not torch.is_grad_enabled():
            return self._unpacked(x, mask, lengths)
        return self._packed(x, mask, lengths)

    def _packed(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` over packed sequences (training, stacked layers)."""
        max_len = x.shape[1]
        empty = lengths == 0
        # pack_padded_sequence rejects length 0; run those rows on one (zero)
        # step and blank their results afterwards.
        packed = pack_padded_sequence(
            masked_fill_padding(x, mask),
            lengths.clamp_min(1).cpu(),
            batch_first=True,
            enforce_sorted=False,
        )
        packed_out, (h_n, _) = self.lstm(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=max_len)
        # h_n: [layers * 2, B, H]; the last two rows are the top layer's directions.
        last = torch.cat([h_n[-2], h_n[-1]], dim=-1)
        outputs = masked_fill_padding(outputs, mask)
        last = last.masked_fill(empty.unsqueeze(-1), 0.0)
        return outputs, last

    def _direction(self, x: torch.Tensor, suffix: str, projected: bool = False) -> torch.Tensor:
        """Outputs ``[B, L, H]`` of one direction's weights (``suffix`` ``""`` or ``"_reverse"``) run
        forwards over ``x`` ``[B, L, D]`` from a zero state. ``projected``: ``x`` is already the input
        projection ``[B, L, 4H]`` (biases not added), and the kernel runs only the recurrence."""
        from torch import _VF

        lstm = self.lstm
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        weights = [getattr(lstm, f"{name}_l0{suffix}") for name in names]
        if projected:
            # an identity input weight: the fused kernel adds the gates exactly and runs the recurrence
            weights[0] = torch.eye(x.shape[-1], device=x.device)
        zeros = x.new_zeros(1, x.shape[0], self.hidden_size)
        # the call nn.LSTM itself makes, for one layer and one direction
        return _VF.lstm(x, (zeros, zeros), weights, True, 1, 0.0, False, False, True)[0]

    def _bf16_projection(self, x: torch.Tensor) -> bool:
        """True when ``x``'s LSTM input projection should be one bfloat16 product (CPU autocast to
        bfloat16, as in :meth:`rerankers.neural.TorchReranker.score_in_bf16`): oneDNN's bfloat16 LSTM is
        slower than its float32 one at these hidden sizes, while a bfloat16 matrix product is several times
        faster, so the projection runs as a product and the recurrence stays float32."""
        return (x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
                and torch.get_autocast_dtype("cpu") == torch.bfloat16)

    def _unpacked(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` without packing, for one layer without gradients (see the class docstring)."""
        batch, max_len, dim = x.shape
        projected = self._bf16_projection(x)
        if not projected and bool((lengths == max_len).all()):
            outputs, (h_n, _) = self.lstm(x)   # no padding: exactly the packed computation
            return outputs, torch.cat([h_n[-2], h_n[-1]], dim=-1)
        positions = torch.arange(max_len, device=x.device)[None, :]
        ends = lengths[:, None]
        # row b reversed within its length; padding positions map to themselves (and stay at the end)
        order = torch.where(positions < ends, ends - 1 - positions, positions)
        if projected:
            lstm = self.lstm
            # both directions' projections in one product, computed time-major (x is usually a transposed
            # view of a time-major tensor), then the backward gates reversed within each row's length
            weight = torch.cat([lstm.weight_ih_l0, lstm.weight_ih_l0_reverse])
            gates = F.linear(x.transpose(0, 1), weight)
            with torch.autocast("cpu", enabled=False):
                forward_gates, backward_gates = gates.float().split(4 * self.hidden_size, dim=-1)
                width = backward_gates.shape[-1]
                backward_gates = backward_gates.gather(0, order.t()[:, :, None].expand(max_len, batch, width))
                forward = self._direction(forward_gates.transpose(0, 1), "", projected=True)
                backward = self._direction(backward_gates.transpose(0, 1), "_reverse", projected=True)
        else:
            forward = self._direction(x, "")
            # gathered time-major, so the LSTM reads the reversed rows without another copy
            flipped = x.transpose(0, 1).gather(0, order.t()[:, :, None].expand(max_len, batch, dim)).transpose(0, 1)
            backward = self._direction(flipped, "_reverse")
        backward = backward.gather(1, order[:, :, None].expand(batch, max_len, self.hidden_size))
        outputs = masked_fill_padding(torch.cat([forward, backward], dim=-1), mask)
        rows = torch.arange(batch, device=x.device)
        # forward: the state after the last real token; backward: after the first token (position 0)
        last = torch.cat([forward[rows, (lengths - 1).clamp_min(0)], backward[:, 0]], dim=-1)
        return outputs, last.masked_fill((lengths == 0).unsqueeze(-1), 0.0)


def feed_forward(
    dims: Sequence[int], dropout: float = 0.0, activation: type[nn.Module] = nn.ReLU
) -> nn.Sequential:
    """Multi-layer perceptron ``dims[0] -> dims[1] -> ... -> dims[-1]``.

    Activation (and dropout, when > 0) follow every layer but the last, which
    stays linear so it can output logits or scores.

    Args:
        dims: layer sizes, input first (at least two entries).
        dropout: dropout after each hidden activation.
        activation: activation class for hidden layers.

    Returns:
        ``nn.Sequential``.
    """
    if len(dims) < 2:
        raise ValueError("feed_forward needs at least an input and an output size")
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(dims) - 2:
            layers.append(activation())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------
# Dynamic pooling (MatchPyramid)
# --------------------------------------------------------------------------


def _dynamic_max_pool_last_axis(x: torch.Tensor, lengths: torch.Tensor, size: int) -> torch.Tensor:
    # Window r over a row of real length n is [floor(r*n/P), ceil((r+1)*n/P)),
    # the formula of adaptive max pooling, so P windows always cover the n
    # real positions (repeating some when n < P) and never reach padding.
    # Gathering at most ceil(L/P)+1 positions per window keeps the memory at
    # O(P * window) instead of the O(P * L) of a dense window-membership mask.
    batch, length = x.shape[0], x.shape[-1]
    leading = x.shape[1:-1]
    ones = (1,) * len(leading)
    real = lengths.clamp(0, length).view(batch, 1)
    slots = torch.arange(size, device=x.device).view(1, size)
    start = (slots * real) // size
    end = ((slots + 1) * real + size - 1) // size
    width = max(1, min(length, -(-length // size) + 1))
    index = start.unsqueeze(-1) + torch.arange(width, device=x.device).view(1, 1, width)
    inside = index < end.unsqueeze(-1)  # [B, P, W]
    index = index.clamp_max(max(length - 1, 0))
    flat = index.view(batch, *ones, size * width).expand(batch, *leading, size * width)
    gathered = x.gather(-1, flat).view(batch, *leading, size, width)
    gathered = gathered.masked_fill(~inside.view(batch, *ones, size, width), torch.finfo(x.dtype).min)
    pooled = gathered.amax(dim=-1)
    empty = (end <= start).view(batch, *ones, size)  # only rows with no real position at all
    return pooled.masked_fill(empty, 0.0)


def masked_dynamic_max_pool2d(
    x: torch.Tensor, q_mask: torch.Tensor, d_mask: torch.Tensor, output_size: tuple[int, int]
) -> torch.Tensor:
    """Dynamic max pooling of each pair's real sub-matrix to a fixed grid (MatchPyramid, Pang et al. 2016).

    MatchPyramid (AAAI 2016, Sec. 3.2, eq. 5, after Socher et al. 2011)
    pools a feature map whose size depends on the two texts' lengths into a
    fixed ``Pq x Pd`` grid, with pooling windows of size about ``n/Pq`` by
    ``m/Pd`` for real lengths ``n`` and ``m``. Here window ``(r, c)`` covers
    rows ``[floor(r*n/Pq), ceil((r+1)*n/Pq))`` and columns
    ``[floor(c*m/Pd), ceil((c+1)*m/Pd))`` of the real region only: the same
    windows as ``F.adaptive_max_pool2d(x[b, :, :n, :m], output_size)``, so a
    text shorter than the grid has its rows/columns repeated, and the result
    never depends on how much padding the batch adds.

    Args:
        x: ``[B, C, Lq, Ld]`` feature maps (e.g. convolved interaction matrices).
        q_mask: ``[B, Lq]`` bool; real tokens must form a prefix of each row.
        d_mask: ``[B, Ld]`` bool; same convention.
        output_size: ``(Pq, Pd)``, both >= 1.

    Returns:
        ``[B, C, Pq, Pd]``; a pair with no real query or document token gets zeros.
    """
    rows, cols = output_size
    if rows < 1 or cols < 1:
        raise ValueError(f"output_size must be positive, got {output_size}")
    if x.dim() != 4:
        raise ValueError(f"x must be [B, C, Lq, Ld], got shape {tuple(x.shape)}")
    pooled = _dynamic_max_pool_last_axis(x, lengths_from_mask(d_mask), cols)  # [B, C, Lq, Pd]
    pooled = _dynamic_max_pool_last_axis(pooled.transpose(-1, -2), lengths_from_mask(q_mask), rows)
    return pooled.transpose(-1, -2).contiguous()


__all__.append("masked_dynamic_max_pool2d")


def maxsim(queries: torch.Tensor, query_mask: torch.Tensor, docs: torch.Tensor, doc_mask: torch.Tensor,
           all_pairs: bool = False) -> torch.Tensor:
    """Late-interaction (ColBERT/ADDAX) score: the sum over real query positions of the largest dot
    product with a real document position, ``sum_i max_j q_i . d_j``.

    Paired (default): ``queries`` ``[B, l, h]`` against ``docs`` ``[B, t, h]`` gives ``[B]``. With
    ``all_pairs``: ``[Nq, l, h]`` against ``[Nd, t, h]`` gives ``[Nq, Nd]``. Masks are bool, True on real
    positions; a document without real positions scores 0. Normalise the vectors first for cosines.
    """
    queries, docs = queries.float(), docs.float()   # float32 also under autocast: the sum is the score
    if all_pairs:
        with torch.autocast(queries.device.type, enabled=False):
            sims = torch.einsum("aih,bjh->abij", queries, docs)
        sims = sims.masked_fill(~doc_mask[None, :, None, :], float("-inf"))
        weights = query_mask[:, None, :]
    else:
        sims = _float32_bmm(queries, docs.transpose(1, 2))
        sims = sims.masked_fill(~doc_mask[:, None, :], float("-inf"))
        weights = query_mask
    best = sims.max(dim=-1).values
    best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
    return (best * weights.to(best.dtype)).sum(dim=-1)


__all__.append("maxsim")
