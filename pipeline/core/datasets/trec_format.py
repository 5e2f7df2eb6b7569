"""TREC-format collections: topics (SGML or TSV), qrels, documents (SGML, JSONL, TSV or rank_llm JSON) and an
optional first-stage run, read into a :class:`~pipeline.core.datasets.dataset.Dataset`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from .. import trec
from ..errors import DataFormatError
from ..records import Doc
from .dataset import Dataset
from .fingerprint import files_fingerprint


def trec_dataset(
    name: str,
    topics: Path,
    qrels: Path | None,
    docs: list[Path],
    run: Path | None = None,
    judged_only: bool = False,
    source: str = "",
) -> Dataset:
    """A collection in TREC files: topics (SGML or TSV), qrels, documents (SGML, JSONL, TSV or rank_llm
    JSON) and optionally a first-stage run. ``judged_only`` keeps the topics that have qrels."""
    queries = trec.read_topics(topics)
    judgments = trec.read_qrels(qrels) if qrels else []
    if judged_only:
        judged = {q.query_id for q in judgments}
        queries = {qid: q for qid, q in queries.items() if qid in judged}

    def docs_factory() -> Iterator[Doc]:
        seen: set[str] = set()
        for path in docs:
            reader = _rank_llm_docs if path.suffix == ".json" else trec.read_docs_numbered
            for line, doc in reader(path):
                if doc.doc_id in seen:
                    if path.suffix == ".json":
                        continue  # the same passage retrieved for two queries
                    raise DataFormatError(path, line, f"duplicate doc id {doc.doc_id!r} (also in an earlier file)")
                seen.add(doc.doc_id)
                yield doc

    first_stage = None
    if run is not None:
        first_stage = {qid: hits for qid, hits in trec.read_run(run).items() if qid in queries}
    return Dataset(
        name=name,
        queries=queries,
        qrels=[q for q in judgments if q.query_id in queries],
        docs_factory=docs_factory,
        fingerprint=files_fingerprint([topics, *(p for p in [qrels, run] if p), *docs]),
        first_stage=first_stage,
        source=source or str(topics.parent),
    )


def _rank_llm_docs(path: Path) -> Iterator[tuple[None, Doc]]:
    """Passages inside a rank_llm retrieval JSON (``[{"query", "hits": [{"docid", "content"}]}]``), each as
    ``(None, Doc)`` (the JSON is read whole, so there is no line to report)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            records = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(path, getattr(error, "lineno", None), f"not a valid UTF-8 JSON file: {error}") from None
    for number, record in enumerate(records):
        for hit in record.get("hits", []):
            if "docid" not in hit or "content" not in hit:
                raise DataFormatError(path, None, f"query record {number}: hit without 'docid'/'content'")
            yield None, Doc(str(hit["docid"]), " ".join(str(hit["content"]).split()))
