"""A user's own dataset directory: read from its ``dataset.json`` manifest (every path confined to the
directory) or, without one, from its detected layout (pair folders, or TREC topics/qrels/docs files)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import DataFormatError, DatasetNotFoundError
from .dataset import Dataset
from .pair_format import pair_dataset
from .trec_format import trec_dataset

MANIFEST = "dataset.json"


def load_local(path: str | os.PathLike, name: str | None = None) -> Dataset:
    """Load a local directory: from its ``dataset.json`` manifest, or by detecting its layout.

    Manifest keys (paths relative to the directory, which they may not leave): ``format`` (``trec`` or
    ``pair``); for ``trec``: ``topics``, ``qrels``, ``docs`` (a path or a list), optional ``run`` and
    ``judged_only``; for ``pair``: ``splits`` (``{split: folder}``) and optional ``qrels`` (a path or list);
    optional ``name``. Without a manifest, a folder holding ``a.toks`` is one pair split, a folder whose
    subfolders hold them is one split per subfolder, and otherwise files named ``*topics*``/``*quer*``,
    ``*qrel*`` and ``*doc*``/``corpus`` are read as TREC.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetNotFoundError(f"{root}: not a directory")
    name = name or root.name
    manifest = root / MANIFEST
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
            f"docs {[p.name for p in docs]}); add a {MANIFEST} manifest (see pipeline.core.datasets.load_local)"
        )
    return trec_dataset(name, topics[0], qrels[0] if qrels else None, docs, source=str(root))


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

    fmt = spec.get("format")
    if fmt == "pair":
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
        )
    raise DataFormatError(manifest, None, f"unknown format {fmt!r}; expected 'trec' or 'pair'")


def confined_path(root: Path, manifest: Path, field: str, value: Any) -> Path:
    """``root / value`` for a manifest field, refusing any path that leaves ``root``.

    A manifest may come with a downloaded folder, so its paths are not trusted: an absolute path, ``..``
    steps out of the directory, or a symlink whose target lies outside it would make the loader read (and
    its parse errors quote) a file the dataset does not own. The error names the manifest and the field,
    never the outside file's content. A missing file inside the directory is left to the readers, whose
    ``file not found`` names it.
    """
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(manifest, None, f"field {field!r} must be a path relative to the dataset directory, "
                                              f"got {type(value).__name__} {str(value)[:80]!r}")
    candidate = root / value
    if Path(value).is_absolute() or not candidate.resolve().is_relative_to(root.resolve()):
        raise DataFormatError(manifest, None, f"field {field!r}: path {value[:200]!r} leads outside the dataset "
                                              f"directory {root}; {MANIFEST} paths must stay inside it")
    return candidate
