"""The line-aligned "pair" format (``a.toks b.toks id.txt sim.txt``, one folder per split) that WikiQA,
TrecQA and HCAN's Microblog candidates ship in, read into a :class:`~pipeline.core.datasets.dataset.Dataset`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .. import trec
from ..errors import DataFormatError
from ..records import Doc, Qrel, Query, Run, ScoredDoc
from ..textio import iter_lines
from .dataset import Dataset
from .fingerprint import files_fingerprint

#: the four line-aligned files of one pair folder: query text, candidate text, ids, label
PAIR_FILES = ("a.toks", "b.toks", "id.txt", "sim.txt")


@dataclass
class PairSplit:
    """One folder of line-aligned pairs: a query and one candidate (full text) per line."""

    name: str
    queries: dict[str, Query]
    docs: dict[str, Doc]
    labels: list[Qrel]
    run: Run


def read_pair_folder(folder: str | os.PathLike, split: str = "", qid_prefix: str = "") -> PairSplit:
    """Read ``a.toks``, ``b.toks``, ``id.txt``, ``sim.txt`` (line-aligned) from one folder.

    ``id.txt`` may hold the query id alone (WikiQA, TrecQA train: doc ids become ``<qid>-<n>``, n counting
    the query's candidates from 0), ``qid 0 docid label`` (TrecQA dev/test) or a TREC run line
    (Microblog: ``qid Q0 docid rank score tag``, whose scores become the first-stage run). Without scores,
    the file order is the candidate ranking. Errors name the file and line.
    """
    folder = Path(folder)
    missing = [name for name in PAIR_FILES if not (folder / name).is_file()]
    if missing:
        raise DataFormatError(folder, None, f"pair-format folder lacks {', '.join(missing)}; expected {', '.join(PAIR_FILES)}")
    columns = [list(iter_lines(folder / name)) for name in PAIR_FILES]
    lengths = {name: len(lines) for name, lines in zip(PAIR_FILES, columns)}
    if len(set(lengths.values())) != 1:
        longest = max(PAIR_FILES, key=lambda name: lengths[name])
        shorter = [name for name in PAIR_FILES if lengths[name] < lengths[longest]]
        first_unmatched = min(lengths[name] for name in shorter) + 1
        raise DataFormatError(
            folder / longest, first_unmatched,
            f"no matching line in {', '.join(shorter)}; pair files must be line-aligned, got line counts {lengths}",
        )
    queries: dict[str, Query] = {}
    docs: dict[str, Doc] = {}
    labels: list[Qrel] = []
    run: Run = {}
    seen_pairs: set[tuple[str, str]] = set()
    per_query_count: dict[str, int] = {}
    for (number, query_text), (_, doc_text), (_, id_line), (_, label_text) in zip(*columns):
        parts = id_line.split()
        if len(parts) == 1:
            qid, docid, score = parts[0], None, None
        elif len(parts) == 4:
            qid, docid, score = parts[0], parts[2], None
        elif len(parts) == 6:
            qid, docid = parts[0], parts[2]
            try:
                score = float(parts[4])
            except ValueError:
                raise DataFormatError(folder / "id.txt", number, f"score {parts[4]!r} is not a number") from None
        else:
            raise DataFormatError(
                folder / "id.txt", number,
                f"expected 'qid', 'qid 0 docid label' or 'qid Q0 docid rank score tag', got {id_line[:80]!r}",
            )
        qid = qid_prefix + qid
        position = per_query_count.get(qid, 0)
        per_query_count[qid] = position + 1
        docid = docid if docid is not None else f"{qid}-{position}"
        query_text = " ".join(query_text.split())
        if not query_text:
            raise DataFormatError(folder / "a.toks", number, f"empty query text for query {qid!r}")
        known = queries.get(qid)
        if known is None:
            queries[qid] = Query(qid, query_text)
        elif known.text != query_text:
            raise DataFormatError(folder / "a.toks", number, f"query {qid!r} has two different texts in one folder")
        if (qid, docid) in seen_pairs:
            raise DataFormatError(folder / "id.txt", number, f"duplicate pair: doc {docid!r} listed twice for query {qid!r}")
        seen_pairs.add((qid, docid))
        if docid not in docs:
            docs[docid] = Doc(docid, " ".join(doc_text.split()))
        label_text = label_text.strip()
        try:
            label = int(float(label_text))
        except ValueError:
            raise DataFormatError(folder / "sim.txt", number, f"label {label_text!r} is not a number; expected 0 or 1") from None
        labels.append(Qrel(qid, docid, label))
        run.setdefault(qid, []).append(ScoredDoc(qid, docid, score if score is not None else -float(position)))
    return PairSplit(split or folder.name, queries, docs, labels, run)


def pair_dataset(
    name: str,
    split_folders: dict[str, Path],
    qrels_files: Iterable[Path] = (),
    source: str = "",
) -> Dataset:
    """Combine pair folders (one per split) into a Dataset.

    Query ids are kept as they are unless two splits use the same id for different questions (WikiQA,
    TrecQA number queries per split); then every id becomes ``<split>/<id>``. Qrels come from the given
    TREC qrels files (Microblog: the official NIST judgments) or else from the ``sim.txt`` labels.
    """
    raw_ids: dict[str, set[str]] = {}
    for split, folder in split_folders.items():
        raw_ids[split] = {line.split()[0] for _, line in iter_lines(Path(folder) / "id.txt") if line.strip()}
    all_ids = [qid for ids in raw_ids.values() for qid in ids]
    prefix = len(all_ids) != len(set(all_ids))
    parts = [read_pair_folder(folder, split, f"{split}/" if prefix else "") for split, folder in split_folders.items()]
    queries: dict[str, Query] = {}
    docs: dict[str, Doc] = {}
    labels: list[Qrel] = []
    run: Run = {}
    for part in parts:
        queries.update(part.queries)
        for doc_id, doc in part.docs.items():
            docs.setdefault(doc_id, doc)
        labels.extend(part.labels)
        run.update(part.run)
    qrels_files = list(qrels_files)
    if qrels_files:
        qrels = [q for path in qrels_files for q in trec.read_qrels(path) if q.query_id in queries]
    else:
        qrels = labels
    files = [Path(f) / n for f in split_folders.values() for n in PAIR_FILES] + qrels_files
    return Dataset(
        name=name,
        queries=queries,
        qrels=qrels,
        docs_factory=lambda: docs.values(),
        fingerprint=files_fingerprint(files),
        splits={part.name: list(part.queries) for part in parts},
        first_stage=run,
        source=source or ", ".join(str(f) for f in split_folders.values()),
        _store=docs,
    )
