"""Two-dimensional recurrences over an interaction grid, computed by anti-diagonals (a wavefront).

A recurrence ``h_ij = f(h_{i-1,j}, h_{i,j-1}, h_{i-1,j-1}, s_ij)`` with zero borders
(``h_{0,j} = h_{i,0} = 0``) over an ``M x N`` grid of interaction vectors ``s``: every cell of the
anti-diagonal ``i + j = k`` depends only on diagonals ``k-1`` and ``k-2``, so :class:`GridRecurrence` loops
over the ``M + N - 1`` anti-diagonals and computes each one's cells at once, for the whole batch. The
recurrence itself (the cell) is a subclass's: Match-SRNN's spatial GRU (Wan et al., IJCAI 2016, eq. 3),
:class:`rerankers.match_srnn.SpatialGRU`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["GridRecurrence", "skew", "active_slots", "reverse_within_lengths"]


def skew(inputs: torch.Tensor) -> torch.Tensor:
    """Lay ``s [B, M, N, C]`` out by anti-diagonals: ``[K, B, M, C]`` with ``K = M + N - 1``, where
    ``out[k, b, i] = s[b, i, k - i]``, and zeros where ``k - i`` falls outside ``[0, N)``.

    Only the small input is skewed (``C`` channels), never its ``8d``-wide projection. Padding every row with
    ``M`` zeros in front makes row ``i``'s cell ``(i, k - i)`` sit at flat offset ``i * (M + N - 1) + k + M``,
    so the skewed grid is one strided view of the padded one and one copy.

    Args:
        inputs: ``[B, M, N, C]``.

    Returns:
        ``[M + N - 1, B, M, C]``.
    """
    batch, rows, cols, channels = inputs.shape
    width = rows + cols
    padded = F.pad(inputs, (0, 0, rows, 0)).contiguous()  # [B, M, M + N, C], M zeros before column 0
    skewed = padded.as_strided((batch, rows, width - 1, channels),
                               (rows * width * channels, (width - 1) * channels, channels, 1),
                               padded.storage_offset() + rows * channels)
    return skewed.permute(2, 0, 1, 3).contiguous()


def active_slots(diagonal: int, rows: int, cols: int) -> tuple[int, int]:
    """The rows ``i`` whose cell ``(i, diagonal - i)`` lies on the grid.

    Args:
        diagonal: the anti-diagonal ``k``.
        rows: the grid's ``M``.
        cols: the grid's ``N``.

    Returns:
        ``(first, last)``: the rows are ``range(first, last)``.

    Example:
        >>> active_slots(3, rows=2, cols=3)
        (1, 2)
    """
    return max(0, diagonal - cols + 1), min(rows, diagonal + 1)


def reverse_within_lengths(cells: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Reverse an interaction grid's rows and columns within each pair's real lengths.

    Each axis is permuted separately. A row index ``i < m`` becomes ``m-1-i``, and a column index ``j < n``
    becomes ``n-1-j``. Indices past the real length map to themselves. The real ``m x n`` block is
    therefore what the forward recursion would see for both texts reversed, the padding stays after
    it, and the backward scan of Bi-Match-SRNN still starts at the real corner.

    Args:
        cells: ``[B, M, N, ...]``.
        rows: ``[B]``, the real lengths along M.
        cols: ``[B]``, the real lengths along N.

    Returns:
        A tensor of the same shape as ``cells``.
    """
    batch, max_rows, max_cols = cells.shape[:3]
    row = torch.arange(max_rows, device=cells.device).unsqueeze(0)
    col = torch.arange(max_cols, device=cells.device).unsqueeze(0)
    row = torch.where(row < rows.unsqueeze(1), rows.unsqueeze(1) - 1 - row, row)
    col = torch.where(col < cols.unsqueeze(1), cols.unsqueeze(1) - 1 - col, col)
    pair = torch.arange(batch, device=cells.device).view(-1, 1, 1)
    return cells[pair, row.unsqueeze(2), col.unsqueeze(1)]


