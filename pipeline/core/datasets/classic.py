"""Classic TREC-format test collections kept in the data root: Vaswani NPL (physics abstracts), the offline
copy of ir_datasets' ``vaswani``. (Cranfield comes through ir_datasets and its mirror.)"""
from __future__ import annotations

from pathlib import Path

from .dataset import Dataset
from .trec_format import trec_dataset


def vaswani_npl(root: Path) -> Dataset:
    """Vaswani NPL from ``<data root>/vaswani-npl``: 93 queries, their qrels and 11,429 abstracts."""
    base = root / "vaswani-npl"
    return trec_dataset("vaswani-npl", base / "query-text.trec", base / "qrels", [base / "corpus" / "doc-text.trec"],
                        source=str(base))
