"""TREC readers and writers (pipeline.core.formats), strict line reading (pipeline.core.textio) and atomic writes
(pipeline.core.atomic): every malformed input names its file and line, and no failed write leaves anything."""
from __future__ import annotations

import os
import stat

import pytest

from conftest import raises_at, write
from pipeline.core import formats
from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.errors import DataFormatError, PipelineError
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc
from pipeline.core.textio import iter_lines, read_text


# ---------------------------------------------------------------------------------------- textio


def test_iter_lines_numbers_lines_and_strips_newlines(tmp_path):
    path = write(tmp_path / "a.txt", "one\r\ntwo\n\nfour")
    assert list(iter_lines(path)) == [(1, "one"), (2, "two"), (3, ""), (4, "four")]
    assert read_text(path) == "one\ntwo\n\nfour"


def test_iter_lines_names_the_line_of_a_bad_byte(tmp_path):
    path = write(tmp_path / "a.txt", b"ok\nstill ok \xc3\xa9\nbad \xff here\n")
    error = raises_at(path, 3, iter_lines)
    assert "UTF-8" in str(error)


def test_missing_file_is_named(tmp_path):
    error = raises_at(tmp_path / "nope.txt", None, iter_lines)
    assert "not found" in str(error)


def test_gzipped_file_is_read(tmp_path):
    import gzip

    path = tmp_path / "topics.tsv.gz"
    path.write_bytes(gzip.compress("7\tgzipped query\n".encode()))
    assert formats.read_topics(path) == {"7": Query("7", "gzipped query")}


# ---------------------------------------------------------------------------------------- topics


def test_tsv_topics_are_read(tmp_path):
    path = write(tmp_path / "topics.tsv", "1\tfirst   query\n\n10\tsecond\tquery with a tab\n")
    assert formats.read_topics(path) == {"1": Query("1", "first query"), "10": Query("10", "second query with a tab")}


def test_sgml_topics_with_and_without_closing_tags(tmp_path):
    path = write(
        tmp_path / "topics.txt",
        "<top>\n<num> Number: 301\n<title> International Organized Crime\n\n<desc> Description:\nIdentify orgs.\n"
        "</top>\n\n<top>\n<num>302</num>\n<title>poliomyelitis and post-polio</title>\n</top>\n",
    )
    assert formats.read_topics(path) == {
        "301": Query("301", "International Organized Crime"),
        "302": Query("302", "poliomyelitis and post-polio"),
    }


def test_microblog_style_topic_numbers_lose_their_prefix(tmp_path):
    path = write(
        tmp_path / "topics.txt",
        "<top>\n<num> Number: MB111 </num>\n<query> water shortages </query>\n<querytime> x </querytime>\n</top>\n"
        "<top>\n<num> Number: MB002 </num>\n<query> second </query>\n</top>\n",
    )
    assert formats.read_topics(path) == {"111": Query("111", "water shortages"), "2": Query("2", "second")}


#: a topics file the readers refuse: (test id, file name, content, the line named, a fragment of the message)
BAD_TOPICS = [
    ("tsv_topic_line_without_tab", "topics.tsv", "1\tfine\n2 no tab on this line\n3\tfine\n", 2, "TAB"),
    ("sgml_top_never_closed", "topics.txt",
     "<top>\n<num> 1 </num>\n<title> a </title>\n</top>\n\n<top>\n<num> 2 </num>\n<title> b </title>\n", 6, "</top>"),
    ("sgml_top_opened_twice", "topics.txt", "<top>\n<num> 1 </num>\n<title> a </title>\n<top>\n", 4, ""),
    ("sgml_topic_without_num", "topics.txt",
     "<top>\n<num> 1 </num>\n<title> a </title>\n</top>\n<top>\n<title> no number </title>\n</top>\n", 5, "<num>"),
    ("sgml_topic_without_title", "topics.txt", "<top>\n<num> 1 </num>\n<desc> only a description </desc>\n</top>\n",
     1, ""),
    ("duplicate_query_ids_in_tsv_topics", "topics.tsv", "1\ta\n2\tb\n1\tc\n", 3, "duplicate"),
    ("duplicate_query_ids_in_sgml_topics", "topics.txt",
     "<top><num>5</num><title>a</title></top>\n<top><num>6</num><title>b</title></top>\n"
     "<top>\n<num>5</num>\n<title>c</title>\n</top>\n", 3, "'5'"),
    ("empty_query_text_in_tsv_topics", "topics.tsv", "1\ta\n2\t   \t \n", 2, "empty"),
    ("empty_query_text_in_sgml_topics", "topics.txt",
     "<top><num>1</num><title>a</title></top>\n\n<top><num>2</num><title>  </title></top>\n", 3, ""),
]


