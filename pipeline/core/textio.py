"""Strict line reading: every line decoded as UTF-8 on its own so a bad byte is reported with its line."""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Iterator

from .errors import DataFormatError

UTF8_BOM = b"\xef\xbb\xbf"


def open_binary(path: str | os.PathLike):
    """Open a file for binary reading, transparently gunzipping ``*.gz``; a missing file names itself."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, None, "file not found")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line (1-based, newline stripped).

    A UTF-8 byte-order mark at the start of the file (what some Windows editors write) is dropped: left in,
    it would become part of the first query id or make the first judgment unreadable.
    Raises :class:`DataFormatError` naming the file and line of the first byte sequence that is not UTF-8.
    """
    with open_binary(path) as handle:
        for number, raw in _numbered(handle, path):
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM):]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                bad = raw[error.start : error.start + 4]
                raise DataFormatError(
                    path, number, f"not valid UTF-8 (byte {bad!r} at column {error.start + 1}); expected UTF-8 text"
                ) from None
            yield number, text.rstrip("\r\n")


def _numbered(handle, path) -> Iterator[tuple[int, bytes]]:
    """``enumerate(handle, start=1)``, a damaged gzip stream being a :class:`DataFormatError` at its line."""
    number = 0
    try:
        for number, raw in enumerate(handle, start=1):
            yield number, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:  # truncated, not gzip, or a corrupt stream
        raise DataFormatError(path, number + 1, f"not a readable gzip file ({type(error).__name__}: {error})") from None


def read_text(path: str | os.PathLike) -> str:
    """Whole file as text, with the same per-line UTF-8 check as :func:`iter_lines`."""
    return "\n".join(line for _, line in iter_lines(path))
