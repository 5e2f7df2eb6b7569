"""TREC Microblog 2011-2014 from the data root: HCAN's candidate pairs (QL top 1000 per query, the shipped
first stage) with the official NIST judgments, one split per year."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from .dataset import Dataset
from .pair_format import pair_dataset
from .recipes import MICROBLOG_RECIPE

MICROBLOG_YEARS = ("2011", "2012", "2013", "2014")


def microblog_loader(years: Iterable[str]) -> Callable[[Path], Dataset]:
    """A data-root loader of some Microblog years: ``microblog`` (all four, with HCAN's recipe) or
    ``microblog-<year>`` (one)."""
    years = tuple(years)

    def load(root: Path) -> Dataset:
        base = root / "trec-microblog-hcan"
        name = "microblog" if len(years) == len(MICROBLOG_YEARS) else f"microblog-{years[0]}"
        dataset = pair_dataset(
            name,
            {year: base / f"trec-{year}" for year in years},
            [base / "topics-and-qrels" / f"qrels.microblog{year}.txt" for year in years],
            source=str(base),
        )
        if len(years) == len(MICROBLOG_YEARS):
            dataset.recipe = MICROBLOG_RECIPE
        return dataset

    return load
