"""Co-attention matching with a BiLSTM over the enhanced context: HCAN's semantic matching.

Rao et al., EMNLP 2019 (HCAN), Sec. 2.3, eq. 2: BiDAF-style co-attention between the query and the context
phrases of one encoder layer, the enhanced concatenation ``H`` and a BiLSTM over it. Scoring computes the
BiLSTM's input projections from ``H``'s structure without building it (:meth:`SemanticMatching._scoring_gates`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .masking import interaction_mask, masked_fill_padding, masked_max, masked_mean, masked_softmax
from .recurrent import MaskedBiLSTM
from .similarity import BilinearInteraction, bidaf_coattention

__all__ = ["SemanticMatching"]


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
        """The semantic matching vector ``O_SM`` of one encoder layer.

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
