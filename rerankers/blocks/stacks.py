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


class _LayerStack(nn.Module):
    """What the three encoders share: N layers (``self.<layer_attribute>``, the name their weights are saved
    under), each output dropped out and returned; stacked layers read the previous layer's dropped-out output,
    parallel ones the embeddings."""

    layer_attribute = "convs"
    stacked = True

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's phrase vectors.

        Args:
            x: ``[B, L, E]`` embeddings.
            mask: ``[B, L]`` bool, True on real tokens.

        Returns:
            N tensors ``[B, L, F]`` (zeros at padding).
        """
        outputs, layer_input = [], x
        for layer in getattr(self, self.layer_attribute):
            # The released code feeds the dropped-out tensor both to the next
            # layer and to the matching modules.
            out = self.dropout(self.layer_output(layer, layer_input, mask))
            outputs.append(out)
            if self.stacked:
                layer_input = out
        return outputs

    def layer_output(self, layer: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One layer's output before dropout.

        Args:
            layer: a CNN (or, overridden, another layer).
            x: ``[B, L, E]`` its input.
            mask: ``[B, L]`` bool, True on real tokens.

        Returns:
            ``[B, L, F]``.
        """
        return layer(x, mask)


class DeepEncoder(_LayerStack):
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


class WideEncoder(_LayerStack):
    """Wide encoder, Sec. 2.1: N parallel CNNs over the embeddings, widths ``k .. k+N-1``.

    Layer l (1-based) has width ``k+l-1`` and is padded on the right, so
    position i covers tokens ``i .. i+k+l-2``.
    """

    stacked = False

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


class ContextualEncoder(_LayerStack):
    """Contextual encoder, Sec. 2.1: ``U^h = BiLSTM^h(U^{h-1})``, h = 1..N.

    F/2 units per direction so every layer outputs F features like the CNN
    encoders (as in the released code). Sequences are packed, so padding
    never leaks into the backward direction.
    """

    layer_attribute = "lstms"

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

    def layer_output(self, layer: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A BiLSTM layer's outputs at every position (its final states are not used).

        Args:
            layer: a :class:`MaskedBiLSTM`.
            x: ``[B, L, E]`` its input.
            mask: ``[B, L]`` bool, True on real tokens.

        Returns:
            ``[B, L, F]``.
        """
        outputs, _ = layer(x, mask)
        return outputs