@pytest.mark.parametrize("name,content,line,fragment", [case[1:] for case in BAD_TOPICS],
                         ids=[case[0] for case in BAD_TOPICS])
def test_a_bad_topics_file_is_refused_at_its_line(tmp_path, name, content, line, fragment):
    error = raises_at(write(tmp_path / name, content), line, formats.read_topics)
    assert fragment in str(error)


def test_empty_topics_file(tmp_path):
    raises_at(write(tmp_path / "topics.tsv", "\n\n"), None, formats.read_topics)


@pytest.mark.parametrize("content, line", [
    (b"1\tfine\n2\tfine\n3\tbad \xe9 latin-1\n", 3),
    (b"<top>\n<num>1</num>\n<title>fine</title>\n</top>\n<top>\n<num>2</num>\n<title>caf\xe9</title>\n</top>\n", 7),
])
def test_non_utf8_topics(tmp_path, content, line):
    raises_at(write(tmp_path / "topics", content), line, formats.read_topics)


def test_write_topics_round_trip(tmp_path):
    queries = [Query("2", "two"), Query("10", "ten words here")]
    formats.write_topics_tsv(tmp_path / "t.tsv", queries)
    assert list(formats.read_topics(tmp_path / "t.tsv").values()) == queries


# ----------------------------------------------------------------------------------------- qrels


def test_qrels_are_read_with_graded_and_negative_relevance(tmp_path):
    path = write(tmp_path / "qrels", "1 0 d1 2\n\n1\t0\td2\t-2\n2 Q0 d1 0\n")
    assert formats.read_qrels(path) == [Qrel("1", "d1", 2, "0"), Qrel("1", "d2", -2, "0"), Qrel("2", "d1", 0, "Q0")]


def test_duplicate_judgment_names_the_first_line(tmp_path):
    path = write(tmp_path / "qrels.txt", "1 0 d1 1\n1 0 d2 0\n1 0 d1 0\n")
    assert "first on line 1" in str(raises_at(path, 3, formats.read_qrels))


def test_non_utf8_qrels(tmp_path):
    raises_at(write(tmp_path / "qrels", b"1 0 d1 1\n1 0 d\xff2 1\n"), 2, formats.read_qrels)


def test_write_qrels_round_trip(tmp_path):
    qrels = [Qrel("1", "a", 2), Qrel("1", "b", -2), Qrel("3", "a", 0, "Q0")]
    formats.write_qrels(tmp_path / "q", qrels)
    assert formats.read_qrels(tmp_path / "q") == qrels


# ------------------------------------------------------------------------------------------ runs

GOOD_RUN = "1 Q0 d1 1 3.5 tag\n1 Q0 d2 2 1.25 tag\n\n2 Q0 d1 1 -0.5 tag\n"


def test_run_is_read(tmp_path):
    run = formats.read_run(write(tmp_path / "r.run", GOOD_RUN))
    assert run == {
        "1": [ScoredDoc("1", "d1", 3.5), ScoredDoc("1", "d2", 1.25)],
        "2": [ScoredDoc("2", "d1", -0.5)],
    }


# a bad third line between good ones, in a qrels file and in a run: the reader names line 3
MALFORMED_THIRD_LINE = {
    "qrels": ("qrels.txt", "1 0 d1 1\n1 0 d2 0\n{}\n2 0 d1 1\n", formats.read_qrels),
    "run": ("r.run", "1 Q0 d1 1 3.5 tag\n1 Q0 d2 2 1.5 tag\n{}\n2 Q0 d1 1 1 tag\n", formats.read_run),
}


