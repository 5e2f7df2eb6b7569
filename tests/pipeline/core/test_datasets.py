"""Dataset loading (pipeline.core.datasets): the pair format in its three id.txt layouts, manifests (their
paths confined to the dataset directory), layout detection, missing datasets, names added in process and by
an installed package's entry point, the ir_datasets path with an offline mirror, and (with the real data) the
counts every built-in dataset must have."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import assert_located, run_python, write
from pipeline.core import datasets
from pipeline.core.datasets import Dataset, load_dataset, load_local, pair_dataset, read_pair_folder, trec_dataset
from pipeline.core.datasets import registry
from pipeline.core.errors import ConfigError, DataFormatError, DatasetNotFoundError, PipelineError
from pipeline.core.plugins import Registry
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc


def pair_folder(folder: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    """Write a pair folder from (query text, doc text, id line, label) rows."""
    for index, name in enumerate(("a.toks", "b.toks", "id.txt", "sim.txt")):
        write(folder / name, "".join(row[index] + "\n" for row in rows))
    return folder


# ----------------------------------------------------------------------------------- pair format


def test_pair_folder_with_query_ids_only(tmp_path):  # WikiQA, TrecQA train
    folder = pair_folder(tmp_path / "train", [
        ("what is a cat", "a cat is an animal", "Q1", "1"),
        ("what is a cat", "the sky is blue", "Q1", "0"),
        ("who wrote it", "someone   wrote it", "Q2", "1"),
    ])
    split = read_pair_folder(folder)
    assert split.name == "train"
    assert split.queries == {"Q1": Query("Q1", "what is a cat"), "Q2": Query("Q2", "who wrote it")}
    assert split.docs == {"Q1-0": Doc("Q1-0", "a cat is an animal"), "Q1-1": Doc("Q1-1", "the sky is blue"),
                          "Q2-0": Doc("Q2-0", "someone wrote it")}
    assert split.labels == [Qrel("Q1", "Q1-0", 1), Qrel("Q1", "Q1-1", 0), Qrel("Q2", "Q2-0", 1)]
    # without scores, the file order is the ranking
    assert [s.doc_id for s in sorted(split.run["Q1"], key=lambda s: -s.score)] == ["Q1-0", "Q1-1"]


def test_pair_folder_with_qrels_like_ids(tmp_path):  # TrecQA dev/test: qid 0 docid label
    folder = pair_folder(tmp_path / "raw-dev", [
        ("q one", "answer a", "32 0 4 1", "1"),
        ("q one", "answer b", "32 0 5 0", "0"),
        ("q two", "answer c", "33 0 9 0", "0"),
    ])
    split = read_pair_folder(folder, split="dev")
    assert split.name == "dev"
    assert set(split.docs) == {"4", "5", "9"}
    assert split.labels == [Qrel("32", "4", 1), Qrel("32", "5", 0), Qrel("33", "9", 0)]
    assert [s.doc_id for s in sorted(split.run["32"], key=lambda s: -s.score)] == ["4", "5"]


def test_pair_folder_with_run_lines_gives_the_first_stage(tmp_path):  # Microblog: qid Q0 docid rank score tag
    folder = pair_folder(tmp_path / "trec-2013", [
        ("water shortages", "tweet one", "111 Q0 300 1 -5.25 lucene4lm", "1"),
        ("water shortages", "tweet two", "111 Q0 301 2 -6.5 lucene4lm", "0"),
        ("kal penn", "tweet three", "113 Q0 300 1 -4.0 lucene4lm", "0"),
    ])
    split = read_pair_folder(folder)
    assert split.run == {"111": [ScoredDoc("111", "300", -5.25), ScoredDoc("111", "301", -6.5)],
                         "113": [ScoredDoc("113", "300", -4.0)]}
    assert split.docs["300"].text == "tweet one"  # the same tweet for two queries is one document
    assert split.labels[0] == Qrel("111", "300", 1)


def test_pair_dataset_prefixes_query_ids_shared_by_splits(tmp_path):
    pair_folder(tmp_path / "train", [("q a", "d", "1", "1"), ("q b", "d", "2", "0")])
    pair_folder(tmp_path / "test", [("q c", "d", "1", "1")])
    dataset = load_local(tmp_path, name="shared")
    assert dataset.name == "shared"
    assert set(dataset.queries) == {"train/1", "train/2", "test/1"}
    assert dataset.queries["test/1"].text == "q c" and dataset.queries["train/1"].text == "q a"
    assert dataset.splits == {"test": ["test/1"], "train": ["train/1", "train/2"]}
    assert {q.doc_id for q in dataset.qrels} == {"train/1-0", "train/2-0", "test/1-0"}
    assert set(dataset.first_stage) == set(dataset.queries)


def test_pair_dataset_keeps_ids_when_splits_are_disjoint(tmp_path):
    pair_folder(tmp_path / "a", [("q a", "d", "1", "1")])
    pair_folder(tmp_path / "b", [("q b", "d", "2", "0")])
    dataset = pair_dataset("disjoint", {"a": tmp_path / "a", "b": tmp_path / "b"})
    assert set(dataset.queries) == {"1", "2"}
    assert dataset.splits == {"a": ["1"], "b": ["2"]}
    assert len(dataset.doc_store()) == 2 and sum(1 for _ in dataset.docs_iter()) == 2


def test_pair_dataset_with_qrels_files_uses_them_for_its_queries(tmp_path):
    pair_folder(tmp_path / "y", [("q", "t1", "5 Q0 100 1 2.0 x", "0"), ("q", "t2", "5 Q0 101 2 1.0 x", "1")])
    qrels = write(tmp_path / "qrels.txt", "5 0 100 2\n5 0 999 1\n6 0 100 1\n")
    dataset = pair_dataset("mb", {"y": tmp_path / "y"}, [qrels])
    assert dataset.qrels == [Qrel("5", "100", 2), Qrel("5", "999", 1)]  # query 6 is not in the dataset


def test_pair_folder_misaligned_line_counts(tmp_path):
    folder = pair_folder(tmp_path / "f", [("q", "d1", "1", "1"), ("q", "d2", "1", "0"), ("q", "d3", "1", "0")])
    write(folder / "id.txt", "1\n1\n")  # one line short
    with pytest.raises(DataFormatError) as info:
        read_pair_folder(folder)
    # the first line of the longer files that has no counterpart, naming the short file
    assert_located(info.value, folder / "a.toks", 3)
    assert "id.txt" in str(info.value) and "line-aligned" in str(info.value)
    with pytest.raises(DataFormatError) as info:  # through the dataset loader too
        load_local(folder)
    assert_located(info.value, folder / "a.toks", 3)
    write(folder / "sim.txt", "1\n0\n0\n1\n1\n")  # now sim.txt is the longest, id.txt ends first
    with pytest.raises(DataFormatError) as info:
        read_pair_folder(folder)
    assert_located(info.value, folder / "sim.txt", 3)


def test_pair_folder_missing_file(tmp_path):
    folder = pair_folder(tmp_path / "f", [("q", "d", "1", "1")])
    (folder / "sim.txt").unlink()
    with pytest.raises(DataFormatError, match="sim.txt"):
        read_pair_folder(folder)


@pytest.mark.parametrize("file_name, rows, message", [
    ("a.toks", [("q", "d1", "1", "1"), ("   ", "d2", "2", "0")], "empty query text"),
    ("a.toks", [("q", "d1", "1", "1"), ("other", "d2", "1", "0")], "two different texts"),
    ("id.txt", [("q", "d1", "1", "1"), ("q", "d2", "1 0 x", "0")], "expected"),
    ("id.txt", [("q", "d1", "1 Q0 a 1 2 t", "1"), ("q", "d2", "1 Q0 b 2 two t", "0")], "not a number"),
    ("sim.txt", [("q", "d1", "1", "1"), ("q", "d2", "1", "yes")], "not a number"),
])
def test_malformed_pair_line(tmp_path, file_name, rows, message):
    folder = pair_folder(tmp_path / "f", rows)
    with pytest.raises(DataFormatError) as info:
        read_pair_folder(folder)
    assert_located(info.value, folder / file_name, 2)
    assert message in str(info.value)


def test_non_utf8_in_a_pair_file(tmp_path):
    folder = pair_folder(tmp_path / "f", [("q", "d1", "1", "1"), ("q", "d2", "1", "0"), ("q", "d3", "1", "0")])
    write(folder / "b.toks", b"d1\nd2\nd\xe93\n")
    with pytest.raises(DataFormatError) as info:
        load_local(folder)
    assert_located(info.value, folder / "b.toks", 3)


# ---------------------------------------------------------------------------------- TREC format


def small_trec_collection(root: Path) -> Path:
    write(root / "topics.txt", "<top>\n<num> 1 </num>\n<title> cats </title>\n</top>\n"
                               "<top>\n<num> 2 </num>\n<title> dogs </title>\n</top>\n"
                               "<top>\n<num> 3 </num>\n<title> unjudged </title>\n</top>\n")
    write(root / "qrels.txt", "1 0 d1 1\n2 0 d2 2\n")
    write(root / "docs.trec", "<DOC>\n<DOCNO>d1</DOCNO>\ncats purr\n</DOC>\n<DOC>\n<DOCNO>d2</DOCNO>\ndogs bark\n</DOC>\n")
    write(root / "README.md", "not data")
    return root


def test_layout_detection_of_a_trec_directory(tmp_path):
    root = small_trec_collection(tmp_path / "mini")
    dataset = load_dataset(str(root))
    assert dataset.name == "mini"
    assert set(dataset.queries) == {"1", "2", "3"}
    assert dataset.qrels == [Qrel("1", "d1", 1), Qrel("2", "d2", 2)]
    assert list(dataset.docs_iter()) == [Doc("d1", "cats purr"), Doc("d2", "dogs bark")]
    assert dataset.first_stage is None


def test_fingerprint_follows_content_not_location_or_mtime(tmp_path):
    # Cached models and indexes are keyed by it: a re-extracted copy of the same files must still hit them.
    original = load_dataset(str(small_trec_collection(tmp_path / "a" / "mini"))).fingerprint
    copy = small_trec_collection(tmp_path / "b" / "mini")
    os.utime(copy / "docs.trec", ns=(10**18, 10**18))
    assert load_dataset(str(copy)).fingerprint == original
    write(copy / "docs.trec", "<DOC>\n<DOCNO>d1</DOCNO>\ncats purr\n</DOC>\n<DOC>\n<DOCNO>d2</DOCNO>\ndogs bork\n</DOC>\n")
    assert load_dataset(str(copy)).fingerprint != original


def test_layout_detection_failure_asks_for_a_manifest(tmp_path):
    write(tmp_path / "x" / "something.txt", "1\t2\n")
    with pytest.raises(DatasetNotFoundError, match="dataset.json"):
        load_local(tmp_path / "x")


def test_trec_manifest(tmp_path):
    root = small_trec_collection(tmp_path / "m")
    os.rename(root / "docs.trec", root / "part1.trec")
    write(root / "part2.tsv", "d3\tbirds sing\n")
    write(root / "bm25.run", "1 Q0 d1 1 2.0 bm25\n1 Q0 d2 2 1.0 bm25\n3 Q0 d3 1 1.0 bm25\n")
    write(root / "dataset.json", json.dumps({
        "format": "trec", "name": "manifested", "topics": "topics.txt", "qrels": "qrels.txt",
        "docs": ["part1.trec", "part2.tsv"], "run": "bm25.run", "judged_only": True,
    }))
    dataset = load_dataset(str(root))
    assert dataset.name == "manifested"
    assert set(dataset.queries) == {"1", "2"}  # judged_only drops query 3 ...
    assert set(dataset.first_stage) == {"1"}  # ... and its part of the run
    assert [d.doc_id for d in dataset.docs_iter()] == ["d1", "d2", "d3"]


def test_pair_manifest(tmp_path):
    pair_folder(tmp_path / "data" / "tr", [("q a", "d", "1", "1")])
    pair_folder(tmp_path / "data" / "te", [("q b", "d", "1", "0"), ("q b", "e", "1", "1")])
    write(tmp_path / "data" / "dataset.json", json.dumps({"format": "pair", "splits": {"train": "tr", "test": "te"}}))
    dataset = load_local(tmp_path / "data")
    assert dataset.name == "data"
    assert dataset.splits == {"train": ["train/1"], "test": ["test/1"]}
    assert len(dataset.qrels) == 3


@pytest.mark.parametrize("manifest, message", [
    ({"format": "csv"}, "unknown format"),
    ({"format": "pair"}, "splits"),
    ({"format": "trec", "topics": "t.txt"}, "'docs'"),
])
def test_bad_manifest_names_the_manifest(tmp_path, manifest, message):
    path = write(tmp_path / "dataset.json", json.dumps(manifest))
    with pytest.raises(DataFormatError, match=message) as info:
        load_local(tmp_path)
    assert_located(info.value, path, None)


def test_manifest_with_invalid_json(tmp_path):
    path = write(tmp_path / "dataset.json", '{\n"format": "trec",\n}\n')
    with pytest.raises(DataFormatError) as info:
        load_local(tmp_path)
    assert_located(info.value, path, 3)


def test_duplicate_docs_across_trec_files(tmp_path):
    root = small_trec_collection(tmp_path / "m")
    write(root / "more.trec", "<DOC>\n<DOCNO>d3</DOCNO>\nnew\n</DOC>\n<DOC>\n<DOCNO>d1</DOCNO>\nagain\n</DOC>\n")
    dataset = trec_dataset("dup", root / "topics.txt", root / "qrels.txt", [root / "docs.trec", root / "more.trec"])
    with pytest.raises(DataFormatError) as info:
        dataset.doc_store()
    assert_located(info.value, root / "more.trec", 5)
    assert "'d1'" in str(info.value)


def test_subset_restricts_queries_qrels_splits_and_run(tmp_path):
    pair_folder(tmp_path / "a", [("q a", "d", "1", "1"), ("q b", "e", "2", "1")])
    dataset = load_local(tmp_path)
    small = dataset.subset(["2"], name="only-2")
    assert small.name == "only-2" and list(small.queries) == ["2"]
    assert [q.query_id for q in small.qrels] == ["2"] and small.splits == {"a": ["2"]}
    assert list(small.first_stage) == ["2"] and len(dataset.queries) == 2


# ------------------------------------------------------------------------- manifest confinement

SECRET = "TOP-SECRET first line of a file outside the dataset"


def dataset_beside_a_secret(tmp_path: Path) -> tuple[Path, Path]:
    """A small TREC dataset directory and, beside it (outside), a file the manifest must not reach."""
    root = small_trec_collection(tmp_path / "data")
    secret = write(tmp_path / "outside" / "secret.txt", SECRET + "\n")
    return root, secret


@pytest.mark.parametrize("fields, field", [
    ({"topics": "../../../../etc/passwd"}, "topics"),
    ({"topics": "../outside/secret.txt"}, "topics"),
    ({"qrels": "sub/../../outside/secret.txt"}, "qrels"),
    ({"docs": ["docs.trec", "../outside/secret.txt"]}, "docs[1]"),
    ({"run": "ABSOLUTE"}, "run"),
])
def test_manifest_paths_cannot_leave_the_dataset_directory(tmp_path, fields, field):
    root, secret = dataset_beside_a_secret(tmp_path)
    spec = {"format": "trec", "topics": "topics.txt", "qrels": "qrels.txt", "docs": "docs.trec"}
    spec.update({key: str(secret) if value == "ABSOLUTE" else value for key, value in fields.items()})
    manifest = write(root / "dataset.json", json.dumps(spec))
    with pytest.raises(DataFormatError) as info:
        load_dataset(str(root))
    assert_located(info.value, manifest, None)
    message = str(info.value)
    assert f"field {field!r}" in message and "outside the dataset directory" in message
    assert SECRET not in message and "root:" not in message  # nothing of the outside file is read or quoted


def test_manifest_path_through_a_symlink_out_of_the_directory(tmp_path):
    root, secret = dataset_beside_a_secret(tmp_path)
    (root / "linked-topics.txt").symlink_to(secret)
    manifest = write(root / "dataset.json", json.dumps({"format": "trec", "topics": "linked-topics.txt",
                                                        "docs": "docs.trec"}))
    with pytest.raises(DataFormatError, match="field 'topics'") as info:
        load_local(root)
    assert_located(info.value, manifest, None)
    assert SECRET not in str(info.value)


def test_pair_manifest_split_folder_cannot_leave_the_directory(tmp_path):
    pair_folder(tmp_path / "elsewhere", [("q a", "d", "1", "1")])
    manifest = write(tmp_path / "data" / "dataset.json", json.dumps({"format": "pair", "splits": {"train": "../elsewhere"}}))
    with pytest.raises(DataFormatError, match="field 'splits.train'") as info:
        load_local(tmp_path / "data")
    assert_located(info.value, manifest, None)


def test_manifest_paths_that_stay_inside_are_followed(tmp_path):
    root = small_trec_collection(tmp_path / "data")
    write(root / "sub" / "docs.trec", (root / "docs.trec").read_text())
    write(root / "dataset.json", json.dumps({"format": "trec", "topics": "./topics.txt", "qrels": "sub/../qrels.txt",
                                             "docs": "sub/docs.trec"}))
    dataset = load_local(root)
    assert set(dataset.queries) == {"1", "2", "3"} and len(dataset.doc_store()) == 2


@pytest.mark.parametrize("spec, message", [
    ({"format": "trec", "topics": 5, "docs": "docs.trec"}, "field 'topics' must be a path"),
    ({"format": "trec", "topics": "topics.txt", "docs": [["docs.trec"]]}, "field 'docs[0]' must be a path"),
    ({"format": "trec", "name": "", "topics": "topics.txt", "docs": "docs.trec"}, "field 'name'"),
    (["format", "trec"], "expected a JSON object"),
])
def test_manifest_fields_of_the_wrong_type(tmp_path, spec, message):
    root = small_trec_collection(tmp_path / "data")
    manifest = write(root / "dataset.json", json.dumps(spec))
    with pytest.raises(DataFormatError, match=message.replace("[", r"\[").replace("]", r"\]")) as info:
        load_local(root)
    assert_located(info.value, manifest, None)


# ------------------------------------------------------------------------- datasets from plugins


def tiny_dataset(name: str = "tiny") -> Dataset:
    """A one-query dataset built in memory (what a plugin's loader returns)."""
    docs = [Doc("d1", "cats purr"), Doc("d2", "dogs bark")]
    return Dataset(name, {"1": Query("1", "cats")}, [Qrel("1", "d1", 1)], lambda: docs, f"fp-{name}")


@pytest.fixture
def fresh_plugins(monkeypatch):
    """An empty in-process dataset registry for one test (registrations do not leak into other tests)."""
    plugins = Registry("dataset", datasets.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "DATASET_PLUGINS", plugins)
    return plugins


def test_register_dataset_in_process(fresh_plugins):
    datasets.register_dataset("my-tiny", lambda: tiny_dataset("my-tiny"))
    assert "my-tiny" in datasets.known_datasets()
    dataset = load_dataset("my-tiny")
    assert dataset.name == "my-tiny" and list(dataset.queries) == ["1"] and len(dataset.doc_store()) == 2
    datasets.register_dataset("by-path", "tests.pipeline.core.test_datasets:tiny_dataset")  # "module:function", lazily
    assert load_dataset("by-path").name == "tiny"


def test_register_dataset_refusals(fresh_plugins):
    with pytest.raises(ConfigError, match="built-in"):
        datasets.register_dataset("wikiqa", tiny_dataset)
    with pytest.raises(ConfigError, match="module:function"):
        datasets.register_dataset("x", "no_colon_here")
    with pytest.raises(ConfigError, match="function"):
        datasets.register_dataset("x", 42)
    with pytest.raises(ConfigError, match="name"):
        datasets.register_dataset(" padded ", tiny_dataset)
    datasets.register_dataset("taken", tiny_dataset)
    datasets.register_dataset("taken", tiny_dataset)  # the same loader again is fine
    with pytest.raises(PipelineError, match="already registered"):
        datasets.register_dataset("taken", lambda: tiny_dataset())


def test_a_loader_that_returns_no_dataset(fresh_plugins):
    datasets.register_dataset("not-a-dataset", lambda: {"queries": []})
    with pytest.raises(ConfigError, match="returned a dict, not a pipeline.core.datasets.Dataset"):
        load_dataset("not-a-dataset")


def install_throwaway_package(site: Path, entry_points: str) -> None:
    """An installed distribution ``foo`` 0.1 in ``site``: its metadata, entry points and module ``foo_datasets``."""
    write(site / "foo-0.1.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: foo\nVersion: 0.1\n")
    write(site / "foo-0.1.dist-info" / "entry_points.txt", entry_points)
    write(site / "foo_datasets.py",
          "from pipeline.core.datasets import Dataset\n"
          "from pipeline.core.records import Doc, Qrel, Query\n\n\n"
          "def foo_news():\n"
          "    docs = [Doc('n1', 'rain in spain'), Doc('n2', 'sun in rome')]\n"
          "    return Dataset('foo-news', {'q1': Query('q1', 'spain')}, [Qrel('q1', 'n1', 1)], lambda: docs,\n"
          "                   'foo-news-v1', splits={'test': ['q1']})\n")


def test_dataset_from_an_installed_packages_entry_point(tmp_path, monkeypatch, fresh_plugins):
    site = tmp_path / "site"
    install_throwaway_package(site, "[neural_rerank.datasets]\nfoo-news = foo_datasets:foo_news\n"
                                    "wikiqa = foo_datasets:foo_news\nfoo-broken = foo_missing:nothing\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "foo_datasets", raising=False)
    try:
        names = datasets.known_datasets()
        assert "foo-news" in names and "foo-broken" in names and names.count("wikiqa") == 1
        assert "foo_datasets" not in sys.modules  # listing the names imports no plugin
        dataset = load_dataset("foo-news")
        assert "foo_datasets" in sys.modules
        assert dataset.name == "foo-news" and dataset.splits == {"test": ["q1"]}
        assert [doc.doc_id for doc in dataset.docs_iter()] == ["n1", "n2"]
        with pytest.raises(PipelineError) as info:  # a broken plugin names its package and target
            load_dataset("foo-broken")
        assert "foo" in str(info.value) and "foo_missing:nothing" in str(info.value)
    finally:
        sys.modules.pop("foo_datasets", None)


def test_a_builtin_name_wins_over_an_entry_point(tmp_path, monkeypatch, fresh_plugins):
    install_throwaway_package(tmp_path / "site", "[neural_rerank.datasets]\nwikiqa = foo_datasets:foo_news\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PIPELINE_DATA", str(tmp_path / "empty-root"))
    with pytest.raises(DatasetNotFoundError, match="PIPELINE_DATA"):  # the built-in loader, not the plugin's
        load_dataset("wikiqa")


# ------------------------------------------------------------------------------ missing datasets


def test_unknown_dataset_name(tmp_path, monkeypatch, no_network, fresh_plugins):
    monkeypatch.setenv("PIPELINE_MIRROR", str(tmp_path))
    datasets.register_dataset("my-tiny", tiny_dataset)
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("no-such-collection")
    message = str(info.value)
    assert "'no-such-collection'" in message
    assert "wikiqa" in message and "my-tiny" in message and "ir_datasets" in message  # says what names would work


@pytest.mark.parametrize("name, missing", [
    ("wikiqa", "wikiqa-castorini"),
    ("trecqa", "trecqa-hcan"),
    ("microblog-2013", "trec-microblog-hcan"),
    ("dl19", "msmarco-passage-trecdl"),
    ("nfcorpus", "nfcorpus"),
    ("vaswani-npl", "vaswani-npl"),
])
def test_builtin_dataset_with_an_empty_data_root(tmp_path, monkeypatch, name, missing):
    monkeypatch.setenv("PIPELINE_DATA", str(tmp_path))
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name)
    message = str(info.value)
    assert f"{name!r}" in message and str(tmp_path / missing) in message and "missing" in message


def test_builtin_dataset_without_a_data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_DATA", str(tmp_path / "absent"))
    with pytest.raises(DatasetNotFoundError, match="PIPELINE_DATA"):
        load_dataset("wikiqa")


def test_a_path_that_is_not_a_directory(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="not a directory"):
        load_local(tmp_path / "absent")


# ---------------------------------------------------------------------------- ir_datasets + mirror

CRAN_MD5 = "1730f7be572d95a5a4b56c59a7b900a5"

LOAD_SCRIPT = """
import json, sys
from pipeline.core.datasets import load_dataset
from pipeline.core.errors import DatasetNotFoundError
try:
    d = load_dataset(sys.argv[1])
except DatasetNotFoundError as error:
    print(json.dumps({"error": str(error)}))
else:
    print(json.dumps({"name": d.name, "source": d.source, "queries": len(d.queries), "qrels": len(d.qrels),
                      "docs": sum(1 for _ in d.docs_iter())}))
"""


def load_in_child(name: str, home: Path, mirror: Path) -> dict:
    """load_dataset(name) in a fresh process (ir_datasets fixes its cache paths when imported)."""
    result = run_python(["-c", LOAD_SCRIPT, name], timeout=120, IR_DATASETS_HOME=home, PIPELINE_MIRROR=mirror)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_cranfield_from_the_mirror_into_an_empty_cache(tmp_path, data_root):
    home = tmp_path / "irds"
    loaded = load_in_child("cranfield", home, data_root)
    assert loaded == {"name": "cranfield", "source": "ir_datasets:cranfield", "queries": 225, "qrels": 1837,
                      "docs": 1400}
    archive = home / "cranfield" / "cran.tar.gz"
    assert archive.is_file()
    assert hashlib.md5(archive.read_bytes()).hexdigest() == CRAN_MD5


def test_mirror_file_with_the_wrong_md5_is_not_used(tmp_path):
    home, mirror = tmp_path / "irds", tmp_path / "mirror"
    write(mirror / "nested" / "cran.tar.gz", b"not the cranfield archive" * 100)
    loaded = load_in_child("cranfield", home, mirror)
    assert "error" in loaded, loaded
    assert "cranfield" in loaded["error"] and str(mirror) in loaded["error"]
    assert not (home / "cranfield" / "cran.tar.gz").exists()


def test_seed_cache_checks_md5(tmp_path, monkeypatch, data_root):
    """seed_ir_datasets_cache copies a matching archive and skips one with the wrong md5."""
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "home"))
    bad = write(tmp_path / "bad" / "cran.tar.gz", b"x" * 1000)
    assert datasets.seed_ir_datasets_cache("cranfield", bad.parent) == []
    assert not (tmp_path / "home" / "cranfield" / "cran.tar.gz").exists()
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(data_root / "classic-glasgow" / "cran.tar.gz", good / "cran.tar.gz")
    placed = datasets.seed_ir_datasets_cache("cranfield", good)
    assert placed == [tmp_path / "home" / "cranfield" / "cran.tar.gz"]
    assert hashlib.md5(placed[0].read_bytes()).hexdigest() == CRAN_MD5
    assert sorted(os.listdir(placed[0].parent)) == ["cran.tar.gz"]  # no temp file left
    assert datasets.seed_ir_datasets_cache("cranfield", good) == []  # already there


