"""Write files and directories so that an interrupted write never leaves a partial result behind.

Everything the pipeline produces (run files, indexes, checkpoints, evaluation reports) goes through
these helpers: content is written under a temporary name in the same directory and moved into place
with :func:`os.replace`, which is atomic on POSIX file systems.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator


def _temp_sibling(path: Path, suffix: str = "") -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    # mkstemp creates 0600; give the result the mode open() would (or the mode of the file it replaces)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    os.chmod(name, mode)
    return Path(name)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open ``path`` for writing through a temporary sibling that replaces it only on success.

    If the ``with`` body raises (or the process is killed), ``path`` keeps its previous content (or does
    not exist) and the temporary file is removed (or, after a kill, left as a hidden ``.name.*.tmp``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_sibling(path)
    binary = "b" in mode
    try:
        with open(temp, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``path`` when the ``with`` body succeeds.

    An existing ``path`` is replaced only after the new content is complete; on failure the temporary
    directory is deleted and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        os.chmod(temp, 0o777 & ~_umask())  # mkdtemp creates 0700; the result gets mkdir()'s mode
        yield temp
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(temp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`); returns the path."""
    with atomic_write(path) as handle:
        handle.write(text)
    return Path(path)
