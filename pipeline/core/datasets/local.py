"""A user's own dataset directory: read from its ``dataset.json`` manifest (every path confined to the
directory) or, without one, from its detected layout (pair folders, WikiQA TSV files, a BEIR folder, or
TREC/SMART topics, qrels and documents files)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .. import formats
from ..errors import ConfigError, DataFormatError, DatasetNotFoundError
from .dataset import Dataset
from .pair_format import is_wikiqa_tsv, pair_dataset, wikiqa_split_name
from .trec_format import trec_dataset

MANIFEST = "dataset.json"
#: BEIR's file names (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``), gzipped or not
BEIR_CORPUS = ("corpus.jsonl", "corpus.jsonl.gz")
BEIR_QUERIES = ("queries.jsonl", "queries.jsonl.gz")
BEIR_QRELS = "qrels"


def load_local(path: str | os.PathLike, name: str | None = None) -> Dataset:
    """Load a local directory: from its ``dataset.json`` manifest, or by detecting its layout.

    Manifest keys (paths relative to the directory, which they may not leave): ``format`` (``trec``,
    ``beir`` or ``pair``); for ``trec``: ``topics``, ``qrels``, ``docs`` (a path or a list; a folder is
    a folder of HTML files), optional ``run``, ``judged_only`` and ``topic_field``; for ``beir``: optional
    ``corpus``, ``queries`` and ``qrels`` (a folder of ``<split>.tsv`` files; by default BEIR's own names)
    and ``topic_field``; for ``pair``: ``splits`` (``{split: folder or WikiQA TSV file}``) and optional
    ``qrels`` (a path or list); optional ``name``. ``topic_field`` is one of
    :data:`pipeline.core.formats.TOPIC_FIELDS` (``title``, the default, ``description`` ...).

    Without a manifest, in this order: a folder holding ``a.toks`` is one pair split, a folder whose
    subfolders hold them is one split per subfolder; WikiQA TSV files (``WikiQA-train.tsv`` ...: one split
    each); a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``: one split per qrels
    file); otherwise files named ``*topic*``/``*quer*``/``*.qry``, ``*qrel*``/``*.rel`` and
    ``*doc*``/``*corpus*``/``*collection*``/``*.all*`` (or a folder so named holding HTML files) are read as
    TREC or SMART files.

    Args:
        path: the directory.
        name: the dataset's name (default: the manifest's ``name``, else the directory's name).

    Returns:
        The dataset.

    Raises:
        DatasetNotFoundError: not a directory, or no layout recognised.
        DataFormatError: a bad manifest or file, named with its line.

    Example:
        >>> dataset = load_local("my-collection")   # doctest: +SKIP
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetNotFoundError(f"{root}: not a directory")
    name = name or root.name
    manifest = root / MANIFEST
    if manifest.is_file():
        confined_path(root, manifest, "the manifest itself", MANIFEST)
        return _from_manifest(root, manifest, name)
    refuse_links_out(root)
    if (root / "a.toks").is_file():
        return pair_dataset(name, {root.name: root})
    subfolders = sorted(p for p in root.iterdir() if (p / "a.toks").is_file())
    if subfolders:
        return pair_dataset(name, {p.name: p for p in subfolders})
    wikiqa = _wikiqa_splits(root)
    if wikiqa:
        return pair_dataset(name, wikiqa, source=str(root))
    if _beir_file(root, BEIR_CORPUS) and _beir_file(root, BEIR_QUERIES) and (root / BEIR_QRELS).is_dir():
        return beir_dataset(name, root)
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix not in {".md", ".bib"}
             and p.suffix.lower() not in formats.HTML_SUFFIXES]
    html_folders = sorted({p.parent for p in root.rglob("*") if p.is_file() and p.suffix.lower() in formats.HTML_SUFFIXES})

    def pick(*needles: str, among=files) -> list[Path]:
        return sorted(p for p in among if any(n in p.name.lower() for n in needles))

    topics, qrels = pick("topic", "quer", ".qry"), [p for p in pick("qrel", ".rel") if not p.name.lower().endswith("readme")]
    docs = [p for p in pick("doc", "corpus", "collection", ".all") if p not in topics and p not in qrels]
    # a folder of HTML pages named like a collection ("docs/", "corpus/" ...) or the only one there is
    folders = pick("doc", "corpus", "collection", "html", "pages", among=html_folders)
    docs += folders or (html_folders if len(html_folders) == 1 and html_folders[0] != root else [])
    if len(topics) != 1 or len(qrels) > 1 or not docs:
        raise DatasetNotFoundError(
            f"{root}: cannot detect the layout (found topics {[p.name for p in topics]}, qrels {[p.name for p in qrels]}, "
            f"docs {[p.name for p in docs]}); add a {MANIFEST} manifest (see pipeline.core.datasets.load_local)"
        )
    return trec_dataset(name, topics[0], qrels[0] if qrels else None, docs, source=str(root))


