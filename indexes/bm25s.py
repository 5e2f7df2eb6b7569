"""``--first-stage bm25s``: BM25 from sparse matrices in memory (the ``bm25s`` package), for collections that fit.

The Lucene first stage (``bm25``) stays the default. This one trades memory (every document's BM25 weight of
every term it holds, as one float32 matrix) for speed: a query is a sum of a few sparse columns and a top-k
selection, with no JVM. It scores documents as Lucene does, as far as ``bm25s`` allows:

* analysis: Lucene's English analyzer, re-implemented in Python (:class:`EnglishAnalyzer`): words split at
  Unicode word boundaries as the StandardTokenizer does for Latin text (letters joined by ``'`` or ``.``,
  digits by ``.``, ``,`` or ``;``), English possessives removed, lower case, Lucene's 33 English stopwords
  removed (unless ``keep_stopwords``), then the Porter stemmer (NLTK's in ``MARTIN_EXTENSIONS`` mode: Martin
  Porter's reference implementation, of which Lucene's PorterStemFilter is a port) or none. Each distinct
  word is analysed once (a cache), so the pure-Python stemmer costs little. Krovetz has no Python implementation here:
  ``--stemmer krovetz`` is refused;
* weights: Lucene's BM25 (``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and ``tf / (tf + k1 (1 - b + b dl /
  avgdl))``, bm25s' ``method="lucene"``) with the project's ``k1 = 0.9, b = 0.4`` (:class:`Bm25sOptions`).
  Two details bm25s does not have are computed here, so that the scores are Lucene's: ``dl`` is the
  document length as Lucene stores it (one byte, :func:`lucene_length`, exact below 24 terms and rounded
  down to 4 significant bits above), and ``N`` and ``avgdl`` count only documents with at least one term;
* retrieval: bm25s' ``BM25.retrieve`` over that matrix (numba backend when numba is installed), on the
  first stage's search threads (``FirstStageSettings.threads``, 2 by default, as Lucene's); a query's
  repeated terms count as often as they occur (as Anserini's bag-of-words query), and only documents
  sharing a term with the query are returned (as Lucene).

The matrix is cached per (dataset fingerprint, options) under ``<home>/indexes/cache/bm25s`` (or
``PIPELINE_INDEX_DIR``), built once by one process at a time (:func:`pipeline.core.locks.exclusive`),
written into a temporary directory renamed into place (:func:`pipeline.core.atomic.atomic_directory`), and
checked against the sizes and SHA-256 digests recorded with it at every open (:mod:`pipeline.core.filecheck`):
a damaged cache is a :class:`~pipeline.core.errors.CorruptCacheError`, never different results.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Iterable

import numpy as np

from pipeline.core import filecheck
from pipeline.core.atomic import atomic_directory, atomic_write, remove_stale_temps
from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.home import index_root as home_index_root
from pipeline.core.locks import build_once
from pipeline.core.filenames import safe_name
from pipeline.core.progress import progress_switch
from pipeline.core.records import Query, Run, ScoredDoc

from .options import BM25Options, FirstStageOptions, FirstStageSettings

log = logging.getLogger(__name__)

META_FILE = "pipeline-bm25s.json"
STAMP_FILE = "pipeline-verified.json"
ARRAYS_FILE = "matrix.npz"
WHAT = "bm25s index"
#: the format of the cached arrays; a change makes every entry rebuild
FORMAT = 2
STEMMERS = ("porter", "none")

#: org.apache.lucene.analysis.en.EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (Anserini's default stopwords)
LUCENE_ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split())

#: a word as Lucene's StandardTokenizer cuts Latin text (UAX #29): letters/digits/underscore joined by one
#: apostrophe or period (MidNumLet), or digits joined by a comma or semicolon (MidNum)
WORD = re.compile(r"\w+(?:(?:['\u2019.]|(?<=\d)[,;](?=\d))\w+)*")
POSSESSIVE = re.compile(r"['\u2019][sS]$")


def lucene_length(length: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene's BM25 sees them: ``SmallFloat.byte4ToInt(SmallFloat.intToByte4(length))``.

    Lucene stores a field's length in one byte: exactly below 24, above that rounded down to its 4 most
    significant bits (e.g. 100 -> 96). BM25's length normalisation reads the rounded value.

    Args:
        length: non-negative integer lengths.

    Returns:
        The rounded lengths (int64).

    Example:
        >>> lucene_length(np.array([5, 23, 24, 100, 1000])).tolist()
        [5, 23, 24, 96, 984]
    """
    free = 24  # 255 - longToInt4(Integer.MAX_VALUE)
    length = np.asarray(length, dtype=np.int64)
    rest = np.maximum(length - free, 0)
    bits = np.zeros_like(rest)
    nonzero = rest > 0
    bits[nonzero] = np.floor(np.log2(rest[nonzero])).astype(np.int64) + 1  # numBits
    shift = np.maximum(bits - 4, 0)
    rounded = (rest >> shift) << shift  # keep the 4 most significant bits
    return np.where(length < free, length, free + rounded)


