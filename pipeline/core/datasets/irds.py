"""ir_datasets ids (``cranfield``, ``nfcorpus/test``, ``msmarco-passage/trec-dl-2019/judged`` ...): the archives
ir_datasets would download are first looked for in an offline mirror (a directory searched recursively by
file name) and copied into its cache after an md5 check; then the id is read into a
:class:`~pipeline.core.datasets.dataset.Dataset`."""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Iterator

from ..errors import DataFormatError, DatasetNotFoundError
from ..records import Doc, Qrel, Query
from .dataset import Dataset

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _mirror_files(mirror: Path) -> dict[str, list[Path]]:
    """Every file under the mirror by file name (walked once per process and mirror)."""
    found: dict[str, list[Path]] = {}
    for directory, _, names in os.walk(mirror):
        for file_name in names:
            found.setdefault(file_name, []).append(Path(directory) / file_name)
    return found


def _md5(path: Path) -> str:
    """MD5 of a file's bytes, read in 1 MiB blocks (archives may be large)."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_entries(tree) -> Iterator[dict]:
    """The download entries (those with a ``url`` or ``cache_path``) nested anywhere in ``downloads.json``."""
    if isinstance(tree, dict):
        if "url" in tree or "cache_path" in tree:
            yield tree
        else:
            for value in tree.values():
                yield from _download_entries(value)


def seed_ir_datasets_cache(dataset_id: str, mirror: Path | None) -> list[Path]:
    """Copy into ir_datasets' cache every archive of ``dataset_id``'s top-level collection that the mirror has.

    A mirror file matches an ir_datasets download by file name (its ``cache_path`` or URL basename) and
    must have the expected md5; a file with another md5 is skipped with a warning.

    Args:
        dataset_id: an ir_datasets id.
        mirror: the mirror directory (``None``: nothing to copy).

    Returns:
        The files placed in the cache.
    """
    if mirror is None or not mirror.is_dir():
        return []
    import ir_datasets

    top = dataset_id.split("/")[0]
    downloads_json = Path(ir_datasets.__file__).parent / "etc" / "downloads.json"
    catalogue = json.loads(downloads_json.read_text(encoding="utf-8"))
    available = _mirror_files(mirror.resolve())
    placed = []
    for entry in _download_entries(catalogue.get(top, {})):
        cache_path = entry.get("cache_path")
        if not cache_path:
            continue
        target = ir_datasets.util.home_path() / top / cache_path
        if target.exists():
            continue
        candidates = {Path(cache_path).name, Path(entry.get("url", "")).name} - {""}
        for file_name in candidates:
            for candidate in available.get(file_name, []):
                if entry.get("expected_md5") and _md5(candidate) != entry["expected_md5"]:
                    log.debug("mirror file %s does not have the md5 ir_datasets expects for %s; skipped", candidate, top)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                # a temp name of this process's own: two processes seeding one cache at once (two runs started
                # side by side from an empty home) must not rename each other's copy away
                temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.mirror-tmp")
                try:
                    shutil.copyfile(candidate, temp)
                    os.replace(temp, target)
                finally:
                    temp.unlink(missing_ok=True)
                placed.append(target)
                break
            if target.exists():
                break
    return placed


def load_ir_dataset(dataset_id: str, mirror: Path | None = None) -> Dataset:
    """Load an ir_datasets id (after seeding its cache from the mirror).

    Queries and qrels are read now (so a failed download surfaces here); documents are iterated lazily.

    Args:
        dataset_id: an ir_datasets id (``vaswani``, ``msmarco-passage/trec-dl-2019/judged`` ...).
        mirror: the offline mirror of its archives (``None``: none).

    Returns:
        The dataset.

    Raises:
        DatasetNotFoundError: an id ir_datasets does not know.
    """
    import ir_datasets

    seed_ir_datasets_cache(dataset_id, mirror)
    try:
        handle = ir_datasets.load(dataset_id)
    except KeyError:
        raise DatasetNotFoundError(f"unknown dataset {dataset_id!r}") from None
    queries: dict[str, Query] = {}
    if handle.has_queries():
        for query in handle.queries_iter():
            text = " ".join(query.default_text().split())
            if not text:
                raise DataFormatError(f"ir_datasets:{dataset_id}", None, f"query {query.query_id!r} has empty text")
            queries[query.query_id] = Query(query.query_id, text)
    qrels = [Qrel(q.query_id, q.doc_id, int(q.relevance), str(getattr(q, "iteration", "0")))
             for q in handle.qrels_iter()] if handle.has_qrels() else []

    def docs_factory() -> Iterator[Doc]:
        for doc in handle.docs_iter():
            yield Doc(doc.doc_id, " ".join(doc.default_text().split()))

    return Dataset(
        name=dataset_id, queries=queries, qrels=qrels, docs_factory=docs_factory,
        fingerprint=hashlib.sha1(f"irds:{dataset_id}:{ir_datasets.__version__}".encode()).hexdigest(),
        source=f"ir_datasets:{dataset_id}",
    )


_FAILED_HOST = re.compile(r"host='([^']+)'")
_FAILED_PATH = re.compile(r"url: (\S+?)(?: \(|$)")


def failed_archive(error: BaseException) -> str | None:
    """The URL of the archive a failed ir_datasets download was fetching.

    Args:
        error: the exception out of ir_datasets.

    Returns:
        The URL read from the error's text (requests names the host and the path), or ``None`` when the
        error does not say.
    """
    for candidate in (error, error.__cause__, error.__context__):
        if candidate is None:
            continue
        text = str(candidate)
        url = re.search(r"https?://\S+?(?=['\s)]|$)", text)
        if url:
            return url.group(0)
        host, path = _FAILED_HOST.search(text), _FAILED_PATH.search(text)
        if host and path:
            return f"https://{host.group(1)}{path.group(1)}"
    return None


def ir_dataset_ids() -> list[str]:
    """Every id ir_datasets registers (for did-you-mean hints; imports ir_datasets).

    Returns:
        The ids.
    """
    import ir_datasets

    return list(ir_datasets.registry._registered)


def is_download_failure(error: BaseException) -> bool:
    """Whether an exception out of ir_datasets is a failed download (it raises plain RuntimeErrors for them).

    Args:
        error: the exception.

    Returns:
        True for a failed download.
    """
    text = repr(error)
    return "download" in text.lower() or "ConnectionError" in text or "NameResolution" in text


def ir_datasets_home() -> Path:
    """ir_datasets' cache folder, named in error messages.

    Returns:
        ``IR_DATASETS_HOME``, else ``~/.ir_datasets``.
    """
    return Path(os.environ.get("IR_DATASETS_HOME", Path.home() / ".ir_datasets"))
