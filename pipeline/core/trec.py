"""Readers and writers for TREC-style files: topics, qrels, runs and documents (TREC SGML, JSONL, TSV, SMART,
HTML), including the BEIR, Anserini and SMART layouts of topics, qrels and documents.

Readers are strict: a malformed line raises :class:`~pipeline.core.errors.DataFormatError` naming the file,
the line and what was expected, instead of being skipped. The run writer is atomic and canonical
(queries in natural order, documents by descending score, ties by doc id descending as trec_eval ranks
them, no duplicate documents).
"""
from __future__ import annotations

import html
import json
import logging
import math
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from .atomic import atomic_write
from .errors import ConfigError, DataFormatError
from .records import Doc, Qrel, Query, Run, ScoredDoc, ranked
from .textio import iter_lines

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------- topics

#: ``topic_field`` values: which text of a topic becomes the query
TOPIC_FIELDS = ("title", "description", "narrative", "title+description")

#: every topics layout :func:`read_topics` accepts, with a one-line example each (quoted in its errors)
TOPIC_FORMATS = (
    "TSV: '301<TAB>international organized crime'",
    "TREC: '<top> <num> Number: 301 <title> organized crime <desc> Description: ... <narr> Narrative: ... </top>'",
    "Anserini/web-track XML: '<topic number=\"301\"><query>organized crime</query><description>...</description></topic>'",
    "SGML documents: '<DOC> <DOCNO>301</DOCNO> organized crime </DOC>' (or a <TITLE>/<DESC> inside)",
    "JSONL, BEIR queries.jsonl included: '{\"_id\": \"301\", \"text\": \"organized crime\"}' "
    "(id: _id/id/qid/query_id; title: title/query/text; description: description/desc/question)",
    "SMART: '.I 301' then '.W' and the query text on the lines below",
)

_TAG = re.compile(
    r"<(/?)([A-Za-z]\w*)((?:\s+[\w:-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'>]+))?)*)\s*/?>", re.IGNORECASE
)
_ATTRIBUTE = re.compile(r"([\w:-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'>]+))")
_RECORD_TAGS = ("top", "topic", "doc")
#: tags (lower case) that hold each topic field, first found wins
_FIELD_TAGS = {
    "title": ("title", "query"),
    "description": ("desc", "description", "question"),
    "narrative": ("narr", "narrative"),
}
_ID_TAGS = ("num", "docno", "number", "qid")
#: the labels old TREC topics put at the start of a field's text ("<desc> Description:")
_FIELD_LABEL = re.compile(r"^\s*(?:topic|description|narrative)\s*:\s*", re.IGNORECASE)
_JSON_TOPIC_ID_KEYS = ("_id", "id", "qid", "query_id", "topic_id", "number")
_JSON_TOPIC_KEYS = {
    "title": ("title", "query", "text"),
    "description": ("description", "desc", "question"),
    "narrative": ("narrative", "narr"),
}


def _formats_list() -> str:
    return "accepted topics formats: " + "; ".join(TOPIC_FORMATS)


def check_topic_field(field: str) -> str:
    """``field`` if it is one of :data:`TOPIC_FIELDS`, else a :class:`ConfigError` listing them."""
    if field not in TOPIC_FIELDS:
        raise ConfigError(f"topic field {field!r} is not one of {', '.join(TOPIC_FIELDS)}")
    return field


def read_topics(path: str | os.PathLike, field: str = "title") -> dict[str, Query]:
    """Read topics as ``{query_id: Query}``; the layout is detected from the first non-empty line.

    Accepted (:data:`TOPIC_FORMATS`): TSV ``id<TAB>text``; TREC ``<top>`` (``<num>``, ``<title>`` or
    ``<query>``, ``<desc>``, ``<narr>``, closing tags optional); Anserini's web-track XML ``<topic
    number="..">`` (``<query>``, ``<description>``, ``<narrative>``); ``<DOC><DOCNO>id</DOCNO> text </DOC>``
    topics; JSONL objects (BEIR ``queries.jsonl``: ``_id``, ``text``); SMART ``.I``/``.W``.

    ``field`` picks the query text (:data:`TOPIC_FIELDS`): ``title`` (default), ``description``,
    ``narrative`` or ``title+description`` (the two joined). TSV and SMART topics have a single text, so
    only ``title`` applies to them. ``<num> Number: MB111`` becomes ``111`` when the rest of the file's
    numbers share the prefix (Microblog topics vs numeric qrels). Empty query text, a topic without the
    chosen field, duplicate ids and lines that fit no format are errors naming the line.
    """
    check_topic_field(field)
    lines = list(iter_lines(path))
    first = next((text.lstrip() for _, text in lines if text.strip()), None)
    if first is None:
        raise DataFormatError(path, None, f"empty topics file; {_formats_list()}")
    tag = _TAG.match(first)
    if tag and not tag.group(1) and tag.group(2).lower() in _RECORD_TAGS:
        return _read_sgml_topics(path, lines, tag.group(2).lower(), field)
    if first.startswith("{"):
        return _read_jsonl_topics(path, lines, field)
    if re.match(r"\.I(\s|$)", first):
        return _read_smart_topics(path, lines, field)
    return _read_tsv_topics(path, lines, field)


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


