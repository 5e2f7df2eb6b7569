"""The records a loader returns: a :class:`Dataset` (queries, qrels, lazy documents, splits, shipped run),
its :class:`Recipe` (the run settings it calls for) and :func:`select_queries` (one split's queries)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..errors import PipelineError
from ..records import Doc, Qrel, Query, Run


@dataclass(frozen=True)
class Recipe:
    """What a run on a dataset uses when the command line does not say: the protocol's test split, the
    first stage's depth when re-ranking, the metrics (the first is the main one: interpolation weights are
    tuned on it and the report's p-values are read on it) and training options (names of
    :class:`rerankers.training.config.TrainConfig` fields; ``--set`` wins). Built-in datasets carry the settings
    their papers or their size call for (:mod:`pipeline.core.datasets.recipes`); a user's own dataset gets the
    general defaults."""

    split: str | None = None
    k: int | None = None
    metrics: str | None = None
    train: Mapping[str, Any] = field(default_factory=dict)
    #: how the re-ranker's scores meet the first stage's by default (``--interpolate``): ``auto`` unless the
    #: shipped candidate order is no ranking to combine with
    interpolate: str = "auto"
    #: set when the dataset's documents are only a pool of a larger collection (e.g. the passages of the
    #: shipped top-100 runs of TREC DL): says what they are. A first stage built over them (bm25, codes ...)
    #: searches the pool, not the collection, so its runs are named ``-pool`` and a warning says so
    pooled: str | None = None


@dataclass
class Dataset:
    """A test collection in plain records.

    ``docs`` is produced lazily by ``docs_factory`` (collections may be large); ``doc_store()`` builds an
    id -> Doc dict on first use. ``splits`` maps a split name (``train``, ``2013``, ``raw-test`` ...) to its
    query ids; ``first_stage`` is the run shipped with the data (Microblog QL, DL BM25), if any.
    ``fingerprint`` identifies the files the dataset was read from (cache keys of models and indexes).
    """

    name: str
    queries: dict[str, Query]
    qrels: list[Qrel]
    docs_factory: Callable[[], Iterable[Doc]]
    fingerprint: str
    splits: dict[str, list[str]] = field(default_factory=dict)
    first_stage: Run | None = None
    source: str = ""
    recipe: Recipe = field(default_factory=Recipe)
    _store: dict[str, Doc] | None = field(default=None, repr=False)
    #: pair data only: every ``(query_id, doc_id, label)`` line in file order, duplicates included (pair
    #: classification scores each line; ranking uses ``first_stage`` and ``qrels``, where they are merged)
    pairs: list[tuple[str, str, int]] | None = field(default=None, repr=False)

    def docs_iter(self) -> Iterator[Doc]:
        """Iterate over all documents of the collection.

        Returns:
            An iterator of :class:`~pipeline.core.records.Doc`, read afresh.
        """
        return iter(self.docs_factory())

    def doc_store(self, on_disk: bool | None = None) -> Mapping[str, Doc]:
        """All documents by id (built once, then cached on the object): a dict, or with ``on_disk`` (default:
        ``PIPELINE_DOC_STORE=disk``) a :class:`pipeline.core.docstore.DiskDocStore`, which reads them from a
        file built once per collection instead of holding them in this process.

        Args:
            on_disk: a disk store instead of a dict (default: ``PIPELINE_DOC_STORE=disk``).

        Returns:
            ``doc_id -> Doc``.
        """
        from ..docstore import DiskDocStore, open_doc_store, wants_disk

        disk = wants_disk(on_disk)
        if self._store is None or disk != isinstance(self._store, DiskDocStore):
            self._store = open_doc_store(self.name, self.fingerprint, self.docs_iter) if disk else \
                {doc.doc_id: doc for doc in self.docs_iter()}
        return self._store

    def qrels_dict(self) -> dict[str, dict[str, int]]:
        """The judgments by query.

        Returns:
            ``{query_id: {doc_id: relevance}}``.
        """
        result: dict[str, dict[str, int]] = {}
        for qrel in self.qrels:
            result.setdefault(qrel.query_id, {})[qrel.doc_id] = qrel.relevance
        return result

    def subset(self, query_ids: Iterable[str], name: str | None = None) -> "Dataset":
        """The same collection restricted to some queries (their qrels, splits and first-stage run).

        Args:
            query_ids: the queries to keep.
            name: the subset's name (default: the dataset's).

        Returns:
            A new dataset sharing the documents.
        """
        keep = set(query_ids)
        return dataclasses.replace(
            self,
            name=name or self.name,
            queries={qid: q for qid, q in self.queries.items() if qid in keep},
            qrels=[q for q in self.qrels if q.query_id in keep],
            splits={s: [q for q in qids if q in keep] for s, qids in self.splits.items()},
            first_stage=None if self.first_stage is None else {q: r for q, r in self.first_stage.items() if q in keep},
            _store=self._store,
            pairs=None if self.pairs is None else [p for p in self.pairs if p[0] in keep],
        )


def select_queries(dataset: Dataset, split: str | None = None) -> list[Query]:
    """The queries to run: all of them, or one named split's.

    Args:
        dataset: the dataset.
        split: a split name (``None``: all queries).

    Returns:
        The queries, in the dataset's (or the split's) order.

    Raises:
        PipelineError: the dataset has no such split; the message lists its splits.
    """
    if split is None:
        return list(dataset.queries.values())
    if split not in dataset.splits:
        known = ", ".join(dataset.splits) or "none"
        raise PipelineError(f"dataset {dataset.name!r} has no split {split!r} (its splits: {known})")
    return [dataset.queries[qid] for qid in dataset.splits[split]]
