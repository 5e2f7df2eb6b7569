"""Readers and writers of the files a retrieval experiment reads and writes, one module per kind of file:
:mod:`.topics`, :mod:`.qrels`, :mod:`.runs` and :mod:`.docs` (TREC SGML, JSONL, TSV, SMART, HTML), including
the BEIR, Anserini and SMART layouts; :mod:`.common` holds what several readers share. Every name is
importable from here.

Readers are strict: a malformed line raises :class:`~pipeline.core.errors.DataFormatError` naming the file,
the line and what was expected, instead of being skipped. Writers are atomic. A whole collection in these
formats (topics, qrels, documents and an optional run) becomes a dataset in
:mod:`pipeline.core.datasets.trec_format`.

Example:
    >>> from pipeline.core.formats import read_run, write_run
"""
from __future__ import annotations

from .common import check_id
from .docs import DOC_FORMATS, HTML_SUFFIXES, html_text, read_docs, read_docs_numbered
from .qrels import QRELS_FORMATS, is_smart_qrels, read_qrels, write_qrels
from .runs import natural_key, read_run, sorted_run, write_run
from .topics import TOPIC_FIELDS, TOPIC_FORMATS, check_topic_field, read_topics, write_topics_tsv

__all__ = [
    "check_id", "DOC_FORMATS", "HTML_SUFFIXES", "html_text", "read_docs", "read_docs_numbered", "QRELS_FORMATS",
    "is_smart_qrels", "read_qrels", "write_qrels", "natural_key", "read_run", "sorted_run", "write_run",
    "TOPIC_FIELDS", "TOPIC_FORMATS", "check_topic_field", "read_topics", "write_topics_tsv",
]