def _single_text_only(path, kind: str, field: str) -> None:
    """TSV and SMART topics carry one text per query: asking for another field is an error, not a silent title."""
    if field != "title":
        raise DataFormatError(
            path, None, f"topic field {field!r} asked for, but {kind} topics have one text per query (read as the "
                        f"title); use topic field 'title', or topics with descriptions (TREC <top>/<topic>, JSONL)",
        )


def _pick_field(path, line: int, query_id: str, texts: Mapping[str, str | None], field: str, names: Mapping) -> str:
    """The text of ``field`` (``title+description``: both) among a topic's ``texts``; a missing one is an
    error naming the tags or keys looked for (``names``: field -> their names)."""
    wanted = ("title", "description") if field == "title+description" else (field,)
    parts = []
    for name in wanted:
        text = texts.get(name)
        if text is None:
            looked = " or ".join(names[name])
            raise DataFormatError(path, line, f"topic {query_id!r} has no {name} ({looked}); topic field {field!r} "
                                              f"needs it")
        if not text.strip():
            raise DataFormatError(path, line, f"query {query_id!r} has an empty {name}; expected a non-empty query")
        parts.append(text)
    return " ".join(parts)


def _read_tsv_topics(path, lines, field: str) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    for number, text in lines:
        if not text.strip():
            continue
        parts = text.split("\t", 1)
        if len(parts) != 2:
            message = f"expected 'query_id<TAB>text', got {text[:80]!r}"
            if not queries:  # the first line fits no format at all: say which ones would
                message += f"; {_formats_list()}"
            raise DataFormatError(path, number, message)
        _single_text_only(path, "TSV", field)
        _add_query(queries, path, number, parts[0].strip(), parts[1])
    return queries


def _read_sgml_topics(path, lines, record: str, field: str) -> dict[str, Query]:
    """``<top>``, ``<topic>`` or ``<DOC>`` records (``record``): each tag's text until the next tag (TREC
    leaves fields unclosed), ids from ``<num>``/``<docno>`` or a ``number=`` attribute."""
    queries: dict[str, Query] = {}
    fields: dict[str, str] = {}
    current: str | None = None
    start = None
    shown = f"<{record}>" if record != "doc" else "<DOC>"
    closing_tag = f"</{record}>" if record != "doc" else "</DOC>"
    for number, text in lines:
        position = 0
        for match in _TAG.finditer(text):
            if start is not None:
                fields[current or "_body"] = fields.get(current or "_body", "") + " " + text[position : match.start()]
            closing, tag = match.group(1), match.group(2).lower()
            position = match.end()
            if tag == record and not closing:
                if start is not None:
                    raise DataFormatError(path, number, f"{shown} opened before the previous {closing_tag}")
                fields, current, start = {}, None, number
                for attribute in _ATTRIBUTE.finditer(match.group(3) or ""):
                    value = next(v for v in attribute.groups()[1:] if v is not None)
                    fields[f"@{attribute.group(1).lower()}"] = value
            elif tag == record and closing:
                if start is None:
                    raise DataFormatError(path, number, f"{closing_tag} without {shown}")
                _finish_sgml_topic(queries, path, start, fields, record, field)
                fields, current, start = {}, None, None
            elif closing:
                current = None
            else:
                current = tag
        if start is not None:
            fields[current or "_body"] = fields.get(current or "_body", "") + " " + text[position:]
        elif text[position:].strip():
            raise DataFormatError(path, number, f"text outside {shown}...{closing_tag}: {text[position:][:80]!r}")
    if start is not None:
        raise DataFormatError(path, start, f"{shown} is never closed; expected {closing_tag}")
    # "MB111" -> "111" so topics match the numeric ids of Microblog qrels and runs
    prefixes = {re.match(r"[A-Za-z]*", qid).group(0) for qid in queries}
    if len(prefixes) == 1 and (prefix := prefixes.pop()) and all(q[len(prefix) :].isdigit() for q in queries):
        queries = {str(int(qid[len(prefix) :])): Query(str(int(qid[len(prefix) :])), q.text) for qid, q in queries.items()}
    return queries


