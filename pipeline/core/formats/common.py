"""What the readers of several formats share: id checks, JSON lines, ``id<TAB>text`` lines and SMART records."""
from __future__ import annotations

import json
import logging
import re
from typing import Iterable, Iterator

from ..errors import DataFormatError

log = logging.getLogger(__name__)

_SMART_MARKER = re.compile(r"^\.([A-Z])(?:\s+(.*?))?\s*$")

#: a line that starts a SMART record (``.I`` and an id)
SMART_START = re.compile(r"\.I(\s|$)")


def check_id(path, line: int | None, kind: str, identifier: str) -> str:
    """``identifier`` if it can stand in a TREC run or qrels column (non-empty, no whitespace), else a
    :class:`DataFormatError` at ``path:line``: caught when the file is read, not when a run is written.

    Args:
        path: the file being read (named in the error).
        line: the 1-based line, or ``None`` for a file without lines (an HTML document).
        kind: what the id names (``query``, ``doc``, ``record``), for the error.
        identifier: the id as read.

    Returns:
        ``identifier`` unchanged.

    Example:
        >>> check_id("topics.tsv", 3, "query", "301")
        '301'
    """
    if not identifier:
        raise DataFormatError(path, line, f"empty {kind} id")
    if any(character.isspace() for character in identifier):
        raise DataFormatError(path, line, f"{kind} id {identifier!r} contains whitespace; TREC runs and qrels "
                                          f"separate columns by whitespace, so ids must be one word")
    return identifier


def read_once(path, number: int, seen: dict, key, what: str) -> None:
    """Note ``key`` as read on line ``number`` of ``path``; a key read before is a :class:`DataFormatError`
    saying ``what`` is repeated and where it was first (``seen``: key -> line, filled as the file is read)."""
    first = seen.setdefault(key, number)
    if first != number:
        raise DataFormatError(path, number, f"{what} (first on line {first})")


def json_object(path, number: int, text: str) -> dict:
    """One line parsed as a JSON object, or a DataFormatError at ``path:number``."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, number, f"invalid JSON ({error.msg}); expected one JSON object per line") from None
    if not isinstance(record, dict):
        raise DataFormatError(path, number, "expected a JSON object per line")
    return record


def json_records(path, lines: Iterable[tuple[int, str]], id_keys: tuple[str, ...],
                 what: str) -> Iterator[tuple[int, dict, str]]:
    """``(line, object, id)`` for each non-empty line of a JSONL file; the id is the first of ``id_keys``
    the object has, and an object with none of them is an error naming ``what`` it is (``JSON topic``)."""
    for number, text in lines:
        if not text.strip():
            continue
        record = json_object(path, number, text)
        identifier = next((str(record[k]) for k in id_keys if k in record), None)
        if identifier is None:
            raise DataFormatError(path, number, f"{what} has no id field (one of {', '.join(id_keys)})")
        yield number, record, identifier


def tab_separated(path, lines: Iterable[tuple[int, str]], kind: str,
                  formats: str) -> Iterator[tuple[int, str, str]]:
    """``(line, id, text)`` for each non-empty ``id<TAB>text`` line; a line without a tab is an error, which
    on the file's first line also lists the accepted ``formats`` (the file may be of another layout)."""
    first = True
    for number, text in lines:
        if not text.strip():
            continue
        parts = text.split("\t", 1)
        if len(parts) != 2:
            message = f"expected '{kind}_id<TAB>text', got {text[:80]!r}"
            if first:  # the file's first line fits no layout: say which ones would
                message += f"; {formats}"
            raise DataFormatError(path, number, message)
        first = False
        yield number, parts[0].strip(), parts[1]


def smart_records(path, lines) -> Iterator[tuple[int, str, dict[str, str]]]:
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


def smart_text(fields: dict[str, str]) -> str:
    """A SMART record's title (``.T``) and body (``.W``), as Anserini and ir_datasets index them."""
    return " ".join(fields.get(name, "") for name in ("T", "W"))
