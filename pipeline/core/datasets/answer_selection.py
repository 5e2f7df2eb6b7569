"""Answer-selection collections from the data root: WikiQA (castorini) and TrecQA (HCAN's preparation), each
question's candidate sentences in the pair format, one folder per split."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .dataset import Dataset, Recipe
from .pair_format import pair_dataset


def answer_selection_loader(folder: str, splits: tuple[str, ...], name: str, filtered: tuple[str, ...] = (),
                            recipe: Recipe | None = None) -> Callable[[Path], Dataset]:
    """A data-root loader of pair folders as splits; each split named in ``filtered`` also gets
    ``<split>-filtered``: its questions with at least one positive and one negative candidate (the usual
    WikiQA test set of 237 questions)."""

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
