"""``hybrid``: BM25 (Lucene, :mod:`indexes.lucene`) and the zero-shot dense first stage (:mod:`indexes.dense`)
fused over the union of their candidates, as Pyserini's hybrid search does.

Each first stage returns its top ``depth`` documents; the fused list ranks their union. Two fusions:

* ``interpolate`` (default): ``w * minmax(bm25)(d) + (1 - w) * minmax(dense)(d)``, each list min-max
  normalised per query over its own ``depth`` hits. A document that one list did not return gets that list's
  minimum normalised score, 0: it ranked below every document the list returned, and 0 is the most that can
  be said of it without scoring it (its true score is unknown; any value above 0 would rank it above
  documents the list did return). ``w`` is BM25's share;
* ``rrf``: reciprocal rank fusion, ``sum over lists of 1 / (rrf_k + rank)`` (ranks from 1, ``rrf_k`` 60 as
  Cormack et al. 2009); a list that misses the document adds nothing. No weight, nothing tuned.

The interpolation weight is tuned like ``--interpolate auto`` (:mod:`pipeline.engine.fusion`): on held-out judged
queries, never on the query it is applied to. The tuning queries are the dataset's ``dev`` splits (``dev`` or
``*-dev``), else its ``train`` split, else every judged query of the dataset; the weight of a query outside
them is the one tuned on all of them, and a query among them (Cranfield, Vaswani, NFCorpus and TREC DL have
no splits, so every query is) gets the weight tuned on the other ``folds`` - 1 folds of them (seeded
folds, as k-fold cross-validation), so its own judgments never choose its weight. The grid is 0, 0.05,
..., 1 and the measure ``metric`` (nDCG@10); ties go to the weight closest to ``default_weight``. With fewer
than two judged tuning queries there is nothing to tune on: ``default_weight`` (0.5, the two lists
weighed equally) is used and a warning says so. ``weight=W`` fixes the weight instead.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.records import Query, Run, ScoredDoc, minmax

from .base import Retriever, check_choice, settings_options
from .dense import DenseOptions
from .options import BM25Options, FirstStageOptions, FirstStageSettings

log = logging.getLogger(__name__)

FUSIONS = ("interpolate", "rrf")
#: interpolation weights tried when tuning: 0, 0.05, ..., 1 (as pipeline.engine.fusion.DEFAULT_GRID)
GRID = tuple(round(i * 0.05, 2) for i in range(21))


def hybrid_option(default, help: str):
    """A :class:`HybridOptions` field with its help (``--hybrid-set NAME=VALUE`` sets it)."""
    return field(default=default, metadata={"help": help, "group": "hybrid first stage"})


@dataclass(frozen=True)
class HybridOptions:
    """Options of the ``hybrid`` first stage (the dense half takes :class:`indexes.dense.DenseOptions`)."""

    fusion: str = hybrid_option("interpolate", "interpolate (min-max, weight tuned on held-out queries) | rrf")
    weight: float | None = hybrid_option(None, "BM25's share in [0, 1] (default: tuned on the dev/train "
                                         "queries, cross-fitted when the searched queries are among them)")
    default_weight: float = hybrid_option(0.5, "the weight when no judged tuning queries exist")
    depth: int = hybrid_option(1000, "candidates taken from each of BM25 and dense (at least k)")
    rrf_k: int = hybrid_option(60, "rrf: the constant k of 1 / (k + rank)")
    metric: str = hybrid_option("nDCG@10", "measure the weight is tuned on (ir-measures name)")
    folds: int = hybrid_option(5, "folds of the tuning queries for the weight of a query among them")
    seed: int = hybrid_option(42, "seed of the folds")

    def __post_init__(self):
        check_choice("fusion", self.fusion, FUSIONS)
        for name in ("weight", "default_weight"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise PipelineError(f"{name} must be in [0, 1], got {value}")
        if self.depth < 1 or self.rrf_k < 0 or self.folds < 2:
            raise PipelineError(f"depth must be >= 1, rrf_k >= 0 and folds >= 2 (got {self.depth}, {self.rrf_k}, "
                                f"{self.folds})")
        from pipeline.core.evaluation import parse_measures

        parse_measures(self.metric)


@dataclass(frozen=True)
class HybridStageOptions(HybridOptions, FirstStageOptions):
    """Every option of the ``hybrid`` first stage: the fusion's (:class:`HybridOptions`, e.g. ``--fs-set
    fusion=rrf``), its dense half's (``dense.<name>``, :class:`indexes.dense.DenseOptions`, e.g. ``--fs-set
    dense.encoder=DIR``) and its BM25 half's (``bm25.<name>``, :class:`indexes.options.BM25Options`)."""

    dense: DenseOptions = field(default_factory=DenseOptions, metadata={"help": "the dense half's options"})
    bm25: BM25Options = field(default_factory=BM25Options, metadata={"help": "the BM25 half's options"})

    def fusion_options(self) -> HybridOptions:
        """The fusion's options alone."""
        return HybridOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(HybridOptions)})