def _finish_sgml_topic(queries, path, line, fields, record: str, field: str) -> None:
    raw_id = next((fields[t] for t in _ID_TAGS if fields.get(t, "").strip()), None)
    if raw_id is None:
        raw_id = fields.get("@number") or fields.get("@id") or ""
    raw_id = re.sub(r"^\s*number:\s*", "", raw_id, flags=re.IGNORECASE).strip()
    if not raw_id:
        where = "<num> id </num>" if record == "top" else "<DOCNO> id </DOCNO>" if record == "doc" else "number=\"id\""
        raise DataFormatError(path, line, f"topic without <num>; expected {where}")
    texts = {name: next((fields[t] for t in tags if t in fields), None) for name, tags in _FIELD_TAGS.items()}
    texts = {name: _FIELD_LABEL.sub("", text) if text is not None else None for name, text in texts.items()}
    if record == "topic":  # XML: entities such as &amp; stand for characters
        texts = {name: html.unescape(text) if text is not None else None for name, text in texts.items()}
    if record == "doc" and texts["title"] is None:
        texts["title"] = fields.get("_body")  # <DOC><DOCNO>1</DOCNO> the query text </DOC>
    if field == "title" and texts["title"] is None:
        raise DataFormatError(path, line, f"topic {raw_id!r} has no <title> or <query>")
    names = {name: [f"<{t}>" for t in tags] for name, tags in _FIELD_TAGS.items()}
    _add_query(queries, path, line, raw_id, _pick_field(path, line, raw_id, texts, field, names))


def _read_jsonl_topics(path, lines, field: str) -> dict[str, Query]:
    """One JSON object per line (BEIR ``queries.jsonl``: ``{"_id", "text", "metadata"}``)."""
    queries: dict[str, Query] = {}
    names = {name: [repr(k) for k in keys] for name, keys in _JSON_TOPIC_KEYS.items()}
    for number, text in lines:
        if not text.strip():
            continue
        record = _json_object(path, number, text)
        query_id = next((str(record[k]) for k in _JSON_TOPIC_ID_KEYS if k in record), None)
        if query_id is None:
            raise DataFormatError(path, number, f"JSON topic has no id field (one of {', '.join(_JSON_TOPIC_ID_KEYS)})")
        metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        texts = {}
        for name, keys in _JSON_TOPIC_KEYS.items():
            value = next((record[k] for k in keys if record.get(k) is not None), None)
            if value is None and name != "title":  # BEIR keeps narratives in "metadata"
                value = next((metadata[k] for k in keys if metadata.get(k) is not None), None)
            texts[name] = None if value is None else str(value)
        _add_query(queries, path, number, query_id.strip(), _pick_field(path, number, query_id, texts, field, names))
    return queries


