"""Documents: TREC SGML, JSONL (BEIR ``corpus.jsonl``), TSV, SMART, and HTML (a folder of pages or one page),
detected per file."""
from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

from ..errors import DataFormatError
from ..records import Doc
from ..textio import iter_lines
from .common import SMART_START, check_id, json_records, read_once, smart_records, smart_text, tab_separated

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

    Args:
        path: a documents file, or a folder of HTML files.

    Yields:
        The documents, in file order, read lazily.

    Raises:
        DataFormatError: the first bad line (or a doc id listed twice), named with its file and number.

    Example:
        >>> next(read_docs("corpus.jsonl")).doc_id   # doctest: +SKIP
        'MED-10'
    """
    for _, doc in read_docs_numbered(path):
        yield doc


def read_docs_numbered(path: str | os.PathLike) -> Iterator[tuple[int | None, Doc]]:
    """Like :func:`read_docs`, with the 1-based line where each document starts.

    Args:
        path: a documents file, or a folder of HTML files.

    Yields:
        ``(line, doc)``; ``line`` is ``None`` for HTML files (one document each).

    Raises:
        DataFormatError: the first bad line (or a doc id listed twice), named with its file and number.
    """
    if Path(path).is_dir() or Path(path).suffix.lower() in HTML_SUFFIXES:
        yield from _html_docs(Path(path))  # one document per file: duplicates are checked by file name there
        return
    seen: dict[str, int] = {}
    for number, doc in _read_docs(path):
        read_once(path, number, seen, doc.doc_id, f"duplicate doc id {doc.doc_id!r}")
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
    elif SMART_START.match(first_line):
        yield from _smart_docs(path, all_lines())
    else:
        yield from _tsv_docs(path, all_lines())


_ID_KEYS = ("id", "doc_id", "docid", "_id")
_TEXT_KEYS = ("contents", "text", "body", "passage", "abstract")


def _jsonl_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    for number, record, doc_id in json_records(path, lines, _ID_KEYS, "JSON object"):
        body = next((str(record[k]) for k in _TEXT_KEYS if k in record), "")
        title = str(record.get("title", "") or "")
        yield number, Doc(check_id(path, number, "doc", doc_id), f"{title} {body}".strip() if title else body)


def _tsv_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    formats = "accepted document formats: " + "; ".join(DOC_FORMATS)
    for number, doc_id, text in tab_separated(path, lines, "doc", formats):
        yield number, Doc(check_id(path, number, "doc", doc_id), text)


def _smart_docs(path, lines) -> Iterator[tuple[int, Doc]]:
    """SMART documents: title (``.T``) and body (``.W``) as the text, as Anserini and ir_datasets index them."""
    for number, doc_id, fields in smart_records(path, lines):
        yield number, Doc(doc_id, " ".join(smart_text(fields).split()))


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
    """The visible text of one HTML file (see :class:`_VisibleText`).

    Args:
        path: the HTML file.

    Returns:
        Its visible text, the ``<title>`` included.

    Raises:
        DataFormatError: a byte that is not UTF-8, named with its line.
    """
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
