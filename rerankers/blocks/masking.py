"""Masks and masked reductions: what every block uses so that padding never changes what a real position
sees (masks are ``BoolTensor`` s, ``True`` on real tokens)."""

from __future__ import annotations

import torch


def lengths_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Number of real tokens per row.

    Args:
        mask: ``[B, L]`` bool, True on real tokens.

    Returns:
        ``[B]`` int64 lengths.
    """
    return mask.long().sum(dim=-1)


def interaction_mask(q_mask: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor:
    """Mask of the real cells of a query x document interaction matrix.

    Args:
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.

    Returns:
        ``[B, Lq, Ld]`` bool, True where both the query and the document token are real.
    """
    return q_mask.unsqueeze(-1) & d_mask.unsqueeze(-2)


def masked_fill_padding(x: torch.Tensor, mask: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Set the padding positions of a sequence tensor to ``value`` (default 0).

    Args:
        x: ``[B, L, ...]`` any trailing dims.
        mask: ``[B, L]`` bool, True on real tokens.
        value: what padding positions get.

    Returns:
        Tensor shaped like ``x`` (out of place, differentiable).
    """
    expanded = mask.reshape(mask.shape + (1,) * (x.dim() - mask.dim()))
    return x.masked_fill(~expanded, value)


def _broadcast_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    # Callers pass masks missing the trailing feature dims (e.g. [B, L] for
    # [B, L, D]); append singleton dims so broadcasting lines up on the left.
    if mask.dim() < like.dim():
        mask = mask.reshape(mask.shape + (1,) * (like.dim() - mask.dim()))
    return mask.expand_as(like)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives masked entries exactly 0.

    A row whose entries are all masked returns all zeros (never NaN, and its
    gradient is zero too), which is what attention over an empty document or
    an all-padding query position must produce.

    Args:
        scores: any shape.
        mask: bool, broadcastable to ``scores`` (trailing singleton dims are
            added when it has fewer dims), True on entries that take part.
        dim: the axis to normalise over.

    Returns:
        Tensor shaped like ``scores``; each row sums to 1 over its real
        entries, or to 0 when it has none.
    """
    mask = _broadcast_mask(mask, scores)
    # finfo.min instead of -inf: a fully masked row then becomes a uniform
    # softmax (finite) that the final multiplication turns into zeros.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(filled, dim=dim)
    return probs * mask.to(probs.dtype)


def masked_max(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim`` ignoring masked entries; 0 where everything is masked.

    Args:
        x: floating point values, any shape (masked entries are set to the dtype's lowest value first).
        mask: bool, broadcastable to ``x`` (trailing singleton dims added).
        dim: axis to reduce.
        keepdim: keep the reduced axis as size 1.

    Returns:
        The largest real entry along ``dim``; 0 for a row with none.
    """
    mask = _broadcast_mask(mask, x)
    filled = x.masked_fill(~mask, torch.finfo(x.dtype).min)
    values = filled.amax(dim=dim, keepdim=keepdim)
    any_real = mask.any(dim=dim, keepdim=keepdim)
    return values.masked_fill(~any_real, 0.0)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Sum over ``dim`` of the unmasked entries (0 where everything is masked).

    Args:
        x: the values, any shape (masked entries count as 0).
        mask: bool, broadcastable to ``x`` (trailing singleton dims added).
        dim: axis to reduce.
        keepdim: keep the reduced axis as size 1.

    Returns:
        ``x`` summed along ``dim``.
    """
    mask = _broadcast_mask(mask, x)
    return (x * mask.to(x.dtype)).sum(dim=dim, keepdim=keepdim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Mean over ``dim`` of the unmasked entries; 0 where everything is masked.

    Args:
        x: the values to average, any shape.
        mask: bool, broadcastable to ``x`` (trailing singleton dims added).
        dim: axis to reduce.
        keepdim: keep the reduced axis as size 1.

    Returns:
        :func:`masked_sum` divided by the number of real entries, so padding never dilutes the mean.
    """
    count = _broadcast_mask(mask, x).sum(dim=dim, keepdim=keepdim).clamp_min(1).to(x.dtype)
    return masked_sum(x, mask, dim, keepdim) / count


def masked_softmax_with_null(scores: torch.Tensor, mask: torch.Tensor, dim: int,
                             null_logit: torch.Tensor) -> torch.Tensor:
    """:func:`masked_softmax` over ``dim`` with one extra, always real entry holding ``null_logit`` (a "no
    match" reference, dropped afterwards): the real entries then sum to less than 1 when none beats it.

    Args:
        scores: ``[..., n, ...]``.
        mask: bool, shaped like ``scores``.
        dim: the axis to normalise over.
        null_logit: a scalar tensor.

    Returns:
        Tensor shaped like ``scores``; 0 at masked entries.
    """
    shape = list(scores.shape)
    shape[dim] = 1
    null = null_logit.to(scores.dtype).expand(shape)
    slot_mask = torch.ones(shape, dtype=torch.bool, device=scores.device)
    extended = masked_softmax(torch.cat([scores, null], dim), torch.cat([mask, slot_mask], dim), dim)
    return extended.narrow(dim, 0, scores.shape[dim]) * mask.to(scores.dtype)