def _json_object(path, number: int, text: str) -> dict:
    """One line parsed as a JSON object, or a DataFormatError at ``path:number``."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, number, f"invalid JSON ({error.msg}); expected one JSON object per line") from None
    if not isinstance(record, dict):
        raise DataFormatError(path, number, "expected a JSON object per line")
    return record


def _read_smart_topics(path, lines, field: str) -> dict[str, Query]:
    """SMART queries (Cranfield ``cran.qry``, CACM ``query.text``): ``.I id``, then ``.W`` (and ``.T``) text."""
    _single_text_only(path, "SMART", field)
    queries: dict[str, Query] = {}
    for line, query_id, fields in _smart_records(path, lines):
        _add_query(queries, path, line, query_id, " ".join(fields.get(name, "") for name in ("T", "W")))
    return queries


def write_topics_tsv(path: str | os.PathLike, queries: Iterable[Query]) -> None:
    """Write ``id<TAB>text`` topics atomically."""
    with atomic_write(path) as handle:
        for query in queries:
            handle.write(f"{query.query_id}\t{query.text}\n")


# ---------------------------------------------------------------------------------------------- qrels

#: every qrels layout :func:`read_qrels` accepts, with an example each (quoted in its errors)
QRELS_FORMATS = (
    "TREC, 4 columns 'query_id iteration doc_id relevance' ('301 0 FBIS3-10082 1')",
    "3 columns 'query_id doc_id relevance' ('301 FBIS3-10082 1')",
    "BEIR TSV: a header 'query-id<TAB>corpus-id<TAB>score', then 3 columns ('301<TAB>FBIS3-10082<TAB>1')",
    "SMART relevance files (CISI.REL, CACM qrels.text): 'query_id doc_id 0 0.000000' on every line, each listed "
    "document relevant ('1     28 0 0.000000')",
)


def is_smart_qrels(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds SMART relevance judgments (``CISI.REL``, CACM's ``qrels.text``): four columns
    ``query_id doc_id 0 0`` on every line, the last written ``0`` or ``0.000000``. Read as TREC qrels they
    would swap the document into the iteration column and judge document ``0`` irrelevant for every query;
    no TREC qrels file looks like this (every judgment of one document ``0`` with relevance 0)."""
    found = False
    for _, text in iter_lines(path):
        parts = text.split()
        if not parts:
            continue
        if len(parts) != 4 or parts[2] != "0":
            return False
        try:
            if float(parts[3]) != 0.0:
                return False
        except ValueError:
            return False
        found = True
    return found
_QRELS_LAYOUTS = {4: "4 columns 'query_id iteration doc_id relevance'", 3: "3 columns 'query_id doc_id relevance'"}
#: names a header line's last column may have (BEIR writes 'query-id corpus-id score')
_HEADER_WORDS = {"score", "relevance", "rel", "label", "grade", "judgment", "judgement"}


def read_qrels(path: str | os.PathLike) -> list[Qrel]:
    """Read qrels, whitespace-separated, relevance an integer: TREC ``qid iter docid relevance``, three
    columns ``qid docid relevance``, or BEIR's TSV (a ``query-id corpus-id score`` header, then three columns).

    The first judgment decides the number of columns; a later line with another number of columns, a
    non-integer relevance or a second judgment of the same (query, document) is an error naming the line.
    A first line that fits no layout is an error listing the accepted ones (:data:`QRELS_FORMATS`).
    """
    qrels: list[Qrel] = []
    seen: dict[tuple[str, str], int] = {}
    width = None
    first_line = None
    header_checked = False
    smart = is_smart_qrels(path)
    if smart:
        log.info("%s: SMART relevance judgments ('query_id doc_id 0 0' per line): every listed document is "
                 "relevant to its query", path)
    for number, text in iter_lines(path):
        parts = text.split()
        if not parts:
            continue
        if not header_checked:
            header_checked = True
            if len(parts) == 3 and parts[-1].lower() in _HEADER_WORDS:
                continue  # BEIR's 'query-id corpus-id score' header
        if width is None:
            first_line = number
            if len(parts) not in _QRELS_LAYOUTS:
                raise DataFormatError(
                    path, number, f"expected 4 columns 'query_id iteration doc_id relevance' or 3 columns 'query_id "
                                  f"doc_id relevance', got {len(parts)}: {text[:80]!r}; accepted qrels formats: "
                                  + "; ".join(QRELS_FORMATS),
                )
            width = len(parts)
        if len(parts) != width:
            raise DataFormatError(
                path, number, f"expected {_QRELS_LAYOUTS[width]} like line {first_line}, got {len(parts)}: {text[:80]!r}"
            )
        if smart:  # SMART's record ids are plain numbers ('.I 1'); CACM's qrels write them '01'
            query_id, doc_id = (str(int(x)) if x.isdigit() else x for x in parts[:2])
            iteration, relevance = "0", "1"
        elif width == 4:
            query_id, iteration, doc_id, relevance = parts
        else:
            (query_id, doc_id, relevance), iteration = parts, "0"
        if not _is_integer(relevance):
            raise DataFormatError(path, number, f"relevance {relevance!r} is not an integer")
        key = (query_id, doc_id)
        if key in seen:
            raise DataFormatError(
                path, number, f"duplicate judgment for query {query_id!r} doc {doc_id!r} (first on line {seen[key]})"
            )
        seen[key] = number
        qrels.append(Qrel(query_id, doc_id, int(relevance), iteration))
    if not qrels:  # an empty file would give a run with no evaluation and no word about it
        raise DataFormatError(path, None, "no judgments in the file (it is empty or holds only a header); expected "
                                          "lines 'query_id iteration doc_id relevance'")
    return qrels