def test_two_processes_seeding_one_cache_at_once_both_succeed(tmp_path, monkeypatch, data_root):
    """Two runs started side by side from an empty home seed the same ir_datasets cache: while one copies, the
    other copies and renames its own copy into place; the first's rename still succeeds and no temp is left."""
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "home"))
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(data_root / "classic-glasgow" / "cran.tar.gz", mirror / "cran.tar.gz")
    copy, pid = shutil.copyfile, os.getpid
    placed_meanwhile, process = [], [pid()]

    def copy_while_another_seeds(source, destination):
        copy(source, destination)
        if process[0] == pid():  # the other process runs its whole seeding between this copy and its rename
            process[0] = pid() + 1
            placed_meanwhile.append(datasets.seed_ir_datasets_cache("cranfield", mirror))
            process[0] = pid()
        return destination

    monkeypatch.setattr(os, "getpid", lambda: process[0])
    monkeypatch.setattr(shutil, "copyfile", copy_while_another_seeds)
    placed = datasets.seed_ir_datasets_cache("cranfield", mirror)
    target = tmp_path / "home" / "cranfield" / "cran.tar.gz"
    assert placed == [target] and placed_meanwhile == [[target]]
    assert hashlib.md5(target.read_bytes()).hexdigest() == CRAN_MD5
    assert sorted(os.listdir(target.parent)) == ["cran.tar.gz"]


