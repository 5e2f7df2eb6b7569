"""One run's first stage, built once and asked once per query: :class:`FirstStageContext`.

A run needs the first stage's candidates three times: for the queries it re-ranks, for the training and dev
queries its models learn from, and for each fold's dev queries its combination weight is tuned on. Each of
these used to build the first stage anew (on Cranfield with 5 folds, a plugin first stage was built 7 times
in one ``pipeline.run``) and dev queries were retrieved twice. The context builds the retriever on first use,
keeps it, and remembers every query's ranking at the deepest depth asked so far; a later request for fewer
documents is answered from it (the top ``k`` of a ranking is a prefix of it), a deeper one retrieves again.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable

from ..core.datasets import Dataset
from ..core.records import Query, Run, ScoredDoc

log = logging.getLogger("pipeline.engine.context")


@dataclass
class FirstStageContext:
    """The first stage ``first_stage`` (built with ``settings``) over ``dataset``, shared by every step of one
    run (see the module docstring).

    Args:
        dataset: the dataset whose documents the first stage searches.
        first_stage: a first-stage name as :func:`indexes.make_first_stage` takes it (``auto`` settled).
        settings: the first stage's options (:class:`indexes.options.FirstStageSettings`), or ``None`` for
            defaults.

    Example:
        >>> context = FirstStageContext(dataset, "bm25")
        >>> test = context.search(test_queries, 100)
        >>> dev = context.search(dev_queries, 100)   # same retriever; queries already searched are not searched again
        >>> context.builds, context.retrieved
        (1, {...})
    """

    dataset: Dataset
    first_stage: str
    settings: object = None
    #: how many times the retriever was built (at most 1)
    builds: int = 0
    #: query id -> how many times it was sent to the retriever
    retrieved: dict[str, int] = field(default_factory=dict)
    _retriever: object = field(default=None, repr=False)
    _rankings: dict[str, tuple[int, list[ScoredDoc]]] = field(default_factory=dict, repr=False)

    @property
    def retriever(self):
        """The first stage, built on first use (an index is built or opened then)."""
        if self._retriever is None:
            from indexes import make_first_stage

            self._retriever = make_first_stage(self.first_stage, self.dataset, self.settings)
            self.builds += 1
        return self._retriever

    def search(self, queries: Iterable[Query], k: int) -> Run:
        """The top ``k`` of each query, retrieving only the queries not yet retrieved at depth ``k`` or more.

        Args:
            queries: the queries (their order is kept in the result).
            k: documents per query.

        Returns:
            ``{query_id: [ScoredDoc, ...]}`` with at most ``k`` documents per query.
        """
        queries = list(queries)
        missing = [q for q in queries if self._rankings.get(q.query_id, (-1, None))[0] < k]
        if missing:
            found = self.retriever.search(missing, k)
            for query in missing:
                self._rankings[query.query_id] = (k, list(found.get(query.query_id, [])))
                self.retrieved[query.query_id] = self.retrieved.get(query.query_id, 0) + 1
        return {q.query_id: self._rankings[q.query_id][1][:k] for q in queries}