@pytest.mark.parametrize("kind, bad_line, expected", [
    ("qrels", "1 0 d3", "4 columns"),
    ("qrels", "1 0 d3 1 extra", "4 columns"),
    ("qrels", "1 0 d3 yes", "not an integer"),
    ("qrels", "1 0 d3 1.5", "not an integer"),
    ("qrels", "1 0 d1 0", "duplicate judgment"),
    ("run", "1 Q0 d3 3 0.5", "6 columns"),
    ("run", "1 Q0 d3 3 0.5 tag extra", "6 columns"),
    ("run", "1 Q0 d3 3 high tag", "not a number"),
    ("run", "1 Q0 d3 three 0.5 tag", "not an integer"),
    ("run", "1 Q0 d3 3.0 0.5 tag", "not an integer"),
    ("run", "1 Q0 d3 3 nan tag", "not finite"),
    ("run", "1 Q0 d3 3 -inf tag", "not finite"),
    ("run", "1 Q0 d1 3 0.1 tag", "listed twice"),
])
def test_malformed_qrels_or_run_line(tmp_path, kind, bad_line, expected):
    name, around, reader = MALFORMED_THIRD_LINE[kind]
    error = raises_at(write(tmp_path / name, around.format(bad_line)), 3, reader)
    assert expected in str(error)


def test_run_with_unknown_doc_id(tmp_path):
    path = write(tmp_path / "r.run", GOOD_RUN + "2 Q0 d9 2 -1 tag\n")
    assert formats.read_run(path)  # fine without a collection to check against
    error = raises_at(path, 5, formats.read_run, known_doc_ids={"d1", "d2"}, known_query_ids={"1", "2"})
    assert "unknown doc id 'd9'" in str(error)


def test_run_with_unknown_query_id(tmp_path):
    path = write(tmp_path / "r.run", GOOD_RUN + "7 Q0 d1 1 1 tag\n")
    known_docs = {"d1": Doc("d1", "x"), "d2": Doc("d2", "y")}  # a doc store (Mapping) works too
    error = raises_at(path, 5, formats.read_run, known_doc_ids=known_docs, known_query_ids={"1": None, "2": None})
    assert "unknown query id '7'" in str(error)


def test_non_utf8_run(tmp_path):
    raises_at(write(tmp_path / "r.run", GOOD_RUN.encode() + b"2 Q0 d\xfe 2 0 tag\n"), 5, formats.read_run)


def test_natural_key_orders_numbers_numerically():
    ids = ["10", "2", "b", "1", "a10", "a9", "MB100", "MB20"]
    assert sorted(ids, key=formats.natural_key) == ["1", "2", "10", "MB20", "MB100", "a9", "a10", "b"]


def test_write_run_canonical_order_and_ranks(tmp_path):
    run = {
        "10": [ScoredDoc("10", "x", 1.0)],
        "2": [ScoredDoc("2", "b", 0.5), ScoredDoc("2", "c", 2.0), ScoredDoc("2", "a", 0.5), ScoredDoc("2", "d", -1.0)],
        "1": [ScoredDoc("1", "z", 0.0)],
    }
    path = formats.write_run(tmp_path / "out" / "r.run", run, tag="mytag")
    lines = [line.split() for line in path.read_text().splitlines()]
    assert [(q, d, r) for q, _, d, r, _, _ in lines] == [
        ("1", "z", "1"),
        ("2", "c", "1"), ("2", "b", "2"), ("2", "a", "3"), ("2", "d", "4"),  # a tie: trec_eval's order
        ("10", "x", "1"),
    ]
    assert {line[1] for line in lines} == {"Q0"} and {line[5] for line in lines} == {"mytag"}


