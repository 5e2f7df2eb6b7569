"""Is a cache entry whole? Sizes and SHA-256 digests recorded when it is built, checked when it is opened.

A cache entry (a code index, say) is a directory written by one build: :func:`describe` records, for the
files that matter, their size and digest (kept in the entry's own metadata, written last). :func:`check`
compares them before the entry is used: a missing or truncated file is found from its size at once; a
changed byte needs the digest, which reads every file (about 0.75 s per GiB here, SHA-256 at 1.4 GB/s).

The content is read at every open, whatever the files' modification times say: a byte changed in place
with its mtime restored (a bad disk, a sync tool, ``touch -r``) is found the same way. Only entries larger
than :func:`full_check_limit` (``PIPELINE_VERIFY_MAX_BYTES``, default 2 GiB, about 1.5 s of reading) are
read once and then trusted while a stamp (each file's size and modification time) matches; ``python -m
pipeline.verify`` reads those whole on demand. Within one process an entry verified once is not read again.
A fault is a :class:`~pipeline.core.errors.CorruptCacheError` that names the entry and how to rebuild it:
a damaged cache gives an error, never different numbers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterable, Mapping

from .atomic import atomic_write
from .errors import ConfigError, CorruptCacheError

log = logging.getLogger(__name__)

BLOCK = 1 << 20
#: entries up to this size are read whole at every open (see the module docstring)
DEFAULT_FULL_CHECK_BYTES = 2 << 30
LIMIT_VARIABLE = "PIPELINE_VERIFY_MAX_BYTES"

#: what this process has verified: ``(entry, stamp)`` pairs, so one entry opened twice is read once
_VERIFIED: set[tuple[str, str]] = set()
_VERIFIED_GUARD = threading.Lock()


def full_check_limit() -> int:
    """The size (bytes) up to which a cache entry's content is read whole at every open:
    ``PIPELINE_VERIFY_MAX_BYTES`` (a whole number of bytes, 0 to trust stamps always), else 2 GiB.

    Raises:
        ConfigError: the variable is not a whole number >= 0.

    Example:
        >>> full_check_limit() >= 0
        True
    """
    raw = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_FULL_CHECK_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{LIMIT_VARIABLE}={raw!r}: expected a whole number of bytes >= 0 (default "
                          f"{DEFAULT_FULL_CHECK_BYTES}, 2 GiB)")
    return value


def remember_verified(entry: Path, stamp: object) -> None:
    """Note that ``entry`` was read whole and found intact while its files had ``stamp``."""
    with _VERIFIED_GUARD:
        _VERIFIED.add((str(Path(entry).resolve()), json.dumps(stamp, sort_keys=True)))


def verified_before(entry: Path, stamp: object) -> bool:
    """True when this process read ``entry`` whole while its files had ``stamp`` (:func:`remember_verified`)."""
    with _VERIFIED_GUARD:
        return (str(Path(entry).resolve()), json.dumps(stamp, sort_keys=True)) in _VERIFIED


def forget_verified() -> None:
    """Forget what this process verified (for tests that damage an entry they opened before)."""
    with _VERIFIED_GUARD:
        _VERIFIED.clear()


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


def stat_stamp(path: Path) -> list[int]:
    """``[size, mtime_ns, ctime_ns]`` of ``path``: the change time is in it because tools that restore a
    modification time (``touch -r``, ``cp -p``, ``rsync -t``) cannot restore it."""
    facts = Path(path).stat()
    return [facts.st_size, facts.st_mtime_ns, facts.st_ctime_ns]


def _stamp(directory: Path, names: Iterable[str]) -> dict[str, list[int]]:
    return {name: stat_stamp(directory / name) for name in names}


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


def check(directory: Path, recorded: Mapping[str, Mapping], stamp_file: str | None, what: str,
          full: bool | None = None) -> None:
    """Raise :class:`CorruptCacheError` unless every file of ``recorded`` (from :func:`describe`) is in
    ``directory`` with its size and digest.

    Args:
        directory: the cache entry.
        recorded: ``{name: {"bytes": size, "sha256": digest}}`` written by its build.
        stamp_file: the entry's stamp (sizes and modification times at the last full read), renewed here;
            ``None`` for none (an entry over the line is then checked by its sizes only).
        what: what the entry is, for the error ("code index").
        full: read every file whatever its size (``True``, the verify command), trust a matching stamp
            (``False``), or decide by size (``None``: entries up to :func:`full_check_limit` are read).

    Example:
        >>> check(entry, metadata["files"], "pipeline-verified.json", "code index")  # doctest: +SKIP
    """
    directory = Path(directory)
    if not isinstance(recorded, Mapping) or not all(
            isinstance(name, str) and isinstance(facts, Mapping) and isinstance(facts.get("bytes"), int)
            and isinstance(facts.get("sha256"), str) for name, facts in recorded.items()):
        raise damaged(directory, what, "its metadata's file list is not {name: {bytes, sha256}}")
    total = 0
    for name, facts in recorded.items():
        path = directory / name
        if not path.is_file():
            raise damaged(directory, what, f"{name} is missing")
        size = path.stat().st_size
        if size != facts["bytes"]:
            raise damaged(directory, what, f"{name} has {size} bytes, {facts['bytes']} were written")
        total += size
    names = sorted(recorded)
    current = _stamp(directory, names)
    if full is not True and verified_before(directory, current):
        return
    if full is None:
        full = total <= full_check_limit()
    if not full:
        if stamp_file is None:
            log.info("%s: %d bytes, over %s: sizes checked, contents not read (python -m pipeline.verify reads "
                     "them)", directory, total, LIMIT_VARIABLE)
            return
        try:
            if json.loads((directory / stamp_file).read_text(encoding="utf-8")) == current:
                log.info("%s: %d bytes, over %s: trusted from its last full check (python -m pipeline.verify "
                         "reads it whole)", directory, total, LIMIT_VARIABLE)
                return
        except (OSError, ValueError):
            pass  # no stamp or an unreadable one: read the files
    for name in names:
        if file_sha256(directory / name) != recorded[name]["sha256"]:
            raise damaged(directory, what, f"{name} does not match the SHA-256 written with it")
    remember_verified(directory, current)
    if stamp_file is not None:
        write_stamp(directory / stamp_file, current)


def write_stamp(path: Path, stamp: object) -> None:
    """Write ``stamp`` to ``path`` unless it holds it already; a read-only cache is left as it is."""
    try:
        if json.loads(Path(path).read_text(encoding="utf-8")) == stamp:
            return
    except (OSError, ValueError):
        pass
    try:
        with atomic_write(path) as handle:
            json.dump(stamp, handle)
    except OSError:
        pass  # a read-only cache: verified now, verified again on the next open


MANIFEST_FORMAT = 1


def write_manifest(directory: Path, manifest: str, names: Iterable[str] | None = None) -> dict[str, dict]:
    """Record every file under ``directory`` (sub-folders too, ``manifest`` itself excepted), or the files
    ``names`` only, with its size and SHA-256 in the JSON file ``directory/manifest``; returns the records.

    Example:
        >>> write_manifest(export_dir, "neural_rerank_checksums.json")  # doctest: +SKIP
        {'config.json': {'bytes': 612, 'sha256': '9f2c...'}, ...}
    """
    directory = Path(directory)
    if names is None:
        names = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")
                       if p.is_file() and not p.is_symlink() and p.relative_to(directory).as_posix() != manifest)
    files = describe(directory, names)
    with atomic_write(directory / manifest) as handle:
        json.dump({"format": MANIFEST_FORMAT, "files": files}, handle, indent=1, sort_keys=True)
        handle.write("\n")
    return files


def read_manifest(path: Path, what: str) -> dict[str, dict]:
    """The ``{name: {"bytes", "sha256"}}`` records of manifest file ``path`` (:func:`write_manifest`); an
    unreadable, garbled or foreign file, or a name leaving its directory, is a :class:`CorruptCacheError`."""
    path = Path(path)
    try:
        body = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise damaged(path.parent, what, f"{path.name} is unreadable: {str(error)[:200]}") from None
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
        raise damaged(path.parent, what, f"{path.name} is not a checksum manifest of format {MANIFEST_FORMAT}")
    for name, facts in files.items():
        if not isinstance(facts, dict) or not isinstance(facts.get("bytes"), int) \
                or not isinstance(facts.get("sha256"), str):
            raise damaged(path.parent, what, f"{path.name}: the record of {name[:200]!r} is not {{bytes, sha256}}")
        parts = Path(name).parts
        if not name or Path(name).is_absolute() or ".." in parts or "\x00" in name:
            raise damaged(path.parent, what, f"{path.name}: {name[:200]!r} is not a path inside the directory")
    return files


def check_manifest(directory: Path, manifest: str, what: str, full: bool | None = None) -> list[str] | None:
    """Check every file ``directory/manifest`` records (sizes, then contents as :func:`check` decides);
    returns the files present but not recorded, or ``None`` when there is no manifest.

    Raises:
        CorruptCacheError: a recorded file is missing, of another size or other content, or the manifest is
            unreadable.
    """
    directory = Path(directory)
    if not (directory / manifest).is_file():
        return None
    recorded = read_manifest(directory / manifest, what)
    check(directory, recorded, None, what, full)
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    return sorted(present - set(recorded) - {manifest})


def stamp_is_fresh(directory: Path, names: Iterable[str], stamp_file: str) -> bool:
    """True when ``stamp_file`` matches the files ``names`` of ``directory`` (for tests)."""
    try:
        stamp = json.loads((Path(directory) / stamp_file).read_text(encoding="utf-8"))
        return stamp == _stamp(Path(directory), sorted(names))
    except (OSError, ValueError):
        return False
