"""Weight-space ensembling of a fine-tuned model with its starting weights (WiSE-FT).

Wortsman et al., "Robust fine-tuning of zero-shot models" (CVPR 2022), eq. 1: the kept weights are
``(1 - a) * trained + a * start``, one model with no extra cost at scoring time. Fine-tuning a pre-trained
encoder on a few hundred queries moves it towards what those queries reward and away from what it knew;
the paper finds the mix at ``a = 0.5`` at least as good as the fine-tuned model on the fine-tuning
distribution and better beyond it. Both ends start from the same pre-trained weights, so the straight line
between them stays in one basin (the paper's condition for the mix to work). Measured here on TREC DL19
with the bi-encoder (``docs/bi-encoder-fine-tuning.md``): level with one plain epoch, so it is off by default.
"""
from __future__ import annotations

from typing import Mapping


def mix_weights(trained: Mapping, start: Mapping, start_share: float) -> dict:
    """``(1 - start_share) * trained + start_share * start`` for every floating-point tensor.

    Integer and boolean buffers (token positions, counters) are taken from ``trained`` as they are.

    Args:
        trained: the fine-tuned ``state_dict``.
        start: the ``state_dict`` training started from (the same keys and shapes).
        start_share: the starting weights' share, in ``[0, 1)``.

    Returns:
        The mixed ``state_dict`` (new tensors; the inputs are not changed).

    Raises:
        ValueError: the two state dicts do not hold the same tensors.

    Example:
        >>> import torch
        >>> mix_weights({"w": torch.tensor([2.0])}, {"w": torch.tensor([0.0])}, 0.25)["w"]
        tensor([1.5000])
    """
    if set(trained) != set(start):
        raise ValueError(f"the trained and starting weights differ in their tensors: "
                         f"{sorted(set(trained) ^ set(start))[:5]}")
    mixed = {}
    for name, value in trained.items():
        origin = start[name]
        if tuple(value.shape) != tuple(origin.shape):
            raise ValueError(f"tensor {name!r} has shape {tuple(value.shape)} after training and "
                             f"{tuple(origin.shape)} at the start")
        if value.is_floating_point():
            mixed[name] = value.lerp(origin.to(value.device, value.dtype), start_share)
        else:
            mixed[name] = value.clone()
    return mixed
