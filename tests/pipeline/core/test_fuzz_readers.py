"""Fuzzing every reader of user input (issue 34 item 5): any byte string gives a result or one clear
:class:`~pipeline.core.errors.PipelineError`, never another exception (which a command line would print as a
traceback).

Readers: topics (every layout, every field), qrels, documents (plain and gzipped), runs, the pair format
(its four line-aligned files, and WikiQA's TSV), dataset manifests (``dataset.json`` in a folder), the
checksum manifests of exports, cache metadata and export descriptions. Inputs are drawn by ``hypothesis``
from raw bytes and from the pieces of each format (tags, separators, numbers such as ``inf`` and ``1e999``,
a byte-order mark, invalid UTF-8), so that many examples get past the first line. Each reader runs
:data:`EXAMPLES` examples (no deadline: a busy machine must not fail them), the same ones on every run;
``-s`` prints each reader's count of inputs, results and errors, ``--hypothesis-show-statistics`` hypothesis'
own statistics.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import write_files
from pipeline.core import filecheck
from pipeline.core.datasets.local import load_local
from pipeline.core.datasets.pair_format import read_pair_folder, read_wikiqa_tsv
from pipeline.core.errors import PipelineError
from pipeline.core.formats import TOPIC_FIELDS, read_docs, read_qrels, read_run, read_topics

#: examples per reader (about 1-3 s each on an idle 2-core machine)
EXAMPLES = 300
#: derandomized (the same examples on every run, like the rest of the suite) and no example database in the
#: checkout; a failure prints its smallest example
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

COMMON = ["\n", "\n", "\t", " ", "\r\n", "1", "2", "q1", "d1", "0", "-1", "1.5", "inf", "-inf", "nan", "1e999",
          "\ufeff", "é", "\x00", "\x85", "\u2028", "\ud7ff", "#", "'", '"', "\\"]
TOPIC_PIECES = COMMON + ["<top>", "</top>", "<num>", "</num>", "Number:", "MB111", "<title>", "</title>", "<desc>",
                         "Description:", "</desc>", "<narr>", "</narr>", '<topic number="3">', "</topic>", "<query>",
                         "</query>", "<description>", "<narrative>", "<DOC>", "<DOCNO>", "</DOCNO>", "</DOC>", "{",
                         "}", '"_id"', '"text"', '"title"', ":", ",", "null", "[]", ".I 1", ".I", ".W", ".T", ".A"]
QRELS_PIECES = COMMON + ["0 d1 1", "Q0", "query-id\tcorpus-id\tscore", "1 0 d1 1", "q1 d1 2", "1_000", "+1"]
DOC_PIECES = TOPIC_PIECES + ['"id"', '"contents"', '"body"', '"doc_id"', "<TEXT>", "</TEXT>", "<HEADLINE>", ".B"]
RUN_PIECES = COMMON + ["Q0", "1 Q0 d1 1 2.5 tag", "run", "1e308", "-0"]
PAIR_PIECES = COMMON + ["q1 Q0 d1 1 2.5 tag", "q1 d1", "q1 d1 1", "q1 0 d1 1", "word", "\t"]
WIKIQA_PIECES = COMMON + ["QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel", "Q1",
                          "D1", "D1-0", "what", "title", "sentence"]
JSON_PIECES = COMMON + ["{", "}", "[", "]", ":", ",", "null", "true", "false", '"format"', '"trec"', '"beir"',
                        '"pair"', '"topics"', '"qrels"', '"docs"', '"run"', '"splits"', '"name"', '"topic_field"',
                        '"judged_only"', '"topics.tsv"', '"docs.tsv"', '"qrels.txt"', '"../x"', '"/etc/passwd"',
                        '"files"', '"bytes"', '"sha256"', '"a.bin"', '"options"', '"kind"',
                        '"neural-rerank-pretrained"', '"reranker"', '"model_config"', "1", "0"]


def fuzz_bytes(pieces: list[str]) -> st.SearchStrategy[bytes]:
    """Raw bytes; text made of a format's ``pieces`` and random characters; or lines of 1-6 such fields
    separated by a space or a tab (UTF-8, sometimes followed by random bytes)."""
    piece = st.one_of(st.sampled_from(pieces), st.text(max_size=4))
    text = st.lists(piece, max_size=60).map("".join)
    field = st.one_of(st.sampled_from([p for p in pieces if p.strip()]), st.text(min_size=1, max_size=4))
    line = st.tuples(st.lists(field, min_size=1, max_size=6), st.sampled_from([" ", "\t"])).map(
        lambda parts: parts[1].join(parts[0]))
    lines = st.lists(line, min_size=1, max_size=8).map("\n".join)
    structured = st.tuples(st.one_of(text, lines, lines), st.one_of(st.just(b""), st.just(b""),
                                                                    st.binary(max_size=4))).map(
        lambda parts: parts[0].encode("utf-8", "surrogatepass") + parts[1])
    return st.one_of(st.binary(max_size=400), structured, structured)


JSON_KEYS = ["format", "name", "topics", "qrels", "docs", "run", "splits", "topic_field", "judged_only", "corpus",
             "queries", "files", "bytes", "sha256", "kind", "reranker", "model_config", "encoder_config",
             "train_config", "options", "train", "a.bin", "manifest.json", "../x", "", "\x00"]
JSON_VALUES = ["trec", "beir", "pair", "topics.tsv", "docs.tsv", "qrels.txt", "../outside.txt", "/etc/passwd",
               "mine", ".", "", "title", "description", "neural-rerank-pretrained", "cross-encoder", "a.bin",
               "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "\ud800"]
JSON_SCALARS = st.one_of(st.sampled_from(JSON_VALUES), st.integers(-3, 5), st.booleans(), st.none(),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
JSON_DATA = st.recursive(JSON_SCALARS, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.sampled_from(JSON_KEYS), children, max_size=6)), max_leaves=20)


def fuzz_json(shape: dict | None = None, required: tuple[str, ...] = ()) -> st.SearchStrategy[bytes]:
    """JSON documents made of a manifest's keys and values, a third of them with the keys ``shape`` gives
    (``{key: strategy}``, those in ``required`` always there, so that valid documents come up too), and a
    third any bytes."""
    def encoded(strategy):
        return strategy.map(lambda value: json.dumps(value).encode("utf-8", "surrogatepass"))
    documents = encoded(st.dictionaries(st.sampled_from(JSON_KEYS), JSON_DATA, max_size=8))
    shaped = encoded(st.fixed_dictionaries({k: v for k, v in shape.items() if k in required},
                                           optional={k: v for k, v in shape.items() if k not in required})) \
        if shape else documents
    return st.one_of(documents, shaped, fuzz_bytes(JSON_PIECES))


PATHS = st.one_of(st.sampled_from(["topics.tsv", "docs.tsv", "qrels.txt", "../outside.txt", "/etc/passwd", "",
                                   "missing.tsv", "."]), JSON_DATA)


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` three times in four, any JSON value otherwise."""
    return st.one_of(valid, valid, valid, JSON_DATA)


