"""A bidirectional LSTM over masked, padded batches (:class:`MaskedBiLSTM`)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .masking import lengths_from_mask, masked_fill_padding


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
        """Run both directions over the real tokens of each row.

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

    def forward_from_gates(self, gates: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` of a one-layer BiLSTM whose input projections are given: ``gates`` ``[B, L, 8H]``
        holds, at each position, ``x W_ih^T + b_ih + b_hh`` of the forward direction then of the backward
        one (``H`` = ``hidden_size``). For callers that compute the projection more cheaply than the LSTM
        would from the whole input, because the input has structure (:class:`rerankers.hcan.SemanticMatching`
        projects the attention-weighted query blocks per query token); only the recurrence runs here.

        Both directions step together (one batched product per time step); the backward direction reads each
        row reversed within its length, as in :meth:`_unpacked`, so padding never reaches a real position.
        The recurrence runs in float32 whatever the autocast. Gradients flow, but training uses
        :meth:`forward` (packed).

        Args:
            gates: ``[B, L, 8H]`` input projections, forward direction's then backward's.
            mask: ``[B, L]`` bool; real tokens must form a prefix of each row.

        Returns:
            as :meth:`forward`: ``(outputs [B, L, 2H], last [B, 2H])``.

        Raises:
            ValueError: a stacked LSTM, or ``gates`` of another width than ``8 * hidden_size``.
        """
        if self.lstm.num_layers != 1:
            raise ValueError("forward_from_gates needs a one-layer MaskedBiLSTM")
        batch, max_len, width = gates.shape
        hidden = self.hidden_size
        if width != 8 * hidden:
            raise ValueError(f"gates must have 8 * hidden_size = {8 * hidden} features, got {width}")
        lstm = self.lstm
        with torch.autocast(gates.device.type, enabled=False):
            gates = gates.float()
            lengths = lengths_from_mask(mask)
            positions = torch.arange(max_len, device=gates.device)[None, :]
            ends = lengths[:, None]
            order = torch.where(positions < ends, ends - 1 - positions, positions)   # [B, L]
            time_major = gates.transpose(0, 1)                                        # [L, B, 8H]
            steps = gates.new_empty(max_len, 2, batch, 4 * hidden)
            steps[:, 0] = time_major[..., : 4 * hidden]
            steps[:, 1] = time_major[..., 4 * hidden :].gather(
                0, order.t()[:, :, None].expand(max_len, batch, 4 * hidden))
            recurrent = torch.stack([lstm.weight_hh_l0.t(), lstm.weight_hh_l0_reverse.t()]).float()  # [2, H, 4H]
            h = gates.new_zeros(2, batch, hidden)
            c = gates.new_zeros(2, batch, hidden)
            states = gates.new_empty(max_len, 2, batch, hidden)
            for t in range(max_len):
                # nn.LSTM's gate order: input, forget, cell, output
                z = torch.baddbmm(steps[t], h, recurrent)
                sig = torch.sigmoid(z)
                c = torch.addcmul(sig[..., hidden : 2 * hidden] * c, sig[..., :hidden],
                                  torch.tanh(z[..., 2 * hidden : 3 * hidden]))
                h = sig[..., 3 * hidden :] * torch.tanh(c)
                states[t] = h
            forward = states[:, 0].transpose(0, 1)                                    # [B, L, H]
            backward = states[:, 1].transpose(0, 1).gather(1, order[:, :, None].expand(batch, max_len, hidden))
            outputs = masked_fill_padding(torch.cat([forward, backward], dim=-1), mask)
            rows = torch.arange(batch, device=gates.device)
            last_step = (lengths - 1).clamp_min(0)
            # forward: after the last real token; backward: after reading back to the first token
            last = torch.cat([states[last_step, 0, rows], states[last_step, 1, rows]], dim=-1)
            return outputs, last.masked_fill((lengths == 0).unsqueeze(-1), 0.0)