@pytest.mark.slow
def test_vaswani_falls_back_to_the_local_copy(data_root, no_network, caplog):
    # This session's IR_DATASETS_HOME is empty and downloads fail, so ir_datasets cannot get npl.tar.gz.
    with caplog.at_level(logging.INFO, logger="pipeline.core.datasets"):
        dataset = load_dataset("vaswani")
    assert dataset.name == "vaswani"
    assert dataset.source == str(data_root / "vaswani-npl")
    assert (len(dataset.queries), len(dataset.qrels), len(dataset.doc_store())) == (93, 2083, 11429)
    assert any("local copy" in record.getMessage() for record in caplog.records)


@pytest.mark.slow
@pytest.mark.parametrize("irds_id, queries", [
    ("nfcorpus/test", 323), ("beir/nfcorpus/test", 323), ("nfcorpus/dev", 324),
    ("msmarco-passage/trec-dl-2019/judged", 43), ("msmarco-passage/trec-dl-2020/judged", 54),
    ("tweets2013-ia/trec-mb-2013", 60), ("tweets2013-ia/trec-mb-2014", 55),
])
def test_other_ir_datasets_ids_fall_back_to_the_data_root(irds_id, queries, data_root, no_network):
    dataset = load_dataset(irds_id)
    assert dataset.name == irds_id and len(dataset.queries) == queries
    assert dataset.source.startswith(str(data_root))