def test_write_run_accepts_a_flat_list_and_orders_it(tmp_path):
    flat = [ScoredDoc("10", "x", 1.0), ScoredDoc("2", "b", 1.0), ScoredDoc("2", "a", 3.0)]
    path = formats.write_run(tmp_path / "r.run", flat)
    assert [line.split()[:4] for line in path.read_text().splitlines()] == [
        ["2", "Q0", "a", "1"], ["2", "Q0", "b", "2"], ["10", "Q0", "x", "1"]]


def test_write_run_round_trip_keeps_exact_scores(tmp_path):
    import numpy

    scores = [0.1 + 0.2, 1 / 3, 1e-20, -5.5, 123456789.123456789, float(numpy.float32(0.7)), 2.0**-1074]
    run = {"q": [ScoredDoc("q", f"d{i}", s) for i, s in enumerate(scores)]}
    path = formats.write_run(tmp_path / "r.run", run)
    back = formats.read_run(path)
    assert {s.doc_id: s.score for s in back["q"]} == {f"d{i}": s for i, s in enumerate(scores)}
    assert [s.score for s in back["q"]] == sorted(scores, reverse=True)


def test_write_run_rejects_a_tag_with_spaces(tmp_path):
    with pytest.raises(ValueError, match="tag"):
        formats.write_run(tmp_path / "r.run", {"1": [ScoredDoc("1", "a", 1.0)]}, tag="my run")
    assert not (tmp_path / "r.run").exists()


def test_write_run_rejects_whitespace_in_ids(tmp_path):
    with pytest.raises(ValueError, match="whitespace"):
        formats.write_run(tmp_path / "r.run", {"1": [ScoredDoc("1", "doc a", 1.0)]})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("score", [float("nan"), float("inf"), -float("inf")])
def test_write_run_rejects_non_finite_scores(tmp_path, score):
    """read_run rejects NaN/inf scores, so write_run must not produce them (a NaN also breaks the order)."""
    run = {"1": [ScoredDoc("1", "a", 1.0), ScoredDoc("1", "b", score)]}
    with pytest.raises(ValueError, match="not finite"):
        formats.write_run(tmp_path / "r.run", run)
    assert list(tmp_path.iterdir()) == []


def test_write_run_with_a_duplicate_doc_writes_nothing(tmp_path):
    path = tmp_path / "r.run"
    path.write_text("previous\n")
    run = {"1": [ScoredDoc("1", "a", 1.0), ScoredDoc("1", "b", 0.5), ScoredDoc("1", "a", 0.2)]}
    with pytest.raises(ValueError, match="twice"):
        formats.write_run(path, run)
    assert path.read_text() == "previous\n"
    assert os.listdir(tmp_path) == ["r.run"]
    with pytest.raises(ValueError):
        formats.write_run(tmp_path / "new.run", run)
    assert os.listdir(tmp_path) == ["r.run"]


# ------------------------------------------------------------------------------------------ docs


def test_read_docs_sgml_jsonl_tsv(tmp_path):
    sgml = write(tmp_path / "d.trec", "<DOC>\n<DOCNO> 1 </DOCNO>\n<TEXT>hello\nworld</TEXT>\n</DOC>\n"
                                      "<DOC><DOCNO>2</DOCNO> one line </DOC>\n")
    assert list(formats.read_docs(sgml)) == [Doc("1", "hello world"), Doc("2", "one line")]
    jsonl = write(tmp_path / "d.jsonl", '{"_id": "a", "title": "T", "text": "body"}\n\n{"id": 5, "contents": "c"}\n')
    assert list(formats.read_docs(jsonl)) == [Doc("a", "T body"), Doc("5", "c")]
    tsv = write(tmp_path / "d.tsv", "MED-1\tsome text\nMED-2\tmore\ttext\n")
    assert list(formats.read_docs(tsv)) == [Doc("MED-1", "some text"), Doc("MED-2", "more\ttext")]
    assert list(formats.read_docs(write(tmp_path / "empty", "\n"))) == []