DATASET_MANIFEST = {"format": mostly(st.sampled_from(["trec", "trec", "beir", "pair"])),
                    "topics": mostly(st.just("topics.tsv")) | PATHS,
                    "docs": mostly(st.sampled_from(["docs.tsv", ["docs.tsv"]])) | PATHS,
                    "qrels": PATHS, "name": mostly(st.text(min_size=1, max_size=5)),
                    "topic_field": mostly(st.sampled_from(TOPIC_FIELDS)), "judged_only": mostly(st.booleans()),
                    "splits": JSON_DATA}
CHECKSUMS = {"format": st.one_of(st.just(1), JSON_DATA), "files": st.one_of(
    st.dictionaries(st.sampled_from(["a.bin", "b.bin", "../a.bin", "/a.bin", ""]), st.one_of(
        st.fixed_dictionaries({"bytes": st.sampled_from([3, 4, -1]), "sha256": st.sampled_from(JSON_VALUES)}),
        JSON_DATA), max_size=3), JSON_DATA)}
DESCRIPTION = {"format": st.one_of(st.just(1), JSON_DATA), "kind": st.one_of(st.just("neural-rerank-pretrained"),
                                                                              JSON_DATA),
               "reranker": JSON_DATA, "model_config": JSON_DATA, "encoder_config": JSON_DATA,
               "train_config": JSON_DATA}


OUTCOMES: dict[str, Counter] = {}


def outcome(reader: str, call: Callable[[], object]) -> None:
    """Run ``call`` (consuming a generator result); a PipelineError is an accepted answer, any other
    exception fails the test with hypothesis' smallest example."""
    counts = OUTCOMES.setdefault(reader, Counter())
    try:
        result = call()
        if hasattr(result, "__next__"):
            list(result)
    except PipelineError as error:
        assert str(error).strip(), "an error without a message"
        counts["error"] += 1
        return
    counts["result"] += 1


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    for reader, counts in sorted(OUTCOMES.items()):
        print(f"\nfuzz {reader}: {sum(counts.values())} inputs, {counts['result']} results, "
              f"{counts['error']} PipelineErrors, 0 other exceptions")


def test_topics(tmp_path):
    @FUZZ
    @given(data=fuzz_bytes(TOPIC_PIECES), field=st.sampled_from(TOPIC_FIELDS))
    def check(data, field):
        (tmp_path / "topics.txt").write_bytes(data)
        outcome("topics", lambda: read_topics(tmp_path / "topics.txt", field))
    check()


def test_qrels(tmp_path):
    @FUZZ
    @given(data=fuzz_bytes(QRELS_PIECES))
    def check(data):
        (tmp_path / "qrels.txt").write_bytes(data)
        outcome("qrels", lambda: read_qrels(tmp_path / "qrels.txt"))
    check()