# ------------------------------------------------------------------------------------- real data

#: name -> (queries, {split: queries}, qrels, docs, first-stage lines, {split: first-stage lines}); from SOURCE.md
REAL_COUNTS = {
    "microblog-2011": (49, {"2011": 49}, 60129, None, 39780, None),
    "microblog-2012": (60, {"2012": 60}, 73073, None, 49879, None),
    "microblog-2013": (60, {"2013": 60}, 71279, None, 46192, None),
    "microblog-2014": (55, {"2014": 55}, 57985, None, 41579, None),
    "microblog": (224, {"2011": 49, "2012": 60, "2013": 60, "2014": 55}, 60129 + 73073 + 71279 + 57985, 171124,
                  39780 + 49879 + 46192 + 41579,
                  {"2011": 39780, "2012": 49879, "2013": 46192, "2014": 41579}),
    "microblog-url": (224, {"2011": 49, "2012": 60, "2013": 60, "2014": 55}, 60129 + 73073 + 71279 + 57985, 171124,
                      39780 + 49879 + 46192 + 41579,
                      {"2011": 39780, "2012": 49879, "2013": 46192, "2014": 41579}),
    "wikiqa": (873 + 126 + 243, {"train": 873, "dev": 126, "test": 243, "test-filtered": 237, "dev-filtered": 122},
               8672 + 1130 + 2351, None, 12153,
               {"train": 8672, "dev": 1130, "test": 2351}),
    "trecqa": (93 + 81 + 95 + 65 + 68, {"train": 93, "raw-dev": 81, "raw-test": 95, "clean-dev": 65, "clean-test": 68},
               4718 + 1148 + 1517 + 1117 + 1442, None, 9942,
               {"train": 4718, "raw-dev": 1148, "raw-test": 1517, "clean-dev": 1117, "clean-test": 1442}),
    "dl19": (43, {}, 9260, 4297, 4300, None),
    "dl20": (54, {}, 11386, 5396, 5400, None),
    "dl21": (53, {}, 10828, 5299, 5300, None),
    "dl": (150, {"2019": 43, "2020": 54, "2021": 53}, 9260 + 11386 + 10828, 4297 + 5396 + 5299 - 35, 15000,
           {"2019": 4300, "2020": 5400, "2021": 5300}),
    "nfcorpus": (323, {}, 12334, 3162, None, None),
    "nfcorpus-dev": (324, {}, 11385, 3193, None, None),
    "vaswani-npl": (93, {}, 2083, 11429, None, None),
    "nfcorpus-titles": (3366, {"train": 2692, "dev": 336, "test": 338}, 3366, 3366, None, None),
}


