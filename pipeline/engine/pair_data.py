"""The labelled pairs pair classification scores (:mod:`pipeline.classify`): a dataset's pairs of some
queries with their labels, checked to be pair data with both classes, and a re-ranker's score of each."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..core.datasets import Dataset
from ..core.errors import ConfigError
from ..core.records import Run, ScoredDoc
from .stages import rerank


@dataclass(frozen=True)
class PairSet:
    """The labelled pairs of some queries: ``pairs[i]`` is ``(query_id, doc_id)`` with label ``labels[i]``
    (1 when the data's label is > 0, else 0), in the data's order."""

    name: str
    pairs: tuple[tuple[str, str], ...]
    labels: np.ndarray

    @property
    def positives(self) -> int:
        """How many pairs are positive."""
        return int(self.labels.sum())

    def describe(self) -> dict[str, Any]:
        """Its name, size and positives (for the report)."""
        return {"name": self.name, "pairs": len(self.pairs), "positives": self.positives}


def check_pair_data(dataset: Dataset) -> None:
    """A :class:`ConfigError` unless ``dataset`` comes with its pairs (the candidate lists of pair-format
    folders): a TREC-format collection has queries and documents but no pairs to classify."""
    if not dataset.first_stage:
        raise ConfigError(f"--dataset {dataset.name!r} is not pair data: pair classification needs pair-format "
                          "folders (a.toks b.toks id.txt sim.txt, one per split) or a built-in pair dataset "
                          "(wikiqa, trecqa)")


def labelled_pairs(dataset: Dataset, query_ids: Sequence[str], name: str, need_both: bool = True) -> PairSet:
    """Every pair of ``query_ids`` in the pair data (the dataset's shipped candidate lists) with its label.

    A pair without a label, queries without pairs, or (with ``need_both``) a set without a positive or
    without a negative pair is a :class:`ConfigError` naming the set: thresholds, F1 and AUC need both."""
    check_pair_data(dataset)
    qrels = dataset.qrels_dict()
    pairs: list[tuple[str, str]] = []
    labels: list[int] = []
    unlabelled: list[tuple[str, str]] = []
    if dataset.pairs is not None:  # every line of pair files, a pair listed twice included with its own label
        by_query: dict[str, list[tuple[str, str, int]]] = {}
        for line in dataset.pairs:
            by_query.setdefault(line[0], []).append(line)
        lines = [line for query_id in query_ids for line in by_query.get(query_id, [])]
        pairs = [(query_id, doc_id) for query_id, doc_id, _ in lines]
        labels = [int(label > 0) for _, _, label in lines]
    for query_id in (query_ids if dataset.pairs is None else ()):
        for hit in dataset.first_stage.get(query_id, []):
            label = qrels.get(query_id, {}).get(hit.doc_id)
            if label is None:
                unlabelled.append((query_id, hit.doc_id))
                continue
            pairs.append((query_id, hit.doc_id))
            labels.append(int(label > 0))
    if unlabelled:
        query_id, doc_id = unlabelled[0]
        raise ConfigError(f"{name}: {len(unlabelled)} pairs have no label (e.g. query {query_id!r}, doc {doc_id!r}); "
                          "pair classification needs a label for every pair (sim.txt, or qrels covering every pair)")
    if not pairs:
        raise ConfigError(f"{name}: no pairs (its {len(query_ids)} queries have no candidates in the pair data)")
    result = PairSet(name, tuple(pairs), np.asarray(labels, dtype=np.int64))
    if need_both and result.positives in (0, len(pairs)):
        missing = "positive (label > 0)" if result.positives == 0 else "negative (label 0)"
        raise ConfigError(f"{name}: {len(pairs)} pairs without a single {missing} one; a threshold, F1 and AUC "
                          "need both classes")
    return result


def score_pairs(reranker, dataset: Dataset, pairs: PairSet, batch_size: int | None = None) -> np.ndarray:
    """The re-ranker's score of every pair of ``pairs``, in its order (batched across queries as
    :func:`pipeline.engine.stages.rerank` batches them; non-finite scores are refused there)."""
    run: Run = {}
    for query_id, doc_id in pairs.pairs:
        run.setdefault(query_id, []).append(ScoredDoc(query_id, doc_id, 0.0))
    scored = rerank(reranker, dataset, run, batch_size=batch_size)
    by_pair = {(hit.query_id, hit.doc_id): hit.score for hits in scored.values() for hit in hits}
    return np.asarray([by_pair[pair] for pair in pairs.pairs], dtype=np.float64)
