"""Every exception that can cross from Anserini's JVM is one line and exit 2, never a Java traceback.

Issue 34 rows 3 and 6: a damaged header made Lucene's ``CorruptIndexException`` cross as a jnius traceback; a
query of 1,100 distinct terms exceeded Lucene's clause limit (1,024), and Anserini's batch search failed as a
whole with ``queryCount = 2 is not equal to completedTaskCount = 1``.
"""
from __future__ import annotations

import logging

import pytest

from indexes.jvm import anserini_class
from indexes.lucene import MAX_QUERY_TERMS, BM25Retriever, LuceneOptions, build_index, external_index_dir
from pipeline.core.errors import CorruptCacheError, PipelineError
from pipeline.core.records import Query
from tests.helpers import tiny_lucene_dataset as tiny_dataset


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path_factory.mktemp("lucene"))


def test_a_query_of_1100_distinct_terms_is_searched(index):
    words = " ".join(f"w{i}x" for i in range(1100)) + " quantum"
    run = BM25Retriever(index).search([Query("long", words), Query("2", "cat mat")], 5)
    assert [d.doc_id for d in run["long"]] == ["quantum"]          # the one term that matches, found
    assert run["2"]                                                 # the batch's other query too


def test_a_query_over_the_term_limit_is_cut_with_a_warning(index, caplog):
    words = "quantum " + " ".join(f"t{i}z" for i in range(MAX_QUERY_TERMS + 50))
    with caplog.at_level(logging.WARNING, logger="indexes.lucene"):
        run = BM25Retriever(index).search([Query("huge", words)], 5)
    assert [d.doc_id for d in run["huge"]] == ["quantum"]
    assert f"query huge: more than {MAX_QUERY_TERMS} distinct terms" in caplog.text


def test_a_query_failing_inside_the_batch_search_is_named_in_one_line(index):
    retriever = BM25Retriever(index)
    searcher = anserini_class("org.apache.lucene.search.IndexSearcher")
    previous = searcher.getMaxClauseCount()
    searcher.setMaxClauseCount(8)            # any failure inside Anserini's thread pool, here TooManyClauses
    try:
        with pytest.raises(PipelineError) as raised:
            retriever.search([Query("ok", "cat"), Query("wide", " ".join(f"u{i}v" for i in range(20)))], 5)
    finally:
        searcher.setMaxClauseCount(previous)
    message = str(raised.value)
    assert message.startswith("query wide: Anserini's search failed") and "TooManyClauses" in message
    assert "\n" not in message and "completedTaskCount" not in message


def test_a_damaged_external_index_is_one_line(index, tmp_path):
    import shutil

    copy = tmp_path / "external"
    shutil.copytree(external_index_dir(index), copy)
    target = next(copy.glob("segments_*"))
    data = bytearray(target.read_bytes())
    data[2] ^= 0xFF                                            # Lucene's codec magic
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptCacheError) as raised:
        BM25Retriever(copy, external=LuceneOptions("porter")).search([Query("1", "cat")], 5)
    assert "cannot be read" in str(raised.value) and "\n" not in str(raised.value)


def test_a_java_exception_while_indexing_is_one_line(tmp_path, monkeypatch):
    from indexes import lucene_build

    real = lucene_build.anserini_class

    class FailingIndexer:         # what IndexCollection throws on a bad collection or an internal fault
        @staticmethod
        def main(args):
            real("java.lang.Integer").parseInt("not a number")

    monkeypatch.setattr(lucene_build, "anserini_class",
                        lambda name: FailingIndexer if name.endswith("IndexCollection") else real(name))
    with pytest.raises(PipelineError) as raised:
        build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path)
    message = str(raised.value)
    assert message.startswith("Anserini failed while indexing 'tiny' (NumberFormatException: For input string")
    assert "\n" not in message and "nothing was cached" in message
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
