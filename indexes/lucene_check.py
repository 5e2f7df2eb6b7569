"""Is a cached Lucene index whole? Checked after every build and before every search.

Every Lucene file ends with a CRC32 footer; :func:`verify_index` opens the latest commit, checks that it holds
the expected number of documents and recomputes every file's checksum (``CodecUtil.checksumEntireFile``),
which catches a missing segments file (a build that ran out of disk space: Anserini logs the ``IOException``
and returns), a truncated file or a single flipped bit. Reading the whole index costs about a second per GB,
so a verified index gets a stamp (each file's size and modification time); :func:`check_index` verifies again
only when a file differs from the stamp. A damaged index is a :class:`~pipeline.core.errors.CorruptCacheError`
that names it and says how to rebuild.
"""
from __future__ import annotations

import json
from pathlib import Path

from pipeline.core.atomic import atomic_write
from pipeline.core.errors import CorruptCacheError

from .jvm import anserini_class

#: written beside ``lucene/`` after a full verification: ``{file name: [size, mtime_ns]}``
STAMP_FILE = "pipeline-verified.json"


def _damaged(path: Path, reason: str) -> CorruptCacheError:
    error = CorruptCacheError(f"the Lucene index {path} is damaged ({reason}); delete it to rebuild it on the "
                              f"next run: rm -rf '{path}'")
    error.reason = reason
    return error


def _files(lucene_dir: Path) -> dict[str, list[int]]:
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(lucene_dir.iterdir())
            if p.is_file() and p.name != "write.lock"}


def verify_index(path: Path, documents: int | None = None) -> None:
    """Open ``path/lucene``'s latest commit, compare its document count with ``documents`` (when given) and
    verify every file's checksum; then write the stamp. Raises :class:`CorruptCacheError` on any fault."""
    lucene_dir = path / "lucene"
    if not lucene_dir.is_dir():
        raise _damaged(path, "no lucene/ directory")
    if not any(p.name.startswith("segments_") for p in lucene_dir.iterdir()):
        raise _damaged(path, "no segments file: the build did not finish, e.g. the disk was full")
    java_file = anserini_class("java.io.File")
    fs_directory = anserini_class("org.apache.lucene.store.FSDirectory")
    segment_infos = anserini_class("org.apache.lucene.index.SegmentInfos")
    directory_reader = anserini_class("org.apache.lucene.index.DirectoryReader")
    codec_util = anserini_class("org.apache.lucene.codecs.CodecUtil")
    io_context = anserini_class("org.apache.lucene.store.IOContext")
    directory = fs_directory.open(java_file(str(lucene_dir)).toPath())
    try:
        try:
            commit = segment_infos.readLatestCommit(directory)
            for name in commit.files(True).toArray():
                stream = directory.openInput(name, io_context.READONCE)
                try:
                    codec_util.checksumEntireFile(stream)
                finally:
                    stream.close()
            reader = directory_reader.open(directory)
            try:
                count = reader.numDocs()
            finally:
                reader.close()
        except Exception as error:  # jnius raises JavaException for Lucene's CorruptIndexException, IOException
            message = (str(error).strip().splitlines() or [type(error).__name__])[0]
            message = message.replace("JVM exception occurred: ", "")
            raise _damaged(path, message) from None
    finally:
        directory.close()
    if documents is not None and count != documents:
        raise _damaged(path, f"{count} documents, {documents} expected")
    try:
        with atomic_write(path / STAMP_FILE) as handle:
            json.dump(_files(lucene_dir), handle)
    except OSError:
        pass  # a read-only cache: verified now, verified again on the next open


def check_index(path: Path, documents: int | None = None) -> None:
    """Verify ``path`` unless its files are exactly as they were at the last verification."""
    stamp = path / STAMP_FILE
    lucene_dir = path / "lucene"
    try:
        if lucene_dir.is_dir() and json.loads(stamp.read_text(encoding="utf-8")) == _files(lucene_dir):
            return
    except (OSError, ValueError):
        pass  # no stamp or an unreadable one: verify
    verify_index(path, documents)


def stamp_is_fresh(path: Path) -> bool:
    """True when ``path`` has a stamp matching its files (for tests and ``pipeline.index --check``)."""
    try:
        return json.loads((path / STAMP_FILE).read_text(encoding="utf-8")) == _files(path / "lucene")
    except (OSError, ValueError):
        return False


__all__ = ["STAMP_FILE", "check_index", "verify_index", "stamp_is_fresh"]