# ------------------------------------------------------------------------------------------ fusion


def _ranked(query_id: str, scores: Mapping[str, float], k: int) -> list[ScoredDoc]:
    order = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [ScoredDoc(query_id, doc_id, float(score)) for doc_id, score in order]


def interpolate_lists(query_id: str, bm25: Sequence[ScoredDoc], dense: Sequence[ScoredDoc], weight: float,
                      k: int) -> list[ScoredDoc]:
    """The top ``k`` of the union of two lists by ``weight * bm25 + (1 - weight) * dense`` (min-max per list;
    a document missing from a list scores 0 there). Ties by doc id.

    Example:
        >>> a = [ScoredDoc("q", "x", 3.0), ScoredDoc("q", "y", 1.0)]
        >>> b = [ScoredDoc("q", "z", 0.9), ScoredDoc("q", "x", 0.1)]
        >>> [h.doc_id for h in interpolate_lists("q", a, b, 0.5, 3)]
        ['x', 'z', 'y']
    """
    first, second = minmax(bm25), minmax(dense)
    union = first.keys() | second.keys()
    return _ranked(query_id, {d: weight * first.get(d, 0.0) + (1 - weight) * second.get(d, 0.0) for d in union}, k)


def rrf_lists(query_id: str, lists: Sequence[Sequence[ScoredDoc]], k: int, rrf_k: int = 60) -> list[ScoredDoc]:
    """Reciprocal rank fusion: ``sum 1 / (rrf_k + rank)`` over the lists holding a document (ranks from 1, in
    each list's order), top ``k``, ties by doc id."""
    scores: dict[str, float] = {}
    for hits in lists:
        for rank, hit in enumerate(hits, start=1):
            scores[hit.doc_id] = scores.get(hit.doc_id, 0.0) + 1.0 / (rrf_k + rank)
    return _ranked(query_id, scores, k)


# ------------------------------------------------------------------------------------------ tuning


def tuning_queries(dataset: Dataset) -> tuple[list[str], str]:
    """The judged queries the interpolation weight is tuned on and where they come from: the ``dev`` splits
    (``dev``, ``*-dev``), else ``train``, else all of the dataset's (then cross-fitted)."""
    judged = {qrel.query_id for qrel in dataset.qrels}
    splits = dataset.splits
    dev = [name for name in splits if name == "dev" or name.endswith("-dev")]
    if dev:
        pool, source = [q for name in dev for q in splits[name]], f"split(s) {', '.join(dev)}"
    elif "train" in splits:
        pool, source = list(splits["train"]), "split train"
    else:
        pool, source = list(dataset.queries), "all queries, cross-fitted"
    return sorted({q for q in pool if q in judged and q in dataset.queries}), source


def assign_folds(query_ids: Sequence[str], folds: int, seed: int) -> dict[str, int]:
    """``query_id -> fold`` (``min(folds, n)`` folds, seeded shuffle, as k-fold cross-validation)."""
    ordered = sorted(query_ids)
    random.Random(seed).shuffle(ordered)
    count = min(folds, len(ordered))
    return {query_id: position % count for position, query_id in enumerate(ordered)}


