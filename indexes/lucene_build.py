"""Building Lucene indexes with Anserini's ``IndexCollection``, and their cache.

Indexes are cached under ``indexes/cache/lucene/<dataset>-<key>``, where the key hashes the dataset's
fingerprint (its files, or its ir_datasets id and version) and the analysis options: an index is rebuilt
only when the data or the options change. Building writes into a temporary directory that is renamed
into place when complete, so an interrupted build leaves nothing that looks like an index; the index is
verified (:mod:`indexes.lucene_check`) before it is cached. :mod:`indexes.lucene` searches them.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.core.atomic import atomic_directory, atomic_write, remove_stale_temps
from pipeline.core.datasets import Dataset
from pipeline.core.errors import CorruptCacheError, PipelineError
from pipeline.core import filecheck
from pipeline.core.home import index_root as home_index_root
from pipeline.core.locks import build_once
from pipeline.core.filenames import safe_name

from .base import check_choice
from .jvm import anserini_class, is_java_exception, java_reason
from .lucene_check import verify_index

# the Lucene module's logger: these messages were written under it before they moved here
log = logging.getLogger("indexes.lucene")


STEMMERS = ("porter", "krovetz", "none")
META_FILE = "pipeline-index.json"
#: the size and SHA-256 of META_FILE (Lucene's own files carry CRC32 footers), checked at every open
CHECKSUM_FILE = "pipeline-checksums.json"
#: a build that fails its check with less free space than this beside it ran out of disk (Anserini only logs it)
LOW_DISK_BYTES = 64 << 20


def index_root() -> Path:
    """Where indexes live: ``PIPELINE_INDEX_DIR``, else ``<home>/indexes/cache/lucene`` (:mod:`pipeline.core.home`)."""
    return home_index_root("lucene")


@dataclass(frozen=True)
class LuceneOptions:
    """Text analysis of an index (the query side must use the same): Anserini's English analyzer with a
    stemmer (``porter``, ``krovetz``, ``none``) and with or without its stopword list."""

    stemmer: str = "porter"
    keep_stopwords: bool = False

    def __post_init__(self):
        check_choice("stemmer", self.stemmer, STEMMERS)

    def key(self) -> str:
        return f"{self.stemmer}-{'keepstop' if self.keep_stopwords else 'stop'}"


def index_path(dataset: Dataset, options: LuceneOptions, root: Path | None = None) -> Path:
    """The cache directory of ``dataset``'s index with ``options``."""
    digest = hashlib.sha1(f"{dataset.fingerprint}:{options.key()}".encode()).hexdigest()[:12]
    return (root or index_root()) / f"{safe_name(dataset.name, fallback='')}-{options.key()}-{digest}"


def is_complete(path: Path) -> bool:
    """True when ``path`` holds a finished index (its metadata file is written last)."""
    return filecheck.is_complete(path, META_FILE)


def build_index(
    dataset: Dataset,
    options: LuceneOptions = LuceneOptions(),
    root: Path | None = None,
    threads: int = 2,
    force: bool = False,
) -> Path:
    """Build (or find in the cache) a positional Lucene index with stored document vectors and raw text.

    RM3 needs the document vectors. The index is verified before it is cached (:mod:`indexes.lucene_check`),
    and one process at a time builds it.

    Args:
        dataset: the collection to index.
        options: the text analysis (stemmer, stopwords); the query side must use the same.
        root: where indexes are cached (default: :func:`index_root`).
        threads: Anserini's indexing threads.
        force: rebuild even when a finished index is cached.

    Returns:
        The index directory.

    Example:
        >>> BM25Retriever(build_index(dataset)).search(dataset.queries.values(), k=100)  # doctest: +SKIP
    """
    path = index_path(dataset, options, root)
    remove_stale_temps(path)  # what a builder killed with SIGKILL left (its process is gone)
    return build_once(path, is_complete, lambda: _build(dataset, options, path, threads), force)


