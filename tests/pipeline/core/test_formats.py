"""Bring-your-own-collection formats: BEIR, Anserini, SMART and HTML collections, 3-column qrels, topic field
choice, every pair-format layout of the HCAN and MatchZoo data. Each reader is checked on a tiny file and on a
malformed one, whose error must name the file and line (and, for a file that fits no layout, list the
accepted ones)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from conftest import assert_located, raises_at, write
from pipeline.core import formats
from pipeline.core.datasets import load_local, pair_dataset, read_pair_folder
from pipeline.core.datasets.pair_format import read_wikiqa_tsv
from pipeline.core.errors import ConfigError, DataFormatError
from pipeline.core.records import Doc, Qrel, Query


# ----------------------------------------------------------------------------------------- topics

TREC_TOPICS = (
    "<top>\n<num> Number: 301\n<title> International Organized Crime\n\n<desc> Description:\n"
    "Identify organizations that participate.\n\n<narr> Narrative:\nA relevant document names one.\n</top>\n\n"
    "<top>\n<num> Number: 302 </num>\n<title> Polio </title>\n<desc> Description: Is polio under control? </desc>\n"
    "</top>\n"
)


@pytest.mark.parametrize("field, first, second", [
    ("title", "International Organized Crime", "Polio"),
    ("description", "Identify organizations that participate.", "Is polio under control?"),
    ("title+description", "International Organized Crime Identify organizations that participate.",
     "Polio Is polio under control?"),
])
def test_trec_topics_field_choice(tmp_path, field, first, second):
    path = write(tmp_path / "topics.txt", TREC_TOPICS)
    assert formats.read_topics(path, field) == {"301": Query("301", first), "302": Query("302", second)}


def test_trec_topic_without_the_chosen_field(tmp_path):
    first_only = write(tmp_path / "first.txt", TREC_TOPICS.split("\n\n<top>")[0])
    assert formats.read_topics(first_only, "narrative") == {"301": Query("301", "A relevant document names one.")}
    path = write(tmp_path / "topics.txt", TREC_TOPICS)
    error = raises_at(path, 12, formats.read_topics, "narrative")  # topic 302 has no <narr>
    assert "'302' has no narrative" in str(error) and "<narr>" in str(error)


def test_unknown_topic_field_is_a_config_error(tmp_path):
    path = write(tmp_path / "topics.txt", TREC_TOPICS)
    with pytest.raises(ConfigError, match="title, description, narrative, title\\+description"):
        formats.read_topics(path, "desc")


def test_anserini_webxml_topics(tmp_path):
    path = write(tmp_path / "topics.web.txt",
                 '<topic number="51" type="faceted">\n  <query>horse hooves</query>\n'
                 '  <description>Find information on horse hooves &amp; their care.</description>\n'
                 '  <subtopic number="1" type="inf">ignored</subtopic>\n</topic>\n'
                 "<topic number='52'>\n  <query>avp</query>\n  <description>AVP tour</description>\n</topic>\n")
    assert formats.read_topics(path) == {"51": Query("51", "horse hooves"), "52": Query("52", "avp")}
    assert formats.read_topics(path, "description")["51"].text == "Find information on horse hooves & their care."
    broken = write(tmp_path / "broken.txt", '<topic number="51">\n<query>a</query>\n</topic>\n<topic>\n<query>b</query>\n</topic>\n')
    assert "number=" in str(raises_at(broken, 4, formats.read_topics))


def test_doc_style_topics(tmp_path):
    path = write(tmp_path / "queries.trec", "<DOC>\n<DOCNO>1</DOCNO>\nmeasurement of dielectric constant\n</DOC>\n"
                                            "<DOC><DOCNO>2</DOCNO><TITLE>waveguides</TITLE><DESC>fed waveguides</DESC></DOC>\n")
    assert formats.read_topics(path) == {"1": Query("1", "measurement of dielectric constant"), "2": Query("2", "waveguides")}
    raises_at(path, 1, formats.read_topics, "description")  # topic 1 has no <DESC>
    broken = write(tmp_path / "broken.trec", "<DOC>\n<DOCNO>1</DOCNO>\na\n</DOC>\n<DOC>\nno number\n</DOC>\n")
    assert "<DOCNO>" in str(raises_at(broken, 5, formats.read_topics))
    stray = write(tmp_path / "stray.trec", "<DOC>\n<DOCNO>1</DOCNO>\na\n</DOC>\nstray\n")
    assert "outside" in str(raises_at(stray, 5, formats.read_topics))


def test_beir_queries_jsonl(tmp_path):
    path = write(tmp_path / "queries.jsonl",
                 '{"_id": "1", "text": "what is the origin of covid-19", "metadata": {"narrative": "seeking origins"}}\n'
                 '{"_id": 2, "text": "how does the virus spread", "metadata": {}}\n')
    assert formats.read_topics(path) == {"1": Query("1", "what is the origin of covid-19"),
                                      "2": Query("2", "how does the virus spread")}
    assert "'2' has no narrative" in str(raises_at(path, 2, formats.read_topics, "narrative"))
    first_only = write(tmp_path / "one.jsonl", path.read_text().splitlines()[0])
    assert formats.read_topics(first_only, "narrative") == {"1": Query("1", "seeking origins")}


def test_jsonl_topics_with_title_and_description(tmp_path):
    path = write(tmp_path / "topics.jsonl", '{"qid": "7", "title": "cats", "description": "care of cats"}\n')
    assert formats.read_topics(path, "title+description") == {"7": Query("7", "cats care of cats")}


def test_smart_topics(tmp_path):
    path = write(tmp_path / "cran.qry", ".I 001\n.W\nwhat similarity laws\nmust be obeyed .\n.I 002\n.W\nheat transfer .\n")
    assert formats.read_topics(path) == {"001": Query("001", "what similarity laws must be obeyed ."),
                                      "002": Query("002", "heat transfer .")}
    assert "one text per query" in str(raises_at(path, None, formats.read_topics, "description"))
    broken = write(tmp_path / "bad.qry", ".I 1\n.W\na\n.I\n.W\nb\n")
    assert "without an id" in str(raises_at(broken, 4, formats.read_topics))


def test_tsv_topics_have_no_description(tmp_path):
    path = write(tmp_path / "topics.tsv", "1\tcats\n")
    assert "TSV topics have one text" in str(raises_at(path, None, formats.read_topics, "description"))


def test_unrecognised_topics_file_lists_every_format(tmp_path):
    path = write(tmp_path / "topics.txt", "\n301 international organized crime\n")
    error = str(raises_at(path, 2, formats.read_topics))
    assert "expected 'query_id<TAB>text'" in error
    for example in ("301<TAB>", "<top>", "<topic number=", "<DOCNO>", "queries.jsonl", ".I 301"):
        assert example in error, example
    assert "<top>" in str(raises_at(write(tmp_path / "empty.txt", "\n"), None, formats.read_topics))


# ------------------------------------------------------------------------------------------ qrels


def test_three_column_qrels(tmp_path):
    path = write(tmp_path / "cranqrel", "1 184 2 \n1 29 -1\n\n2 12 3\n")  # Cranfield's, trailing space included
    assert formats.read_qrels(path) == [Qrel("1", "184", 2), Qrel("1", "29", -1), Qrel("2", "12", 3)]


def test_beir_qrels_tsv(tmp_path):
    path = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nPLAIN-2\tMED-2427\t2\nPLAIN-2\tMED-10\t1\n")
    assert formats.read_qrels(path) == [Qrel("PLAIN-2", "MED-2427", 2), Qrel("PLAIN-2", "MED-10", 1)]


@pytest.mark.parametrize("name, content, line, message", [
    ("queries.jsonl", '{"_id": "1", "text": "a"}\n{"_id": "2", "text": \n', 2, "invalid JSON"),
    ("queries.jsonl", '{"_id": "1", "text": "a"}\n{"text": "no id"}\n', 2, "no id field"),
    ("queries.jsonl", '{"_id": "1", "text": "a"}\n{"_id": "1", "text": "again"}\n', 2, "duplicate query id"),
    ("queries.jsonl", '{"_id": "1", "text": "a"}\n{"_id": "2", "text": "  "}\n', 2, "empty"),
    ("qrels.txt", "1 d1 1\n1 d2 0\n1 0 d3 1\n", 3, "expected 3 columns 'query_id doc_id relevance' like line 1, got 4"),
    ("qrels.txt", "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\thigh\n", 3, "not an integer"),
    ("qrels.txt", "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td1\t0\n", 3, "duplicate judgment"),
    ("qrels.txt", "1 0 d1 1 extra\n", 1, "3 columns 'query_id doc_id relevance'"),
])
def test_malformed_jsonl_topics_and_qrels_layouts(tmp_path, name, content, line, message):
    reader = formats.read_topics if name == "queries.jsonl" else formats.read_qrels
    assert message in str(raises_at(write(tmp_path / name, content), line, reader))


def test_unrecognised_qrels_file_lists_every_layout(tmp_path):
    error = str(raises_at(write(tmp_path / "qrels.txt", "1 d1\n"), 1, formats.read_qrels))
    for layout in ("4 columns", "3 columns", "query-id<TAB>corpus-id<TAB>score"):
        assert layout in error, layout


# ------------------------------------------------------------------------------------------- docs

SMART_DOCS = (".I 1\n.T\nexperimental investigation of a wing\n.A\nbrenckman,m.\n.B\nj. ae. scs. 25, 1958.\n"
              ".W\nan experimental study\nof a wing .\n.I 2\n.T\nshear flow\n.W\nsimple shear flow .\n")


def test_smart_docs_are_title_and_body(tmp_path):
    path = write(tmp_path / "cran.all.1400", SMART_DOCS)
    assert list(formats.read_docs(path)) == [
        Doc("1", "experimental investigation of a wing an experimental study of a wing ."),
        Doc("2", "shear flow simple shear flow ."),
    ]


@pytest.mark.parametrize("content, line, message", [
    (".I 1\nno field marker\n", 2, "field marker"),
    (".I 1\n.W\na\n.I 2\n.W\nb\n.I 1\n.W\nc\n", 7, "duplicate doc id '1' (first on line 1)"),
    (".I 1\n.W\na\n.I\n.W\nb\n", 4, "without an id"),
    (b".I 1\n.W\na\n.I 2\n.W\nna\xefve\n", 6, "UTF-8"),
])
def test_malformed_smart_docs(tmp_path, content, line, message):
    assert message in str(raises_at(write(tmp_path / "docs.all", content), line, formats.read_docs))


HTML_PAGE = ("<!DOCTYPE html>\n<html><head><title>Cats &amp; dogs</title>\n<style>p { color: red }</style>\n"
             "<script>var hidden = 'no';</script></head>\n<body><p>Cats <b>purr</b>.</p><p>Dogs&nbsp;bark.</p>\n"
             "<noscript>enable js</noscript></body></html>\n")


def test_html_folder(tmp_path):
    write(tmp_path / "pages" / "cats.html", HTML_PAGE)
    write(tmp_path / "pages" / "sub" / "birds.htm", "<p>Birds sing</p>")
    write(tmp_path / "pages" / "notes.txt", "not a document")
    assert list(formats.read_docs(tmp_path / "pages")) == [
        Doc("cats", "Cats & dogs Cats purr . Dogs bark."), Doc("birds", "Birds sing")]
    assert list(formats.read_docs(tmp_path / "pages" / "sub" / "birds.htm")) == [Doc("birds", "Birds sing")]


def test_malformed_html_collections(tmp_path):
    bad = write(tmp_path / "a" / "page.html", b"<p>fine</p>\n<p>caf\xe9</p>\n")
    raises_at(bad, 2, formats.read_docs)  # one file: the byte's line
    with pytest.raises(DataFormatError) as info:
        list(formats.read_docs(tmp_path / "a"))  # through its folder: the same file and line
    assert_located(info.value, bad, 2)
    write(tmp_path / "b" / "more" / "x.htm", "<p>one</p>")
    second = write(tmp_path / "b" / "x.html", "<p>two</p>")  # read after more/x.htm (files are read sorted)
    assert "duplicate doc id 'x'" in str(raises_at(second, None, lambda _: formats.read_docs(tmp_path / "b")))
    spaced = write(tmp_path / "c" / "my page.html", "<p>x</p>")
    assert "whitespace" in str(raises_at(spaced, None, lambda _: formats.read_docs(tmp_path / "c")))
    write(tmp_path / "d" / "readme.txt", "x")
    assert ".html" in str(raises_at(tmp_path / "d", None, formats.read_docs))


def test_beir_corpus_uses_title_and_text(tmp_path):
    path = write(tmp_path / "corpus.jsonl", '{"_id": "MED-10", "title": "Statins", "text": "breast cancer", "metadata": {}}\n'
                                            '{"_id": "MED-11", "title": "", "text": "no title"}\n')
    assert list(formats.read_docs(path)) == [Doc("MED-10", "Statins breast cancer"), Doc("MED-11", "no title")]


def test_unrecognised_docs_file_lists_every_format(tmp_path):
    error = str(raises_at(write(tmp_path / "docs.txt", "d1 no tab here\n"), 1, formats.read_docs))
    for example in ("<DOCNO>", "corpus.jsonl", "d1<TAB>text", ".I 1", ".html"):
        assert example in error, example
    later = str(raises_at(write(tmp_path / "docs2.txt", "d1\tfine\nd2 no tab\n"), 2, formats.read_docs))
    assert "accepted" not in later  # a TSV file with one bad line: just that line's problem


# --------------------------------------------------------------------------------- dataset layouts


def beir_folder(root: Path) -> Path:
    write(root / "corpus.jsonl", '{"_id": "d1", "title": "Cats", "text": "cats purr"}\n'
                                 '{"_id": "d2", "title": "Dogs", "text": "dogs bark"}\n'
                                 '{"_id": "d3", "title": "", "text": "birds sing"}\n')
    write(root / "queries.jsonl", '{"_id": "q1", "text": "cats", "description": "do cats purr"}\n'
                                  '{"_id": "q2", "text": "dogs", "description": "do dogs bark"}\n'
                                  '{"_id": "q3", "text": "birds", "description": "do birds sing"}\n')
    write(root / "qrels" / "train.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    write(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq3\td3\t2\n")
    return root


def test_beir_folder_is_detected_with_its_splits(tmp_path):
    dataset = load_local(beir_folder(tmp_path / "mini-beir"))
    assert dataset.name == "mini-beir"
    assert dataset.splits == {"test": ["q3"], "train": ["q1", "q2"]}
    assert sorted(dataset.qrels) == [Qrel("q1", "d1", 1), Qrel("q2", "d2", 1), Qrel("q3", "d3", 2)]
    assert dataset.queries["q1"] == Query("q1", "cats")
    assert dataset.doc_store()["d1"] == Doc("d1", "Cats cats purr")


def test_manifest_names_the_topic_field(tmp_path):
    root = beir_folder(tmp_path / "b")
    titles = load_local(root)
    write(root / "dataset.json", json.dumps({"format": "beir", "topic_field": "description"}))
    described = load_local(root)
    assert described.queries["q2"] == Query("q2", "do dogs bark")
    assert described.splits == titles.splits
    assert described.fingerprint != titles.fingerprint  # a model trained on titles is not reused for descriptions
    write(tmp_path / "t" / "topics.txt", TREC_TOPICS)
    write(tmp_path / "t" / "docs.tsv", "d1\tcrime\n")
    write(tmp_path / "t" / "dataset.json", json.dumps({"format": "trec", "topics": "topics.txt", "docs": "docs.tsv",
                                                       "topic_field": "title+description"}))
    assert load_local(tmp_path / "t").queries["302"].text == "Polio Is polio under control?"


def test_bad_topic_field_in_a_manifest(tmp_path):
    root = beir_folder(tmp_path / "b")
    manifest = write(root / "dataset.json", json.dumps({"format": "beir", "topic_field": "abstract"}))
    with pytest.raises(DataFormatError, match="topic_field") as info:
        load_local(root)
    assert_located(info.value, manifest, None)
    pair_folder(tmp_path / "p" / "tr", [("q", "d", "1", "1")])
    manifest = write(tmp_path / "p" / "dataset.json", json.dumps(
        {"format": "pair", "splits": {"train": "tr"}, "topic_field": "description"}))
    with pytest.raises(DataFormatError, match="one text") as info:
        load_local(tmp_path / "p")
    assert_located(info.value, manifest, None)


def test_html_collection_is_detected(tmp_path):
    root = tmp_path / "web"
    write(root / "topics.tsv", "1\tcats\n")
    write(root / "qrels.txt", "1 cats 1\n")
    write(root / "docs" / "cats.html", HTML_PAGE)
    write(root / "docs" / "dogs.html", "<html><body>Dogs bark</body></html>")
    dataset = load_local(root)
    assert [d.doc_id for d in dataset.docs_iter()] == ["cats", "dogs"]
    assert dataset.qrels == [Qrel("1", "cats", 1)]
    before = dataset.fingerprint
    write(root / "docs" / "dogs.html", "<html><body>Dogs howl</body></html>")
    assert load_local(root).fingerprint != before  # the pages' contents are part of the cache key


def test_smart_collection_is_detected_and_mismatched_ids_are_reported(tmp_path, caplog):
    root = tmp_path / "cran"
    write(root / "cran.all.1400", SMART_DOCS)
    write(root / "cran.qry", ".I 001\n.W\nwing study\n.I 002\n.W\nshear flow\n")
    write(root / "cranqrel", "1 1 2\n2 2 1\n")
    write(root / "cranqrel.readme", "relevance codes")
    with caplog.at_level(logging.WARNING):
        dataset = load_local(root)
    assert set(dataset.queries) == {"001", "002"} and len(list(dataset.docs_iter())) == 2
    assert dataset.qrels == []  # cran.qry numbers its queries 001, 002; cranqrel 1, 2 ...
    assert "2 judged query ids have no topic" in caplog.text  # ... which is said, not left silent


# ------------------------------------------------------------------------------------------- pairs


def pair_folder(folder: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    """Write a pair folder from (query text, doc text, id line, label) rows."""
    for index, name in enumerate(("a.toks", "b.toks", "id.txt", "sim.txt")):
        write(folder / name, "".join(row[index] + "\n" for row in rows))
    return folder


def test_pair_ids_numbered_per_question(tmp_path):  # 'qid docid' with candidates counted per question: '0 0'
    folder = pair_folder(tmp_path / "dev", [
        ("what is a cat", "a cat is an animal", "0 0", "1"),
        ("what is a cat", "the sky is blue", "0 1", "0"),
        ("who wrote it", "someone wrote it", "1 0", "1"),
    ])
    split = read_pair_folder(folder)
    assert split.docs == {"0-0": Doc("0-0", "a cat is an animal"), "0-1": Doc("0-1", "the sky is blue"),
                          "1-0": Doc("1-0", "someone wrote it")}
    assert split.labels == [Qrel("0", "0-0", 1), Qrel("0", "0-1", 0), Qrel("1", "1-0", 1)]


def test_pair_ids_with_global_doc_ids_and_labels(tmp_path):  # 'qid docid' and 'qid docid label'
    two = read_pair_folder(pair_folder(tmp_path / "a", [("q", "shared text", "5 d1", "1"), ("r", "shared text", "6 d1", "0")]))
    assert two.docs == {"d1": Doc("d1", "shared text")}  # the same id and text: one document
    three = read_pair_folder(pair_folder(tmp_path / "b", [("q", "x", "5 d1 1", "1"), ("q", "y", "5 d2 0", "0")]))
    assert three.labels == [Qrel("5", "d1", 1), Qrel("5", "d2", 0)]
    assert [s.doc_id for s in sorted(three.run["5"], key=lambda s: -s.score)] == ["d1", "d2"]


@pytest.mark.parametrize("ids, message", [
    (["1 0 a 1", "1 a"], "one layout per file"),
    (["1 a 1", "1 b yes"], "label 'yes' is not a number"),
    (["1", "1 0 a 1 x"], "expected one of 'qid'"),  # 5 columns: no layout; the error lists them all
])
def test_malformed_pair_ids(tmp_path, ids, message):
    folder = pair_folder(tmp_path / "f", [("q", f"d{i}", line, "0") for i, line in enumerate(ids)])
    error = raises_at(folder / "id.txt", 2, lambda _: read_pair_folder(folder))
    assert message in str(error)


def test_unrecognised_pair_ids_list_every_layout(tmp_path):
    folder = pair_folder(tmp_path / "f", [("q", "d", "1 2 3 4 5", "0")])
    error = str(raises_at(folder / "id.txt", 1, lambda _: read_pair_folder(folder)))
    for layout in ("'qid'", "'qid docid'", "'qid docid label'", "'qid 0 docid label'", "'qid Q0 docid rank score tag'"):
        assert layout in error, layout


WIKIQA_HEADER = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel\n"


def wikiqa_tsv(path: Path, rows: list[str]) -> Path:
    return write(path, WIKIQA_HEADER + "".join(row + "\n" for row in rows))


def test_wikiqa_tsv(tmp_path):
    path = wikiqa_tsv(tmp_path / "WikiQA-dev.tsv", [
        "Q1\thow are glacier caves formed?\tD1\tGlacier cave\tD1-0\tA partly submerged glacier cave.\t0",
        "Q1\thow are glacier caves formed?\tD1\tGlacier cave\tD1-1\tA glacier cave is formed by melting.\t1",
        "Q2\twho wrote it?\tD2\tBook\tD2-0\tSomeone wrote it.\t1",
    ])
    split = read_wikiqa_tsv(path)
    assert split.name == "dev"
    assert split.queries == {"Q1": Query("Q1", "how are glacier caves formed?"), "Q2": Query("Q2", "who wrote it?")}
    assert split.labels == [Qrel("Q1", "D1-0", 0), Qrel("Q1", "D1-1", 1), Qrel("Q2", "D2-0", 1)]
    assert split.docs["D1-1"] == Doc("D1-1", "A glacier cave is formed by melting.")


@pytest.mark.parametrize("rows, line, message", [
    (["Q1\tq\tD1\tt\tD1-0\ts\t1", "Q1\tq\tD1\tt\tD1-1\ts"], 3, "expected 7 tab-separated columns"),
    (["Q1\tq\tD1\tt\tD1-0\ts\tyes"], 2, "not a number"),
])
def test_malformed_wikiqa_tsv(tmp_path, rows, line, message):
    path = wikiqa_tsv(tmp_path / "WikiQA-train.tsv", rows)
    assert message in str(raises_at(path, line, read_wikiqa_tsv))
    headless = write(tmp_path / "other.tsv", "Q1\tq\tD1\tt\tD1-0\ts\t1\n")
    assert "QuestionID<TAB>Question" in str(raises_at(headless, 1, read_wikiqa_tsv))


def test_wikiqa_folder_is_detected_one_split_per_file(tmp_path):
    rows = {"train": ["Q1\tq one\tD1\tt\tD1-0\ts\t1"], "test": ["Q9\tq nine\tD9\tt\tD9-0\ts\t0"]}
    for split, lines in rows.items():
        wikiqa_tsv(tmp_path / f"WikiQA-{split}.tsv", lines)
    wikiqa_tsv(tmp_path / "WikiQA.tsv", rows["train"] + rows["test"])  # the whole corpus: not a split
    dataset = load_local(tmp_path)
    assert dataset.splits == {"test": ["Q9"], "train": ["Q1"]}
    write(tmp_path / "dataset.json", json.dumps({"format": "pair", "splits": {"all": "WikiQA.tsv"}}))
    assert load_local(tmp_path).splits == {"all": ["Q1", "Q9"]}


def test_pair_dataset_mixes_folders_and_tsv_splits(tmp_path):
    pair_folder(tmp_path / "train", [("q a", "d", "1", "1")])
    tsv = wikiqa_tsv(tmp_path / "WikiQA-test.tsv", ["1\tq b\tD1\tt\tD1-0\ts\t0"])
    dataset = pair_dataset("mixed", {"train": tmp_path / "train", "test": tsv})
    assert dataset.splits == {"train": ["train/1"], "test": ["test/1"]}  # the same id in two splits: prefixed


@pytest.mark.parametrize("folder, pairs, questions", [
    ("trecqa-hcan/raw-dev", 1148, 81),  # qid 0 docid label
    ("wikiqa-castorini/dev", 1130, 126),  # qid
    ("trec-microblog-hcan/trec-2011", 39780, 49),  # qid Q0 docid rank score tag
])
def test_real_pair_layouts(data_root, folder, pairs, questions):
    split = read_pair_folder(data_root / folder)
    assert (len(split.labels), len(split.queries)) == (pairs, questions)  # counts of the data's SOURCE.md
