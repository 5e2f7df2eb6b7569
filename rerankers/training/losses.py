"""The ``in_batch`` loss: softmax over a unit's own positive and negatives plus every other document of the batch.

Each training unit is ``(query, [positive, *hard_negatives], labels)``, its hard negatives sampled from the
query's first-stage candidates (:meth:`rerankers.training.loop.Trainer.epoch_units`). With ``loss=in_batch``
the Trainer scores every query of the batch against every document of the batch, and each query's softmax
runs over all of them, its own positive the target: the other units' positives and hard negatives become
extra negatives at no extra encoding for a re-ranker that encodes each distinct query and document once per
batch (the bi-encoder). This is sentence-transformers' MultipleNegativesRankingLoss with hard negatives, and
DPR's recipe (Karpukhin et al., "Dense Passage Retrieval for Open-Domain Question Answering", EMNLP 2020,
arXiv:2004.04906, section 3.2: in-batch negatives plus one BM25 negative per question).

Why a mask: two units of one query (two of its judged-relevant documents) can share a batch; the other
unit's positive is then relevant to this query too and must not be pushed down. A document is left out of a
query's softmax when it is labelled positive for that query anywhere in the batch, except in the query's own
target column. A cross-encoder would score ``units x documents`` pairs, each a full forward pass: this loss
is meant for re-rankers that embed queries and documents apart.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["in_batch_pairs", "in_batch_loss"]


def _columns(units: Sequence) -> tuple[list, list[int]]:
    """The batch's documents in unit order and each unit's first column (its positive's)."""
    docs, offsets = [], []
    for _, unit_docs, _ in units:
        offsets.append(len(docs))
        docs.extend(unit_docs)
    return docs, offsets


def in_batch_pairs(units: Sequence) -> list[tuple]:
    """``(query, doc)`` pairs scoring every unit's query against every document of the batch, row by row.

    Args:
        units: training units ``(query, docs, labels)``, each ``docs[0]`` the positive.

    Returns:
        ``len(units) * D`` pairs, ``D`` the number of documents over all units; row ``i`` holds unit ``i``'s
        query with the documents in unit order.

    Example:
        >>> from pipeline.core.records import Doc, Query
        >>> u = [(Query("q", "a"), [Doc("p", "x"), Doc("n", "y")], [1.0, 0.0])]
        >>> [d.doc_id for _, d in in_batch_pairs(u)]
        ['p', 'n']
    """
    docs, _ = _columns(units)
    return [(query, doc) for query, _, _ in units for doc in docs]


def in_batch_loss(scores, units: Sequence):
    """Mean cross-entropy of each unit's row of ``scores`` with its own positive as the target.

    Args:
        scores: flat scores ``[len(units) * D]`` of :func:`in_batch_pairs`' pairs, in that order.
        units: the same units.

    Returns:
        A scalar tensor. Columns holding a document labelled positive for the row's query (by any unit of
        that query in the batch) are masked out, except the row's own target column.

    Example:
        >>> import torch
        >>> from pipeline.core.records import Doc, Query
        >>> u = [(Query("q", "a"), [Doc("p", "x")], [1.0]), (Query("r", "b"), [Doc("s", "y")], [1.0])]
        >>> round(float(in_batch_loss(torch.tensor([5.0, 0.0, 0.0, 5.0]), u)), 4)
        0.0067
    """
    import torch
    import torch.nn.functional as F

    docs, offsets = _columns(units)
    grouped = scores.view(len(units), len(docs))
    # which (query, document id) pairs are judged positive, as a small table indexed by query and document:
    # the [units, D] mask is then one gather (a document may appear in several columns, a query in several rows)
    query_numbers: dict[str, int] = {}
    doc_numbers: dict[str, int] = {}
    row_queries = [query_numbers.setdefault(query.query_id, len(query_numbers)) for query, _, _ in units]
    column_docs = [doc_numbers.setdefault(doc.doc_id, len(doc_numbers)) for doc in docs]
    positive = [(query_numbers[query.query_id], doc_numbers[doc.doc_id])
                for query, unit_docs, labels in units for doc, label in zip(unit_docs, labels) if label > 0]
    relevant = torch.zeros(len(query_numbers), len(doc_numbers), dtype=torch.bool)
    if positive:
        relevant[tuple(torch.tensor(positive).T)] = True
    mask = relevant[torch.tensor(row_queries)][:, torch.tensor(column_docs)]
    mask[torch.arange(len(units)), torch.tensor(offsets)] = False  # the row's own target stays
    mask = mask.to(grouped.device)
    target = torch.tensor(offsets, dtype=torch.long, device=scores.device)
    return F.cross_entropy(grouped.masked_fill(mask, float("-inf")), target)
