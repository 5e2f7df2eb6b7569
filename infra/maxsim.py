"""Late-interaction (ColBERT/ADDAX) MaxSim scores, shared by ADDAX (:mod:`rerankers.addax`) and the code
first stages (:mod:`indexes.codes`)."""

from __future__ import annotations

import torch


def maxsim(queries: torch.Tensor, query_mask: torch.Tensor, docs: torch.Tensor, doc_mask: torch.Tensor,
           all_pairs: bool = False) -> torch.Tensor:
    """Late-interaction score: the sum over real query positions of the largest dot product with a real
    document position, ``sum_i max_j q_i . d_j``.

    Computed in float32 also under bfloat16 autocast: the sum is the score, and 8 significant bits would tie
    documents a ranking should separate.

    Args:
        queries: ``[B, l, h]`` (paired) or ``[Nq, l, h]`` (``all_pairs``) query vectors; normalise them
            first for cosines.
        query_mask: bool ``[B, l]`` / ``[Nq, l]``, True on real positions.
        docs: ``[B, t, h]`` (paired) or ``[Nd, t, h]`` (``all_pairs``) document vectors.
        doc_mask: bool ``[B, t]`` / ``[Nd, t]``, True on real positions.
        all_pairs: score every query against every document instead of pair ``i`` with pair ``i``.

    Returns:
        ``[B]`` scores (paired) or ``[Nq, Nd]`` (``all_pairs``); a document without real positions scores 0.

    Example:
        >>> q, d = torch.ones(1, 2, 3), torch.ones(1, 4, 3)
        >>> maxsim(q, torch.ones(1, 2, dtype=torch.bool), d, torch.ones(1, 4, dtype=torch.bool))
        tensor([6.])
    """
    queries, docs = queries.float(), docs.float()
    with torch.autocast(queries.device.type, enabled=False):
        if all_pairs:
            sims = torch.einsum("aih,bjh->abij", queries, docs)
            sims = sims.masked_fill(~doc_mask[None, :, None, :], float("-inf"))
            weights = query_mask[:, None, :]
        else:
            sims = torch.bmm(queries, docs.transpose(1, 2))
            sims = sims.masked_fill(~doc_mask[:, None, :], float("-inf"))
            weights = query_mask
    best = sims.max(dim=-1).values
    best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
    return (best * weights.to(best.dtype)).sum(dim=-1)