def test_duplicate_docs_in_sgml(tmp_path):
    path = write(tmp_path / "docs.trec", "<DOC>\n<DOCNO>1</DOCNO>\na\n</DOC>\n<DOC>\n<DOCNO>2</DOCNO>\nb\n</DOC>\n"
                                         "<DOC>\n<DOCNO>1</DOCNO>\nc\n</DOC>\n")
    error = raises_at(path, 9, formats.read_docs)
    assert "duplicate doc id '1'" in str(error)


def test_duplicate_docs_in_tsv(tmp_path):
    raises_at(write(tmp_path / "docs.tsv", "a\tx\nb\ty\na\tz\n"), 3, formats.read_docs)


@pytest.mark.parametrize("name, content, line", [
    ("docs.trec", "<DOC>\n<DOCNO>1</DOCNO>\na\n</DOC>\n<DOC>\n<DOCNO>2</DOCNO>\nb\n", 5),  # never closed
    ("docs.trec", "<DOC>\n<DOCNO>1</DOCNO>\na\n</DOC>\n\n<DOC>\n<TEXT>no docno</TEXT>\n</DOC>\n", 6),
    ("docs.trec", "<DOC>\n<DOCNO>1</DOCNO>\n</DOC>\nstray text\n", 4),
    ("docs.trec", "<DOC>\n<DOCNO>1</DOCNO>\n<DOC>\n", 3),
    ("docs.jsonl", '{"id": "1", "text": "a"}\n{"id": "2", "text": \n', 2),
    ("docs.jsonl", '{"id": "1", "text": "a"}\n{"text": "no id"}\n', 2),
    ("docs.jsonl", '{"id": "1", "text": "a"}\n["a list"]\n', 2),
    ("docs.tsv", "1\ta\n2 no tab\n", 2),
])
def test_malformed_docs(tmp_path, name, content, line):
    raises_at(write(tmp_path / name, content), line, formats.read_docs)


@pytest.mark.parametrize("name, content, line", [
    ("docs.trec", b"<DOC>\n<DOCNO>1</DOCNO>\nok\n</DOC>\n<DOC>\n<DOCNO>2</DOCNO>\nna\xefve\n</DOC>\n", 7),
    ("docs.tsv", b"1\tok\n2\tok\n3\t\x80\n", 3),
    ("docs.jsonl", b'{"id": "1", "text": "a"}\n{"id": "2", "text": "\xc3"}\n', 2),
])
def test_non_utf8_docs(tmp_path, name, content, line):
    raises_at(write(tmp_path / name, content), line, formats.read_docs)


# ---------------------------------------------------------------------------------------- atomic


def test_atomic_write_replaces_on_success(tmp_path):
    path = tmp_path / "sub" / "f.txt"
    with atomic_write(path) as handle:
        handle.write("new")
        assert not path.exists()  # nothing visible until the body finishes
    assert path.read_text() == "new"
    assert os.listdir(path.parent) == ["f.txt"]


def test_atomic_write_failure_keeps_previous_content_and_no_temp_file(tmp_path):
    path = write(tmp_path / "f.txt", "old content\n")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as handle:
            handle.write("partial")
            raise RuntimeError("interrupted")
    assert path.read_text() == "old content\n"
    assert os.listdir(tmp_path) == ["f.txt"]
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(tmp_path / "g.bin", "wb") as handle:
            handle.write(b"partial")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["f.txt"]


def test_atomic_write_gives_files_the_usual_permissions(tmp_path):
    """An atomically written file is as readable as one written with open() (mkstemp alone gives 0600)."""
    (tmp_path / "plain.txt").write_text("x")
    with atomic_write(tmp_path / "atomic.txt") as handle:
        handle.write("x")
    mode = lambda name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)  # noqa: E731
    assert mode("atomic.txt") == mode("plain.txt")
    # rewriting a file keeps the permissions it had
    os.chmod(tmp_path / "atomic.txt", 0o640)
    with atomic_write(tmp_path / "atomic.txt") as handle:
        handle.write("y")
    assert mode("atomic.txt") == 0o640


