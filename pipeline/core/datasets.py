"""Load a dataset by name into plain records: queries, documents, qrels, splits and a shipped first-stage run.

Names resolve in this order (:func:`load_dataset`):

1. a path to a local directory: its ``dataset.json`` manifest, or a detected layout (TREC topics/qrels/docs
   files, or the line-aligned "pair" format ``a.toks b.toks id.txt sim.txt``, one folder or one per split);
2. a built-in name for a folder of the project's data root (``PIPELINE_DATA``, default ``../shared/data``):
   ``microblog`` (2011-2014, one split per year) and ``microblog-2011`` .. ``microblog-2014``, ``wikiqa``,
   ``trecqa``, ``dl`` (TREC DL 2019-2021, one split per year), ``dl19``, ``dl20``, ``dl21``, ``nfcorpus`` (test pool, BEIR queries), ``nfcorpus-dev``, ``vaswani-npl``,
   and ``nfcorpus-titles`` (IASM's PubMed task rebuilt from NFCorpus: see :func:`nfcorpus_titles`);
3. an ir_datasets id (``cranfield``, ``vaswani``, ``nfcorpus/test``, ``msmarco-passage/trec-dl-2019/judged``,
   ``tweets2013-ia/trec-mb-2013`` ...). The archives ir_datasets would download are first looked for in an
   offline mirror (``PIPELINE_MIRROR`` or ``--mirror``: a directory searched recursively by file name; by
   default the data root) and copied into ir_datasets' cache after an md5 check. When the download is
   unavailable and the data root holds the same collection (see :data:`IR_DATASETS_EQUIVALENTS`), that
   copy is used instead and a warning says so.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from .errors import DataFormatError, DatasetNotFoundError, PipelineError
from .records import Doc, Qrel, Query, Run, ScoredDoc
from .textio import iter_lines
from . import trec

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Bumped when loaders change what they produce, so cached indexes built from old output are rebuilt.
LOADER_VERSION = 1


def data_root() -> Path | None:
    """The folder of real data (``PIPELINE_DATA``, else ``../shared/data`` beside the repo), or None."""
    explicit = os.environ.get("PIPELINE_DATA")
    if explicit:
        return Path(explicit)
    default = REPO_ROOT.parent / "shared" / "data"
    return default if default.is_dir() else None


def mirror_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The offline mirror: the argument, else ``PIPELINE_MIRROR``, else the data root when it exists."""
    if explicit:
        return Path(explicit)
    if os.environ.get("PIPELINE_MIRROR"):
        return Path(os.environ["PIPELINE_MIRROR"])
    return data_root()


@dataclass(frozen=True)
class Recipe:
    """What a run on a dataset uses when the command line does not say: the protocol's test split, the
    first stage's depth when re-ranking, the metrics (the first is the main one: interpolation weights are
    tuned on it and the report's p-values are read on it) and training options (names of
    :class:`rerankers.training.config.TrainConfig` fields; ``--set`` wins). Built-in datasets carry the settings
    their papers or their size call for; a user's own dataset gets the general defaults."""

    split: str | None = None
    k: int | None = None
    metrics: str | None = None
    train: Mapping[str, Any] = field(default_factory=dict)
    #: how the re-ranker's scores meet the first stage's by default (``--interpolate``): ``auto`` unless the
    #: shipped candidate order is no ranking to combine with
    interpolate: str = "auto"


