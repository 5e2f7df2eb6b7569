"""The line-aligned "pair" format (``a.toks b.toks id.txt sim.txt``, one folder per split) that WikiQA,
TrecQA and HCAN's Microblog candidates ship in, and WikiQA's own TSV files (what MatchZoo reads), read into
a :class:`~pipeline.core.datasets.dataset.Dataset`."""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .. import formats
from ..errors import DataFormatError
from ..formats import check_id
from ..records import Doc, Qrel, Query, Run, ScoredDoc
from ..textio import iter_lines
from .dataset import Dataset
from .fingerprint import files_fingerprint

log = logging.getLogger(__name__)

#: the four line-aligned files of one pair folder: query text, candidate text, ids, label
PAIR_FILES = ("a.toks", "b.toks", "id.txt", "sim.txt")


@dataclass
class PairSplit:
    """One folder of line-aligned pairs: a query and one candidate (full text) per line. ``labels`` and ``run``
    hold each (query, doc) once (a pair listed on several lines merged: its first place, its highest label);
    ``pairs`` holds every line's ``(query_id, doc_id, label)``, as pair classification scores them."""

    name: str
    queries: dict[str, Query]
    docs: dict[str, Doc]
    labels: list[Qrel]
    run: Run
    pairs: list[tuple[str, str, int]] = field(default_factory=list)


#: the layouts of ``id.txt`` lines, by number of columns (quoted in its errors)
ID_LAYOUTS = {
    1: "'qid' (WikiQA, TrecQA train: doc ids become '<qid>-<n>')",
    2: "'qid docid'",
    3: "'qid docid label'",
    4: "'qid 0 docid label' (TrecQA dev/test)",
    6: "'qid Q0 docid rank score tag' (a TREC run line, Microblog: its scores are the first stage)",
}
#: the header of WikiQA's own TSV files (``WikiQA-train.tsv`` ..., what MatchZoo's WikiQA loader reads)
WIKIQA_COLUMNS = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label")


def _layouts() -> str:
    return ", ".join(ID_LAYOUTS.values())


@dataclass(slots=True)
class _Row:
    """One candidate pair before ids are settled: where it is, its ids, texts, label and first-stage score."""

    line: int
    qid: str
    docid: str | None
    query_text: str
    doc_text: str
    label: int
    score: float | None


def read_pair_folder(folder: str | os.PathLike, split: str = "", qid_prefix: str = "") -> PairSplit:
    """Read ``a.toks``, ``b.toks``, ``id.txt``, ``sim.txt`` (line-aligned) from one folder.

    ``id.txt`` holds one of :data:`ID_LAYOUTS` per line, the same in the whole file: the query id alone
    (WikiQA, TrecQA train: doc ids become ``<qid>-<n>``, n counting the query's candidates from 0),
    ``qid docid``, ``qid docid label``, ``qid 0 docid label`` (TrecQA dev/test) or a TREC run line
    (Microblog: ``qid Q0 docid rank score tag``, whose scores become the first-stage run). ``sim.txt``'s
    label wins over a label column of ``id.txt``. Without scores, the file order is the candidate ranking.
    In the ``qid docid`` and ``qid docid label`` layouts, doc ids that name different texts within the
    folder (candidates numbered per question: ``0 0``, ``0 1``, ``1 0`` ...) are local to their question:
    every doc id of the folder then becomes ``<qid>-<docid>``; in the 4- and 6-column layouts doc ids are
    global (a tweet retrieved for two queries is one document). Other files of the folder (``url.txt``,
    ``boundary.txt``, ``numrels.txt``) are not read.

    Args:
        folder: the folder of the four files.
        split: the split's name.
        qid_prefix: prepended to every query id (and to doc ids made from them).

    Returns:
        The split.

    Raises:
        DataFormatError: a missing file, or a bad line named with its file and number.
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
    ids = folder / "id.txt"
    rows: list[_Row] = []
    width = None
    for (number, query_text), (_, doc_text), (_, id_line), (_, label_text) in zip(*columns):
        parts = id_line.split()
        if len(parts) not in ID_LAYOUTS:
            raise DataFormatError(ids, number, f"expected one of {_layouts()}; got {id_line[:80]!r}")
        if width is None:
            width = len(parts)
        elif len(parts) != width:
            raise DataFormatError(ids, number, f"{len(parts)} columns where line 1 has {width}: one layout per file "
                                               f"is expected, {ID_LAYOUTS[width]}; got {id_line[:80]!r}")
        qid, docid, score = parts[0], None, None
        if width in (2, 3):
            docid = parts[1]
        elif width in (4, 6):
            docid = parts[2]
        if width == 3 and not _is_number(parts[2]):
            raise DataFormatError(ids, number, f"label {parts[2]!r} is not a number; expected {ID_LAYOUTS[3]}")
        if width == 6:
            try:
                score = float(parts[4])
            except ValueError:
                raise DataFormatError(ids, number, f"score {parts[4]!r} is not a number") from None
            if not math.isfinite(score):
                raise DataFormatError(ids, number, f"score {parts[4]!r} is not a finite number")
        label_text = label_text.strip()
        try:
            label = int(float(label_text))
        except (ValueError, OverflowError):  # int(float("inf")) overflows
            raise DataFormatError(folder / "sim.txt", number, f"label {label_text!r} is not a number; expected 0 or 1") from None
        rows.append(_Row(number, qid_prefix + qid, docid, query_text, doc_text, label, score))
    # only the short layouts number candidates per question; TrecQA's and Microblog's doc ids are global
    local = width in (2, 3) and _local_doc_ids(rows)
    return _pair_split(split or folder.name, rows, folder / "a.toks", ids, local_doc_ids=local)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _local_doc_ids(rows: list[_Row]) -> bool:
    """True when a doc id comes with two different texts: the ids only number each question's candidates."""
    texts: dict[str, str] = {}
    for row in rows:
        if row.docid is not None and texts.setdefault(row.docid, " ".join(row.doc_text.split())) != " ".join(row.doc_text.split()):
            return True
    return False


