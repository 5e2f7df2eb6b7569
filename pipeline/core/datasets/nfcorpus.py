"""NFCorpus from the data root: the test pool with BEIR's test queries (``nfcorpus``), the dev pool
(``nfcorpus-dev``), and IASM's PubMed title -> abstract task rebuilt from its documents (``nfcorpus-titles``)."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

from .. import formats
from ..errors import DataFormatError
from ..records import Doc, Qrel, Query
from .dataset import Dataset
from .fingerprint import files_fingerprint
from .recipes import NFCORPUS_RECIPE
from .trec_format import trec_dataset

#: seed of the train/dev/test partition of ``nfcorpus-titles`` (fixed: the split is part of the dataset)
TITLES_SPLIT_SEED = 2016


def nfcorpus_loader(split: str) -> Callable[[Path], Dataset]:
    """A data-root loader of one NFCorpus pool (``test``: BEIR's test queries, raw titles; ``dev``: the
    release's title queries), its judged queries only, with NFCorpus's recipe."""

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
    usable). Each title is a query whose only
    relevant document is its own abstract; the collection is all abstracts. Articles are partitioned 8:1:1
    into ``train``/``dev``/``test`` queries with a fixed seed (:data:`TITLES_SPLIT_SEED`), as IASM partitions
    its PubMed articles. There is no shipped first stage: candidates come from BM25 over the abstracts.
    """
    base = root / "nfcorpus"
    sources = [base / "test.docs", base / "dev.docs"]
    texts: dict[str, str] = {}
    for path in sources:
        if not path.exists():
            raise DataFormatError(path, None, "file not found")
        for line, doc in formats.read_docs_numbered(path):
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
        fingerprint=files_fingerprint(sources) + f"-titles{TITLES_SPLIT_SEED}",
        splits=splits,
        source=str(base),
    )
