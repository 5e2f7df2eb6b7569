"""Layers shared by the word-level models: embeddings, spatial dropout, a masked convolution, a feed-forward
stack; and encoding each text once: once per distinct row of a batch, or once per key of a cache across
batches."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from .masking import masked_fill_padding


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
        """Drop whole channels (training mode only).

        Args:
            x: ``[B, L, D]``.

        Returns:
            ``[B, L, D]``, each kept channel scaled by ``1 / (1 - p)``.
        """
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
        """Convolve the real positions; padding stays zero.

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


def per_distinct_row(encode, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """``encode(ids, mask)`` (a list of ``[B, ...]`` tensors) computed once per distinct row of ``ids`` and
    ``mask`` and gathered back to every row that holds it: a query repeated over its candidates is encoded
    once. Only for eval mode, where a row's encoding does not depend on the batch (no dropout).

    Args:
        encode: maps ``ids`` ``[n, L]`` and ``mask`` ``[n, L]`` to a list of ``[n, ...]`` tensors.
        ids: ``[B, L]`` long.
        mask: ``[B, L]`` bool.

    Returns:
        What ``encode(ids, mask)`` returns (equal values).
    """
    if ids.shape[0] > 1:
        width = ids.shape[1]
        rows, inverse = torch.unique(torch.cat([ids, mask.long()], dim=1), dim=0, return_inverse=True)
        if rows.shape[0] < ids.shape[0]:
            return [level[inverse] for level in encode(rows[:, :width], rows[:, width:].bool())]
    return encode(ids, mask)


def cached_states(encode, cache, keys, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """Encoder states ``[N, L, d]`` of a batch's unique texts (queries or documents), from ``cache``
    where present. Every state is looked up or computed here, never assumed cached: a bounded cache may
    have forgotten a text that an earlier batch of the same call encoded (a document under several
    queries whose pairs fall in different batches).

    Args:
        encode: maps ``ids`` ``[n, L]`` and ``attention`` ``[n, L]`` of uncached texts to states ``[n, L, d]``.
        cache: a bounded cache of states by key (:class:`rerankers.lru.LRUCache`: ``get`` and ``put``).
        keys: one cache key per row of ``ids``.
        ids: ``[N, L]`` token ids, padded.
        attention: ``[N, L]``, 1 on real tokens.

    Returns:
        ``[N, L', d]``: each row's states up to its length, zero-padded to the longest.
    """
    lengths = attention.sum(dim=1).tolist()
    states = [cache.get(key) for key in keys]
    missing = [i for i, state in enumerate(states) if state is None]
    if missing:
        rows = torch.tensor(missing, device=ids.device)
        width = max(lengths[i] for i in missing)
        fresh = encode(ids[rows, :width], attention[rows, :width])
        for row, i in enumerate(missing):
            states[i] = fresh[row, : lengths[i]].clone()
            cache.put(keys[i], states[i])
    return pad_sequence(states, batch_first=True)


def positionwise(function, mask: torch.Tensor | None, *inputs: torch.Tensor) -> torch.Tensor:
    """``function`` (acting on the last axis only) applied to the real positions of ``inputs`` ``[B, n, *]``
    (``mask`` ``[B, n]``, True = real) and scattered back to ``[B, n, out]``; padded positions get zeros.
    Skipping padding saves work, not results; ``mask=None`` applies ``function`` everywhere.

    Args:
        function: maps tensors ``[m, *]`` to ``[m, out]``, acting on the last axis only.
        mask: ``[B, n]`` bool, True on real positions, or ``None``.
        *inputs: ``[B, n, *]`` tensors.

    Returns:
        ``[B, n, out]`` with zeros at padded positions.
    """
    if mask is None:
        return function(*inputs)
    packed = function(*(x[mask] for x in inputs))
    result = packed.new_zeros(*mask.shape, packed.shape[-1])
    result[mask] = packed
    return result