def _is_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


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

#: every document layout :func:`read_docs` accepts (quoted in its errors)
DOC_FORMATS = (
    "TREC SGML: '<DOC> <DOCNO>d1</DOCNO> text </DOC>'",
    "JSONL, BEIR corpus.jsonl included: '{\"_id\": \"d1\", \"title\": \"...\", \"text\": \"...\"}'",
    "TSV: 'd1<TAB>text'",
    "SMART: '.I 1' then '.T' title, '.A' authors, '.B' source, '.W' body on the lines below",
    "HTML: a folder of .html/.htm files (or one file), the doc id being the file name without extension",
)
HTML_SUFFIXES = (".html", ".htm")


def read_docs(path: str | os.PathLike) -> Iterator[Doc]:
    """Iterate documents from TREC SGML (``<DOC><DOCNO>``), JSONL, TSV (``id<TAB>text``) or SMART (``.I``,
    ``.T``, ``.W`` ...), detected per file, or from HTML: a folder of ``.html``/``.htm`` files or one such file.

    JSONL objects need an id (``id``/``doc_id``/``docid``/``_id``) and text (``contents``/``text``/``body``,
    with ``title`` prepended when present: BEIR's ``corpus.jsonl``). SMART documents are their ``.T`` title
    and ``.W`` body (authors and source left out). An HTML document is its visible text (the ``<title>``
    included; tags, scripts and styles left out) and its id the file name without extension. Errors name the
    file and line, a doc id listed twice included.
    """
    for _, doc in read_docs_numbered(path):
        yield doc


def read_docs_numbered(path: str | os.PathLike) -> Iterator[tuple[int | None, Doc]]:
    """Like :func:`read_docs`, with the 1-based line where each document starts (``None`` for HTML files,
    one document each)."""
    if Path(path).is_dir() or Path(path).suffix.lower() in HTML_SUFFIXES:
        yield from _html_docs(Path(path))  # one document per file: duplicates are checked by file name there
        return
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
    elif re.match(r"\.I(\s|$)", first_line):
        yield from _smart_docs(path, all_lines())
    else:
        yield from _tsv_docs(path, all_lines())


_ID_KEYS = ("id", "doc_id", "docid", "_id")
_TEXT_KEYS = ("contents", "text", "body", "passage", "abstract")


def _jsonl_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    for number, text in lines:
        if not text.strip():
            continue
        record = _json_object(path, number, text)
        doc_id = next((str(record[k]) for k in _ID_KEYS if k in record), None)
        if doc_id is None:
            raise DataFormatError(path, number, f"JSON object has no id field (one of {', '.join(_ID_KEYS)})")
        body = next((str(record[k]) for k in _TEXT_KEYS if k in record), "")
        title = str(record.get("title", "") or "")
        yield number, Doc(check_id(path, number, "doc", doc_id), f"{title} {body}".strip() if title else body)


def _tsv_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    first = True
    for number, text in lines:
        if not text.strip():
            continue
        parts = text.split("\t", 1)
        if len(parts) != 2:
            message = f"expected 'doc_id<TAB>text', got {text[:80]!r}"
            if first:  # the file's first line fits no layout: say which ones would
                message += "; accepted document formats: " + "; ".join(DOC_FORMATS)
            raise DataFormatError(path, number, message)
        first = False
        yield number, Doc(check_id(path, number, "doc", parts[0].strip()), parts[1])


_SMART_MARKER = re.compile(r"^\.([A-Z])(?:\s+(.*?))?\s*$")