def test_docs(tmp_path):
    @FUZZ
    @given(data=fuzz_bytes(DOC_PIECES), gzipped=st.sampled_from(["plain", "gzip", "damaged gzip"]))
    def check(data, gzipped):
        path = tmp_path / ("docs.txt" if gzipped == "plain" else "docs.txt.gz")
        if gzipped == "gzip":
            data = gzip.compress(data)
        elif gzipped == "damaged gzip":
            data = gzip.compress(data)[: max(1, len(data) // 2)] + data[:8]
        path.write_bytes(data)
        outcome("docs", lambda: read_docs(path))
    check()


def test_runs(tmp_path):
    @FUZZ
    @given(data=fuzz_bytes(RUN_PIECES), known=st.booleans())
    def check(data, known):
        (tmp_path / "a.run").write_bytes(data)
        ids = {"1": 1, "q1": 1} if known else None
        outcome("runs", lambda: read_run(tmp_path / "a.run", ids and {"d1"}, ids))
    check()


def test_pair_folders(tmp_path):
    @FUZZ
    @given(files=st.tuples(*[fuzz_bytes(PAIR_PIECES)] * 4))
    def check(files):
        for name, data in zip(("a.toks", "b.toks", "id.txt", "sim.txt"), files):
            (tmp_path / name).write_bytes(data)
        outcome("pair folders", lambda: read_pair_folder(tmp_path, "train"))
    check()


WIKIQA_HEADER = WIKIQA_PIECES[len(COMMON)]
#: WikiQA's header, then rows of tab-separated fields (seven, mostly)
WIKIQA_ROWS = st.lists(st.lists(st.one_of(st.sampled_from(WIKIQA_PIECES[len(COMMON) + 1:] + COMMON),
                                          st.text(max_size=4)), min_size=6, max_size=8).map("\t".join),
                       max_size=6).map(lambda rows: "\n".join([WIKIQA_HEADER, *rows]).encode("utf-8", "surrogatepass"))


def test_wikiqa_tsv(tmp_path):
    @FUZZ
    @given(data=st.one_of(fuzz_bytes(WIKIQA_PIECES), WIKIQA_ROWS))
    def check(data):
        (tmp_path / "WikiQA-train.tsv").write_bytes(data)
        outcome("wikiqa tsv", lambda: read_wikiqa_tsv(tmp_path / "WikiQA-train.tsv"))
    check()


def test_dataset_manifests(tmp_path):
    folder = write_files(tmp_path / "mine", {"topics.tsv": "1\tcats\n", "qrels.txt": "1 0 d1 1\n",
                                             "docs.tsv": "d1\tcats and dogs\n"})
    (tmp_path / "outside.txt").write_text("SECRET\n")

    @FUZZ
    @given(data=fuzz_json(DATASET_MANIFEST, required=("format", "topics", "docs")))
    def check(data):
        (folder / "dataset.json").write_bytes(data)

        def load():
            dataset = load_local(folder)
            list(dataset.docs_iter())
            return dataset
        outcome("dataset manifests", load)
    check()


def test_checksum_manifests_and_cache_metadata(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abc")

    @FUZZ
    @given(data=fuzz_json(CHECKSUMS, required=("format", "files")), which=st.sampled_from(["checksums", "metadata", "check"]))
    def check(data, which):
        (tmp_path / "manifest.json").write_bytes(data)
        if which == "checksums":
            outcome("checksum manifests", lambda: filecheck.check_manifest(tmp_path, "manifest.json", "export"))
        elif which == "metadata":
            outcome("cache metadata", lambda: filecheck.read_metadata(tmp_path, "manifest.json", "index", ("files",)))
        else:  # a code index's recorded files, whatever its metadata holds
            def checked():
                metadata = filecheck.read_metadata(tmp_path, "manifest.json", "code index")
                filecheck.check(tmp_path, metadata.get("files", {}), "stamp.json", "code index")
            outcome("cache metadata", checked)
    check()


def test_export_descriptions(tmp_path):
    from rerankers.hf_export import CONFIG_FILE, read_description

    @FUZZ
    @given(data=fuzz_json(DESCRIPTION))
    def check(data):
        (tmp_path / CONFIG_FILE).write_bytes(data)
        outcome("export descriptions", lambda: read_description(tmp_path, CONFIG_FILE))
    check()


def test_the_fuzzing_sees_both_outcomes():
    """The strategies reach past the first line: every reader gave some results and some errors."""
    assert OUTCOMES, "run with the other tests of this file"
    for reader in ("topics", "qrels", "docs", "runs", "dataset manifests"):
        if reader in OUTCOMES:
            assert OUTCOMES[reader]["result"] > 0 and OUTCOMES[reader]["error"] > 0, (reader, OUTCOMES[reader])