def test_every_builtin_dataset_has_expected_counts():
    assert set(REAL_COUNTS) == set(datasets.BUILTIN_DATASETS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REAL_COUNTS))
def test_builtin_dataset_counts(name, data_root):
    queries, splits, qrels, docs, run_lines, split_lines = REAL_COUNTS[name]
    dataset = load_dataset(name)
    assert dataset.name == name
    assert len(dataset.queries) == queries
    assert {split: len(ids) for split, ids in dataset.splits.items()} == splits
    assert len(dataset.qrels) == qrels
    if docs is not None:
        assert len(dataset.doc_store()) == docs
    if run_lines is None:
        assert dataset.first_stage is None
    else:
        assert sum(len(hits) for hits in dataset.first_stage.values()) == run_lines
        assert set(dataset.first_stage) == set(dataset.queries)
    for split, lines in (split_lines or {}).items():
        assert sum(len(dataset.first_stage[q]) for q in dataset.splits[split]) == lines
    assert all(q.text for q in dataset.queries.values())
    assert {q.query_id for q in dataset.qrels} <= set(dataset.queries)


@pytest.mark.slow
def test_real_trec_directory_is_detected(data_root):
    dataset = load_dataset(str(data_root / "vaswani-npl"))
    assert (len(dataset.queries), len(dataset.qrels), len(dataset.doc_store())) == (93, 2083, 11429)


