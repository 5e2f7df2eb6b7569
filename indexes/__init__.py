"""First stages: anything with ``search(queries, k) -> Run``.

``make_first_stage(spec, dataset)`` builds one from a name:

* ``bm25`` / ``bm25+rm3``: Lucene (Anserini) over the dataset's documents; the index is built if missing;
* ``run:PATH``: re-rank a given TREC run (checked strictly against the dataset's queries and documents);
* ``shipped``: the run that comes with the data (Microblog QL top-1000, DL19/DL20 BM25 top-100);
* ``codes``: learned binary per-token codes (ADDAX-style hashing of a transformer's token vectors) in a faiss
  binary index, candidates by Hamming kNN per query token, ranked by exact MaxSim (:mod:`indexes.codes`);
* ``colbert``: the same with ColBERT-style L2-normalised float token vectors in a faiss float index;
* ``auto``: ``shipped`` when the dataset has one, else ``bm25``.

``codes`` / ``colbert`` take their options from ``settings.codes`` (a :class:`indexes.codes.CodeOptions`);
without options they use the most recently built index of that kind for the dataset, or build one with the
default options (training the encoder first: ``python -m pipeline.index --kind codes`` builds it ahead).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol, runtime_checkable

from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.records import Query, Run

FIRST_STAGES = ("auto", "bm25", "bm25+rm3", "codes", "colbert", "shipped", "run:PATH")


@runtime_checkable
class Retriever(Protocol):
    """A first stage: the top-``k`` documents of each query."""

    name: str

    def search(self, queries: Iterable[Query], k: int = 1000) -> Run:
        """Return ``{query_id: [ScoredDoc, ...]}`` (at most ``k`` per query)."""
        ...


@dataclass
class RunRetriever:
    """A fixed ranking (a TREC run file or a dataset's shipped run) served as a first stage."""

    name: str
    run: Run

    def search(self, queries: Iterable[Query], k: int = 1000) -> Run:
        """The run's top-``k`` for each query (by score, ties by doc id); queries it lacks get no documents."""
        result: Run = {}
        for query in queries:
            hits = sorted(self.run.get(query.query_id, []), key=lambda s: (-s.score, s.doc_id))
            result[query.query_id] = hits[:k]
        return result


@dataclass
class BM25Settings:
    """Options of the first stages: Lucene's (index analysis, BM25 and RM3 parameters) and, in ``codes``, an
    :class:`indexes.codes.CodeOptions` for the learned-code first stages. ``index_root`` is where indexes
    are cached (default: ``PIPELINE_INDEX_DIR``, else ``indexes/cache/<lucene|codes>``)."""

    k1: float = 0.9
    b: float = 0.4
    fb_terms: int = 10
    fb_docs: int = 10
    original_query_weight: float = 0.5
    stemmer: str = "porter"
    keep_stopwords: bool = False
    threads: int = 2
    index_root: Path | None = None
    codes: Any = None


def resolve_first_stage(spec: str, dataset: Dataset) -> str:
    """``auto`` -> ``shipped`` when the dataset comes with a first-stage run, else ``bm25``."""
    if spec == "auto":
        return "shipped" if dataset.first_stage else "bm25"
    return spec


def make_first_stage(spec: str, dataset: Dataset, settings: BM25Settings | None = None) -> Retriever:
    """Build the first stage named by ``spec`` (see the module docstring) for ``dataset``."""
    settings = settings or BM25Settings()
    spec = resolve_first_stage(spec, dataset)
    if spec == "shipped":
        if not dataset.first_stage:
            raise PipelineError(f"dataset {dataset.name!r} ships no first-stage run; use bm25 or run:PATH")
        return RunRetriever("shipped", dataset.first_stage)
    if spec.startswith("run:"):
        from pipeline.core.trec import read_run

        path = Path(spec[4:])
        return RunRetriever(f"run:{path.name}", read_run(path, dataset.doc_store(), dataset.queries))
    if spec in ("bm25", "bm25+rm3"):
        from .lucene import RM3, BM25Retriever, LuceneOptions, build_index

        options = LuceneOptions(settings.stemmer, settings.keep_stopwords)
        path = build_index(dataset, options, settings.index_root, settings.threads)
        rm3 = RM3(settings.fb_terms, settings.fb_docs, settings.original_query_weight) if spec == "bm25+rm3" else None
        return BM25Retriever(path, settings.k1, settings.b, rm3, settings.threads)
    if spec in ("codes", "colbert"):
        import dataclasses

        from .codes import CodeOptions, CodeRetriever, build_code_index, find_code_index

        options = settings.codes
        path = None
        if options is None:
            path = find_code_index(dataset, spec, settings.index_root)
            options = CodeOptions(kind=spec)
        else:  # one CodeOptions serves both kinds; a hash head is a binary-codes option
            binary_only = {"hash_head": "mlp", "hash_seed": None} if spec == "colbert" else {}
            options = dataclasses.replace(options, kind=spec, **binary_only)
        if path is None:
            path = build_code_index(dataset, options, settings.index_root)
        return CodeRetriever(path, k_prime=options.k_prime, device=options.device, threads=options.threads)
    raise PipelineError(f"unknown first stage {spec!r}; expected one of {', '.join(FIRST_STAGES)}")