@dataclass
class Dataset:
    """A test collection in plain records.

    ``docs`` is produced lazily by ``docs_factory`` (collections may be large); ``doc_store()`` builds an
    id -> Doc dict on first use. ``splits`` maps a split name (``train``, ``2013``, ``raw-test`` ...) to its
    query ids; ``first_stage`` is the run shipped with the data (Microblog QL, DL BM25), if any.
    """

    name: str
    queries: dict[str, Query]
    qrels: list[Qrel]
    docs_factory: Callable[[], Iterable[Doc]]
    fingerprint: str
    splits: dict[str, list[str]] = field(default_factory=dict)
    first_stage: Run | None = None
    source: str = ""
    recipe: Recipe = field(default_factory=Recipe)
    _store: dict[str, Doc] | None = field(default=None, repr=False)

    def docs_iter(self) -> Iterator[Doc]:
        """Iterate over all documents of the collection."""
        return iter(self.docs_factory())

    def doc_store(self) -> dict[str, Doc]:
        """All documents by id (built once, then cached on the object)."""
        if self._store is None:
            self._store = {doc.doc_id: doc for doc in self.docs_iter()}
        return self._store

    def qrels_dict(self) -> dict[str, dict[str, int]]:
        """Qrels as ``{query_id: {doc_id: relevance}}``."""
        result: dict[str, dict[str, int]] = {}
        for qrel in self.qrels:
            result.setdefault(qrel.query_id, {})[qrel.doc_id] = qrel.relevance
        return result

    def subset(self, query_ids: Iterable[str], name: str | None = None) -> "Dataset":
        """The same collection restricted to some queries (their qrels, splits and first-stage run)."""
        keep = set(query_ids)
        return dataclasses.replace(
            self,
            name=name or self.name,
            queries={qid: q for qid, q in self.queries.items() if qid in keep},
            qrels=[q for q in self.qrels if q.query_id in keep],
            splits={s: [q for q in qids if q in keep] for s, qids in self.splits.items()},
            first_stage=None if self.first_stage is None else {q: r for q, r in self.first_stage.items() if q in keep},
            _store=self._store,
        )


# ------------------------------------------------------------------------------------ pair format

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
        fingerprint=_files_fingerprint(files),
        splits={part.name: list(part.queries) for part in parts},
        first_stage=run,
        source=source or ", ".join(str(f) for f in split_folders.values()),
        _store=docs,
    )


# ------------------------------------------------------------------------------------ TREC format


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
        fingerprint=_files_fingerprint([topics, *(p for p in [qrels, run] if p), *docs]),
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


# ------------------------------------------------------------------------- manifests and detection