@pytest.mark.slow
def test_microblog_queries_have_the_official_topic_text(data_root):
    from pipeline.core.formats import read_topics

    dataset = load_dataset("microblog-2013")
    topics = read_topics(data_root / "trec-microblog-hcan" / "topics-and-qrels" / "topics.microblog2013.txt")
    assert set(topics) == set(dataset.queries)
    assert topics["111"].text == "water shortages"
    assert dataset.queries["111"].text.lower() == "water shortages"


@pytest.mark.slow
def test_dl19_docs_come_from_the_shipped_json(data_root):
    dataset = load_dataset("dl19")
    store = dataset.doc_store()
    assert all(hit.doc_id in store for hits in dataset.first_stage.values() for hit in hits)
    assert all(doc.text for doc in store.values())


@pytest.mark.slow
def test_dl_is_three_years_with_leave_one_year_out_and_its_recipe(data_root):
    from pipeline.engine.protocols import make_protocol

    dataset = load_dataset("dl")
    assert dataset.recipe.split == "2019" and dataset.recipe.metrics.split()[0] == "nDCG@10"
    assert dataset.recipe.train["positive_relevance"] == 2
    for year in ("2019", "2020", "2021"):
        fold, = make_protocol(dataset, year, 1)
        assert set(fold.test) == set(dataset.splits[year])
        others = {q for y, ids in dataset.splits.items() if y != year for q in ids}
        assert set(fold.train) | set(fold.dev) == others and not set(fold.train) & set(fold.dev)
    assert load_dataset("dl21").queries.keys() == set(dataset.splits["2021"])


