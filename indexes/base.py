"""What every first stage shares: the :class:`Retriever` protocol, :class:`RunRetriever` (a fixed ranking
served as a first stage) and :class:`BM25Settings`, the settings object of every first stage before each
declared its own options (:mod:`indexes.options`); still accepted by :func:`indexes.make_first_stage`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol, TypeVar, runtime_checkable

from pipeline.core.errors import PipelineError
from pipeline.core.records import Query, Run, ranked

OptionsT = TypeVar("OptionsT")


@runtime_checkable
class Retriever(Protocol):
    """A first stage: the top-``k`` documents of each query."""

    name: str

    def search(self, queries: Iterable[Query], k: int = 1000) -> Run:
        """The top-``k`` documents of each query.

        Args:
            queries: the queries.
            k: at most this many documents per query.

        Returns:
            ``{query_id: [ScoredDoc, ...]}``.

        Example:
            >>> from pipeline.core.records import ScoredDoc
            >>> RunRetriever("given", {"q1": [ScoredDoc("q1", "d1", 1.0)]}).search([Query("q1", "x")], k=10)
            {'q1': [ScoredDoc(query_id='q1', doc_id='d1', score=1.0)]}
        """
        ...


@dataclass
class RunRetriever:
    """A fixed ranking (a TREC run file or a dataset's shipped run) served as a first stage."""

    name: str
    run: Run

    def search(self, queries: Iterable[Query], k: int = 1000) -> Run:
        """The run's top-``k`` for each query (by score, ties by doc id); queries it lacks get no documents.

        Args:
            queries: the queries.
            k: at most this many documents per query (fewer where the run ranks fewer).

        Returns:
            ``{query_id: [ScoredDoc, ...]}``, best first.

        Example:
            >>> from pipeline.core.records import ScoredDoc
            >>> RunRetriever("given", {"q1": [ScoredDoc("q1", "d1", 1.0)]}).search([Query("q2", "x")])
            {'q2': []}
        """
        result: Run = {}
        for query in queries:
            hits = ranked(self.run.get(query.query_id, []))
            result[query.query_id] = hits[:k]
        return result


@dataclass
class BM25Settings:
    """The older settings object of every first stage (kept for callers written before
    :class:`indexes.options.FirstStageSettings`): Lucene's options (index analysis, BM25 and RM3 parameters)
    and, in ``codes``, an :class:`indexes.codes.CodeOptions` for the learned-code first stages, in ``dense``
    an :class:`indexes.dense.DenseOptions` (``dense`` and ``hybrid``) and in ``hybrid`` an
    :class:`indexes.hybrid.HybridOptions` (``None``: the defaults). ``index_root`` is where indexes are
    cached (default: ``PIPELINE_INDEX_DIR``, else ``indexes/cache/<lucene|codes|dense>``).
    :func:`indexes.registry.legacy_settings` gives the options of one first stage from these fields."""

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
    dense: Any = None
    hybrid: Any = None


def check_choice(what: str, value: Any, choices: Iterable[str]) -> None:
    """Refuse an option value that is not one of its choices.

    Args:
        what: the option, as the message names it (``"pooling"``, ``"index type"``).
        value: the value given.
        choices: the values it may take.

    Raises:
        PipelineError: ``value`` is not among ``choices``; the message lists them.

    Example:
        >>> check_choice("fusion", "rrf", ("rrf", "interpolate"))
    """
    if value not in choices:
        raise PipelineError(f"unknown {what} {value!r}; expected one of {', '.join(choices)}")


def settings_options(settings: Any, options_class: type[OptionsT]) -> OptionsT:
    """The options of a first stage's ``settings``, checked to be of the first stage's own class.

    Args:
        settings: a first stage's settings (:class:`indexes.options.FirstStageSettings`).
        options_class: the first stage's options class.

    Returns:
        ``settings.options`` (from ``--fs-set``), else ``options_class()`` (the defaults).

    Raises:
        PipelineError: ``settings.options`` is something other than an ``options_class``.

    Example:
        >>> from types import SimpleNamespace
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Opts:
        ...     depth: int = 3
        >>> settings_options(SimpleNamespace(options=None), Opts)
        Opts(depth=3)
    """
    options = settings.options
    if options is None:
        return options_class()
    if not isinstance(options, options_class):
        raise PipelineError(f"settings.options must be a {options_class.__name__}, got {type(options).__name__}")
    return options
