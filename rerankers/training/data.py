"""Training and dev data of a re-ranker: queries, their first-stage candidates, judgments and document texts,
and :func:`rerank_candidates` (how a dev metric re-scores them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from pipeline.core.progress import tqdm

from pipeline.core.datasets import Dataset
from pipeline.core.records import Doc, Qrel, Query, Run, ScoredDoc, ranked


@dataclass
class RankingData:
    """Queries with candidates (a first-stage run), judgments and the texts of the documents."""

    queries: dict[str, Query]
    candidates: Run
    qrels: dict[str, dict[str, int]]
    docs: Mapping[str, Doc]

    @classmethod
    def from_dataset(cls, dataset: Dataset, query_ids: Iterable[str], candidates: Run) -> "RankingData":
        """The given queries of ``dataset`` with their candidates from ``candidates``.

        Args:
            dataset: the dataset (queries, judgments, document store).
            query_ids: the queries to keep (those without candidates are left out).
            candidates: a first-stage run.

        Returns:
            The training (or dev) data.
        """
        query_ids = [q for q in query_ids if q in candidates]
        qrels = dataset.qrels_dict()
        return cls({q: dataset.queries[q] for q in query_ids}, {q: candidates[q] for q in query_ids},
                   {q: qrels.get(q, {}) for q in query_ids}, dataset.doc_store())

    def positives(self, query_id: str, pool: str = "all", min_relevance: int = 1) -> list[str]:
        """Judged-relevant documents whose text is available, in a stable order.

        Args:
            query_id: the query.
            pool: ``"all"``, or ``"candidates"`` for only those among the query's candidates.
            min_relevance: the lowest relevance that counts (at least 1).

        Returns:
            Their document ids.
        """
        relevant = sorted(d for d, r in self.qrels.get(query_id, {}).items() if r >= max(1, min_relevance)
                          and d in self.docs)
        if pool == "candidates":
            retrieved = {h.doc_id for h in self.candidates.get(query_id, [])}
            relevant = [d for d in relevant if d in retrieved]
        return relevant

    def negatives(self, query_id: str) -> list[str]:
        """Candidates not judged relevant (unjudged ones count as non-relevant).

        Args:
            query_id: the query.

        Returns:
            Their document ids, in candidate order.
        """
        judged = self.qrels.get(query_id, {})
        return [h.doc_id for h in self.candidates.get(query_id, []) if judged.get(h.doc_id, 0) <= 0]

    def qrels_list(self):
        """Judgments as :class:`~pipeline.core.records.Qrel` records (for ir-measures).

        Returns:
            One record per judgment.
        """
        return [Qrel(q, d, r) for q, docs in self.qrels.items() for d, r in docs.items()]


#: pairs scored per call by :func:`rerank_candidates` (as ``pipeline.engine.stages.RERANK_CHUNK_PAIRS``)
EVALUATION_CHUNK_PAIRS = 4096


def rerank_candidates(reranker, data: RankingData, depth: int = 0) -> Run:
    """Score every query's candidates in ``data`` with ``reranker``.

    A re-ranker with ``score_many`` scores all queries in one call (batches filled across queries); others
    query by query.

    Args:
        reranker: a re-ranker (``score``, optionally ``score_many``).
        data: queries with candidates and document texts.
        depth: when > 0, only the top ``depth`` by first-stage score (a cheaper dev metric on long lists).

    Returns:
        The re-ranked run, each query's documents in candidate order with their new scores.
    """
    heads = {}
    for query_id in data.queries:
        hits = data.candidates.get(query_id, [])
        if depth > 0:
            hits = ranked(hits)[:depth]
        heads[query_id] = hits
    items = [(data.queries[q], [data.docs[h.doc_id] for h in hits]) for q, hits in heads.items()]
    score_many = getattr(reranker, "score_many", None)
    # chunks of about EVALUATION_CHUNK_PAIRS pairs, so a long dev evaluation shows its progress
    chunks, pairs = [[]], 0
    for item in items:
        if chunks[-1] and pairs + len(item[1]) > EVALUATION_CHUNK_PAIRS:
            chunks.append([])
            pairs = 0
        chunks[-1].append(item)
        pairs += len(item[1])
    scored = []
    with tqdm(total=len(items), desc="dev evaluation", unit="query", leave=False,
              disable=None if len(chunks) > 1 else True) as bar:
        for chunk in chunks:
            if score_many is not None:
                scored.extend(score_many(chunk))
            else:
                scored.extend(reranker.score(query, docs) for query, docs in chunk)
            bar.update(len(chunk))
    return {query_id: [ScoredDoc(query_id, h.doc_id, float(s)) for h, s in zip(hits, scores)]
            for (query_id, hits), scores in zip(heads.items(), scored)}
