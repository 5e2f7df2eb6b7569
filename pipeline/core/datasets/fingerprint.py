"""The identity of a dataset's files, for the cache keys of trained models and indexes built from it."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Iterable

from ..errors import DataFormatError

#: Bumped when loaders change what they produce, so cached indexes built from old output are rebuilt.
LOADER_VERSION = 1


def files_fingerprint(paths: Iterable[Path]) -> str:
    """Identity of a dataset's files for cache keys (trained models, indexes): file names and contents.

    Content, not path or modification time: a data folder that is copied, moved or re-extracted (new
    mtimes, same bytes) keeps its cached models and indexes; any changed byte gives a new key. The loaders
    read every file whole anyway, so hashing adds one cheap pass. A missing file is a
    :class:`~pipeline.core.errors.DataFormatError` whose detail is ``file not found``."""
    digest = hashlib.sha1(f"loader-v{LOADER_VERSION}".encode())
    for path in paths:
        path = Path(path)
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise DataFormatError(path, None, "file not found") from None
        content = _content_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        digest.update(f"{path.name}:{stat.st_size}:{content}".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1024)
def _content_digest(resolved: str, size: int, mtime_ns: int) -> str:
    """SHA-1 of one file's bytes, memoised per process on (path, size, mtime)."""
    with open(resolved, "rb") as handle:
        return hashlib.file_digest(handle, "sha1").hexdigest()