def refuse_links_out(root: Path) -> None:
    """Refuse a dataset directory (read without a manifest) holding a symbolic link out of it.

    Its files are found by name, so a link ``topics.tsv -> /etc/passwd`` would be read, and a parse error
    would quote the outside file's first line. The error names the link, never the file it leads to.

    Args:
        root: the dataset directory.

    Raises:
        DataFormatError: naming the first such link.
    """
    resolved = root.resolve()
    for folder, folders, files in os.walk(root):
        for entry in sorted([*folders, *files]):
            path = Path(folder) / entry
            if path.is_symlink() and not path.resolve().is_relative_to(resolved):
                raise DataFormatError(path, None, f"a symbolic link out of the dataset directory {root}: the files "
                                                  f"of a dataset must be inside it (copy the file in)")


def _wikiqa_splits(root: Path) -> dict[str, Path]:
    """WikiQA's TSV files in ``root`` as ``{split: file}``; the whole-corpus ``WikiQA.tsv`` is left out when
    split files (``WikiQA-train.tsv`` ...) are there, as its pairs are theirs."""
    files = sorted(p for p in root.iterdir() if is_wikiqa_tsv(p))
    split_files = [p for p in files if "-" in p.stem]
    return {wikiqa_split_name(p): p for p in (split_files or files)}


def _beir_file(root: Path, names: tuple[str, ...]) -> Path | None:
    """The first of ``names`` (plain, then gzipped) that is a file in ``root``."""
    return next((root / n for n in names if (root / n).is_file()), None)


def beir_dataset(name: str, root: Path, corpus: Path | None = None, queries: Path | None = None,
                 qrels: Path | None = None, topic_field: str = "title") -> Dataset:
    """A BEIR folder: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``)
    and ``qrels/<split>.tsv`` (a ``query-id corpus-id score`` header, then 3 columns), each split file
    giving a split of the same name (``train``, ``dev``, ``test``). Paths default to BEIR's names.

    Args:
        name: the dataset's name.
        root: the BEIR folder.
        corpus: the documents file (default ``root/corpus.jsonl``).
        queries: the queries file (default ``root/queries.jsonl``).
        qrels: the folder of ``<split>.tsv`` judgments (default ``root/qrels``).
        topic_field: which text of a query is used (:data:`pipeline.core.formats.TOPIC_FIELDS`).

    Returns:
        The dataset, one split per qrels file.

    Raises:
        DatasetNotFoundError: no qrels files.
    """
    corpus = corpus or _beir_file(root, BEIR_CORPUS) or root / BEIR_CORPUS[0]
    queries = queries or _beir_file(root, BEIR_QUERIES) or root / BEIR_QUERIES[0]
    qrels = qrels or root / BEIR_QRELS
    split_files = sorted(p for p in qrels.iterdir() if p.is_file() and p.suffix in {".tsv", ".txt", ".gz"}) \
        if qrels.is_dir() else []
    if not split_files:
        raise DatasetNotFoundError(f"{qrels}: a BEIR folder needs qrels files, one per split ({qrels}/test.tsv ...)")
    return trec_dataset(name, queries, None, [corpus], source=str(root), topic_field=topic_field,
                        split_qrels={p.name.split(".")[0]: p for p in split_files})


