"""Collections as they are found (issue 35 item 7), in their exact shapes, loading with no edits: SMART
relevance files (``qid docid 0 0.000000``), pair folders with duplicate (query, doc) lines, a trailing ``.I``
without an id, and a folder of original SMART ``.ALL`` / ``.QRY`` / ``.REL`` files."""
from __future__ import annotations

import logging

import pytest

from pipeline.core.datasets import load_local
from pipeline.core.errors import DataFormatError
from pipeline.core.records import Qrel
from pipeline.core.formats import is_smart_qrels, read_docs, read_qrels, read_topics
from tests.conftest import write

# CISI.REL as distributed (Glasgow's test collections): right-aligned ids, a 0, a zero float
CISI_REL = ("     1     28 0 0.000000\n"
            "     1     35 0 0.000000\n"
            "     2     29 0 0.000000\n"
            "     2     68 0 0.000000\n")
# CACM's qrels.text: zero-padded query ids, two spaces, integer zeros
CACM_QRELS = "01 1410  0 0\n01 1572  0 0\n02 2434  0 0\n"
# MED.REL is TREC-shaped: 'qid 0 docid 1'
MED_REL = "1 0 13 1\n1 0 14 1\n2 0 80 1\n"


def test_smart_relevance_files_are_read_with_the_right_columns(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pipeline.core.formats")
    cisi = write(tmp_path / "CISI.REL", CISI_REL)
    assert is_smart_qrels(cisi)
    # read as TREC, this file would judge document '0' (iteration '28') irrelevant: the docs must be 28, 35 ...
    assert read_qrels(cisi) == [Qrel("1", "28", 1), Qrel("1", "35", 1), Qrel("2", "29", 1), Qrel("2", "68", 1)]
    assert "SMART relevance judgments" in caplog.text
    cacm = write(tmp_path / "qrels.text", CACM_QRELS)
    assert read_qrels(cacm) == [Qrel("1", "1410", 1), Qrel("1", "1572", 1), Qrel("2", "2434", 1)]
    med = write(tmp_path / "MED.REL", MED_REL)
    assert not is_smart_qrels(med)
    assert read_qrels(med) == [Qrel("1", "13", 1), Qrel("1", "14", 1), Qrel("2", "80", 1)]
    # one TREC line among SMART-shaped ones: read as TREC, whose relevance must then be an integer
    mixed = write(tmp_path / "mixed.rel", "1 28 0 0.000000\n1 0 35 1\n")
    with pytest.raises(DataFormatError, match="relevance '0.000000' is not an integer"):
        read_qrels(mixed)


def pair_folder(folder, rows):
    """A pair folder (a.toks b.toks id.txt sim.txt), one (query, doc text, id line, label) per row."""
    for index, name in enumerate(("a.toks", "b.toks", "id.txt", "sim.txt")):
        write(folder / name, "".join(f"{row[index]}\n" for row in rows))
    return folder


# the public TrecQA-style layout ('qid 0 docid label'), with a pair listed twice with the same label and
# one listed twice with conflicting labels
ROWS = [
    ("what is a cave", "a cave is a hole", "1 0 d1 1", "1"),
    ("what is a cave", "caves are cold", "1 0 d2 0", "0"),
    ("what is a cave", "a cave is a hole", "1 0 d1 1", "1"),     # same pair, same label
    ("what is a cave", "caves are cold", "1 0 d2 1", "1"),       # same pair, another label
    ("who wrote it", "she wrote it", "2 0 d3 1", "1"),
    ("who wrote it", "nobody knows", "2 0 d4 0", "0"),
]


def test_duplicate_pair_lines_are_merged_for_ranking_and_kept_for_classification(tmp_path, caplog):
    from pipeline.classify import labelled_pairs

    caplog.set_level(logging.INFO, logger="pipeline.core.datasets.pair_format")
    folder = pair_folder(tmp_path / "qa" / "train", ROWS)
    pair_folder(tmp_path / "qa" / "test", [("who is it", "it is me", "3 0 d5 1", "1"), ("who is it", "no", "3 0 d6 0", "0")])
    dataset = load_local(tmp_path / "qa")
    # ranking: one candidate per (query, doc), in first-seen order; a conflicting pair judged by its highest label
    assert [h.doc_id for h in dataset.first_stage["1"]] == ["d1", "d2"]
    assert sorted((q.query_id, q.doc_id, q.relevance) for q in dataset.qrels if q.query_id == "1") == [
        ("1", "d1", 1), ("1", "d2", 1)]
    assert f"{folder / 'id.txt'}: 2 duplicate (query, doc) line(s) merged" in caplog.text
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING)
    assert "1 duplicate (query, doc) line(s) disagree" in warning.message and "line 4" in warning.message
    # classification: every line is a pair to classify, with its own label
    pairs = labelled_pairs(dataset, ["1"], "train")
    assert pairs.pairs == (("1", "d1"), ("1", "d2"), ("1", "d1"), ("1", "d2"))
    assert pairs.labels.tolist() == [1, 0, 1, 1]
    # a subset keeps its own lines
    assert dataset.subset(["2"]).pairs == [("2", "d3", 1), ("2", "d4", 0)]


CISI_ALL = """.I 1
.T
18 Editions of the Dewey Decimal Classifications
.A
Comaromi, J.P.
.W
   The present study is a history of the DEWEY Decimal
Classification.
.X
1\t5\t1
.I 2
.T
Use Made of Technical Libraries
.W
This report is an analysis of 6300 acts of use
in 104 technical libraries.
.X
2\t2\t2
.I
"""

CISI_QRY = """.I 1
.W
What problems and concerns are there in making up descriptive titles?
.I 2
.W
How can actually pertinent data be obtained from technical libraries?
.I
"""


def test_a_trailing_nameless_I_is_skipped_with_a_warning(tmp_path, caplog):
    docs = write(tmp_path / "CISI.ALL", CISI_ALL)
    with caplog.at_level(logging.WARNING, logger="pipeline.core.formats"):
        read = list(read_docs(docs))
    assert [d.doc_id for d in read] == ["1", "2"]
    assert read[0].text == "18 Editions of the Dewey Decimal Classifications The present study is a history of the " \
                           "DEWEY Decimal Classification."
    assert f"{docs}:19: '.I' without an id" in caplog.text and "skipped" in caplog.text
    topics = write(tmp_path / "CISI.QRY", CISI_QRY)
    assert list(read_topics(topics)) == ["1", "2"]
    # a nameless '.I' with a record after it is still an error naming its line
    middle = write(tmp_path / "bad.all", ".I 1\n.W\nfirst\n.I\n.W\nsecond\n")
    with pytest.raises(DataFormatError, match=r"bad.all:4: '.I' without an id"):
        list(read_docs(middle))


def test_a_folder_of_original_smart_files_loads_with_no_edits(tmp_path):
    folder = tmp_path / "cisi"
    write(folder / "CISI.ALL", CISI_ALL)
    write(folder / "CISI.QRY", CISI_QRY)
    write(folder / "CISI.REL", "     1      2 0 0.000000\n     2      1 0 0.000000\n     2      2 0 0.000000\n")
    write(folder / "CISI.BLN", "(an index file the loader does not need)\n")
    dataset = load_local(folder)
    assert sorted(dataset.queries) == ["1", "2"]
    assert sorted(dataset.doc_store()) == ["1", "2"]
    assert sorted((q.query_id, q.doc_id, q.relevance) for q in dataset.qrels) == [
        ("1", "2", 1), ("2", "1", 1), ("2", "2", 1)]
