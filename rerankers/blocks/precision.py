"""Where scoring under bfloat16 autocast stays float32: similarity matrices (exact matches need more than
bfloat16's 8 significant bits) and score heads (a score rounded to 8 bits ties documents)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


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
