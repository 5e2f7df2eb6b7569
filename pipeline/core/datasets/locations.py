"""Where data is looked for: the project's data root and the offline mirror of ir_datasets' archives."""
from __future__ import annotations

import os
from pathlib import Path

#: the repository's root (this file is pipeline/core/datasets/locations.py)
REPO_ROOT = Path(__file__).resolve().parents[3]


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
