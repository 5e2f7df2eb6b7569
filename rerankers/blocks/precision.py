"""What stays float32 under bfloat16 autocast, as the blocks import it; written once in :mod:`rerankers.precision`
(the one home of scoring precision)."""

from __future__ import annotations

from rerankers.precision import float32_bmm as _float32_bmm  # noqa: F401  (used by .similarity)
from rerankers.precision import score_heads, score_heads_in_float32

__all__ = ["score_heads", "score_heads_in_float32"]