def _smart_records(path, lines) -> Iterator[tuple[int, str, dict[str, str]]]:
    """SMART records (Cranfield, CACM, CISI, MED ...): ``(line of .I, id, {field letter: text})``.

    A line that is only ``.X`` (one capital letter, e.g. ``.T`` title, ``.A`` authors, ``.B`` source, ``.W``
    body) starts field X; ``.I id`` starts a record. Text before the first ``.I`` and an ``.I`` without an id
    are errors naming the line, except a last ``.I`` without an id and nothing after it (found at the end of
    a common copy of CISI), which is skipped with a warning."""
    record: tuple[int, str, dict[str, list[str]]] | None = None
    field: str | None = None
    nameless: int | None = None  # the line of an '.I' without an id: an error unless nothing follows it
    for number, text in lines:
        if nameless is not None and text.strip():
            raise DataFormatError(path, nameless, "'.I' without an id; expected '.I <id>' to start a record")
        marker = _SMART_MARKER.match(text)
        if marker and marker.group(1) == "I":
            if record is not None:
                yield record[0], record[1], {k: " ".join(v) for k, v in record[2].items()}
            identifier = (marker.group(2) or "").strip()
            if not identifier:
                nameless, record, field = number, None, None
                continue
            record, field = (number, check_id(path, number, "record", identifier), {}), None
        elif marker:
            if record is None:
                raise DataFormatError(path, number, f"field {text.strip()[:80]!r} before the first '.I <id>'")
            field = marker.group(1)
            record[2].setdefault(field, [])
            if marker.group(2):  # '.T title' on the marker's own line, as some conversions write it
                record[2][field].append(marker.group(2))
        elif text.strip():
            if record is None or field is None:
                where = "the first '.I <id>'" if record is None else "a field marker such as '.T' or '.W'"
                raise DataFormatError(path, number, f"text before {where}: {text[:80]!r}; SMART records are "
                                                    f"'.I <id>' then fields '.T', '.A', '.B', '.W' ...")
            record[2][field].append(text.strip())
    if record is not None:
        yield record[0], record[1], {k: " ".join(v) for k, v in record[2].items()}
    if nameless is not None:
        log.warning("%s:%d: '.I' without an id and nothing after it at the end of the file; skipped", path, nameless)


def _smart_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    """SMART documents: title (``.T``) and body (``.W``) as the text, as Anserini and ir_datasets index them."""
    for number, doc_id, fields in _smart_records(path, lines):
        text = " ".join(" ".join(fields.get(name, "") for name in ("T", "W")).split())
        yield number, Doc(doc_id, text)


class _VisibleText(HTMLParser):
    """Collects the text a browser shows (and the page ``<title>``): everything but tags and the content of
    ``<script>``, ``<style>``, ``<noscript>``, ``<template>``; character references decoded."""

    _HIDDEN = {"script", "style", "noscript", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden_depth = 0

    def handle_starttag(self, tag, attrs):
        if tag in self._HIDDEN:
            self._hidden_depth += 1
        self.parts.append(" ")  # <p>a</p><p>b</p> is "a b", not "ab"

    def handle_endtag(self, tag):
        if tag in self._HIDDEN and self._hidden_depth:
            self._hidden_depth -= 1
        self.parts.append(" ")

    def handle_data(self, data):
        if not self._hidden_depth:
            self.parts.append(data)

    def text(self) -> str:
        """The collected text with whitespace runs collapsed."""
        return " ".join("".join(self.parts).split())


def html_text(path: str | os.PathLike) -> str:
    """The visible text of one HTML file (see :class:`_VisibleText`); a byte that is not UTF-8 is an error
    naming its line."""
    parser = _VisibleText()
    for _, text in iter_lines(path):
        parser.feed(text + "\n")
    parser.close()
    return parser.text()


def _html_docs(path: Path) -> Iterator[tuple[None, Doc]]:
    """One document per ``.html``/``.htm`` file of a folder (sorted, subfolders included) or one file; the
    id is the file name without extension, so two files with the same name are an error naming both."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in HTML_SUFFIXES)
        if not files:
            raise DataFormatError(path, None, "folder without .html/.htm files; a document folder holds one HTML "
                                              "file per document (accepted document formats: "
                                              + "; ".join(DOC_FORMATS) + ")")
    else:
        files = [path]
    seen: dict[str, Path] = {}
    for file in files:
        doc_id = check_id(file, None, "doc", file.stem)
        if doc_id in seen:
            raise DataFormatError(file, None, f"duplicate doc id {doc_id!r} (also {seen[doc_id]}); HTML documents "
                                              f"are named after their file, without its extension")
        seen[doc_id] = file
        yield None, Doc(doc_id, html_text(file))


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
