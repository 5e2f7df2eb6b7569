"""The document store on disk (pipeline.core.docstore) against the in-memory dict, from an empty home."""
from __future__ import annotations

import pickle
import threading

import pytest

from pipeline.core.datasets import Dataset
from pipeline.core.docstore import DiskDocStore, build_doc_store, open_doc_store, store_path
from pipeline.core.errors import CorruptCacheError, PipelineError
from pipeline.core.records import Doc

DOCS = [Doc("d2", "second document"), Doc("d1", "first: ünïcode ✓ and\ttabs\nnew lines"), Doc("d3", ""),
        Doc("d2", "second document, corrected"), Doc("10", "a numeric id")]


def collection(calls: list, name: str = "tiny", fingerprint: str = "f1") -> Dataset:
    def docs():
        calls.append(1)
        return iter(DOCS)

    return Dataset(name=name, queries={}, qrels=[], docs_factory=docs, fingerprint=fingerprint)


@pytest.fixture()
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_DOC_STORE", raising=False)
    return tmp_path / "home"


def test_disk_store_reads_as_the_dict(empty_home):
    calls = []
    memory = collection(calls).doc_store()
    disk = collection(calls).doc_store(on_disk=True)
    assert isinstance(memory, dict) and isinstance(disk, DiskDocStore)
    assert disk.path.is_relative_to(empty_home) and disk.path.is_file()
    assert list(disk) == list(memory) == ["d2", "d1", "d3", "10"]        # first position, last text of a repeat
    assert len(disk) == len(memory) == 4
    assert dict(disk.items()) == memory and sorted(disk.values()) == sorted(memory.values())
    assert disk["d2"] == Doc("d2", "second document, corrected") and disk["d3"].text == ""
    assert "d1" in disk and "nope" not in disk and 10 not in disk and disk.get("nope") is None
    with pytest.raises(KeyError):
        disk["nope"]
    assert disk.many(["d3", "nope", "d1", "d3"]) == {"d3": memory["d3"], "d1": memory["d1"]}
    # opened again (another process, a new Dataset object): the documents are not read again
    before = len(calls)
    again = collection(calls).doc_store(on_disk=True)
    assert len(calls) == before and dict(again.items()) == memory
    # another fingerprint (changed files) is another store
    other = collection(calls, fingerprint="f2").doc_store(on_disk=True)
    assert other.path != disk.path and len(calls) == before + 1


def test_environment_switch_and_bad_value(empty_home, monkeypatch):
    dataset = collection([])
    assert isinstance(dataset.doc_store(), dict)
    monkeypatch.setenv("PIPELINE_DOC_STORE", "disk")
    assert isinstance(dataset.doc_store(), DiskDocStore)                   # switches on the same object
    assert isinstance(dataset.doc_store(on_disk=False), dict)
    monkeypatch.setenv("PIPELINE_DOC_STORE", "ram")
    with pytest.raises(PipelineError, match="PIPELINE_DOC_STORE='ram': expected one of memory, disk"):
        collection([]).doc_store()


def test_pickled_copy_threads_and_close(empty_home):
    store = collection([]).doc_store(on_disk=True)
    copy = pickle.loads(pickle.dumps(store))
    assert copy.path == store.path and dict(copy.items()) == dict(store.items())
    results = []
    workers = [threading.Thread(target=lambda: results.append([store[i].text for i in ("d1", "d2", "10")] * 50))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(results) == 4 and all(r == results[0] for r in results)
    copy.close()
    assert store["d1"].text.startswith("first")                           # the other connection is untouched


def test_damaged_or_foreign_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(CorruptCacheError, match="not a document store"):
        DiskDocStore(path)
    import sqlite3

    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE docs (n INTEGER PRIMARY KEY, id TEXT, text TEXT)").connection.commit()
    with pytest.raises(CorruptCacheError, match="format 0, expected 1"):
        DiskDocStore(foreign)
    with pytest.raises(PipelineError, match="no documents to build it from"):
        open_doc_store("x", "y", None, root=tmp_path)


def test_a_failed_build_leaves_no_store(tmp_path):
    def broken():
        yield Doc("a", "text")
        raise RuntimeError("disk full")

    path = store_path("c", "f", tmp_path)
    with pytest.raises(RuntimeError):
        build_doc_store(broken(), path)
    assert not path.exists() and not list(tmp_path.iterdir())
