"""One builder at a time per cache directory: an exclusive lock held while an index (or any other cache entry)
is built.

Two processes that need the same missing index at the same moment would otherwise both build it and swap the
directory under each other (Lucene then reports ``CorruptIndexException: file mismatch``). The lock is
``fcntl.flock`` on the cache directory itself (the entry's parent), so no lock file is left behind: a second
builder waits, then finds the entry complete. Builds of different entries in one cache directory wait for each
other too, which costs little (a build is rare) and keeps the cache free of lock files. The kernel releases
the lock when its holder exits, even after ``kill -9``.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def exclusive(entry: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of ``entry``'s cache directory for the ``with`` body (waiting for another holder first)."""
    directory = Path(entry).parent
    directory.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process that is building in %s", directory)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)
