"""Plain records every stage of the pipeline exchanges.

The field names follow ir_datasets / ir_measures (``query_id``, ``doc_id``, ``relevance``, ``score``), so
records pass to ir_measures unchanged and a notebook user sees familiar shapes.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence


class Query(NamedTuple):
    """A query (topic) with the text the first stage and the re-ranker see."""

    query_id: str
    text: str


class Doc(NamedTuple):
    """A document (or passage, tweet, answer sentence) with its full text."""

    doc_id: str
    text: str


class Qrel(NamedTuple):
    """A relevance judgment; ``relevance`` may be graded or negative (e.g. -2 spam in Microblog)."""

    query_id: str
    doc_id: str
    relevance: int
    iteration: str = "0"


class ScoredDoc(NamedTuple):
    """One line of a ranking: a document and its score for a query."""

    query_id: str
    doc_id: str
    score: float


#: A ranking of many queries: query id -> its scored documents (any order; writers sort).
Run = dict[str, list[ScoredDoc]]


def ranked(hits: Iterable[ScoredDoc]) -> list[ScoredDoc]:
    """``hits`` best first: score descending, ties by doc id descending, the order trec_eval ranks them in
    (so the rank column written, the top-k cut and the evaluation all agree).

    Args:
        hits: scored documents (of one query, usually).

    Returns:
        A new list, best first.

    Example:
        >>> [h.doc_id for h in ranked([ScoredDoc("q", "a", 1.0), ScoredDoc("q", "b", 1.0), ScoredDoc("q", "c", 2.0)])]
        ['c', 'b', 'a']
    """
    by_id = sorted(hits, key=lambda hit: hit.doc_id, reverse=True)
    return sorted(by_id, key=lambda hit: -hit.score)  # stable: ties keep the doc id order


def minmax(hits: Sequence[ScoredDoc]) -> dict[str, float]:
    """One query's ranking min-max rescaled, the normalisation every fusion of rankings here uses.

    Args:
        hits: the scored documents of one query.

    Returns:
        ``doc_id -> score`` rescaled to [0, 1] (all 0 when every score is equal).

    Example:
        >>> minmax([ScoredDoc("q", "a", 3.0), ScoredDoc("q", "b", 1.0)])
        {'a': 1.0, 'b': 0.0}
    """
    if not hits:
        return {}
    low = min(h.score for h in hits)
    span = max(h.score for h in hits) - low
    return {h.doc_id: (h.score - low) / span if span > 0 else 0.0 for h in hits}