def test_atomic_directory_success_failure_and_replacement(tmp_path):
    target = tmp_path / "index"
    with atomic_directory(target) as temp:
        (temp / "a").write_text("1")
        assert not target.exists()
    assert (target / "a").read_text() == "1"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    plain.rmdir()
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as temp:
            (temp / "b").write_text("2")
            raise RuntimeError("interrupted")
    assert sorted(os.listdir(tmp_path)) == ["index"]
    assert os.listdir(target) == ["a"]
    with atomic_directory(target) as temp:
        (temp / "c").write_text("3")
    assert os.listdir(target) == ["c"]
    assert os.listdir(tmp_path) == ["index"]


def test_pipeline_errors_are_value_errors():
    error = DataFormatError("f.txt", 3, "bad")
    assert isinstance(error, PipelineError) and isinstance(error, ValueError)
    assert str(error) == "f.txt:3: bad"
    assert str(DataFormatError("f.txt", None, "bad")) == "f.txt: bad"


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    """Windows editors start files with a BOM: left in, it became part of the first query id (written into
    the run) or made the first judgment of a qrels file unreadable, and changed scores silently."""
    bom = "\ufeff"
    topics = write(tmp_path / "topics.tsv", bom + "1\tfirst query\n2\tsecond query\n")
    assert list(formats.read_topics(topics)) == ["1", "2"]
    qrels = write(tmp_path / "qrels.txt", bom + "1 0 d1 1\n2 0 d2 0\n")
    assert formats.read_qrels(qrels) == [Qrel("1", "d1", 1), Qrel("2", "d2", 0)]
    run = write(tmp_path / "a.run", bom + "1 Q0 d1 1 2.0 t\n1 Q0 d2 2 1.0 t\n")
    assert [h.doc_id for h in formats.read_run(run)["1"]] == ["d1", "d2"]
    docs = write(tmp_path / "docs.jsonl", bom + '{"id": "d1", "contents": "text one"}\n')
    assert list(formats.read_docs(docs)) == [Doc("d1", "text one")]


@pytest.mark.parametrize("name, content, line", [
    ("topics.tsv", "1\tfirst query\nq 2\tsecond query\n", 2),
])
def test_query_ids_with_whitespace_are_rejected_when_read(tmp_path, name, content, line):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataFormatError, match=rf"{name}:{line}: query id 'q 2' contains whitespace"):
        formats.read_topics(path)


@pytest.mark.parametrize("name, content, line", [
    ("docs.jsonl", '{"id": "d1", "contents": "x"}\n{"id": "d 2", "contents": "y"}\n', 2),
    ("docs.tsv", "d1\tx\nd 2\ty\n", 2),
    ("docs.trec", "<DOC>\n<DOCNO>d1</DOCNO>\nx\n</DOC>\n<DOC>\n<DOCNO>d 2</DOCNO>\ny\n</DOC>\n", 5),
])
def test_doc_ids_with_whitespace_are_rejected_when_read(tmp_path, name, content, line):
    from pipeline.core.formats import read_docs

    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataFormatError, match=rf"{name}:{line}: doc id 'd 2' contains whitespace"):
        list(read_docs(path))


def test_the_rank_column_agrees_with_trec_eval_on_ties(tmp_path):
    """trec_eval ranks tied scores by doc id descending; the written rank column says the same, so RR and P@k
    computed from the rank column and from the scores agree."""
    import pytrec_eval

    run = {"1": [ScoredDoc("1", doc, 1.0) for doc in ("d1", "d3", "d2")] + [ScoredDoc("1", "d0", 2.0)]}
    path = formats.write_run(tmp_path / "ties.run", run)
    ranks = [line.split()[2] for line in path.read_text().splitlines()]
    assert ranks == ["d0", "d3", "d2", "d1"]
    for relevant, expected_rr in (("d1", 1 / 4), ("d3", 1 / 2)):
        evaluator = pytrec_eval.RelevanceEvaluator({"1": {relevant: 1}}, {"recip_rank"})
        scores = {"1": {hit.doc_id: hit.score for hit in run["1"]}}
        assert evaluator.evaluate(scores)["1"]["recip_rank"] == expected_rr
        assert 1 / (ranks.index(relevant) + 1) == expected_rr