class EnglishAnalyzer:
    """Lucene's (Anserini's default) English analysis in Python: see the module docstring.

    Example:
        >>> EnglishAnalyzer().terms("The Cat's hats, e.g. 3.14 of them")
        ['cat', 'hat', 'e.g', '3.14', 'them']
    """

    def __init__(self, stemmer: str = "porter", keep_stopwords: bool = False) -> None:
        """
        Args:
            stemmer: ``porter`` or ``none``.
            keep_stopwords: keep Lucene's English stopwords.
        """
        if stemmer not in STEMMERS:
            raise ConfigError(f"--first-stage bm25s supports --stemmer {' or '.join(STEMMERS)}, not {stemmer!r} "
                              "(Krovetz has no Python implementation here; use --first-stage bm25)")
        self.stopwords = frozenset() if keep_stopwords else LUCENE_ENGLISH_STOPWORDS
        self._stem = None
        if stemmer == "porter":
            # Lucene's PorterStemmer is a port of Martin Porter's reference implementation, whose departures
            # from the 1980 paper (e.g. -logi -> -log, -bli -> -ble, words of 1-2 letters untouched) NLTK's
            # MARTIN_EXTENSIONS mode follows; Snowball's "porter" (PyStemmer) does not
            from nltk.stem.porter import PorterStemmer

            self._stem = partial(PorterStemmer(PorterStemmer.MARTIN_EXTENSIONS).stem, to_lowercase=False)
        self._cache: dict[str, str] = {}

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order (repeats kept)."""
        out = []
        cache, stopwords = self._cache, self.stopwords
        for word in WORD.findall(text):
            term = cache.get(word)
            if term is None:
                lowered = POSSESSIVE.sub("", word).lower()
                if lowered in stopwords or not lowered.strip("_"):  # underscores alone are no word
                    term = ""
                else:
                    term = self._stem(lowered) if self._stem else lowered
                if len(cache) < 2_000_000:
                    cache[word] = term
            if term:
                out.append(term)
        return out


@dataclass(frozen=True)
class Bm25sOptions(FirstStageOptions):
    """Options of ``bm25s``, all of which a cached matrix depends on besides the data: analysis and the BM25
    parameters (baked into it)."""

    stemmer: str = field(default="porter", metadata={"help": "porter or none (krovetz is refused)"})
    keep_stopwords: bool = field(default=False, metadata={"help": "index and match stopwords"})
    k1: float = field(default=0.9, metadata={"help": "BM25 k1 (at least 0)"})
    b: float = field(default=0.4, metadata={"help": "BM25 b, in [0, 1]"})

    def __post_init__(self):
        BM25Options(self.k1, self.b, self.stemmer, self.keep_stopwords)  # the same checks as Lucene's

    def key(self) -> str:
        """A short readable name of the options."""
        return f"{self.stemmer}-{'keepstop' if self.keep_stopwords else 'stop'}-k{self.k1:g}-b{self.b:g}"


def index_root() -> Path:
    """``PIPELINE_INDEX_DIR``, else ``<home>/indexes/cache/bm25s``."""
    return home_index_root("bm25s")


def index_path(dataset: Dataset, options: Bm25sOptions, root: Path | None = None) -> Path:
    """The cache entry of ``dataset`` with ``options``."""
    digest = hashlib.sha1(f"{dataset.fingerprint}:{json.dumps(asdict(options), sort_keys=True)}:{FORMAT}"
                          .encode()).hexdigest()[:12]
    return (root or index_root()) / f"bm25s-{safe_name(dataset.name, fallback='')}-{options.key()}-{digest}"


def build_index(dataset: Dataset, options: Bm25sOptions = Bm25sOptions(), root: Path | None = None,
                force: bool = False) -> Path:
    """Build (or find in the cache) the BM25 matrix of ``dataset``; returns the entry's directory.

    Example:
        >>> path = build_index(dataset)  # doctest: +SKIP
        >>> Bm25sRetriever(path).search(dataset.queries(), k=10)  # doctest: +SKIP
    """
    EnglishAnalyzer(options.stemmer)  # a refused stemmer fails before anything is read or locked
    path = index_path(dataset, options, root)
    remove_stale_temps(path)
    return build_once(path, lambda entry: filecheck.is_complete(entry, META_FILE), lambda: _build(dataset, options, path),
                      force)


def _build(dataset: Dataset, options: Bm25sOptions, path: Path) -> Path:
    from pipeline.core.progress import tqdm

    started = time.perf_counter()
    analyzer = EnglishAnalyzer(options.stemmer, options.keep_stopwords)
    vocabulary: dict[str, int] = {}
    doc_ids: list[str] = []
    rows, cols, counts, lengths = [], [], [], []
    for doc in tqdm(dataset.docs_iter(), desc=f"analysing {dataset.name} docs", unit="doc"):
        terms = analyzer.terms(doc.text)
        tf: dict[int, int] = {}
        for term in terms:
            term_id = vocabulary.setdefault(term, len(vocabulary))
            tf[term_id] = tf.get(term_id, 0) + 1
        row = len(doc_ids)
        doc_ids.append(doc.doc_id)
        rows.append(np.full(len(tf), row, dtype=np.int32))
        cols.append(np.fromiter(tf.keys(), dtype=np.int32, count=len(tf)))
        counts.append(np.fromiter(tf.values(), dtype=np.float32, count=len(tf)))
        lengths.append(len(terms))
    if not doc_ids:
        raise PipelineError(f"dataset {dataset.name!r} has no documents to index")
    if not vocabulary:
        raise PipelineError(f"dataset {dataset.name!r}: no document has an index term after analysis")
    row = np.concatenate(rows)
    col = np.concatenate(cols)
    tf = np.concatenate(counts)
    length = np.asarray(lengths, dtype=np.int64)
    # Lucene: N and avgdl over the documents that have the field (an empty text is not indexed)
    with_terms = int((length > 0).sum())
    average = np.float32(length.sum() / with_terms)
    df = np.bincount(col, minlength=len(vocabulary)).astype(np.float64)
    idf = np.log(1.0 + (with_terms - df + 0.5) / (df + 0.5)).astype(np.float32)
    norm = (np.float32(options.k1) * (np.float32(1 - options.b) + np.float32(options.b)
                                      * lucene_length(length).astype(np.float32) / average)).astype(np.float32)
    weight = idf[col] * (tf / (tf + norm[row]))
    # term-major (CSC over documents x terms), the layout bm25s' retrieval reads
    order = np.lexsort((row, col))
    indptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
    np.cumsum(np.bincount(col, minlength=len(vocabulary)), out=indptr[1:])
    with atomic_directory(path) as temp:
        with atomic_write(temp / ARRAYS_FILE, "wb") as handle:
            np.savez(handle, data=weight[order].astype(np.float32), indices=row[order].astype(np.int32),
                     indptr=indptr, doc_ids=np.asarray(doc_ids, dtype=str),
                     vocabulary=np.asarray(list(vocabulary), dtype=str))
        files = filecheck.describe(temp, [ARRAYS_FILE])
        with atomic_write(temp / META_FILE) as handle:
            json.dump({"dataset": dataset.name, "source": dataset.source, "fingerprint": dataset.fingerprint,
                       "format": FORMAT, "documents": len(doc_ids), "with_terms": with_terms,
                       "terms": len(vocabulary), "postings": int(len(weight)), "options": asdict(options),
                       "files": files, "seconds": round(time.perf_counter() - started, 2)}, handle, indent=1)
    log.info("bm25s: %d docs, %d terms of %s in %.1f s", len(doc_ids), len(vocabulary), dataset.name,
             time.perf_counter() - started)
    return path


class Bm25sRetriever:
    """BM25 top-k from a cached matrix of :func:`build_index` (see the module docstring)."""

    name = "bm25s"

    def __init__(self, path: Path, threads: int = 1) -> None:
        """
        Args:
            path: an entry of :func:`build_index`; its files are checked against their recorded digests.
            threads: bm25s' retrieval threads (0 or 1: the calling thread).

        Raises:
            CorruptCacheError: the entry is incomplete or damaged.
        """
        import bm25s

        path = Path(path)
        if not filecheck.is_complete(path, META_FILE):
            raise PipelineError(f"{path}: not a finished bm25s index (it is built by --first-stage bm25s)")
        metadata = filecheck.read_metadata(path, META_FILE, WHAT, required=("options", "files", "format"))
        if metadata["format"] != FORMAT or not isinstance(metadata["options"], dict):
            raise filecheck.damaged(path, WHAT, f"{META_FILE}: format {metadata['format']!r}, expected {FORMAT}")
        filecheck.check(path, metadata["files"], STAMP_FILE, WHAT)
        try:
            with np.load(path / ARRAYS_FILE, allow_pickle=False) as arrays:
                data, indices, indptr = arrays["data"], arrays["indices"], arrays["indptr"]
                self.doc_ids = arrays["doc_ids"].tolist()
                vocabulary = arrays["vocabulary"].tolist()
        except (OSError, ValueError, KeyError) as error:
            raise filecheck.damaged(path, WHAT, f"{ARRAYS_FILE} is unreadable: {error}") from None
        if len(indptr) != len(vocabulary) + 1 or int(indptr[-1]) != len(data) or len(indices) != len(data):
            raise filecheck.damaged(path, WHAT, f"{ARRAYS_FILE}: its arrays do not fit together")
        options = Bm25sOptions(**metadata["options"])
        self.path, self.options, self.threads = path, options, max(0, int(threads))
        self.analyzer = EnglishAnalyzer(options.stemmer, options.keep_stopwords)
        numba = _numba_available()
        self._bm25 = bm25s.BM25(k1=options.k1, b=options.b, method="lucene", backend="numba" if numba else "numpy")
        self._bm25.scores = {"data": data, "indices": indices, "indptr": indptr, "num_docs": len(self.doc_ids)}
        self._bm25.vocab_dict = {term: k for k, term in enumerate(vocabulary)}
        self._bm25.unique_token_ids_set = set(range(len(vocabulary)))
        self._bm25.nonoccurrence_array = None  # only BM25L / BM25+ have one

    def search(self, queries: Iterable[Query], k: int = 1000, batch_size: int = 256) -> Run:
        """Top-``k`` documents sharing a term with each query, by BM25 score (ties by bm25s' selection).

        Args:
            queries: the queries.
            k: at most this many documents per query.
            batch_size: queries per call of bm25s' retrieval.

        Returns:
            ``{query_id: [ScoredDoc, ...]}``; a query without an index term gets no documents.
        """
        from pipeline.core.progress import tqdm

        queries = list(queries)
        k = min(int(k), len(self.doc_ids))
        vocab = self._bm25.vocab_dict
        run: Run = {}
        with tqdm(total=len(queries), desc="bm25s search", unit="query",
                  **progress_switch(len(queries) >= batch_size)) as bar:
            for start in range(0, len(queries), batch_size):
                chunk = queries[start:start + batch_size]
                ids = [[vocab[t] for t in self.analyzer.terms(q.text) if t in vocab] for q in chunk]
                searchable = [n for n, terms in enumerate(ids) if terms]
                for q in chunk:
                    run[q.query_id] = []
                if searchable and k > 0:
                    results = self._bm25.retrieve([ids[n] for n in searchable], k=k, show_progress=False,
                                                  n_threads=self.threads if self.threads > 1 else 0)
                    with _no_gc():
                        for row, n in enumerate(searchable):
                            scores, docs = results.scores[row], results.documents[row]
                            keep = scores > 0  # Lucene returns only documents that match a query term
                            run[chunk[n].query_id] = _hits(chunk[n].query_id, self.doc_ids, docs[keep].tolist(),
                                                           scores[keep].tolist())
                bar.update(len(chunk))
        return run

    def close(self) -> None:
        """Nothing to release (kept for the first stages' common interface)."""


def _hits(query_id: str, doc_ids: list[str], rows: list[int], scores: list[float]) -> list[ScoredDoc]:
    """``ScoredDoc``s of one query. Building them is most of a search once the matrix is summed (a thousand
    per query): ``tuple.__new__`` skips the named tuple's Python-level ``__new__``, same objects."""
    new = tuple.__new__
    return [new(ScoredDoc, (query_id, doc_ids[row], score)) for row, score in zip(rows, scores)]


@contextlib.contextmanager
def _no_gc():
    """Pause the cyclic garbage collector while many small acyclic tuples are made (it would scan the whole
    heap again and again as they pile up); it is re-enabled only if it was on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def bm25s_first_stage(dataset: Dataset, settings: FirstStageSettings) -> Bm25sRetriever:
    """``bm25s``: in-memory BM25 over the dataset's documents (the matrix is built and cached if missing).

    Args:
        dataset: the collection to search.
        settings: options (:class:`Bm25sOptions`) and the index cache.

    Returns:
        A :class:`Bm25sRetriever` on the cached matrix, searching on ``settings.threads`` threads (as the
        Lucene first stages do; results do not depend on them).
    """
    options = settings.options or Bm25sOptions()
    path = build_index(dataset, options, settings.index_root)
    return Bm25sRetriever(path, threads=settings.threads)


bm25s_first_stage.Options = Bm25sOptions