def _pair_split(name: str, rows: list[_Row], query_file: Path, id_file: Path, local_doc_ids: bool = False) -> PairSplit:
    """The queries, documents, labels and candidate ranking of parsed rows (errors name ``query_file`` for
    query texts and ``id_file`` for ids)."""
    queries: dict[str, Query] = {}
    docs: dict[str, Doc] = {}
    run: Run = {}
    label_of: dict[tuple[str, str], int] = {}  # each (query, doc) once, in file order: the ranking's judgments
    lines: list[tuple[str, str, int]] = []
    merged = 0
    conflicts: list[tuple[str, str, int, int, int]] = []  # query, doc, line, its label, the earlier label
    per_query_count: dict[str, int] = {}
    for row in rows:
        qid = row.qid
        position = per_query_count.get(qid, 0)
        per_query_count[qid] = position + 1
        if row.docid is None:
            docid = f"{qid}-{position}"
        else:
            docid = f"{qid}-{row.docid}" if local_doc_ids else row.docid
        query_text = " ".join(row.query_text.split())
        if not query_text:
            raise DataFormatError(query_file, row.line, f"empty query text for query {qid!r}")
        known = queries.get(qid)
        if known is None:
            queries[qid] = Query(check_id(id_file, row.line, "query", qid), query_text)
        elif known.text != query_text:
            raise DataFormatError(query_file, row.line, f"query {qid!r} has two different texts in one folder")
        lines.append((qid, docid, row.label))
        if (qid, docid) in label_of:  # a pair listed again: one candidate for ranking, one more line to classify
            merged += 1
            if label_of[(qid, docid)] != row.label:
                conflicts.append((qid, docid, row.line, row.label, label_of[(qid, docid)]))
                label_of[(qid, docid)] = max(label_of[(qid, docid)], row.label)
            continue
        label_of[(qid, docid)] = row.label
        if docid not in docs:
            docs[docid] = Doc(docid, " ".join(row.doc_text.split()))
        run.setdefault(qid, []).append(ScoredDoc(qid, docid, row.score if row.score is not None else -float(position)))
    labels = [Qrel(qid, docid, label) for (qid, docid), label in label_of.items()]
    if merged:
        log.info("%s: %d duplicate (query, doc) line(s) merged into one candidate each for ranking (pair "
                 "classification keeps every line)", id_file, merged)
    if conflicts:
        qid, docid, line, label, earlier = conflicts[0]
        log.warning("%s: %d duplicate (query, doc) line(s) disagree with an earlier line's label, e.g. line %d: "
                    "query %r doc %r labelled %d, earlier %d; ranking judges such a pair by its highest label, "
                    "classification each line by its own", id_file, len(conflicts), line, qid, docid, label, earlier)
    return PairSplit(name, queries, docs, labels, run, lines)


