"""A document store on disk (:class:`DiskDocStore`): a collection's texts by id in one SQLite file, read
through the OS page cache instead of a Python dict per process.

Why: ``Dataset.doc_store()`` held every passage in a dict in each process (MS MARCO's 8.8M passages are
several GB per process, once per rank or server worker). The disk store costs a build once per collection
(one pass over ``docs_iter()``, written to a temp file and renamed), then each process opens it in
milliseconds and holds only the pages it reads; the pages are shared between processes by the page cache.
SQLite (standard library) gives the id lookup (a B-tree over the ids), the insertion order for iteration
and safe concurrent readers; the file is opened read-only and immutable.

Used by :meth:`pipeline.core.datasets.Dataset.doc_store` with ``on_disk=True`` or ``PIPELINE_DOC_STORE=disk``.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Iterable, Iterator

from .errors import CorruptCacheError, PipelineError
from .home import home
from .locks import exclusive
from .filenames import safe_name
from .records import Doc

#: the layout of a store file (``PRAGMA user_version``)
STORE_FORMAT = 1
#: ``PIPELINE_DOC_STORE``: ``memory`` (a dict per process, the default) or ``disk`` (:class:`DiskDocStore`)
DOC_STORE_MODES = ("memory", "disk")
#: documents inserted per transaction while building
BUILD_BATCH = 10_000
#: bytes of the file SQLite memory-maps per connection (reads then copy out of the page cache directly)
MMAP_BYTES = 1 << 40


def doc_store_root() -> Path:
    """Where disk stores live.

    Returns:
        ``<home>/cache/docstore`` (:mod:`pipeline.core.home`).
    """
    return home() / "cache" / "docstore"


def wants_disk(on_disk: bool | None = None) -> bool:
    """Whether documents are kept in a disk store rather than in memory.

    Args:
        on_disk: the caller's choice (``None``: what ``PIPELINE_DOC_STORE`` asks for, ``memory`` by default).

    Returns:
        True for a disk store.

    Raises:
        PipelineError: ``PIPELINE_DOC_STORE`` is neither ``memory`` nor ``disk``.
    """
    if on_disk is not None:
        return on_disk
    mode = os.environ.get("PIPELINE_DOC_STORE", "memory").strip().lower() or "memory"
    if mode not in DOC_STORE_MODES:
        raise PipelineError(f"PIPELINE_DOC_STORE={mode!r}: expected one of {', '.join(DOC_STORE_MODES)}")
    return mode == "disk"


def store_path(name: str, fingerprint: str, root: Path | None = None) -> Path:
    """The store file of the collection ``name`` whose files have ``fingerprint``.

    Args:
        name: the dataset's name.
        fingerprint: the identity of its files.
        root: the stores' folder (default: :func:`doc_store_root`).

    Returns:
        The path of the SQLite file.
    """
    digest = hashlib.sha1(f"{name}\0{fingerprint}".encode()).hexdigest()[:12]
    return (root or doc_store_root()) / f"{safe_name(name, fallback='dataset')}-{digest}.sqlite"


def build_doc_store(docs: Iterable[Doc], path: Path) -> Path:
    """Write ``docs`` to a store file at ``path`` (a temp file renamed when complete). A repeated id keeps
    its first position and its last text (as a dict built from the documents would).

    Args:
        docs: the documents.
        path: the store file.

    Returns:
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    connection = sqlite3.connect(temp)
    try:
        connection.execute("PRAGMA journal_mode=OFF")
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute("CREATE TABLE docs (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL)")
        insert = "INSERT INTO docs (id, text) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET text = excluded.text"
        batch = []
        for doc in docs:
            batch.append((doc.doc_id, doc.text))
            if len(batch) >= BUILD_BATCH:
                connection.executemany(insert, batch)
                batch.clear()
        connection.executemany(insert, batch)
        connection.execute(f"PRAGMA user_version={STORE_FORMAT}")
        connection.commit()
    except BaseException:
        connection.close()
        temp.unlink(missing_ok=True)
        raise
    connection.close()
    os.replace(temp, path)
    return path