class HybridRetriever:
    """BM25 and dense fused over the union of their candidates (see the module docstring).

    Args:
        dataset: the collection; its judged dev/train queries tune the interpolation weight.
        bm25: the BM25 retriever (``search(queries, k) -> Run``).
        dense: the dense retriever.
        options: fusion, weight, depth (:class:`HybridOptions`).

    Example:
        >>> hybrid = hybrid_first_stage(load_dataset("vaswani"), FirstStageSettings())  # doctest: +SKIP
        >>> run = hybrid.search(dataset.queries.values(), k=1000)  # doctest: +SKIP
    """

    name = "hybrid"

    def __init__(self, dataset: Dataset, bm25: Retriever, dense: Retriever, options: HybridOptions = HybridOptions()):
        self.dataset, self.bm25, self.dense, self.options = dataset, bm25, dense, options
        self.pool, self.pool_source = tuning_queries(dataset)
        self.folds = assign_folds(self.pool, options.folds, options.seed)
        #: the tuned weights: ``fold -> weight`` (fold -1: all tuning queries), filled by :meth:`tune`
        self.weights: dict[int, float] = {}
        self.tuning: dict[str, object] = {}

    # -- weights
    def _lists(self, queries: Sequence[Query], k: int) -> tuple[Run, Run]:
        depth = max(self.options.depth, k)
        return self.bm25.search(queries, depth), self.dense.search(queries, depth)

    def tune(self) -> dict[int, float]:
        """Tune the interpolation weights (once).

        For each fold of the tuning queries the best weight on the others, and the best on all of them.

        Returns:
            ``fold -> weight`` (fold -1: all tuning queries); empty with RRF or a fixed weight.
        """
        if self.weights or self.options.fusion != "interpolate" or self.options.weight is not None:
            return self.weights
        if len(self.pool) < 2:
            log.warning("hybrid: %s has %d judged tuning queries; interpolation weight %.2f (default_weight)",
                        self.dataset.name, len(self.pool), self.options.default_weight)
            self.weights = {-1: self.options.default_weight}
            return self.weights
        import ir_measures

        from pipeline.core.evaluation import parse_measures

        measure = parse_measures(self.options.metric)[0]
        cutoff = getattr(measure, "params", {}).get("cutoff")
        queries = [self.dataset.queries[q] for q in self.pool]
        bm25, dense = self._lists(queries, 0)
        pool = set(self.pool)
        qrels = [ir_measures.Qrel(q.query_id, q.doc_id, int(q.relevance)) for q in self.dataset.qrels
                 if q.query_id in pool]
        # per-query value of every weight, computed once; each fold's choice averages the other folds' values
        values: dict[float, dict[str, float]] = {}
        for weight in GRID:
            scored = [ir_measures.ScoredDoc(h.query_id, h.doc_id, h.score) for q in self.pool
                      for h in interpolate_lists(q, bm25.get(q, []), dense.get(q, []), weight,
                                                 cutoff or self.options.depth)]
            values[weight] = {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], qrels, scored)}

        def best(held_in: Sequence[str]) -> float:
            means = {w: sum(values[w].get(q, 0.0) for q in held_in) / len(held_in) for w in GRID}
            return max(GRID, key=lambda w: (round(means[w], 12), -abs(w - self.options.default_weight), -w))

        weights = {-1: best(self.pool)}
        for fold in sorted(set(self.folds.values())):
            weights[fold] = best([q for q in self.pool if self.folds[q] != fold])
        self.weights = weights
        self.tuning = {"queries": len(self.pool), "source": self.pool_source, "metric": self.options.metric,
                       "weights": {str(f): w for f, w in weights.items()}}
        log.info("hybrid: interpolation weight %.2f on %d tuning queries of %s (%s); per fold %s", weights[-1],
                 len(self.pool), self.dataset.name, self.pool_source,
                 ", ".join(f"{w:.2f}" for f, w in sorted(weights.items()) if f >= 0))
        return weights

    def weight_of(self, query_id: str) -> float:
        """BM25's share for ``query_id``.

        Args:
            query_id: the query.

        Returns:
            The fixed weight, or the one tuned without that query's judgments.
        """
        if self.options.weight is not None:
            return self.options.weight
        weights = self.tune()
        fold = self.folds.get(query_id)
        return weights[fold] if fold is not None and fold in weights else weights[-1]

    # -- search
    def search(self, queries: Iterable[Query], k: int = 1000) -> Run:
        """Top-``k`` documents of the fused union for every query.

        Args:
            queries: the queries.
            k: documents per query; each first stage gives its top ``max(depth, k)`` to the fusion.

        Returns:
            ``{query_id: [ScoredDoc, ...]}``, score descending, ties by doc id.
        """
        queries = list(queries)
        if self.options.fusion == "interpolate":
            self.tune()
        bm25, dense = self._lists(queries, k)
        run: Run = {}
        for query in queries:
            first, second = bm25.get(query.query_id, []), dense.get(query.query_id, [])
            if self.options.fusion == "rrf":
                run[query.query_id] = rrf_lists(query.query_id, [first, second], k, self.options.rrf_k)
            else:
                run[query.query_id] = interpolate_lists(query.query_id, first, second,
                                                        self.weight_of(query.query_id), k)
        return run

    def close(self) -> None:
        """Close both first stages."""
        for retriever in (self.bm25, self.dense):
            if hasattr(retriever, "close"):
                retriever.close()


def hybrid_first_stage(dataset: Dataset, settings: FirstStageSettings) -> HybridRetriever:
    """``hybrid``: BM25 (options ``bm25.*``) and dense (options ``dense.*``) fused as the other options say.

    Both indexes are built on first use.

    Args:
        dataset: the collection to search; its judged dev/train queries tune the weight.
        settings: options (:class:`HybridStageOptions`) and the index cache.

    Returns:
        The first stage.
    """
    from .dense import dense_first_stage
    from .lucene import bm25_first_stage

    options = settings_options(settings, HybridStageOptions)
    bm25 = bm25_first_stage(dataset, dataclasses.replace(settings, options=options.bm25))
    dense = dense_first_stage(dataset, dataclasses.replace(settings, options=options.dense))
    return HybridRetriever(dataset, bm25, dense, options.fusion_options())


hybrid_first_stage.Options = HybridStageOptions
