"""Readers and writers for TREC-style files: topics, qrels, runs and SGML/JSONL/TSV documents.

Readers are strict: a malformed line raises :class:`~pipeline.core.errors.DataFormatError` naming the file,
the line and what was expected, instead of being skipped. The run writer is atomic and canonical
(queries in natural order, documents by descending score, ties by doc id descending as trec_eval ranks
them, no duplicate documents).
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from .atomic import atomic_write
from .errors import DataFormatError
from .records import Doc, Qrel, Query, Run, ScoredDoc, ranked
from .textio import iter_lines

# --------------------------------------------------------------------------------------------- topics

_TAG = re.compile(r"<(/?)(\w+)>", re.IGNORECASE)
_TITLE_TAGS = ("title", "query")


def read_topics(path: str | os.PathLike) -> dict[str, Query]:
    """Read topics as ``{query_id: Query}`` from TREC SGML (``<top><num>..<title>..``) or TSV (``id<TAB>text``).

    The format is detected from the first non-empty line. ``<num> Number: MB111`` becomes ``111`` when the
    rest of the file's numbers share the prefix (Microblog topics vs numeric qrels). Empty query text,
    duplicate ids and lines that fit neither format are errors naming the line.
    """
    lines = list(iter_lines(path))
    first = next((text for _, text in lines if text.strip()), None)
    if first is None:
        raise DataFormatError(path, None, "empty topics file; expected TREC <top> topics or 'id<TAB>text' lines")
    if first.lstrip().lower().startswith("<top"):
        return _read_sgml_topics(path, lines)
    return _read_tsv_topics(path, lines)


def check_id(path, line: int | None, kind: str, identifier: str) -> str:
    """``identifier`` if it can stand in a TREC run or qrels column (non-empty, no whitespace), else a
    :class:`DataFormatError` at ``path:line``: caught when the file is read, not when a run is written."""
    if not identifier:
        raise DataFormatError(path, line, f"empty {kind} id")
    if any(character.isspace() for character in identifier):
        raise DataFormatError(path, line, f"{kind} id {identifier!r} contains whitespace; TREC runs and qrels "
                                          f"separate columns by whitespace, so ids must be one word")
    return identifier


def _add_query(queries: dict[str, Query], path, line: int, query_id: str, text: str) -> None:
    text = " ".join(text.split())
    check_id(path, line, "query", query_id)
    if not text:
        raise DataFormatError(path, line, f"query {query_id!r} has empty text; expected a non-empty query")
    if query_id in queries:
        raise DataFormatError(path, line, f"duplicate query id {query_id!r}")
    queries[query_id] = Query(query_id, text)


def _read_tsv_topics(path, lines) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    for number, text in lines:
        if not text.strip():
            continue
        parts = text.split("\t", 1)
        if len(parts) != 2:
            raise DataFormatError(path, number, f"expected 'query_id<TAB>text', got {text[:80]!r}")
        _add_query(queries, path, number, parts[0].strip(), parts[1])
    return queries


def _read_sgml_topics(path, lines) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    fields: dict[str, str] = {}
    current: str | None = None
    top_line = None
    for number, text in lines:
        position = 0
        for match in _TAG.finditer(text):
            if current is not None:
                fields[current] = fields.get(current, "") + " " + text[position : match.start()]
            closing, tag = match.group(1), match.group(2).lower()
            position = match.end()
            if tag == "top" and not closing:
                if top_line is not None:
                    raise DataFormatError(path, number, "<top> opened before the previous </top>")
                fields, current, top_line = {}, None, number
            elif tag == "top" and closing:
                if top_line is None:
                    raise DataFormatError(path, number, "</top> without <top>")
                _finish_sgml_topic(queries, path, top_line, fields)
                fields, current, top_line = {}, None, None
            elif closing:
                current = None
            else:
                current = tag
        if current is not None:
            fields[current] = fields.get(current, "") + " " + text[position:]
    if top_line is not None:
        raise DataFormatError(path, top_line, "<top> is never closed; expected </top>")
    # "MB111" -> "111" so topics match the numeric ids of Microblog qrels and runs
    prefixes = {re.match(r"[A-Za-z]*", qid).group(0) for qid in queries}
    if len(prefixes) == 1 and (prefix := prefixes.pop()) and all(q[len(prefix) :].isdigit() for q in queries):
        queries = {str(int(qid[len(prefix) :])): Query(str(int(qid[len(prefix) :])), q.text) for qid, q in queries.items()}
    return queries


def _finish_sgml_topic(queries, path, line, fields) -> None:
    raw_id = fields.get("num", "").strip()
    raw_id = re.sub(r"^number:\s*", "", raw_id, flags=re.IGNORECASE).strip()
    if not raw_id:
        raise DataFormatError(path, line, "topic without <num>; expected <num> id </num>")
    text = next((fields[tag] for tag in _TITLE_TAGS if tag in fields), None)
    if text is None:
        raise DataFormatError(path, line, f"topic {raw_id!r} has no <title> or <query>")
    _add_query(queries, path, line, raw_id, text)


def write_topics_tsv(path: str | os.PathLike, queries: Iterable[Query]) -> None:
    """Write ``id<TAB>text`` topics atomically."""
    with atomic_write(path) as handle:
        for query in queries:
            handle.write(f"{query.query_id}\t{query.text}\n")


# ---------------------------------------------------------------------------------------------- qrels


def read_qrels(path: str | os.PathLike) -> list[Qrel]:
    """Read TREC qrels (``qid iter docid relevance``, whitespace-separated, relevance an integer).

    A line with another number of columns, a non-integer relevance or a second judgment of the same
    (query, document) is an error naming the line.
    """
    qrels: list[Qrel] = []
    seen: dict[tuple[str, str], int] = {}
    for number, text in iter_lines(path):
        parts = text.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise DataFormatError(
                path, number, f"expected 4 columns 'query_id iteration doc_id relevance', got {len(parts)}: {text[:80]!r}"
            )
        query_id, iteration, doc_id, relevance = parts
        try:
            grade = int(relevance)
        except ValueError:
            raise DataFormatError(path, number, f"relevance {relevance!r} is not an integer") from None
        key = (query_id, doc_id)
        if key in seen:
            raise DataFormatError(
                path, number, f"duplicate judgment for query {query_id!r} doc {doc_id!r} (first on line {seen[key]})"
            )
        seen[key] = number
        qrels.append(Qrel(query_id, doc_id, grade, iteration))
    return qrels


def write_qrels(path: str | os.PathLike, qrels: Iterable[Qrel]) -> None:
    """Write TREC qrels atomically."""
    with atomic_write(path) as handle:
        for qrel in qrels:
            handle.write(f"{qrel.query_id} {qrel.iteration} {qrel.doc_id} {qrel.relevance}\n")


# ----------------------------------------------------------------------------------------------- runs


def read_run(
    path: str | os.PathLike,
    known_doc_ids: Mapping | set | None = None,
    known_query_ids: Mapping | set | None = None,
) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``) strictly.

    Errors name the line for: a wrong number of columns, a rank that is not an integer, a score that is not
    a finite number, a document listed twice for one query, and (when ``known_doc_ids`` /
    ``known_query_ids`` are given) ids the collection does not have.
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
        key = (query_id, doc_id)
        if key in seen:
            raise DataFormatError(
                path, number, f"doc {doc_id!r} listed twice for query {query_id!r} (first on line {seen[key]})"
            )
        seen[key] = number
        run.setdefault(query_id, []).append(ScoredDoc(query_id, doc_id, value))
    return run


def natural_key(text: str) -> tuple:
    """Sort key that orders ``2`` before ``10`` and keeps non-numeric ids stable."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def sorted_run(run: Run | Iterable[ScoredDoc]) -> list[ScoredDoc]:
    """All scored docs in canonical order: queries naturally, then score descending, ties by doc id descending
    (trec_eval's order, :func:`pipeline.core.records.ranked`)."""
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


