"""Relevance judgments (qrels): TREC's four columns, three columns, BEIR's TSV with a header and SMART
relevance files."""
from __future__ import annotations

import logging
import os
from typing import Iterable

from ..atomic import write_lines
from ..errors import DataFormatError
from ..records import Qrel
from ..textio import iter_lines
from .common import read_once

log = logging.getLogger(__name__)

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
    no TREC qrels file looks like this (every judgment of one document ``0`` with relevance 0).

    Args:
        path: a judgments file.

    Returns:
        Whether it is in the SMART layout.
    """
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

    Args:
        path: the qrels file.

    Returns:
        The judgments, in file order.

    Raises:
        DataFormatError: the first bad line, named with its number and what was expected, or an empty file.
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
        read_once(path, number, seen, (query_id, doc_id), f"duplicate judgment for query {query_id!r} doc {doc_id!r}")
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
    """Write TREC qrels atomically.

    Args:
        path: the file to write (replaced if it exists).
        qrels: the judgments, one line each (``query_id iteration doc_id relevance``).
    """
    write_lines(path, (f"{qrel.query_id} {qrel.iteration} {qrel.doc_id} {qrel.relevance}" for qrel in qrels))