def _build(dataset: Dataset, options: LuceneOptions, path: Path, threads: int) -> Path:
    from pipeline.core.progress import tqdm

    started = time.perf_counter()
    with atomic_directory(path) as temp:
        collection = temp / "collection"
        collection.mkdir()
        count = searchable = 0
        with open(collection / "docs.jsonl", "w", encoding="utf-8") as handle:
            for doc in tqdm(dataset.docs_iter(), desc=f"exporting {dataset.name} docs", unit="doc"):
                handle.write(json.dumps({"id": doc.doc_id, "contents": doc.text}) + "\n")
                count += 1
                searchable += bool(doc.text.strip())  # Anserini skips empty documents (Cranfield has two)
        if count == 0:
            raise PipelineError(f"dataset {dataset.name!r} has no documents to index")
        args = [
            "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(collection), "-index", str(temp / "lucene"), "-threads", str(threads),
            "-storePositions", "-storeDocvectors", "-stemmer", options.stemmer, "-quiet",
        ]
        if options.keep_stopwords:
            args.append("-keepStopwords")
        log.info("indexing %d docs of %s into %s", count, dataset.name, path)
        with index_progress(temp / "lucene", f"indexing {dataset.name}"):
            try:
                anserini_class("io.anserini.index.IndexCollection").main(args)
            except Exception as error:  # noqa: BLE001 - jnius.JavaException
                if not is_java_exception(error):
                    raise
                raise PipelineError(f"Anserini failed while indexing {dataset.name!r} ({java_reason(error)}); "
                                    f"nothing was cached") from None
        (collection / "docs.jsonl").unlink()
        collection.rmdir()
        if not (temp / "lucene").is_dir():
            raise PipelineError(f"Anserini produced no index for {dataset.name!r} (see its log above)")
        try:  # Anserini logs some failures (a full disk) and returns: check what it wrote before caching it
            verify_index(temp, searchable)
        except CorruptCacheError as error:
            free = shutil.disk_usage(temp).free
            if free < LOW_DISK_BYTES:  # a fault of the machine (exit 1), not of the input
                raise OSError(errno.ENOSPC, f"no space left on the device ({free} bytes free) while Anserini wrote "
                                            f"the index of {dataset.name!r} ({error.reason}); nothing was cached",
                              str(path)) from None
            raise PipelineError(f"Anserini did not write a whole index of {dataset.name!r}: "
                                f"{error.reason}; nothing was cached "
                                f"(see Anserini's log above, e.g. for 'No space left on device')") from None
        with atomic_write(temp / META_FILE) as handle:
            json.dump({"dataset": dataset.name, "source": dataset.source, "fingerprint": dataset.fingerprint,
                       "documents": count, "indexed": searchable, "options": asdict(options),
                       "seconds": round(time.perf_counter() - started, 2)}, handle, indent=1)
        filecheck.write_manifest(temp, CHECKSUM_FILE, [META_FILE])
    return path


def index_metadata(path: Path) -> dict:
    """The metadata written beside an index (dataset, options, document count)."""
    metadata = filecheck.read_metadata(path, META_FILE, "Lucene index", required=("options",))
    if not isinstance(metadata["options"], dict):
        raise filecheck.damaged(Path(path), "Lucene index", f"{META_FILE}: 'options' is not an object")
    return metadata


@contextlib.contextmanager
def index_progress(folder: Path, description: str, interval: float = 0.5):
    """A progress bar of the bytes Lucene has written into ``folder`` while the ``with`` body runs (Anserini's
    indexing is one Java call that reports nothing to Python; the bytes written show that it moves)."""
    from pipeline.core.progress import tqdm

    stop = threading.Event()
    bar = tqdm(desc=description, unit="B", unit_scale=True, leave=False)

    def watch():
        while not stop.wait(interval):
            try:
                written = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            except OSError:  # files come and go while Lucene merges segments
                continue
            bar.n = written
            bar.refresh()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        bar.close()
