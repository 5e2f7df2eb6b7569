"""Lucene indexes (Anserini through pyjnius) and BM25 / BM25+RM3 retrieval over them.

Only what BM25 needs is loaded: the JVM with Anserini's fat jar and two Java classes
(``IndexCollection`` to build, ``SimpleSearcher`` to search). ``import pyserini.search.lucene`` would pull in
pyserini's dense encoders (10+ s, 650 MB), so it is never imported on this path.

Indexes are built and cached by :mod:`indexes.lucene_build` (:func:`build_index`); this module opens one
(or an index built outside this project) and searches it, and holds the ``bm25`` / ``bm25+rm3`` first stages.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError, CorruptCacheError, PipelineError
from pipeline.core import filecheck
from pipeline.core.progress import progress_switch
from pipeline.core.records import Query, Run, ScoredDoc

from .options import BM25Options, FirstStageSettings, RM3Options
from .jvm import anserini_class, is_java_exception, java_errors, java_failure
from .lucene_check import check_index
# building lived here before its own module: importable from here as before
from .lucene_build import (  # noqa: F401
    CHECKSUM_FILE, LOW_DISK_BYTES, META_FILE, STEMMERS, LuceneOptions, build_index, index_metadata, index_path,
    index_progress, index_root, is_complete,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RM3:
    """RM3 pseudo-relevance feedback (Anserini's defaults)."""

    fb_terms: int = 10
    fb_docs: int = 10
    original_query_weight: float = 0.5


class BM25Retriever:
    """BM25 (optionally + RM3) over a Lucene index built by :func:`build_index`.

    ``search`` runs Anserini's multi-threaded batch search and returns ``{query_id: [ScoredDoc, ...]}``
    in Anserini's order (score descending, ties by internal doc order).
    """

    def __init__(self, path: Path, k1: float = 0.9, b: float = 0.4, rm3: RM3 | None = None, threads: int = 2,
                 external: LuceneOptions | None = None):
        """
        Args:
            path: an index of :func:`build_index`; or, with ``external``, any Lucene index directory
                (Anserini's or Pyserini's prebuilt ones), used as it is.
            k1: BM25 k1.
            b: BM25 b.
            rm3: RM3 feedback settings (``None``: BM25 alone).
            threads: Anserini's search threads.
            external: the analysis an outside index was built with (``None``: ``path`` is one of ours).

        Raises:
            PipelineError: ``path`` is not a finished index.
            CorruptCacheError: the index fails its check.
        """
        if external is not None:
            lucene_dir, options = external_index_dir(path), external
        else:
            if not is_complete(path):
                raise PipelineError(f"{path}: not a finished index (build it with python -m pipeline.index)")
            metadata = index_metadata(path)
            # its metadata (the analysis options, the document count) as written: an edit is damage too
            filecheck.check_manifest(path, CHECKSUM_FILE, "Lucene index", full=True)
            options = LuceneOptions(**metadata["options"])
            # a damaged cache is an error, never different numbers
            check_index(path, metadata.get("indexed", metadata.get("documents")))
            lucene_dir = path / "lucene"
        self.path, self.k1, self.b, self.rm3, self.threads = path, k1, b, rm3, threads
        self.name = "bm25+rm3" if rm3 else "bm25"
        self._external = external is not None
        allow_long_queries()
        with java_errors(path, self._external):
            self._analyzer = anserini_class("io.anserini.analysis.DefaultEnglishAnalyzer").fromArguments(
                options.stemmer, options.keep_stopwords, None
            )
            self._searcher = anserini_class("io.anserini.search.SimpleSearcher")(str(lucene_dir))
            self._searcher.set_analyzer(self._analyzer)
            self._searcher.set_bm25(float(k1), float(b))
            if rm3:
                self._searcher.set_rm3(int(rm3.fb_terms), int(rm3.fb_docs), float(rm3.original_query_weight))

    def search(self, queries: Iterable[Query], k: int = 1000, batch_size: int = 64) -> Run:
        """Top-``k`` documents for every query.

        Args:
            queries: the queries.
            k: documents per query.
            batch_size: queries per Anserini batch search.

        Returns:
            ``{query_id: [ScoredDoc, ...]}`` in Anserini's order (score descending, ties by internal doc order).

        Raises:
            PipelineError: a query Anserini cannot search, named with its reason.
        """
        from pipeline.core.progress import tqdm

        ArrayList = anserini_class("java.util.ArrayList")
        queries = list(queries)
        run: Run = {}
        with tqdm(total=len(queries), desc=f"{self.name} search", unit="query",
                  **progress_switch(len(queries) >= batch_size)) as bar:
            for start in range(0, len(queries), batch_size):
                chunk = queries[start : start + batch_size]
                texts, ids = ArrayList(), ArrayList()
                for query in chunk:
                    texts.add(self._searchable_text(query))
                    ids.add(query.query_id)
                try:
                    results = self._searcher.batch_search(texts, ids, int(k), int(self.threads))
                except Exception as error:  # noqa: BLE001 - jnius.JavaException (jnius is imported lazily)
                    if not is_java_exception(error):
                        raise
                    # Anserini's batch search reports only "queryCount = n is not equal to completedTaskCount =
                    # m" when a query fails in its thread pool: search them one by one to name it and its cause
                    raise self._failed_query(chunk, k, error) from None
                for query in chunk:
                    hits = results.get(query.query_id) or []
                    run[query.query_id] = [ScoredDoc(query.query_id, hit.docid, float(hit.score)) for hit in hits]
                bar.update(len(chunk))
        return run

    def _searchable_text(self, query: Query) -> str:
        """``query``'s text, cut to its first :data:`MAX_QUERY_TERMS` distinct analysed terms (with a warning)
        when it has more: Lucene refuses a query of more clauses than its limit, and Anserini's batch search
        then fails as a whole."""
        text = query.text
        # a term takes at least one character and a separator: a shorter text cannot have too many
        if len(text) <= 2 * MAX_QUERY_TERMS:
            return text
        words = text.split()
        if self._distinct_terms(" ".join(words)) <= MAX_QUERY_TERMS:
            return text
        low, high = 0, len(words)  # the longest prefix of words within the limit (binary search)
        while low < high:
            middle = (low + high + 1) // 2
            if self._distinct_terms(" ".join(words[:middle])) <= MAX_QUERY_TERMS:
                low = middle
            else:
                high = middle - 1
        log.warning("query %s: more than %d distinct terms after analysis (Lucene's clause limit); only its first "
                    "%d of %d words are searched", query.query_id, MAX_QUERY_TERMS, low, len(words))
        return " ".join(words[:low])

    def _distinct_terms(self, text: str) -> int:
        with java_errors(self.path, self._external):
            terms = anserini_class("io.anserini.analysis.AnalyzerUtils").analyze(self._analyzer, text)
            return len(set(terms.toArray()))

    def _failed_query(self, chunk: list[Query], k: int, batch_error: Exception) -> PipelineError:
        """The error of a failed batch search: the first query of ``chunk`` that fails alone, named with
        Anserini's reason (or the batch's own error when every query succeeds alone)."""
        for query in chunk:
            try:
                self._searcher.search(self._searchable_text(query), int(k))
            except Exception as error:  # noqa: BLE001 - jnius.JavaException
                if not is_java_exception(error):
                    raise
                mapped = java_failure(error, self.path, self._external)
                if isinstance(mapped, CorruptCacheError):
                    return mapped
                return PipelineError(f"query {query.query_id}: Anserini's search failed: {mapped}")
        return java_failure(batch_error, self.path, self._external)

    def close(self) -> None:
        """Release the Lucene reader."""
        self._searcher.close()


#: queries are cut to this many distinct analysed terms (see :meth:`BM25Retriever._searchable_text`)
MAX_QUERY_TERMS = 16384
#: Lucene's clause limit while this project searches: room for :data:`MAX_QUERY_TERMS` and RM3's expansion
#: terms (Lucene's default, 1,024, fails a query of 1,100 distinct words)
MAX_CLAUSES = 2 * MAX_QUERY_TERMS

def allow_long_queries() -> None:
    """Raise Lucene's clause limit (a JVM-wide setting) to :data:`MAX_CLAUSES` unless it is higher already."""
    searcher = anserini_class("org.apache.lucene.search.IndexSearcher")
    if searcher.getMaxClauseCount() < MAX_CLAUSES:
        searcher.setMaxClauseCount(MAX_CLAUSES)


def external_index_dir(path: Path) -> Path:
    """The Lucene directory of an index built outside this project: ``path`` itself when it holds a
    ``segments_N`` file, or its ``lucene/`` folder (this project's layout); else a :class:`ConfigError`."""
    path = Path(path)
    for candidate in (path, path / "lucene"):
        if candidate.is_dir() and any(p.name.startswith("segments_") for p in candidate.iterdir()):
            return candidate
    raise ConfigError(f"{path}: not a Lucene index (no segments_N file in it or in its lucene/ folder); build one "
                      "with Anserini/Pyserini or python -m pipeline.index")


def existing_index_first_stage(spec: str, settings: FirstStageSettings) -> BM25Retriever:
    """``bm25:PATH`` / ``bm25+rm3:PATH``: BM25 (and RM3) over an existing Lucene index, searched as it is.

    The index may be built by Anserini or Pyserini (e.g. a prebuilt index); queries are analysed with the
    options' stemmer and stopwords, which must be the ones the index was built with (Anserini's default:
    porter, stopwords removed). Its document ids must be the dataset's.

    Args:
        spec: ``bm25:PATH`` or ``bm25+rm3:PATH``.
        settings: the options of ``bm25`` / ``bm25+rm3`` and the search threads.

    Returns:
        The first stage.

    Raises:
        ConfigError: ``PATH`` holds no Lucene index.
    """
    kind, _, location = spec.partition(":")
    options = settings.options or (RM3Options() if kind == "bm25+rm3" else BM25Options())
    rm3 = _rm3(options) if kind == "bm25+rm3" else None
    analysis = LuceneOptions(options.stemmer, options.keep_stopwords)
    return BM25Retriever(Path(location), options.k1, options.b, rm3, settings.threads, external=analysis)


def _rm3(options: RM3Options) -> RM3:
    return RM3(options.fb_terms, options.fb_docs, options.original_query_weight)


def _built_index_retriever(dataset: Dataset, settings: FirstStageSettings, options: BM25Options,
                           rm3: RM3 | None) -> BM25Retriever:
    # bm25 and bm25+rm3 share an index: the analysis options are the only ones it is built with
    path = build_index(dataset, LuceneOptions(options.stemmer, options.keep_stopwords), settings.index_root,
                       settings.threads)
    return BM25Retriever(path, options.k1, options.b, rm3, settings.threads)


def bm25_first_stage(dataset: Dataset, settings: FirstStageSettings) -> BM25Retriever:
    """``bm25``: Lucene BM25 over the dataset's documents (the index is built if missing).

    Args:
        dataset: the collection to search.
        settings: options (:class:`~indexes.options.BM25Options`), threads and the index cache.

    Returns:
        A :class:`BM25Retriever` searching each query as it is.
    """
    return _built_index_retriever(dataset, settings, settings.options or BM25Options(), None)


def bm25_rm3_first_stage(dataset: Dataset, settings: FirstStageSettings) -> BM25Retriever:
    """``bm25+rm3``: BM25 then RM3 query expansion (Lavrenko and Croft's relevance model, pseudo-feedback).

    Args:
        dataset: the collection to search.
        settings: options (:class:`~indexes.options.RM3Options`), threads and the index cache.

    Returns:
        A :class:`BM25Retriever` that expands each query with RM3 from its first BM25 ranking, then
        searches again.
    """
    options = settings.options or RM3Options()
    return _built_index_retriever(dataset, settings, options, _rm3(options))


bm25_first_stage.Options = BM25Options
bm25_rm3_first_stage.Options = RM3Options
