"""Is a cached Lucene index whole? Checked after every build and before every search.

Every Lucene file ends with a CRC32 footer; :func:`verify_index` opens the latest commit, checks that it holds
the expected number of documents and recomputes every file's checksum (``CodecUtil.checksumEntireFile``),
which catches a missing segments file (a build that ran out of disk space: Anserini logs the ``IOException``
and returns), a truncated file or a single flipped bit. Lucene itself checks these footers only when it
merges, never while it searches, so without this a changed byte in a postings file gives other scores.

:func:`check_index` runs that full verification at every open, whatever the files' modification times say,
for indexes up to :func:`pipeline.core.filecheck.full_check_limit` (``PIPELINE_VERIFY_MAX_BYTES``, default
2 GiB; reading costs about a second per GB). A larger index is read whole once and then trusted while its
stamp (each file's size, modification and change time) matches; ``python -m pipeline.verify`` reads it on
demand. A damaged index is a :class:`~pipeline.core.errors.CorruptCacheError` that names it and says how to
rebuild.
"""
from __future__ import annotations

import json
from pathlib import Path

from pipeline.core import filecheck
from pipeline.core.errors import CorruptCacheError

from .jvm import anserini_class

#: written beside ``lucene/`` after a full verification: ``{file name: [size, mtime_ns, ctime_ns]}``
STAMP_FILE = "pipeline-verified.json"


def _damaged(path: Path, reason: str) -> CorruptCacheError:
    error = CorruptCacheError(f"the Lucene index {path} is damaged ({reason}); delete it to rebuild it on the "
                              f"next run: rm -rf '{path}'")
    error.reason = reason
    return error


def _files(lucene_dir: Path) -> dict[str, list[int]]:
    return {p.name: filecheck.stat_stamp(p) for p in sorted(lucene_dir.iterdir())
            if p.is_file() and p.name != "write.lock"}


def verify_index(path: Path, documents: int | None = None) -> None:
    """Open ``path/lucene``'s latest commit, compare its document count with ``documents`` (when given) and
    verify every file's checksum; then write the stamp.

    Args:
        path: the index directory (holding ``lucene/``).
        documents: the document count it must have, when known.

    Raises:
        CorruptCacheError: any fault, with how to rebuild the index.
    """
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
    files = _files(lucene_dir)
    filecheck.remember_verified(lucene_dir, files)
    filecheck.write_stamp(path / STAMP_FILE, files)


def check_index(path: Path, documents: int | None = None, full: bool | None = None) -> None:
    """Verify ``path`` (:func:`verify_index`) before it is searched.

    Args:
        path: the index directory (holding ``lucene/``).
        documents: the document count it must have, when known.
        full: verify whatever the size (``True``), trust a stamp matching the files (``False``), or decide by
            size (``None``: indexes up to :func:`~pipeline.core.filecheck.full_check_limit` are read whole).

    Example:
        >>> check_index(index_path(dataset, LuceneOptions()))  # doctest: +SKIP
    """
    lucene_dir = path / "lucene"
    if lucene_dir.is_dir():
        files = _files(lucene_dir)
        if full is not True and filecheck.verified_before(lucene_dir, files):
            return  # read whole by this process, untouched since (its change times say so)
        if full is None:
            full = sum(facts[0] for facts in files.values()) <= filecheck.full_check_limit()
        if not full:
            try:
                if json.loads((path / STAMP_FILE).read_text(encoding="utf-8")) == files:
                    return
            except (OSError, ValueError):
                pass  # no stamp or an unreadable one: verify
    verify_index(path, documents)


def stamp_is_fresh(path: Path) -> bool:
    """Whether ``path`` has a stamp matching its files (for tests and ``pipeline.index --check``).

    Args:
        path: the index directory.

    Returns:
        True when the stamp matches.
    """
    try:
        return json.loads((path / STAMP_FILE).read_text(encoding="utf-8")) == _files(path / "lucene")
    except (OSError, ValueError):
        return False


__all__ = ["STAMP_FILE", "check_index", "verify_index", "stamp_is_fresh"]
