"""Is a cache entry whole? Sizes and SHA-256 digests recorded when it is built, checked when it is opened.

A cache entry (a code index, say) is a directory written by one build: :func:`describe` records, for the
files that matter, their size and digest (kept in the entry's own metadata, written last). :func:`check`
compares them before the entry is used: a missing or truncated file is found from its size at once; a
changed byte needs the digest, which reads every file (about a second per GB), so a verified entry gets a
stamp (each file's size and modification time) and is read again only when a file differs from the stamp.
A fault is a :class:`~pipeline.core.errors.CorruptCacheError` that names the entry and how to rebuild it:
a damaged cache gives an error, never different numbers.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Mapping

from .atomic import atomic_write
from .errors import CorruptCacheError

BLOCK = 1 << 20


def file_sha256(path: Path) -> str:
    """The SHA-256 of ``path``'s bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(directory: Path, names: Iterable[str]) -> dict[str, dict]:
    """``{name: {"bytes": size, "sha256": digest}}`` for the files ``names`` of ``directory``."""
    directory = Path(directory)
    return {name: {"bytes": (directory / name).stat().st_size, "sha256": file_sha256(directory / name)}
            for name in names}


def _stamp(directory: Path, names: Iterable[str]) -> dict[str, list[int]]:
    return {name: [(directory / name).stat().st_size, (directory / name).stat().st_mtime_ns] for name in names}


def is_complete(entry: Path, metadata_file: str) -> bool:
    """True when the cache ``entry`` is finished: its metadata file, written last, exists."""
    return (Path(entry) / metadata_file).is_file()


def read_metadata(entry: Path, metadata_file: str, what: str, required: tuple[str, ...] = ()) -> dict:
    """The JSON object a build wrote into ``entry``'s ``metadata_file`` (with the keys ``required``); an
    unreadable or garbled file is a damaged entry (:class:`CorruptCacheError` with the command that clears it)."""
    try:
        metadata = json.loads((Path(entry) / metadata_file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise damaged(Path(entry), what, f"{metadata_file} is unreadable: {error}") from None
    if not isinstance(metadata, dict) or any(key not in metadata for key in required):
        keys = f" with {', '.join(repr(k) for k in required)}" if required else ""
        raise damaged(Path(entry), what, f"{metadata_file} is not a JSON object{keys}")
    return metadata


def damaged(entry: Path, what: str, reason: str) -> CorruptCacheError:
    """The error for a damaged cache ``entry`` (``what``: "code index", ...), with the command that clears it."""
    error = CorruptCacheError(f"the {what} {entry} is damaged ({reason}); delete it to rebuild it on the next "
                              f"run: rm -rf '{entry}'")
    error.reason = reason
    return error


def check(directory: Path, recorded: Mapping[str, Mapping], stamp_file: str, what: str) -> None:
    """Raise :class:`CorruptCacheError` unless every file of ``recorded`` (from :func:`describe`) is in
    ``directory`` with its size and digest. The digests are read again only when the stamp ``stamp_file``
    does not match the files' sizes and modification times; a successful check renews the stamp."""
    directory = Path(directory)
    for name, facts in recorded.items():
        path = directory / name
        if not path.is_file():
            raise damaged(directory, what, f"{name} is missing")
        size = path.stat().st_size
        if size != facts["bytes"]:
            raise damaged(directory, what, f"{name} has {size} bytes, {facts['bytes']} were written")
    names = sorted(recorded)
    stamp = directory / stamp_file
    try:
        if json.loads(stamp.read_text(encoding="utf-8")) == _stamp(directory, names):
            return
    except (OSError, ValueError):
        pass  # no stamp or an unreadable one: read the files
    for name in names:
        if file_sha256(directory / name) != recorded[name]["sha256"]:
            raise damaged(directory, what, f"{name} does not match the SHA-256 written with it")
    try:
        with atomic_write(stamp) as handle:
            json.dump(_stamp(directory, names), handle)
    except OSError:
        pass  # a read-only cache: verified now, verified again on the next open


def stamp_is_fresh(directory: Path, names: Iterable[str], stamp_file: str) -> bool:
    """True when ``stamp_file`` matches the files ``names`` of ``directory`` (for tests)."""
    try:
        stamp = json.loads((Path(directory) / stamp_file).read_text(encoding="utf-8"))
        return stamp == _stamp(Path(directory), sorted(names))
    except (OSError, ValueError):
        return False
