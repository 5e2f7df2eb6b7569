"""TREC runs (``query_id Q0 doc_id rank score tag``): a strict reader and an atomic, canonical writer (queries in
natural order, documents by descending score, ties by doc id descending as trec_eval ranks them, no duplicate
documents)."""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Iterable, Mapping

from ..atomic import atomic_write
from ..errors import DataFormatError
from ..records import Run, ScoredDoc, ranked
from ..textio import iter_lines
from .common import read_once

def read_run(
    path: str | os.PathLike,
    known_doc_ids: Mapping | set | None = None,
    known_query_ids: Mapping | set | None = None,
) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``) strictly.

    Errors name the line for: a wrong number of columns, a rank that is not an integer, a score that is not
    a finite number, a document listed twice for one query, and (when ``known_doc_ids`` /
    ``known_query_ids`` are given) ids the collection does not have.

    Args:
        path: the run file.
        known_doc_ids: the collection's document ids (``None``: not checked).
        known_query_ids: the topics' query ids (``None``: not checked).

    Returns:
        ``{query_id: [ScoredDoc, ...]}`` in file order.

    Raises:
        DataFormatError: the first bad line, named with its number and what was expected.

    Example:
        >>> run = read_run("bm25.run", dataset.doc_store(), dataset.queries)   # doctest: +SKIP
    """
    run: Run = {}
    seen: dict[tuple[str, str], int] = {}
    for number, text in iter_lines(path):
        parts = text.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise DataFormatError(
                path, number, f"expected 6 columns 'query_id Q0 doc_id rank score tag', got {len(parts)}: {text[:80]!r}"
            )
        query_id, _, doc_id, rank, score, _ = parts
        try:
            int(rank)
        except ValueError:
            raise DataFormatError(path, number, f"rank {rank!r} is not an integer") from None
        try:
            value = float(score)
        except ValueError:
            raise DataFormatError(path, number, f"score {score!r} is not a number") from None
        if not math.isfinite(value):
            raise DataFormatError(path, number, f"score {score!r} is not finite")
        if known_query_ids is not None and query_id not in known_query_ids:
            raise DataFormatError(path, number, f"unknown query id {query_id!r} (not in the dataset's topics)")
        if known_doc_ids is not None and doc_id not in known_doc_ids:
            raise DataFormatError(path, number, f"unknown doc id {doc_id!r} for query {query_id!r} (not in the collection)")
        read_once(path, number, seen, (query_id, doc_id), f"doc {doc_id!r} listed twice for query {query_id!r}")
        run.setdefault(query_id, []).append(ScoredDoc(query_id, doc_id, value))
    return run


def natural_key(text: str) -> tuple:
    """Sort key that orders ``2`` before ``10`` and keeps non-numeric ids stable.

    Args:
        text: an id.

    Returns:
        A tuple comparing digit runs as numbers.

    Example:
        >>> sorted(["q10", "q2", "q1"], key=natural_key)
        ['q1', 'q2', 'q10']
    """
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def sorted_run(run: Run | Iterable[ScoredDoc]) -> list[ScoredDoc]:
    """All scored docs in canonical order: queries naturally, then score descending, ties by doc id descending
    (trec_eval's order, :func:`pipeline.core.records.ranked`).

    Args:
        run: a run or scored documents.

    Returns:
        The scored documents in that order.
    """
    if not isinstance(run, Mapping):
        grouped: Run = {}
        for scored in run:
            grouped.setdefault(scored.query_id, []).append(scored)
        run = grouped
    ordered: list[ScoredDoc] = []
    for query_id in sorted(run, key=natural_key):
        ordered.extend(ranked(run[query_id]))
    return ordered


def write_run(path: str | os.PathLike, run: Run | Iterable[ScoredDoc], tag: str = "pipeline") -> Path:
    """Write a TREC run atomically in canonical order; a document listed twice for a query, an id with
    whitespace and a score that is not finite (NaN, inf) are errors, and nothing is written.

    Scores are written with ``repr`` precision so reading the file back gives the same ranking.

    Args:
        path: the file to write (replaced if it exists).
        run: a run or scored documents.
        tag: the run tag of the last column (one word).

    Returns:
        The path written.

    Raises:
        ValueError: a tag with whitespace, a document twice for a query, an id with whitespace or a score
            that is not finite.

    Example:
        >>> path = write_run("bm25.run", {"q1": [ScoredDoc("q1", "d1", 1.5)]}, tag="bm25")
        >>> read_run(path)
        {'q1': [ScoredDoc(query_id='q1', doc_id='d1', score=1.5)]}
    """
    if not re.fullmatch(r"\S+", tag):
        raise ValueError(f"run tag {tag!r} must be one word without whitespace")
    ordered = sorted_run(run)
    seen: set[tuple[str, str]] = set()
    for scored in ordered:
        key = (scored.query_id, scored.doc_id)
        if key in seen:
            raise ValueError(f"doc {scored.doc_id!r} appears twice for query {scored.query_id!r}; runs list each doc once")
        if any(char.isspace() for char in scored.doc_id + scored.query_id):
            raise ValueError(f"ids must not contain whitespace: query {scored.query_id!r}, doc {scored.doc_id!r}")
        if not math.isfinite(float(scored.score)):  # read_run rejects such a file, so never write one
            raise ValueError(f"score {scored.score!r} of doc {scored.doc_id!r} for query {scored.query_id!r} is not finite")
        seen.add(key)
    path = Path(path)
    with atomic_write(path) as handle:
        rank = 0
        previous = None
        for scored in ordered:
            rank = rank + 1 if scored.query_id == previous else 1
            previous = scored.query_id
            handle.write(f"{scored.query_id} Q0 {scored.doc_id} {rank} {float(scored.score)!r} {tag}\n")
    return path
