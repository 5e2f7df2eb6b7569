"""One home for what the pipeline makes (indexes, trained models, runs), whatever the current directory.

``PIPELINE_HOME`` names it; without it, the home is the source checkout the code runs from (the repository
root, where ``indexes/cache/`` has always been), or ``~/.cache/neural-rerank`` when the code is installed
elsewhere (a wheel in site-packages). So a notebook in another folder finds the indexes and models that
``python -m pipeline.run`` built from the repository, instead of building them again. The older, narrower
variables still win for their own kind: ``PIPELINE_INDEX_DIR`` (indexes) and ``PIPELINE_MODEL_DIR``
(models); ``--output-dir`` chooses where one run's files go.
"""
from __future__ import annotations

import os
from pathlib import Path

#: the directory holding ``pipeline/`` (this file is pipeline/core/home.py)
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def home() -> Path:
    """Where the project keeps what it builds (models, indexes, caches, runs).

    Returns:
        ``PIPELINE_HOME``, else the source checkout (it has a ``pyproject.toml``), else
        ``~/.cache/neural-rerank``.
    """
    explicit = os.environ.get("PIPELINE_HOME")
    if explicit:
        return Path(explicit).expanduser()
    if (SOURCE_ROOT / "pyproject.toml").is_file():
        return SOURCE_ROOT
    return Path.home() / ".cache" / "neural-rerank"


def index_root(kind: str) -> Path:
    """Where indexes of ``kind`` live.

    Args:
        kind: ``lucene``, ``codes``, ``dense``, ``bm25s`` ...

    Returns:
        ``PIPELINE_INDEX_DIR``, else ``<home>/indexes/cache/<kind>``.
    """
    explicit = os.environ.get("PIPELINE_INDEX_DIR")
    return Path(explicit).expanduser() if explicit else home() / "indexes" / "cache" / kind


def model_root() -> Path:
    """Where trained re-rankers are cached.

    Returns:
        ``PIPELINE_MODEL_DIR``, else ``<home>/models``.
    """
    explicit = os.environ.get("PIPELINE_MODEL_DIR")
    return Path(explicit).expanduser() if explicit else home() / "models"


def runs_root() -> Path:
    """Where runs and reports go by default.

    Returns:
        ``<home>/runs``.
    """
    return home() / "runs"