class GridRecurrence(nn.Module):
    """A recurrence over a grid, scanned by anti-diagonals (see the module docstring).

    A subclass sets ``input_dim`` (``C``), ``hidden_dim`` (``d``) and ``gate_order`` (how :meth:`forward`
    reorders the cell's update gates) and provides ``_step_weights(dtype)`` -> ``(weight, bias, hidden)``,
    ``_cell(q, weight, bias, hidden)`` -> ``(states [B, n, d], update gates [B, n, G, d])`` for one
    diagonal's ``q = [h_top; h_left; h_diagonal; s]`` and ``_native_bf16()`` (whether the CPU has bfloat16
    matrix instructions, so that products under bfloat16 autocast run in bfloat16).
    """

    input_dim: int
    hidden_dim: int
    gate_order: list[int]

    def _native_bf16(self) -> bool:
        return False

    def _scan(self, inputs: torch.Tensor, last: int, keep: bool, on_step=None) -> list[torch.Tensor]:
        """Run diagonals ``0 .. last - 1``.

        Returns:
            With ``keep``, every diagonal's states ``[B, M + 1, d]`` (slot 0 is the border row ``i = 0``,
            slot ``i + 1`` holds row ``i``). Without it, nothing: ``on_step(k, states, update, first, stop)``
            sees every diagonal's new states ``[B, stop - first, d]`` and update gates ``[B, stop - first, 4, d]``
            (order ``z_t, z_l, z_d, z_i``) of rows ``first .. stop - 1`` as they are computed.
        """
        batch, rows, cols, _ = inputs.shape
        d = self.hidden_dim
        dtype = inputs.dtype
        if inputs.device.type == "cpu" and torch.is_autocast_enabled("cpu") \
                and torch.get_autocast_dtype("cpu") == torch.bfloat16 and self._native_bf16():
            # Without AMX or AVX512-BF16, torch's bfloat16 products are emulated and several times slower
            # than float32 at these small shapes: autocast then leaves the recursion in float32.
            dtype = torch.bfloat16
        weight, bias, hidden = self._step_weights(dtype)
        skewed = skew(inputs)
        # Without autograd, states go into a preallocated buffer written in place: all diagonals, or three in
        # turn. Reusing a slot is safe because a step reads only slots on the grid or slots never written (the
        # rows on the grid only move down as k grows; see active_slots).
        in_place = not (torch.is_grad_enabled() and (inputs.requires_grad or weight.requires_grad))
        history = [skewed.new_zeros(batch, rows + 1, d)] * 2
        if in_place:
            history = list(skewed.new_zeros(last + 2 if keep else 3, batch, rows + 1, d).unbind(0))
        with torch.autocast(inputs.device.type, enabled=False):
            for k in range(last):
                first, stop = active_slots(k, rows, cols)
                if in_place:
                    size = len(history)
                    before_previous, previous, target = (history[k % size], history[(k + 1) % size],
                                                         history[(k + 2) % size])
                else:
                    before_previous, previous = history[-2], history[-1]
                q = torch.cat([previous[:, first:stop], previous[:, first + 1:stop + 1],
                               before_previous[:, first:stop], skewed[k, :, first:stop]], -1)
                state, update = self._cell(q, weight, bias, hidden)
                if on_step is not None:
                    on_step(k, state, update, first, stop)
                if in_place:
                    target[:, first + 1:stop + 1] = state
                else:
                    history.append(F.pad(state, (0, 0, first + 1, rows - stop)))
                    if not keep:
                        del history[0]
        return history[2:] if keep else []

    def forward(self, inputs: torch.Tensor, return_gates: bool = False):
        """The recursion's state at every cell, computed anti-diagonal by anti-diagonal.

        Args:
            inputs: ``[B, M, N, C]``, the interaction vectors ``s_ij``.
            return_gates: also return the update gates (for backtracking a matching path, Sec. 5.2/6.2).

        Returns:
            ``states [B, M, N, d]``, where ``states[:, i-1, j-1]`` is ``h_ij`` (the interaction of the prefixes
            ``S1[1:i]`` and ``S2[1:j]``). With ``return_gates``, the function returns
            ``(states, gates [B, M, N, 4, d])`` instead, with the gates in the order of
            :data:`rerankers.match_srnn.UPDATE_GATES` (``z_i, z_l, z_t, z_d``).
        """
        self._check(inputs)
        batch, rows, cols, _ = inputs.shape
        gates = []

        def keep_gates(k, state, update, first, stop):
            gates.append(F.pad(update[..., self.gate_order, :], (0, 0, 0, 0, first, rows - stop)))

        diagonals = self._scan(inputs, rows + cols - 1, keep=True, on_step=keep_gates if return_gates else None)
        # Unskew: h at (i, j) sits on diagonal i + j, slot i + 1.
        grid_rows = torch.arange(rows, device=inputs.device).unsqueeze(1).expand(rows, cols)
        grid_diagonals = grid_rows + torch.arange(cols, device=inputs.device).unsqueeze(0)
        grid = torch.stack(diagonals, 1)[:, grid_diagonals, grid_rows + 1]
        if not return_gates:
            return grid
        return grid, torch.stack(gates, 1)[:, grid_diagonals, grid_rows]

    def corners(self, inputs: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Only the states scoring needs: each pair's ``h_mn`` at its real corner ``(m, n)``.

        Equal to ``forward(inputs)[b, m - 1, n - 1]``, without keeping or unskewing the grid, and the scan
        stops at the last diagonal a pair ends on.

        Args:
            inputs: ``[B, M, N, C]``, the interaction vectors ``s_ij``.
            rows: ``[B]``, the real lengths ``m`` (``<= M``).
            cols: ``[B]``, the real lengths ``n`` (``<= N``).

        Returns:
            ``[B, d]`` in ``inputs``' dtype (also under bfloat16 autocast). A pair with
            ``m = 0`` or ``n = 0`` gets zeros.

        Example:
            >>> from rerankers.match_srnn import SpatialGRU
            >>> gru = SpatialGRU(input_dim=10, hidden_dim=10)
            >>> gru.corners(torch.rand(2, 3, 5, 10), torch.tensor([3, 2]), torch.tensor([5, 4])).shape
            torch.Size([2, 10])
        """
        self._check(inputs)
        batch = inputs.shape[0]
        real = (rows > 0) & (cols > 0)
        ends = torch.where(real, rows + cols - 2, -1).tolist()
        slots = (rows - 1).clamp_min(0).tolist()
        ending: dict[int, list[int]] = {}
        for pair, k in enumerate(ends):
            if k >= 0:
                ending.setdefault(k, []).append(pair)
        pieces, order = [], []
        device = inputs.device

        def take(k, state, update, first, stop):
            if k in ending:
                pairs = ending[k]
                index = torch.tensor(pairs, device=device)
                slot = torch.tensor([slots[p] - first for p in pairs], device=device)
                pieces.append(state[index, slot])
                order.extend(pairs)

        last = max(ends) + 1 if any(k >= 0 for k in ends) else 0
        self._scan(inputs, last, keep=False, on_step=take)
        out = inputs.new_zeros(batch, self.hidden_dim)
        if pieces:
            out = out.index_put((torch.tensor(order, device=device),), torch.cat(pieces))
        return out

    def _check(self, inputs: torch.Tensor) -> None:
        if inputs.dim() != 4 or inputs.shape[-1] != self.input_dim:
            raise ValueError(f"inputs must be [B, M, N, {self.input_dim}], got {tuple(inputs.shape)}")
