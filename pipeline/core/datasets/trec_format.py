"""TREC-format collections: topics (any layout :func:`pipeline.core.formats.read_topics` reads), qrels (one file,
or one per split as BEIR ships them), documents (SGML, JSONL, TSV, SMART, HTML folders or rank_llm JSON) and an
optional first-stage run, read into a :class:`~pipeline.core.datasets.dataset.Dataset`."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Iterator, Mapping

from .. import formats
from ..errors import DataFormatError
from ..records import Doc
from .dataset import Dataset
from .fingerprint import files_fingerprint

log = logging.getLogger(__name__)


def trec_dataset(
    name: str,
    topics: Path,
    qrels: Path | None,
    docs: list[Path],
    run: Path | None = None,
    judged_only: bool = False,
    source: str = "",
    topic_field: str = "title",
    split_qrels: Mapping[str, Path] | None = None,
) -> Dataset:
    """A collection in TREC files: topics, qrels, documents (SGML, JSONL, TSV, SMART, a folder of HTML files
    or rank_llm JSON) and optionally a first-stage run. ``judged_only`` keeps the topics that have qrels.

    ``topic_field`` picks each topic's text (:data:`pipeline.core.formats.TOPIC_FIELDS`: ``title``,
    ``description`` ...). ``split_qrels`` (``{split: qrels file}``, BEIR's ``qrels/train.tsv`` ...) adds
    those files' judgments and makes one split of each file's judged queries.

    Args:
        name: the dataset's name.
        topics: the topics file.
        qrels: the judgments file (``None``: none).
        docs: the documents files (or folders of HTML files).
        run: a first-stage run to ship with the data.
        judged_only: keep only the topics that have judgments.
        source: where the data came from, for reports.
        topic_field: which text of a topic is the query.
        split_qrels: ``{split: qrels file}``, one split each.

    Returns:
        The dataset; documents are read lazily.

    Raises:
        DataFormatError: a bad line in the topics, qrels or run.
    """
    queries = formats.read_topics(topics, topic_field)
    judgments = formats.read_qrels(qrels) if qrels else []
    splits: dict[str, list[str]] = {}
    for split, path in (split_qrels or {}).items():
        split_judgments = formats.read_qrels(path)
        judgments.extend(split_judgments)
        splits[split] = [qid for qid in dict.fromkeys(q.query_id for q in split_judgments) if qid in queries]
    orphans = sorted({q.query_id for q in judgments} - set(queries), key=formats.natural_key)
    if orphans:  # e.g. Cranfield: cran.qry says .I 001, 002, 004 ...; cranqrel numbers them 1, 2, 3 ...
        log.warning("%s: %d judged query ids have no topic in %s (%s); the two files may number queries "
                    "differently", name, len(orphans), topics.name, ", ".join(orphans[:5]))
    if judged_only:
        judged = {q.query_id for q in judgments}
        queries = {qid: q for qid, q in queries.items() if qid in judged}

    def docs_factory() -> Iterator[Doc]:
        seen: set[str] = set()
        for path in docs:
            reader = _rank_llm_docs if path.suffix == ".json" else formats.read_docs_numbered
            for line, doc in reader(path):
                if doc.doc_id in seen:
                    if path.suffix == ".json":
                        continue  # the same passage retrieved for two queries
                    raise DataFormatError(path, line, f"duplicate doc id {doc.doc_id!r} (also in an earlier file)")
                seen.add(doc.doc_id)
                yield doc

    first_stage = None
    if run is not None:
        first_stage = {qid: hits for qid, hits in formats.read_run(run).items() if qid in queries}
    files = [topics, *(p for p in [qrels, run] if p), *(split_qrels or {}).values(), *_doc_files(docs)]
    fingerprint = files_fingerprint(files)
    if topic_field != "title":  # same files, other query texts: models trained on titles must not be reused
        fingerprint = hashlib.sha1(f"{fingerprint}:topic_field={topic_field}".encode()).hexdigest()
    return Dataset(
        name=name,
        queries=queries,
        qrels=[q for q in judgments if q.query_id in queries],
        docs_factory=docs_factory,
        fingerprint=fingerprint,
        splits=splits,
        first_stage=first_stage,
        source=source or str(topics.parent),
    )


def _doc_files(docs: list[Path]) -> list[Path]:
    """The files behind the document paths: a folder of HTML documents stands for its HTML files."""
    files: list[Path] = []
    for path in docs:
        if Path(path).is_dir():
            files.extend(sorted(p for p in Path(path).rglob("*") if p.is_file() and p.suffix.lower() in formats.HTML_SUFFIXES))
        else:
            files.append(path)
    return files


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
