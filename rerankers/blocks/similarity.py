"""Interaction matrices between a query and a document (dot, cosine, bilinear, BiDAF co-attention); float32
even under autocast. The late-interaction MaxSim score, which the code first stages share, is
:func:`infra.maxsim.maxsim`."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .masking import interaction_mask, masked_max, masked_softmax
from .precision import _float32_bmm


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
        """The score matrix (or stack) of every query and document position.

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

