"""Matching-adapted gating (MAGS) of ADDAX: gated reference and divergence signals of a text against its
counterpart, eq. 3-13 of the ADDAX paper (see :mod:`rerankers.addax` for the reference and the choices).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layers import positionwise
from .masking import masked_softmax

__all__ = ["MAGCell"]


class MAGCell(nn.Module):
    """One matching-adapted gating cell (eq. 3-13), for the text whose states are ``own`` against its
    ``other`` counterpart (the query-side cell has own = U_Q, other = V_D; the document side swaps them).

    Args:
        dim: d, the encoder's output size.
        positions: rows of W1/w1 (eq. 5, 8): the most counterpart positions it accepts.
        attention_only: keep only eq. 3-4 (``H = R``; Att-MAGS).
        highway: eq. 9-13; otherwise the gated signals are added (w/o HW).
    """

    def __init__(self, dim: int, positions: int, attention_only: bool = False, highway: bool = True):
        super().__init__()
        self.dim, self.positions = dim, positions
        self.attention_only, self.highway = attention_only, highway
        if attention_only:
            return
        bound = 1.0 / math.sqrt(positions)  # nn.Linear's initialisation for a [positions -> d] map
        self.gate_weight = nn.Parameter(torch.empty(dim, positions).uniform_(-bound, bound))     # W1 (eq. 5)
        self.gate_bias = nn.Parameter(torch.empty(dim).uniform_(-bound, bound))                  # B1
        self.mix_weight = nn.Parameter(torch.empty(1, positions).uniform_(-bound, bound))        # w1 (eq. 8)
        self.mix_bias = nn.Parameter(torch.empty(1).uniform_(-bound, bound))                     # b1
        if highway:
            self.transform = nn.Linear(2 * dim, 2 * dim)   # W3, b3 (eq. 10)
            self.carry = nn.Linear(2 * dim, 2 * dim)       # W4, b4 (eq. 11)
            self.output = nn.Linear(2 * dim, dim)          # W5, b5 (eq. 13)

    def forward(self, own: torch.Tensor, other: torch.Tensor, other_mask: torch.Tensor,
                similarity: torch.Tensor, own_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hybrid discriminative features ``[B, n, d]`` of ``own`` ``[B, n, d]``.

        ``similarity`` is ``S`` (eq. 3) oriented ``[B, n, m]`` (own positions by ``other`` positions);
        ``other_mask`` ``[B, m]`` marks the counterpart's real positions. With ``own_mask`` ``[B, n]``, the
        position-wise part (eq. 5-13) runs on real own positions only and padded rows are zeros.

        Args:
            own: ``[B, n, d]`` states of this text.
            other: ``[B, m, d]`` states of the counterpart.
            other_mask: ``[B, m]`` bool, the counterpart's real positions.
            similarity: ``S`` ``[B, n, m]``.
            own_mask: ``[B, n]`` bool, this text's real positions (``None``: all).

        Returns:
            ``[B, n, d]`` features.

        Raises:
            ValueError: the counterpart has more positions than the gates have rows.
        """
        columns = similarity.shape[-1]
        if columns > self.positions:
            raise ValueError(f"counterpart has {columns} positions, the gates have {self.positions} rows "
                             f"(max_query_length/max_doc_length)")
        column_mask = other_mask[:, None, :]
        reference = masked_softmax(similarity, column_mask, dim=-1) @ other           # R (eq. 4)
        if self.attention_only:
            return reference
        pattern = similarity.masked_fill(~column_mask, 0.0)  # padded columns take no part in eq. 5, 8
        return positionwise(self._gated, own_mask, own, reference, pattern)

    def _gated(self, own: torch.Tensor, reference: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
        """Eq. 5-13 for each own position (``pattern``: its row of S, padded columns zeroed)."""
        columns = pattern.shape[-1]
        divergence = own - reference                                                  # D = U - R
        gate = torch.sigmoid(F.linear(pattern, self.gate_weight[:, :columns], self.gate_bias))   # E (eq. 5)
        referred = reference * gate                                                   # F(r) (eq. 6)
        diverged = divergence * (1.0 - gate)                                          # F(d) (eq. 7)
        mix = torch.sigmoid(F.linear(pattern, self.mix_weight[:, :columns], self.mix_bias))      # p (eq. 8)
        if not self.highway:
            return mix * referred + (1.0 - mix) * diverged                            # w/o HW: added
        combined = torch.cat([mix * referred, (1.0 - mix) * diverged], dim=-1)       # F(c) (eq. 9)
        transformed = torch.relu(self.transform(combined))                            # p_i (eq. 10)
        carry = torch.sigmoid(self.carry(combined))                                   # g_i (eq. 11)
        mixed = (1.0 - carry) * combined + carry * transformed                        # i_i (eq. 12)
        return self.output(mixed)                                                     # h_i (eq. 13)
