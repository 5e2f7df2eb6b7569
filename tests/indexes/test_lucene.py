"""Lucene indexes and BM25 / RM3 retrieval (indexes.lucene, indexes.jvm) on tiny synthetic collections:
ranking, the index cache, analysis options, and that a failed build leaves nothing behind."""
from __future__ import annotations

import json
import os

import pytest

from conftest import run_python
from indexes import BM25Settings, RunRetriever, make_first_stage, resolve_first_stage
from indexes import lucene, lucene_build
from indexes.lucene import RM3, BM25Retriever, LuceneOptions, build_index, index_path, is_complete
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.records import Doc, Query, ScoredDoc
from tests.helpers import LUCENE_DOCS as DOCS, tiny_lucene_dataset as tiny_dataset  # noqa: F401


@pytest.fixture(scope="module")
def index_root(tmp_path_factory):
    return tmp_path_factory.mktemp("lucene")


@pytest.fixture(scope="module")
def porter_index(index_root):
    return build_index(tiny_dataset(), LuceneOptions("porter"), root=index_root)


@pytest.fixture(scope="module")
def unstemmed_index(index_root):
    return build_index(tiny_dataset(), LuceneOptions("none"), root=index_root)


def ranking(run, query_id):
    return [hit.doc_id for hit in run[query_id]]


def test_bm25_ranks_the_obvious_document_first(porter_index):
    retriever = BM25Retriever(porter_index)
    assert retriever.name == "bm25"
    run = retriever.search([Query("1", "quantum particles"), Query("2", "cat mat"), Query("3", "stock market")], k=10)
    assert ranking(run, "1") == ["quantum"]
    assert ranking(run, "2")[:2] == ["cat", "pets"]
    assert ranking(run, "3") == ["market"]
    scores = [hit.score for hit in run["2"]]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert all(isinstance(hit, ScoredDoc) and hit.query_id == "2" for hit in run["2"])
    assert ranking(retriever.search([Query("2", "cat mat")], k=1), "2") == ["cat"]
    assert retriever.search([Query("9", "zebra")], k=10) == {"9": []}


def test_index_metadata(porter_index, index_root):
    meta = lucene.index_metadata(porter_index)
    assert meta["documents"] == len(DOCS) and meta["dataset"] == "tiny"
    assert meta["options"] == {"stemmer": "porter", "keep_stopwords": False}
    assert porter_index.parent == index_root and is_complete(porter_index)
    # the exported JSONL is gone; the stamp says the files were verified (indexes.lucene_check); the metadata's
    # checksum is beside it
    assert sorted(os.listdir(porter_index)) == sorted(["lucene", lucene.META_FILE, lucene.CHECKSUM_FILE,
                                                       "pipeline-verified.json"])


def test_second_build_uses_the_cache(porter_index, index_root, monkeypatch):
    before = os.stat(porter_index / lucene.META_FILE).st_mtime_ns

    def no_java(name):
        raise AssertionError(f"rebuilt: {name}")

    def no_docs():
        raise AssertionError("documents iterated again")

    monkeypatch.setattr(lucene_build, "anserini_class", no_java)
    again = Dataset("tiny", {}, [], no_docs, "tiny-v1")
    assert build_index(again, LuceneOptions("porter"), root=index_root) == porter_index
    assert os.stat(porter_index / lucene.META_FILE).st_mtime_ns == before


def test_cache_key_follows_options_and_data(index_root):
    dataset = tiny_dataset()
    paths = {
        index_path(dataset, LuceneOptions("porter"), index_root),
        index_path(dataset, LuceneOptions("none"), index_root),
        index_path(dataset, LuceneOptions("krovetz"), index_root),
        index_path(dataset, LuceneOptions("porter", keep_stopwords=True), index_root),
        index_path(tiny_dataset(fingerprint="tiny-v2"), LuceneOptions("porter"), index_root),
    }
    assert len(paths) == 5
    assert index_path(dataset, LuceneOptions(), index_root) == index_path(tiny_dataset(), LuceneOptions(), index_root)
    assert index_path(tiny_dataset(name="a b/c"), LuceneOptions(), index_root).name.startswith("a_b_c-porter-stop-")


def test_index_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_INDEX_DIR", str(tmp_path))
    assert lucene.index_root() == tmp_path
    assert index_path(tiny_dataset(), LuceneOptions()).parent == tmp_path


def test_unknown_stemmer():
    with pytest.raises(PipelineError, match="stemmer"):
        LuceneOptions("snowball")


def test_stemming_none_versus_porter(porter_index, unstemmed_index):
    queries = [Query("run", "run"), Query("running", "running"), Query("dog", "dog")]
    stemmed = BM25Retriever(porter_index).search(queries, k=10)
    plain = BM25Retriever(unstemmed_index).search(queries, k=10)
    assert ranking(stemmed, "run") == ["dog"] and ranking(stemmed, "dog") == ["dog"]  # run~running, dog~dogs
    assert ranking(plain, "run") == [] and ranking(plain, "dog") == []
    assert ranking(plain, "running") == ["dog"]
    assert unstemmed_index != porter_index


def test_rm3_expands_the_query(porter_index):
    query = [Query("m", "mat")]
    plain = BM25Retriever(porter_index).search(query, k=10)
    assert ranking(plain, "m") == ["cat"]
    rm3 = BM25Retriever(porter_index, rm3=RM3(fb_terms=10, fb_docs=1, original_query_weight=0.5))
    assert rm3.name == "bm25+rm3"
    expanded = rm3.search(query, k=10)
    # feedback from the "cat" document adds its terms, which reach the other cat document
    assert ranking(expanded, "m")[0] == "cat" and "pets" in ranking(expanded, "m")


