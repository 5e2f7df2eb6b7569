"""File names made from user and dataset names."""
from __future__ import annotations

import re


def safe_name(text: str, keep: str = "._-", fallback: str = "unnamed") -> str:
    """``text`` with every run of characters other than letters, digits and ``keep`` replaced by ``_``
    (leading and trailing ``_`` dropped): a single path component, never ``..`` or an absolute path."""
    cleaned = re.sub(f"[^A-Za-z0-9{re.escape(keep)}]+", "_", text).strip("_")
    return fallback if cleaned in ("", ".", "..") else cleaned