def test_dataset_is_a_plain_container():
    docs = [Doc("a", "x")]
    dataset = Dataset("t", {"1": Query("1", "q")}, [Qrel("1", "a", 1), Qrel("1", "b", 0)], lambda: docs, "fp")
    assert dataset.qrels_dict() == {"1": {"a": 1, "b": 0}}
    assert dataset.doc_store() == {"a": Doc("a", "x")}
    assert list(dataset.docs_iter()) == docs


def test_repo_root_is_the_repository():
    # computed from the module's own path: it must follow the file when the package is reorganised
    assert datasets.REPO_ROOT == Path(__file__).resolve().parents[3]
    assert (datasets.REPO_ROOT / "pipeline" / "core" / "datasets" / "__init__.py").is_file()


def test_data_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_DATA", str(tmp_path))
    assert datasets.data_root() == tmp_path
    monkeypatch.setenv("PIPELINE_MIRROR", str(tmp_path / "m"))
    assert datasets.mirror_dir() == tmp_path / "m" and datasets.mirror_dir("/x") == Path("/x")
    monkeypatch.delenv("PIPELINE_MIRROR")
    assert datasets.mirror_dir() == tmp_path


@pytest.mark.parametrize("text, expected", [
    ("statin breast cancer survival abstract " + "word " * 25, ("statin breast cancer survival", ("word " * 25).strip())),
    ("statin diagnosis pubmed ncbi abstract background " + "w " * 30, ("statin diagnosis", "background" + " w" * 30)),
    ("no marker here " + "w " * 30, None),                   # no "abstract" token
    ("abstract " + "w " * 30, None),                          # empty title
    ("pubmed ncbi abstract " + "w " * 30, None),              # title is only the PubMed suffix
    ("a title abstract too short", None),                    # abstract under 20 words
])
def test_split_title(text, expected):
    assert datasets.split_title(text) == expected