def _from_manifest(root: Path, manifest: Path, name: str) -> Dataset:
    """The dataset a manifest describes; a bad manifest is a DataFormatError naming it and the field."""
    try:
        spec = json.loads(manifest.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(manifest, getattr(error, "lineno", None), f"invalid JSON manifest: {error}") from None
    if not isinstance(spec, dict):
        raise DataFormatError(manifest, None, f"expected a JSON object, got a {type(spec).__name__}")
    name = spec.get("name", name)
    if not isinstance(name, str) or not name.strip():
        raise DataFormatError(manifest, None, f"field 'name' must be a non-empty string, got {name!r}")

    def paths(field: str) -> list[Path]:
        value = spec.get(field, [])
        if isinstance(value, list):
            return [confined_path(root, manifest, f"{field}[{i}]", v) for i, v in enumerate(value) if v]
        return [confined_path(root, manifest, field, value)] if value else []

    def optional_path(field: str) -> Path | None:
        return confined_path(root, manifest, field, spec[field]) if spec.get(field) else None

    topic_field = spec.get("topic_field", "title")
    try:
        formats.check_topic_field(topic_field)
    except (ConfigError, TypeError):
        raise DataFormatError(manifest, None, f"field 'topic_field' must be one of {', '.join(formats.TOPIC_FIELDS)}, "
                                              f"got {topic_field!r}") from None
    fmt = spec.get("format")
    if fmt == "beir":
        return beir_dataset(name, root, optional_path("corpus"), optional_path("queries"), optional_path("qrels"),
                            topic_field)
    if fmt == "pair":
        if topic_field != "title":  # a pair file holds one text per question: no description to choose
            raise DataFormatError(manifest, None, f"field 'topic_field' is {topic_field!r}, but pair-format "
                                                  f"questions have one text; leave it out or use 'title'")
        if not isinstance(spec.get("splits"), dict):
            raise DataFormatError(manifest, None, "'pair' manifest needs 'splits': {split_name: folder}")
        folders = {s: confined_path(root, manifest, f"splits.{s}", f) for s, f in spec["splits"].items()}
        return pair_dataset(name, folders, paths("qrels"), source=str(root))
    if fmt == "trec":
        for key in ("topics", "docs"):
            if key not in spec:
                raise DataFormatError(manifest, None, f"'trec' manifest needs {key!r}")
        return trec_dataset(
            name, confined_path(root, manifest, "topics", spec["topics"]), optional_path("qrels"), paths("docs"),
            optional_path("run"), judged_only=bool(spec.get("judged_only", False)), source=str(root),
            topic_field=topic_field,
        )
    raise DataFormatError(manifest, None, f"unknown format {fmt!r}; expected 'trec', 'beir' or 'pair'")


def confined_path(root: Path, manifest: Path, field: str, value: Any) -> Path:
    """``root / value`` for a manifest field, refusing any path that leaves ``root``.

    A manifest may come with a downloaded folder, so its paths are not trusted: an absolute path, ``..``
    steps out of the directory, or a symlink whose target lies outside it would make the loader read (and
    its parse errors quote) a file the dataset does not own. The error names the manifest and the field,
    never the outside file's content. A missing file inside the directory is left to the readers, whose
    ``file not found`` names it.

    Args:
        root: the dataset directory.
        manifest: the manifest file, for messages.
        field: the manifest field, for messages.
        value: the field's value.

    Returns:
        The path inside ``root``.

    Raises:
        DataFormatError: a value that is no relative path, or a path that leaves ``root``.
    """
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(manifest, None, f"field {field!r} must be a path relative to the dataset directory, "
                                              f"got {type(value).__name__} {str(value)[:80]!r}")
    candidate = root / value
    if Path(value).is_absolute() or not candidate.resolve().is_relative_to(root.resolve()):
        raise DataFormatError(manifest, None, f"field {field!r}: path {value[:200]!r} leads outside the dataset "
                                              f"directory {root}; {MANIFEST} paths must stay inside it")
    return candidate
