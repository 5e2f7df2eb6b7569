"""Encoders that return every layer's output, for models that match at each level (HCAN's hybrid encoders).

Rao et al., EMNLP 2019 (HCAN), Sec. 2.1: a deep encoder (N stacked CNNs of width k), a wide encoder (N
parallel CNNs of widths ``k .. k+N-1``) and a contextual encoder (N stacked BiLSTMs). Each takes the input
size and a config with ``num_layers``, ``kernel_size``, ``num_filters`` and ``dropout``
(:class:`rerankers.hcan.HCANConfig`), and maps ``[B, L, E]``, ``[B, L]`` to N tensors ``[B, L, F]`` with
zeros at padding. Convolutions pad on the right only, so position i of every level starts at token i.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .layers import MaskedConv1d
from .recurrent import MaskedBiLSTM

__all__ = ["DeepEncoder", "WideEncoder", "ContextualEncoder"]


class DeepEncoder(nn.Module):
    """Deep encoder, Sec. 2.1: ``U^h = CNN^h(U^{h-1})``, h = 1..N, width k, F filters, ReLU.

    Each layer is padded on the right, so position i of layer h covers tokens
    ``i .. i+h(k-1)`` of the input. Parameters are shared by query and context.
    """

    def __init__(self, input_dim: int, config) -> None:
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
        """Every layer's phrase vectors.

        Args:
            x: ``[B, L, E]`` embeddings.
            mask: ``[B, L]`` bool, True on real tokens.

        Returns:
            N tensors ``[B, L, F]`` (zeros at padding).
        """
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

    def __init__(self, input_dim: int, config) -> None:
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
        """Every CNN's phrase vectors.

        Args:
            x: ``[B, L, E]`` embeddings.
            mask: ``[B, L]`` bool, True on real tokens.

        Returns:
            N tensors ``[B, L, F]`` (zeros at padding).
        """
        return [self.dropout(conv(x, mask)) for conv in self.convs]


class ContextualEncoder(nn.Module):
    """Contextual encoder, Sec. 2.1: ``U^h = BiLSTM^h(U^{h-1})``, h = 1..N.

    F/2 units per direction so every layer outputs F features like the CNN
    encoders (as in the released code). Sequences are packed, so padding
    never leaks into the backward direction.
    """

    def __init__(self, input_dim: int, config) -> None:
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
        """Every BiLSTM layer's outputs.

        Args:
            x: ``[B, L, E]`` embeddings.
            mask: ``[B, L]`` bool, True on real tokens.

        Returns:
            N tensors ``[B, L, F]`` (zeros at padding).
        """
        outputs = []
        for lstm in self.lstms:
            x, _ = lstm(x, mask)
            x = self.dropout(x)
            outputs.append(x)
        return outputs