def load_local(path: str | os.PathLike, name: str | None = None) -> Dataset:
    """Load a local directory: from its ``dataset.json`` manifest, or by detecting its layout.

    Manifest keys (paths relative to the directory): ``format`` (``trec`` or ``pair``); for ``trec``:
    ``topics``, ``qrels``, ``docs`` (a path or a list), optional ``run`` and ``judged_only``; for ``pair``:
    ``splits`` (``{split: folder}``) and optional ``qrels`` (a path or list). Without a manifest, a folder
    holding ``a.toks`` is one pair split, a folder whose subfolders hold them is one split per subfolder,
    and otherwise files named ``*topics*``/``*quer*``, ``*qrel*`` and ``*doc*``/``corpus`` are read as TREC.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetNotFoundError(f"{root}: not a directory")
    name = name or root.name
    manifest = root / "dataset.json"
    if manifest.is_file():
        return _from_manifest(root, manifest, name)
    if (root / "a.toks").is_file():
        return pair_dataset(name, {root.name: root})
    subfolders = sorted(p for p in root.iterdir() if (p / "a.toks").is_file())
    if subfolders:
        return pair_dataset(name, {p.name: p for p in subfolders})
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix not in {".md", ".bib"}]

    def pick(*needles: str) -> list[Path]:
        return sorted(p for p in files if any(n in p.name.lower() for n in needles))

    topics, qrels = pick("topic", "quer"), pick("qrel")
    docs = [p for p in pick("doc", "corpus", "collection") if p not in topics and p not in qrels]
    if len(topics) != 1 or len(qrels) > 1 or not docs:
        raise DatasetNotFoundError(
            f"{root}: cannot detect the layout (found topics {[p.name for p in topics]}, qrels {[p.name for p in qrels]}, "
            f"docs {[p.name for p in docs]}); add a dataset.json manifest (see pipeline.datasets.load_local)"
        )
    return trec_dataset(name, topics[0], qrels[0] if qrels else None, docs, source=str(root))


def _from_manifest(root: Path, manifest: Path, name: str) -> Dataset:
    try:
        spec = json.loads(manifest.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(manifest, getattr(error, "lineno", None), f"invalid JSON manifest: {error}") from None

    def paths(value) -> list[Path]:
        values = value if isinstance(value, list) else [value]
        return [root / v for v in values if v]

    fmt = spec.get("format")
    if fmt == "pair":
        if not isinstance(spec.get("splits"), dict):
            raise DataFormatError(manifest, None, "'pair' manifest needs 'splits': {split_name: folder}")
        return pair_dataset(spec.get("name", name), {s: root / f for s, f in spec["splits"].items()},
                            paths(spec.get("qrels", [])), source=str(root))
    if fmt == "trec":
        for key in ("topics", "docs"):
            if key not in spec:
                raise DataFormatError(manifest, None, f"'trec' manifest needs {key!r}")
        return trec_dataset(
            spec.get("name", name), root / spec["topics"], root / spec["qrels"] if spec.get("qrels") else None,
            paths(spec["docs"]), root / spec["run"] if spec.get("run") else None,
            judged_only=bool(spec.get("judged_only", False)), source=str(root),
        )
    raise DataFormatError(manifest, None, f"unknown format {fmt!r}; expected 'trec' or 'pair'")


# ------------------------------------------------------------------------------ built-in datasets

MICROBLOG_YEARS = ("2011", "2012", "2013", "2014")
#: HCAN's protocol (test on 2014, the last year of its Table 3; train on the other three, re-rank QL's top
#: 1000; MAP and P@30) with a CPU budget: 6,400 sampled training units per epoch, 4 epochs, the dev metric
#: over each dev query's top 100. Measured in BENCHMARKS.md (the headline command).
MICROBLOG_RECIPE = Recipe(split="2014", k=1000, metrics="AP P@30",
                          train={"max_examples_per_epoch": 6400, "epochs": 4, "dev_depth": 100})
#: TREC DL: test on 2019 (train on 2020 and 2021), the shipped BM25 top 100, nDCG@10 first; grade 1
#: ("related") is not a training positive and AP/RR count grades >= 2, as TREC DL's binary measures do.
DL_RECIPE = Recipe(split="2019", k=100, metrics="nDCG@10 AP(rel=2) RR(rel=2)",
                   train={"positive_relevance": 2, "dev_metric": "nDCG@10"})


def _microblog(years: Iterable[str]) -> Callable[[Path], Dataset]:
    years = tuple(years)

    def load(root: Path) -> Dataset:
        base = root / "trec-microblog-hcan"
        name = "microblog" if len(years) == 4 else f"microblog-{years[0]}"
        dataset = pair_dataset(
            name,
            {year: base / f"trec-{year}" for year in years},
            [base / "topics-and-qrels" / f"qrels.microblog{year}.txt" for year in years],
            source=str(base),
        )
        if len(years) == 4:
            dataset.recipe = MICROBLOG_RECIPE
        return dataset

    return load


#: TrecQA's candidate files list the correct answers first (MAP .937 in file order): that order leaks the
#: labels, so it is no first stage to combine with; re-rankers stand alone there and are read as such
TRECQA_RECIPE = Recipe(metrics="AP RR", interpolate="none")


def _pairs(folder: str, splits: tuple[str, ...], name: str, filtered: tuple[str, ...] = (),
           recipe: Recipe | None = None) -> Callable[[Path], Dataset]:
    """Pair folders as splits; each split named in ``filtered`` also gets ``<split>-filtered``: its questions
    with at least one positive and one negative candidate (the usual WikiQA test set of 237 questions)."""

    def load(root: Path) -> Dataset:
        dataset = pair_dataset(name, {s: root / folder / s for s in splits}, source=str(root / folder))
        labels: dict[str, set[int]] = {}
        for qrel in dataset.qrels:
            labels.setdefault(qrel.query_id, set()).add(int(qrel.relevance > 0))
        for split in filtered:
            dataset.splits[f"{split}-filtered"] = [q for q in dataset.splits[split] if labels.get(q) == {0, 1}]
        if recipe is not None:
            dataset.recipe = recipe
        return dataset

    return load


#: TREC DL passage years shipped in ``msmarco-passage-trecdl``: topics file, qrels file (DL21 is MS MARCO v2)
DL_YEARS = {
    "2019": ("topics.dl19-passage.txt", "qrels.dl19-passage.txt", "dl19"),
    "2020": ("topics.dl20.txt", "qrels.dl20-passage.txt", "dl20"),
    "2021": ("topics.dl21.txt", "qrels.dl21-passage.txt", "dl21"),
}


def _dl(year: str) -> Callable[[Path], Dataset]:
    """One TREC DL year: its judged queries, graded qrels and the shipped BM25 top-100 with passage text."""
    topics, qrels, short = DL_YEARS[year]

    def load(root: Path) -> Dataset:
        base = root / "msmarco-passage-trecdl"
        dataset = trec_dataset(
            short, base / "topics-and-qrels" / topics, base / "topics-and-qrels" / qrels,
            [base / "bm25-top100" / f"retrieve_results_{short}.json"], base / "bm25-top100" / f"trec_results_{short}.txt",
            judged_only=True, source=str(base),
        )
        dataset.recipe = Recipe(k=DL_RECIPE.k, metrics=DL_RECIPE.metrics, train=DL_RECIPE.train)
        return dataset

    return load


def dl_years(root: Path) -> Dataset:
    """TREC DL 2019, 2020 and 2021 passage as one dataset with one split per year (``2019``, ``2020``,
    ``2021``), like Microblog's: the default protocol trains on two years' graded judgments and re-ranks the
    third (:func:`pipeline.protocols.make_protocol`). Query ids and passage ids of the three years are
    disjoint (DL21 passages are MS MARCO v2 ids), so the years are merged as they are."""
    years = {year: _dl(year)(root) for year in DL_YEARS}
    queries: dict[str, Query] = {}
    for year, part in years.items():
        clash = queries.keys() & part.queries.keys()
        if clash:
            raise DataFormatError(Path(part.source), None, f"query id {sorted(clash)[0]!r} of DL {year} is also "
                                  f"in an earlier year")
        queries.update(part.queries)

    def docs_factory() -> Iterator[Doc]:
        seen: set[str] = set()
        for part in years.values():
            for doc in part.docs_iter():
                if doc.doc_id not in seen:
                    seen.add(doc.doc_id)
                    yield doc

    digest = hashlib.sha1("".join(part.fingerprint for part in years.values()).encode()).hexdigest()
    return Dataset(
        name="dl",
        queries=queries,
        qrels=[q for part in years.values() for q in part.qrels],
        docs_factory=docs_factory,
        fingerprint=digest,
        splits={year: list(part.queries) for year, part in years.items()},
        first_stage={qid: hits for part in years.values() for qid, hits in (part.first_stage or {}).items()},
        source=str(root / "msmarco-passage-trecdl"),
        recipe=DL_RECIPE,
    )


#: NFCorpus: nDCG@10 first (BEIR's measure); training positives only among the candidates, because most of
#: a query's ~35 judged documents are not among BM25's top 100 (BENCHMARKS.md, NFCorpus)
NFCORPUS_RECIPE = Recipe(metrics="nDCG@10 AP P@10 R@{k}", train={"positive_pool": "candidates"})


def _nfcorpus(split: str) -> Callable[[Path], Dataset]:
    def load(root: Path) -> Dataset:
        base = root / "nfcorpus"
        if split == "test":  # the BEIR test queries (raw titles) over the test pool
            topics = base / "beir-topics-and-qrels" / "topics.beir-v1.0.0-nfcorpus.test.tsv.gz"
        else:
            topics = base / f"{split}.titles.queries"
        dataset = trec_dataset(
            "nfcorpus" if split == "test" else f"nfcorpus-{split}", topics, base / f"{split}.2-1-0.qrel",
            [base / f"{split}.docs"], judged_only=True, source=str(base),
        )
        dataset.recipe = NFCORPUS_RECIPE
        return dataset

    return load


#: seed of the train/dev/test partition of ``nfcorpus-titles`` (fixed: the split is part of the dataset)
TITLES_SPLIT_SEED = 2016


def split_title(text: str) -> tuple[str, str] | None:
    """``(title, abstract)`` of an NFCorpus document, or None when it cannot be split.

    The release's documents are the article title followed by the abstract, lowercased with punctuation
    and stop words removed; PubMed pages add ``pubmed ncbi`` before the abstract, and nearly every abstract
    starts with the word ``abstract``. So the title is the text before the first ``abstract`` token (a
    trailing ``pubmed ncbi`` dropped) and the abstract the text after it. Documents without that token
    (21 of 3,395, e.g. abstracts that open with ``summary`` or ``synopsis``, words that titles use too),
    with an empty title, or with an abstract under 20 words (8) are not used.
    """
    words = text.split()
    if "abstract" not in words:
        return None
    cut = words.index("abstract")
    title = words[:cut]
    while title and title[-1] in ("pubmed", "ncbi"):
        title.pop()
    abstract = words[cut + 1 :]
    if not title or len(abstract) < 20:
        return None
    return " ".join(title), " ".join(abstract)


def nfcorpus_titles(root: Path) -> Dataset:
    """IASM's PubMed task (title -> its own abstract) built from the NFCorpus documents.

    Documents of the test and dev pools (3,395 distinct articles), split by :func:`split_title` (3,366
    usable). Each title is a query whose only relevant document is its own abstract; the collection is
    all abstracts. Articles are partitioned 8:1:1 into ``train``/``dev``/``test`` queries with a fixed
    seed (:data:`TITLES_SPLIT_SEED`), as IASM partitions its PubMed articles. There is no shipped first
    stage: candidates come from BM25 over the abstracts.
    """
    import random

    base = root / "nfcorpus"
    sources = [base / "test.docs", base / "dev.docs"]
    texts: dict[str, str] = {}
    for path in sources:
        if not path.exists():
            raise DataFormatError(path, None, "file not found")
        for line, doc in trec.read_docs_numbered(path):
            if texts.setdefault(doc.doc_id, doc.text) != doc.text:
                raise DataFormatError(path, line, f"document {doc.doc_id!r} differs from its copy in an earlier file")
    pairs = {doc_id: parts for doc_id, text in sorted(texts.items()) if (parts := split_title(text))}
    ids = sorted(pairs)
    random.Random(TITLES_SPLIT_SEED).shuffle(ids)
    n_train, n_dev = int(len(ids) * 0.8), int(len(ids) * 0.1)
    splits = {"train": sorted(ids[:n_train]), "dev": sorted(ids[n_train : n_train + n_dev]),
              "test": sorted(ids[n_train + n_dev :])}
    abstracts = [Doc(doc_id, abstract) for doc_id, (_, abstract) in sorted(pairs.items())]
    return Dataset(
        name="nfcorpus-titles",
        queries={doc_id: Query(doc_id, title) for doc_id, (title, _) in sorted(pairs.items())},
        qrels=[Qrel(doc_id, doc_id, 1) for doc_id in sorted(pairs)],
        docs_factory=lambda: iter(abstracts),
        fingerprint=_files_fingerprint(sources) + f"-titles{TITLES_SPLIT_SEED}",
        splits=splits,
        source=str(base),
    )


def _vaswani(root: Path) -> Dataset:
    base = root / "vaswani-npl"
    return trec_dataset("vaswani-npl", base / "query-text.trec", base / "qrels", [base / "corpus" / "doc-text.trec"],
                        source=str(base))


#: Built-in names for the folders of the data root.
BUILTIN_DATASETS: dict[str, Callable[[Path], Dataset]] = {
    "microblog": _microblog(MICROBLOG_YEARS),
    **{f"microblog-{year}": _microblog([year]) for year in MICROBLOG_YEARS},
    "wikiqa": _pairs("wikiqa-castorini", ("train", "dev", "test"), "wikiqa", filtered=("test", "dev")),
    "trecqa": _pairs("trecqa-hcan", ("train", "raw-dev", "raw-test", "clean-dev", "clean-test"), "trecqa",
                     recipe=TRECQA_RECIPE),
    "dl": dl_years,
    "dl19": _dl("2019"),
    "dl20": _dl("2020"),
    "dl21": _dl("2021"),
    "nfcorpus": _nfcorpus("test"),
    "nfcorpus-dev": _nfcorpus("dev"),
    "nfcorpus-titles": nfcorpus_titles,
    "vaswani-npl": _vaswani,
}

#: ir_datasets ids whose collection the data root also holds (used when the download is unavailable).
IR_DATASETS_EQUIVALENTS = {
    "vaswani": "vaswani-npl",
    "nfcorpus/test": "nfcorpus",
    "beir/nfcorpus/test": "nfcorpus",
    "nfcorpus/dev": "nfcorpus-dev",
    "msmarco-passage/trec-dl-2019/judged": "dl19",
    "msmarco-passage/trec-dl-2020/judged": "dl20",
    "msmarco-passage-v2/trec-dl-2021/judged": "dl21",
    "tweets2013-ia/trec-mb-2013": "microblog-2013",
    "tweets2013-ia/trec-mb-2014": "microblog-2014",
}


# ----------------------------------------------------------------------------------- ir_datasets


@functools.lru_cache(maxsize=8)
def _mirror_files(mirror: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for directory, _, names in os.walk(mirror):
        for file_name in names:
            found.setdefault(file_name, []).append(Path(directory) / file_name)
    return found


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_entries(tree) -> Iterator[dict]:
    if isinstance(tree, dict):
        if "url" in tree or "cache_path" in tree:
            yield tree
        else:
            for value in tree.values():
                yield from _download_entries(value)


def seed_ir_datasets_cache(dataset_id: str, mirror: Path | None) -> list[Path]:
    """Copy into ir_datasets' cache every archive of ``dataset_id``'s top-level collection that the mirror has.

    A mirror file matches an ir_datasets download by file name (its ``cache_path`` or URL basename) and
    must have the expected md5; a file with another md5 is skipped with a warning. Returns the files placed.
    """
    if mirror is None or not mirror.is_dir():
        return []
    import ir_datasets

    top = dataset_id.split("/")[0]
    downloads_json = Path(ir_datasets.__file__).parent / "etc" / "downloads.json"
    catalogue = json.loads(downloads_json.read_text(encoding="utf-8"))
    available = _mirror_files(mirror.resolve())
    placed = []
    for entry in _download_entries(catalogue.get(top, {})):
        cache_path = entry.get("cache_path")
        if not cache_path:
            continue
        target = ir_datasets.util.home_path() / top / cache_path
        if target.exists():
            continue
        candidates = {Path(cache_path).name, Path(entry.get("url", "")).name} - {""}
        for file_name in candidates:
            for candidate in available.get(file_name, []):
                if entry.get("expected_md5") and _md5(candidate) != entry["expected_md5"]:
                    log.debug("mirror file %s does not have the md5 ir_datasets expects for %s; skipped", candidate, top)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                temp = target.with_name(f".{target.name}.mirror-tmp")
                shutil.copyfile(candidate, temp)
                os.replace(temp, target)
                placed.append(target)
                break
            if target.exists():
                break
    return placed


def load_ir_dataset(dataset_id: str, mirror: Path | None = None) -> Dataset:
    """Load an ir_datasets id (after seeding its cache from the mirror). Queries and qrels are read now
    (so a failed download surfaces here); documents are iterated lazily."""
    import ir_datasets

    seed_ir_datasets_cache(dataset_id, mirror)
    try:
        handle = ir_datasets.load(dataset_id)
    except KeyError:
        raise DatasetNotFoundError(f"unknown dataset {dataset_id!r}") from None
    queries: dict[str, Query] = {}
    if handle.has_queries():
        for query in handle.queries_iter():
            text = " ".join(query.default_text().split())
            if not text:
                raise DataFormatError(f"ir_datasets:{dataset_id}", None, f"query {query.query_id!r} has empty text")
            queries[query.query_id] = Query(query.query_id, text)
    qrels = [Qrel(q.query_id, q.doc_id, int(q.relevance), str(getattr(q, "iteration", "0")))
             for q in handle.qrels_iter()] if handle.has_qrels() else []

    def docs_factory() -> Iterator[Doc]:
        for doc in handle.docs_iter():
            yield Doc(doc.doc_id, " ".join(doc.default_text().split()))

    return Dataset(
        name=dataset_id, queries=queries, qrels=qrels, docs_factory=docs_factory,
        fingerprint=hashlib.sha1(f"irds:{dataset_id}:{ir_datasets.__version__}".encode()).hexdigest(),
        source=f"ir_datasets:{dataset_id}",
    )


def _is_download_failure(error: BaseException) -> bool:
    text = repr(error)
    return "download" in text.lower() or "ConnectionError" in text or "NameResolution" in text


# ------------------------------------------------------------------------------------- entry point


def load_dataset(name: str, mirror: str | os.PathLike | None = None) -> Dataset:
    """Load a dataset by directory path, built-in name or ir_datasets id (see the module docstring)."""
    mirror_path = mirror_dir(mirror)
    candidate = Path(name).expanduser()
    if candidate.is_dir():
        return load_local(candidate)
    if name in BUILTIN_DATASETS:
        return _load_builtin(name)
    try:
        return load_ir_dataset(name, mirror_path)
    except DatasetNotFoundError:
        if name in IR_DATASETS_EQUIVALENTS:
            return _load_builtin(IR_DATASETS_EQUIVALENTS[name], requested=name)
        raise DatasetNotFoundError(
            f"unknown dataset {name!r}: not a directory, not a built-in name ({', '.join(BUILTIN_DATASETS)}) "
            "and not an ir_datasets id"
        ) from None
    except Exception as error:  # ir_datasets raises plain RuntimeErrors for failed downloads
        if not _is_download_failure(error):
            raise
        if name in IR_DATASETS_EQUIVALENTS and data_root() is not None:
            log.warning("ir_datasets could not download %s; using the local copy %s from %s",
                        name, IR_DATASETS_EQUIVALENTS[name], data_root())
            return _load_builtin(IR_DATASETS_EQUIVALENTS[name], requested=name)
        raise DatasetNotFoundError(
            f"ir_datasets could not download {name!r} and no offline copy was found: put the archive ir_datasets "
            f"downloads into a mirror directory (PIPELINE_MIRROR or --mirror; searched: {mirror_path}) "
            f"or into {_irds_home()}"
        ) from None


def _irds_home() -> Path:
    return Path(os.environ.get("IR_DATASETS_HOME", Path.home() / ".ir_datasets"))


def _load_builtin(name: str, requested: str | None = None) -> Dataset:
    root = data_root()
    if root is None or not root.is_dir():
        raise DatasetNotFoundError(
            f"dataset {name!r} lives in the data root, which was not found: set PIPELINE_DATA to the folder "
            "holding trec-microblog-hcan/, wikiqa-castorini/, ... (default ../shared/data beside the repo)"
        )
    try:
        dataset = BUILTIN_DATASETS[name](root)
    except DataFormatError as error:
        if error.detail == "file not found":
            raise DatasetNotFoundError(f"dataset {name!r}: missing file {error.path}") from None
        raise
    if requested:
        dataset.name = requested
    return dataset


def _files_fingerprint(paths: Iterable[Path]) -> str:
    """Identity of a dataset's files for cache keys (trained models, indexes): file names and contents.

    Content, not path or modification time: a data folder that is copied, moved or re-extracted (new
    mtimes, same bytes) keeps its cached models and indexes; any changed byte gives a new key. The loaders
    read every file whole anyway, so hashing adds one cheap pass."""
    digest = hashlib.sha1(f"loader-v{LOADER_VERSION}".encode())
    for path in paths:
        path = Path(path)
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise DataFormatError(path, None, "file not found") from None
        content = _content_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        digest.update(f"{path.name}:{stat.st_size}:{content}".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1024)
def _content_digest(resolved: str, size: int, mtime_ns: int) -> str:
    """SHA-1 of one file's bytes, memoised per process on (path, size, mtime)."""
    with open(resolved, "rb") as handle:
        return hashlib.file_digest(handle, "sha1").hexdigest()


def select_queries(dataset: Dataset, split: str | None = None) -> list[Query]:
    """The queries to run: all of them, or one named split's."""
    if split is None:
        return list(dataset.queries.values())
    if split not in dataset.splits:
        known = ", ".join(dataset.splits) or "none"
        raise PipelineError(f"dataset {dataset.name!r} has no split {split!r} (its splits: {known})")
    return [dataset.queries[qid] for qid in dataset.splits[split]]