# ---------------------------------------------------------------------------------------------- docs


def read_docs(path: str | os.PathLike) -> Iterator[Doc]:
    """Iterate documents from TREC SGML (``<DOC><DOCNO>``), JSONL or TSV (``id<TAB>text``), detected per file.

    JSONL objects need an id (``id``/``doc_id``/``docid``/``_id``) and text (``contents``/``text``/``body``,
    with ``title`` prepended when present). Errors name the line, a doc id listed twice included.
    """
    for _, doc in read_docs_numbered(path):
        yield doc


def read_docs_numbered(path: str | os.PathLike) -> Iterator[tuple[int, Doc]]:
    """Like :func:`read_docs`, with the 1-based line where each document starts."""
    seen: dict[str, int] = {}
    for number, doc in _read_docs(path):
        first = seen.setdefault(doc.doc_id, number)
        if first != number:
            raise DataFormatError(path, number, f"duplicate doc id {doc.doc_id!r} (first on line {first})")
        yield number, doc


def _read_docs(path) -> Iterator[tuple[int, Doc]]:
    lines = iter_lines(path)
    first_line = None
    buffered: list[tuple[int, str]] = []
    for number, text in lines:
        buffered.append((number, text))
        if text.strip():
            first_line = text.lstrip()
            break
    if first_line is None:
        return

    def all_lines():
        yield from buffered
        yield from lines

    if first_line.upper().startswith("<DOC"):
        yield from _sgml_docs(path, all_lines())
    elif first_line.startswith("{"):
        yield from _jsonl_docs(path, all_lines())
    else:
        yield from _tsv_docs(path, all_lines())