class DiskDocStore(Mapping):
    """The documents of a store file by id (a read-only ``Mapping[str, Doc]``: ``store[id]``, ``id in
    store``, ``len``, iteration over the ids in the collection's order). Thread-safe; picklable (a copy
    reopens the file).

    Args:
        path: a file written by :func:`build_doc_store`.

    Raises:
        CorruptCacheError: the file is not a store of this format.

    Example:
        >>> store = DiskDocStore(build_doc_store([Doc("d1", "a text")], tmp / "docs.sqlite"))  # doctest: +SKIP
        >>> store["d1"].text  # doctest: +SKIP
        'a text'
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._connection = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro&immutable=1", uri=True,
                                               check_same_thread=False)
            self._connection.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            version = self._connection.execute("PRAGMA user_version").fetchone()[0]
            self._length = self._connection.execute("SELECT count(*) FROM docs").fetchone()[0]
        except sqlite3.DatabaseError as error:
            raise CorruptCacheError(f"{self.path}: not a document store ({error}); delete it to rebuild") from None
        if version != STORE_FORMAT:
            raise CorruptCacheError(f"{self.path}: document store format {version}, expected {STORE_FORMAT}; "
                                    "delete it to rebuild")

    def _query(self, sql: str, parameters=()) -> list:
        with self._lock:
            return self._connection.execute(sql, parameters).fetchall()

    def __getitem__(self, doc_id: str) -> Doc:
        rows = self._query("SELECT text FROM docs WHERE id = ?", (doc_id,)) if isinstance(doc_id, str) else []
        if not rows:
            raise KeyError(doc_id)
        return Doc(doc_id, rows[0][0])

    def __contains__(self, doc_id) -> bool:
        return isinstance(doc_id, str) and bool(self._query("SELECT 1 FROM docs WHERE id = ?", (doc_id,)))

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[str]:
        last = 0
        while True:  # in pages, so that no query holds the lock while the caller works
            rows = self._query("SELECT n, id FROM docs WHERE n > ? ORDER BY n LIMIT ?", (last, BUILD_BATCH))
            if not rows:
                return
            yield from (doc_id for _, doc_id in rows)
            last = rows[-1][0]

    def many(self, doc_ids: Iterable[str]) -> dict[str, Doc]:
        """The documents of ``doc_ids`` that the store holds, in one query per 500 ids (a ranking's
        candidates).

        Args:
            doc_ids: the ids wanted.

        Returns:
            ``doc_id -> Doc`` of those found.
        """
        ids = list(dict.fromkeys(doc_ids))
        found: dict[str, Doc] = {}
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            for doc_id, text in self._query(f"SELECT id, text FROM docs WHERE id IN ({marks})", part):
                found[doc_id] = Doc(doc_id, text)
        return found

    def close(self) -> None:
        """Close the file (the store cannot be read afterwards)."""
        with self._lock:
            self._connection.close()

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.__init__(state["path"])

    def __repr__(self) -> str:
        return f"DiskDocStore({str(self.path)!r}, {self._length} documents)"


def open_doc_store(name: str, fingerprint: str, docs: Iterable[Doc] | None = None, root: Path | None = None,
                   ) -> DiskDocStore:
    """The disk store of collection ``name`` (files ``fingerprint``): opened when built before, else built
    from ``docs`` first (one process builds, others wait on the entry's lock and then open it).

    Args:
        name: the dataset's name.
        fingerprint: the identity of the dataset's files (:func:`~pipeline.core.datasets.files_fingerprint`),
            part of the key.
        docs: the collection's documents, iterated only when the store is built (an iterable or a callable
            returning one).
        root: the folder of stores (default :func:`doc_store_root`).

    Returns:
        The open :class:`DiskDocStore`.

    Example:
        >>> store = open_doc_store(dataset.name, dataset.fingerprint, dataset.docs_iter)  # doctest: +SKIP
    """
    path = store_path(name, fingerprint, root)
    if not path.is_file():
        if docs is None:
            raise PipelineError(f"no document store for {name!r} at {path} and no documents to build it from")
        with exclusive(path):
            if not path.is_file():  # not built by the process we waited for
                build_doc_store(docs() if callable(docs) else docs, path)
    return DiskDocStore(path)
