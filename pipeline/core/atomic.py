"""Write files and directories so that an interrupted write never leaves a partial result behind.

Everything the pipeline produces (run files, indexes, checkpoints, evaluation reports) goes through
these helpers: content is written under a temporary name in the same directory and moved into place
with :func:`os.replace`, which is atomic on POSIX file systems.

A temporary sibling is named ``.<name>.pid<PID>@<host>.<random>.tmp`` (``.old`` for an entry being replaced).
A process killed with SIGKILL cannot remove it, so every later write of the same target first removes the
siblings whose owner is gone (:func:`remove_stale_temps`): its process id no longer runs on this host.
Siblings written before owners were recorded (``.<name>.<random>.tmp``) are removed once a day old.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Iterable, Iterator

log = logging.getLogger(__name__)

#: a temporary sibling of the old naming (no owner) is removed when older than this (seconds)
LEGACY_STALE_AGE = 24 * 3600


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]


def _owner_prefix(path: Path) -> str:
    """``.<name>.pid<PID>@<host>.``: who writes this temporary sibling (read back by :func:`remove_stale_temps`).
    A name too long for that (file names stop at 255 bytes) keeps its first 180 characters and no owner: such
    a sibling is never taken for another entry's, and is left after a kill."""
    prefix = f".{path.name}.pid{os.getpid()}@{_host_tag()}."
    return prefix if len(os.fsencode(prefix)) <= 240 else f".{path.name[:180]}~."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary siblings of ``path`` (``.<name>.*.tmp`` / ``.old`` files or directories) left by
    writers that are gone: the process id in the name no longer runs on this host (or, for names without
    an owner, written by older versions, the sibling is over a day old). Returns what was removed.

    Args:
        path: the target a write is about to produce (it need not exist).

    Returns:
        The siblings removed.

    Example:
        >>> remove_stale_temps(cache / "cranfield-porter-stop-1a2b3c")  # doctest: +SKIP
        [PosixPath('.../.cranfield-porter-stop-1a2b3c.pid4242@host.k3j2l1m0.tmp')]
    """
    path = Path(path)
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(?:pid(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]*)\.)?"
                         rf"[A-Za-z0-9_]{{8}}\.(?:tmp|old)$")
    removed = []
    try:
        siblings = list(os.scandir(path.parent))
    except OSError:
        return removed
    host, now = _host_tag(), time.time()
    for sibling in siblings:
        match = pattern.match(sibling.name)
        if match is None:
            continue
        try:
            if match["pid"] is None:
                stale = now - sibling.stat(follow_symlinks=False).st_mtime > LEGACY_STALE_AGE
            else:
                stale = match["host"] == host and not _alive(int(match["pid"]))
            if not stale:
                continue
            if sibling.is_dir(follow_symlinks=False):
                shutil.rmtree(sibling.path)
            else:
                os.unlink(sibling.path)
        except FileNotFoundError:
            continue  # another process removed it first
        except OSError as error:
            log.warning("could not remove the stale temporary %s: %s", sibling.path, error)
            continue
        log.info("removed %s, left by a writer that is gone", sibling.path)
        removed.append(Path(sibling.path))
    return removed


def _temp_sibling(path: Path, suffix: str = "") -> Path:
    fd, name = tempfile.mkstemp(prefix=_owner_prefix(path), suffix=f".tmp{suffix}", dir=path.parent)
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

    Args:
        path: the file to write (its folder is created).
        mode: ``open``'s mode (``w``, ``wb``, ...).
        encoding: the text encoding (ignored in binary mode).

    Yields:
        The open temporary file.

    Example:
        >>> with atomic_write("report.md") as handle:
        ...     _ = handle.write("# Report\\n")
        >>> Path("report.md").read_text()
        '# Report\\n'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
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

    Args:
        path: the directory to produce (its parent is created).

    Yields:
        The temporary directory to fill.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    temp = Path(tempfile.mkdtemp(prefix=_owner_prefix(path), suffix=".tmp", dir=path.parent))
    try:
        os.chmod(temp, 0o777 & ~_umask())  # mkdtemp creates 0700; the result gets mkdir()'s mode
        yield temp
        readable_modes(temp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=_owner_prefix(path), suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(temp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def readable_modes(directory: str | os.PathLike) -> None:
    """Give every file and folder under ``directory`` at least the permissions ``open()`` and ``mkdir()``
    would (``0o666`` / ``0o777`` less the umask): libraries that write through their own temporary files
    leave some at ``0o600`` (transformers' ``model.safetensors``), unreadable to the other users of a shared
    cache or export while the files beside them are.

    Args:
        directory: the folder to walk (symbolic links are left alone).
    """
    mask = _umask()
    for root, folders, files in os.walk(directory):
        for name, wanted in [*((f, 0o777) for f in folders), *((f, 0o666) for f in files)]:
            target = os.path.join(root, name)
            if os.path.islink(target):
                continue
            mode = stat.S_IMODE(os.stat(target).st_mode)
            if mode | (wanted & ~mask) != mode:
                os.chmod(target, mode | (wanted & ~mask))


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`).

    Args:
        path: the file to write.
        text: its content.

    Returns:
        The path written.
    """
    with atomic_write(path) as handle:
        handle.write(text)
    return Path(path)


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> Path:
    """Write ``lines`` to ``path`` atomically, each followed by a newline: a record file (qrels, topics).

    ``lines`` may be a generator: one that raises leaves ``path`` as it was (see :func:`atomic_write`).

    Args:
        path: the file to write (replaced if it exists).
        lines: its lines, without their newlines.

    Returns:
        The path written.

    Example:
        >>> write_lines("topics.tsv", ["1\\tcheap flights", "2\\trome hotels"]).read_text()
        '1\\tcheap flights\\n2\\trome hotels\\n'
    """
    with atomic_write(path) as handle:
        for line in lines:
            handle.write(f"{line}\n")
    return Path(path)