@pytest.mark.slow
def test_nfcorpus_titles_pairs_each_title_with_its_own_abstract(data_root):
    dataset = load_dataset("nfcorpus-titles")
    store = dataset.doc_store()
    splits = dataset.splits
    assert not set(splits["train"]) & set(splits["test"]) and not set(splits["dev"]) & set(splits["test"])
    assert sorted(splits["train"] + splits["dev"] + splits["test"]) == sorted(dataset.queries)
    assert all(q.query_id == q.doc_id and q.relevance == 1 for q in dataset.qrels)
    title, abstract = dataset.queries["MED-10"].text, store["MED-10"].text
    assert title == "statin breast cancer survival nationwide cohort study finland"
    assert abstract.startswith("recent studies suggested statins") and "abstract" not in abstract.split()[:1]
    assert load_dataset("nfcorpus-titles").splits == splits  # the partition is fixed


def test_a_misspelt_dataset_name_gets_the_closest_one():
    with pytest.raises(DatasetNotFoundError, match="did you mean 'cranfield'.*offline: cranfield, vaswani"):
        load_dataset("cranfeild")


def test_url_words_keep_the_content_words_of_a_link():
    from pipeline.core.datasets.microblog import url_words

    url = "http://www.thehindu.com/todays-paper/tp-national/water-scarcity-worries-bbmp/article4520714.ece?utm_source=twitterfeed"
    assert url_words(url) == ["thehindu", "todays", "paper", "tp", "national", "water", "scarcity", "worries",
                              "bbmp", "ece"]
    assert url_words("") == []


@pytest.mark.slow
def test_microblog_url_appends_each_tweets_link_words_and_changes_nothing_else(data_root):
    plain, linked = load_dataset("microblog"), load_dataset("microblog-url")
    assert linked.name == "microblog-url" and linked.fingerprint != plain.fingerprint
    assert (linked.queries, linked.qrels, linked.splits, linked.recipe) == (plain.queries, plain.qrels, plain.splits,
                                                                            plain.recipe)
    before, after = plain.doc_store(), linked.doc_store()
    assert before.keys() == after.keys()
    changed = [d for d in before if before[d].text != after[d].text]
    assert 0.3 * len(before) < len(changed) < 0.7 * len(before)  # about half of the tweets carry a link
    assert all(after[d].text.startswith(before[d].text + " ") for d in changed)
    # MB111's second candidate links to a Hindu article on water scarcity (trec-2013/url.txt line 2)
    assert after["313518284903428096"].text.endswith("water scarcity worries bbmp councillors ece")
