"""One builder at a time per cache entry: an exclusive lock held while one index (or any other cache entry) is
built.

Two processes that need the same missing index at the same moment would otherwise both build it and swap the
directory under each other (Lucene then reports ``CorruptIndexException: file mismatch``). The lock is
``fcntl.flock`` on a small lock file beside the entry, ``.<entry name>.lock`` in the entry's parent directory:
one lock per entry, so building one entry never waits for the build of another (a code index whose encoder
needs a Lucene index of its training set for hard negatives takes the two locks one after the other and never
waits on itself). The holder deletes the lock file before it releases the lock, and a waiter that then gets
the lock of a deleted file tries again on the path's new file, so no lock file stays behind and no two
builders ever hold one entry. The kernel releases the lock when its holder exits, even after ``kill -9`` (the
empty lock file then stays until the next build of that entry).

A thread that asks again for an entry it already holds gets a :class:`~pipeline.core.errors.PipelineError`
at once instead of waiting for itself forever (``flock`` locks of two descriptors of one file exclude each
other even inside one process); two threads of one process wait for each other like two processes.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from .errors import PipelineError

log = logging.getLogger(__name__)

#: the entries held in this process: (resolved lock-file path, thread id) (guarded by :data:`_HELD_GUARD`)
_HELD: set[tuple[str, int]] = set()
_HELD_GUARD = threading.Lock()

Built = TypeVar("Built")


def lock_path(entry: str | os.PathLike) -> Path:
    """The lock file of cache entry ``entry``: ``<parent>/.<name>.lock``."""
    entry = Path(entry)
    return entry.parent / f".{entry.name}.lock"


@contextlib.contextmanager
def exclusive(entry: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of cache entry ``entry`` for the ``with`` body (waiting for another process first).

    Args:
        entry: the directory (or file) the body builds; it need not exist yet.

    Raises:
        PipelineError: this thread already holds ``entry``'s lock (a build that would wait on itself).

    Example:
        >>> with exclusive(cache / "vaswani-bm25-abc123"):  # doctest: +SKIP
        ...     build_into(cache / "vaswani-bm25-abc123")
    """
    path = lock_path(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = (str(path.resolve()), threading.get_ident())
    with _HELD_GUARD:
        if key in _HELD:
            raise PipelineError(f"{Path(entry)}: this thread is already building it (a lock it would wait on "
                                "forever); this is a bug, please report it")
        _HELD.add(key)
    try:
        descriptor = _acquire(path, entry)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # while still locked: a waiter on this file sees it gone and retries
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)
    finally:
        with _HELD_GUARD:
            _HELD.discard(key)


def build_once(entry: str | os.PathLike, is_complete: Callable[[Path], bool], build: Callable[[], Built],
               force: bool = False) -> Path | Built:
    """``entry`` when it is complete, else what ``build()`` returns, called under ``entry``'s lock: a process
    that waited for another one's build finds the entry complete and builds nothing.

    Args:
        entry: the cache entry (a directory or file) ``build`` writes.
        is_complete: whether an entry at a path is finished (e.g. its metadata file is written).
        build: builds the entry, called with the lock held; returns the entry's path.
        force: build even when the entry is complete.

    Returns:
        ``entry`` (as a :class:`~pathlib.Path`) when it was complete, else ``build()``'s result.

    Example:
        >>> entry = cache / "vaswani-bm25-abc123"  # doctest: +SKIP
        >>> build_once(entry, is_complete, lambda: build_into(entry))  # doctest: +SKIP
    """
    entry = Path(entry)
    if is_complete(entry) and not force:
        return entry
    with exclusive(entry):  # one builder per entry; a second process waits, then finds it built
        if is_complete(entry) and not force:
            return entry
        return build()


def _acquire(path: Path, entry) -> int:
    """An open descriptor of ``path`` holding its exclusive lock, ``path`` still naming that very file."""
    waited = False
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not waited:
                    log.info("waiting for another process that is building %s", Path(entry))
                    waited = True
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                    return descriptor
            except FileNotFoundError:
                pass  # the previous holder deleted it while we waited: lock the new file instead
        except BaseException:
            os.close(descriptor)
            raise
        os.close(descriptor)