def read_wikiqa_tsv(path: str | os.PathLike, split: str = "", qid_prefix: str = "") -> PairSplit:
    """Read one of WikiQA's own TSV files (``WikiQA-train.tsv`` ..., the layout MatchZoo's WikiQA loader
    reads): a header :data:`WIKIQA_COLUMNS`, then one candidate sentence per line. Query ids are
    ``QuestionID`` (``Q1``), doc ids ``SentenceID`` (``D1-0``), the label ``Label``; the file order is the
    candidate ranking. The split is named after the file (``WikiQA-train.tsv``: ``train``) unless ``split``
    says otherwise.

    Args:
        path: the TSV file.
        split: the split's name (default: from the file name).
        qid_prefix: prepended to every query id.

    Returns:
        The split.

    Raises:
        DataFormatError: a bad header or line, named with its file and number.
    """
    path = Path(path)
    rows: list[_Row] = []
    header = None
    for number, text in iter_lines(path):
        if not text.strip():
            continue
        columns = text.split("\t")
        if header is None:
            if tuple(c.strip() for c in columns) != WIKIQA_COLUMNS:
                raise DataFormatError(path, number, f"expected WikiQA's header {'<TAB>'.join(WIKIQA_COLUMNS)!r}, got "
                                                    f"{text[:80]!r}")
            header = number
            continue
        if len(columns) != len(WIKIQA_COLUMNS):
            raise DataFormatError(path, number, f"expected {len(WIKIQA_COLUMNS)} tab-separated columns "
                                                f"({', '.join(WIKIQA_COLUMNS)}), got {len(columns)}: {text[:80]!r}")
        record = dict(zip(WIKIQA_COLUMNS, columns))
        try:
            label = int(float(record["Label"]))
        except (ValueError, OverflowError):  # int(float("inf")) overflows
            raise DataFormatError(path, number, f"label {record['Label']!r} is not a number; expected 0 or 1") from None
        docid = check_id(path, number, "doc", record["SentenceID"].strip())
        rows.append(_Row(number, qid_prefix + record["QuestionID"].strip(), docid, record["Question"],
                         record["Sentence"], label, None))
    if header is None:
        raise DataFormatError(path, None, f"empty file; expected WikiQA's header {'<TAB>'.join(WIKIQA_COLUMNS)!r}")
    return _pair_split(split or wikiqa_split_name(path), rows, path, path)


def wikiqa_split_name(path: Path) -> str:
    """The split a WikiQA file holds: the part of the file name after its last ``-`` (the whole stem when
    there is none).

    Args:
        path: the TSV file.

    Returns:
        The split's name.

    Example:
        >>> wikiqa_split_name(Path("WikiQA-train.tsv"))
        'train'
    """
    return path.stem.rsplit("-", 1)[-1].lower()


def is_wikiqa_tsv(path: Path) -> bool:
    """Whether ``path`` is a file whose first line is WikiQA's TSV header.

    Args:
        path: a file or folder.

    Returns:
        True for a WikiQA TSV file.
    """
    if not path.is_file() or path.suffix.lower() != ".tsv":
        return False
    with open(path, "rb") as handle:
        first = handle.readline().decode("utf-8-sig", errors="replace").rstrip("\r\n")
    return tuple(c.strip() for c in first.split("\t")) == WIKIQA_COLUMNS


def read_pair_split(path: str | os.PathLike, split: str = "", qid_prefix: str = "") -> PairSplit:
    """One split of pairs: a pair folder (:func:`read_pair_folder`) or a WikiQA TSV file (:func:`read_wikiqa_tsv`).

    Args:
        path: the folder or TSV file.
        split: the split's name.
        qid_prefix: prepended to every query id.

    Returns:
        The split.
    """
    path = Path(path)
    if path.is_file():
        return read_wikiqa_tsv(path, split, qid_prefix)
    return read_pair_folder(path, split, qid_prefix)


def _raw_query_ids(path: Path) -> set[str]:
    """The query ids of one split as written (before any split prefix)."""
    if path.is_file():
        return {q.query_id for q in read_wikiqa_tsv(path).queries.values()}
    return {line.split()[0] for _, line in iter_lines(path / "id.txt") if line.strip()}


def pair_dataset(
    name: str,
    split_folders: dict[str, Path],
    qrels_files: Iterable[Path] = (),
    source: str = "",
) -> Dataset:
    """Combine pair splits (one folder, or one WikiQA TSV file, per split) into a Dataset.

    Query ids are kept as they are unless two splits use the same id for different questions (WikiQA,
    TrecQA number queries per split); then every id becomes ``<split>/<id>``. Qrels come from the given
    TREC qrels files (Microblog: the official NIST judgments) or else from the ``sim.txt`` labels.

    Args:
        name: the dataset's name.
        split_folders: ``{split: folder or WikiQA TSV file}``.
        qrels_files: TREC qrels files that replace the labels as judgments.
        source: where the data came from, for reports.

    Returns:
        The dataset, one split per entry of ``split_folders``.
    """
    raw_ids: dict[str, set[str]] = {}
    for split, folder in split_folders.items():
        raw_ids[split] = _raw_query_ids(Path(folder))
    all_ids = [qid for ids in raw_ids.values() for qid in ids]
    prefix = len(all_ids) != len(set(all_ids))
    parts = [read_pair_split(folder, split, f"{split}/" if prefix else "") for split, folder in split_folders.items()]
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
        qrels = [q for path in qrels_files for q in formats.read_qrels(path) if q.query_id in queries]
        pairs = None  # judged by the qrels files, not line by line: classification pairs come from the run
    else:
        qrels = labels
        pairs = [line for part in parts for line in part.pairs]
    files = [file for split_path in map(Path, split_folders.values())
             for file in ([split_path] if split_path.is_file() else [split_path / n for n in PAIR_FILES])] + qrels_files
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
        pairs=pairs,
    )