def test_make_first_stage_bm25_and_run(porter_index, index_root, tmp_path):
    dataset = tiny_dataset()
    retriever = make_first_stage("bm25", dataset, BM25Settings(index_root=index_root))
    assert isinstance(retriever, BM25Retriever) and retriever.path == porter_index
    assert ranking(retriever.search(dataset.queries.values(), 5), "1") == ["quantum"]
    assert resolve_first_stage("auto", dataset) == "bm25"
    run_file = tmp_path / "given.run"
    run_file.write_text("2 Q0 pets 1 5 x\n2 Q0 cat 2 4 x\n")
    given = make_first_stage(f"run:{run_file}", dataset)
    assert isinstance(given, RunRetriever) and ranking(given.search([dataset.queries["2"]], 1), "2") == ["pets"]
    run_file.write_text("2 Q0 unknown-doc 1 5 x\n")
    with pytest.raises(PipelineError):  # run ids are checked against the collection
        make_first_stage(f"run:{run_file}", dataset)
    with pytest.raises(PipelineError, match="ships no first-stage run"):
        make_first_stage("shipped", dataset)
    with pytest.raises(PipelineError, match="unknown first stage"):
        make_first_stage("tfidf", dataset)


def test_retriever_refuses_an_unfinished_index(tmp_path):
    (tmp_path / "half" / "lucene").mkdir(parents=True)
    assert not is_complete(tmp_path / "half")
    with pytest.raises(PipelineError, match="not a finished index"):
        BM25Retriever(tmp_path / "half")


# ------------------------------------------------------------------------------------- atomicity


def failing_dataset(exception: BaseException) -> Dataset:
    def docs():
        yield from DOCS[:3]
        raise exception

    return Dataset("broken", {}, [], docs, "broken-v1")


@pytest.mark.parametrize("exception", [RuntimeError("disk gone"), KeyboardInterrupt()])
def test_interrupted_build_leaves_no_index_and_no_temp_dir(tmp_path, exception):
    dataset = failing_dataset(exception)
    root = tmp_path / "indexes"
    with pytest.raises(type(exception)):
        build_index(dataset, root=root)
    assert list(root.iterdir()) == []
    assert not is_complete(index_path(dataset, LuceneOptions(), root))


def test_interrupted_build_under_pipeline_index_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_INDEX_DIR", str(tmp_path))
    dataset = failing_dataset(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        build_index(dataset)
    assert list(tmp_path.iterdir()) == []
    assert not index_path(dataset, LuceneOptions()).exists()


def test_failed_rebuild_keeps_the_previous_index(porter_index, index_root):
    before = sorted(os.listdir(porter_index))
    broken = Dataset("tiny", {}, [], failing_dataset(RuntimeError("x")).docs_factory, "tiny-v1")
    with pytest.raises(RuntimeError):
        build_index(broken, LuceneOptions("porter"), root=index_root, force=True)
    assert is_complete(porter_index) and sorted(os.listdir(porter_index)) == before
    assert not [p for p in os.listdir(index_root) if p.startswith(".")]


def test_empty_collection_is_an_error(tmp_path):
    with pytest.raises(PipelineError, match="no documents"):
        build_index(tiny_dataset(docs=[]), root=tmp_path)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- JVM

JVM_SCRIPT = """
import json
import jnius_config
jnius_config.add_options("--add-modules=jdk.incubator.vector")  # as pyserini's setup would
from indexes.jvm import start_jvm
start_jvm()
import pyserini.search.lucene  # noqa: F401  (pyserini's own classpath setup runs here)
from pyserini.search.lucene import LuceneSearcher
print(json.dumps({"options": list(jnius_config.get_options()), "searcher": LuceneSearcher.__name__}))
"""


def test_jvm_never_gets_the_incubator_module_and_pyserini_imports():
    result = run_python(["-c", JVM_SCRIPT], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["searcher"] == "LuceneSearcher"
    assert not any("jdk.incubator.vector" in option for option in report["options"])
    assert any(option.startswith("-Xmx") for option in report["options"])


def test_in_process_jvm_options(porter_index):
    import jnius_config

    assert jnius_config.vm_running
    assert "--add-modules=jdk.incubator.vector" not in jnius_config.get_options()
    from indexes.jvm import java_home

    assert os.environ["JAVA_HOME"] == java_home()


def test_an_existing_lucene_index_is_searched_as_it_is(porter_index, tmp_path):
    """``bm25:PATH``: a Lucene index built elsewhere (here: this project's, copied; Anserini's layout is the
    lucene/ folder itself) gives the same ranking as the cached one, and is never rebuilt or stamped."""
    import shutil

    from pipeline.core.errors import ConfigError

    dataset = tiny_dataset()
    copy = tmp_path / "anserini-index"
    shutil.copytree(porter_index / "lucene", copy)
    before = sorted(p.name for p in copy.iterdir())
    cached = make_first_stage("bm25", dataset, BM25Settings(index_root=porter_index.parent)).search(
        dataset.queries.values(), 5)
    for spec in (f"bm25:{copy}", f"bm25:{porter_index}"):
        assert make_first_stage(spec, dataset).search(dataset.queries.values(), 5) == cached
    rm3 = make_first_stage(f"bm25+rm3:{copy}", dataset).search(dataset.queries.values(), 5)
    assert set(rm3) == set(cached)
    assert sorted(p.name for p in copy.iterdir()) == before
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a Lucene index"):
        make_first_stage(f"bm25:{tmp_path / 'empty'}", dataset)
    with pytest.raises(ConfigError, match="no such index directory"):
        make_first_stage(f"bm25:{tmp_path / 'missing'}", dataset)
