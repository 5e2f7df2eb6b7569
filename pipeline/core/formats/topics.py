"""Topics (queries) in every layout :func:`read_topics` accepts: TSV, TREC ``<top>``, Anserini's web-track
XML, SGML documents, JSONL (BEIR ``queries.jsonl``) and SMART."""
from __future__ import annotations

import html
import os
import re
from typing import Iterable, Mapping

from ..atomic import write_lines
from ..errors import ConfigError, DataFormatError
from ..records import Query
from ..textio import iter_lines
from .common import SMART_START, check_id, json_records, smart_records, smart_text, tab_separated

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
    """``field`` if it is one of :data:`TOPIC_FIELDS`.

    Args:
        field: a topic field name.

    Returns:
        ``field``.

    Raises:
        ConfigError: another name; the message lists the fields.
    """
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

    Args:
        path: the topics file.
        field: which text becomes the query (see above).

    Returns:
        ``{query_id: Query}`` in file order.

    Raises:
        DataFormatError: the first bad line, named with its number and what was expected.
        ConfigError: an unknown ``field``.

    Example:
        >>> queries = read_topics("topics.401-450.txt", field="title+description")   # doctest: +SKIP
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
    if SMART_START.match(first):
        return _read_smart_topics(path, lines, field)
    return _read_tsv_topics(path, lines, field)


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
    for number, query_id, text in tab_separated(path, lines, "query", _formats_list()):
        _single_text_only(path, "TSV", field)
        _add_query(queries, path, number, query_id, text)
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
    for number, record, query_id in json_records(path, lines, _JSON_TOPIC_ID_KEYS, "JSON topic"):
        metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        texts = {}
        for name, keys in _JSON_TOPIC_KEYS.items():
            value = next((record[k] for k in keys if record.get(k) is not None), None)
            if value is None and name != "title":  # BEIR keeps narratives in "metadata"
                value = next((metadata[k] for k in keys if metadata.get(k) is not None), None)
            texts[name] = None if value is None else str(value)
        _add_query(queries, path, number, query_id.strip(), _pick_field(path, number, query_id, texts, field, names))
    return queries


def _read_smart_topics(path, lines, field: str) -> dict[str, Query]:
    """SMART queries (Cranfield ``cran.qry``, CACM ``query.text``): ``.I id``, then ``.W`` (and ``.T``) text."""
    _single_text_only(path, "SMART", field)
    queries: dict[str, Query] = {}
    for line, query_id, fields in smart_records(path, lines):
        _add_query(queries, path, line, query_id, smart_text(fields))
    return queries


def write_topics_tsv(path: str | os.PathLike, queries: Iterable[Query]) -> None:
    """Write ``id<TAB>text`` topics atomically.

    Args:
        path: the file to write (replaced if it exists).
        queries: the queries.
    """
    write_lines(path, (f"{query.query_id}\t{query.text}" for query in queries))