_ID_KEYS = ("id", "doc_id", "docid", "_id")
_TEXT_KEYS = ("contents", "text", "body", "passage", "abstract")


def _jsonl_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    for number, text in lines:
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, number, f"invalid JSON ({error.msg}); expected one JSON object per line") from None
        if not isinstance(record, dict):
            raise DataFormatError(path, number, "expected a JSON object per line")
        doc_id = next((str(record[k]) for k in _ID_KEYS if k in record), None)
        if doc_id is None:
            raise DataFormatError(path, number, f"JSON object has no id field (one of {', '.join(_ID_KEYS)})")
        body = next((str(record[k]) for k in _TEXT_KEYS if k in record), "")
        title = str(record.get("title", "") or "")
        yield number, Doc(check_id(path, number, "doc", doc_id), f"{title} {body}".strip() if title else body)


def _tsv_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    for number, text in lines:
        if not text.strip():
            continue
        parts = text.split("\t", 1)
        if len(parts) != 2:
            raise DataFormatError(path, number, f"expected 'doc_id<TAB>text', got {text[:80]!r}")
        yield number, Doc(check_id(path, number, "doc", parts[0].strip()), parts[1])


_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.IGNORECASE | re.DOTALL)
_ANY_TAG = re.compile(r"</?[A-Za-z][^>]*>")


def _sgml_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    body: list[str] = []
    start = None
    for number, text in lines:
        upper = text.upper()
        if "<DOC>" in upper:
            if start is not None:
                raise DataFormatError(path, number, "<DOC> opened before the previous </DOC>")
            start, body = number, []
            text = text[upper.index("<DOC>") + 5 :]
            upper = text.upper()
        if start is None:
            if text.strip():
                raise DataFormatError(path, number, f"text outside <DOC>...</DOC>: {text[:80]!r}")
            continue
        if "</DOC>" in upper:
            body.append(text[: upper.index("</DOC>")])
            yield start, _sgml_doc(path, start, "\n".join(body))
            start = None
        else:
            body.append(text)
    if start is not None:
        raise DataFormatError(path, start, "<DOC> is never closed; expected </DOC>")


def _sgml_doc(path, line, content: str) -> Doc:
    match = _DOCNO.search(content)
    if not match or not match.group(1):
        raise DataFormatError(path, line, "document without <DOCNO>; expected <DOCNO>id</DOCNO>")
    check_id(path, line, "doc", match.group(1))
    text = _ANY_TAG.sub(" ", content[: match.start()] + " " + content[match.end() :])
    return Doc(match.group(1), " ".join(text.split()))
