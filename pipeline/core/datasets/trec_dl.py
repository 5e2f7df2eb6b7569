"""TREC Deep Learning passage years 2019-2021 from the data root: judged queries, graded qrels and the
shipped BM25 top 100 with passage text, one year alone (``dl19`` ...) or all three as splits (``dl``)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Iterator

from ..errors import DataFormatError
from ..records import Doc, Query
from .dataset import Dataset
from .recipes import DL_RECIPE, DL_YEAR_RECIPE
from .trec_format import trec_dataset

#: TREC DL passage years shipped in ``msmarco-passage-trecdl``: topics file, qrels file, short name (DL21 is
#: MS MARCO v2)
DL_YEARS = {
    "2019": ("topics.dl19-passage.txt", "qrels.dl19-passage.txt", "dl19"),
    "2020": ("topics.dl20.txt", "qrels.dl20-passage.txt", "dl20"),
    "2021": ("topics.dl21.txt", "qrels.dl21-passage.txt", "dl21"),
}


def dl_year_loader(year: str) -> Callable[[Path], Dataset]:
    """A data-root loader of one TREC DL year: its judged queries, graded qrels and the shipped BM25 top-100
    with passage text."""
    topics, qrels, short = DL_YEARS[year]

    def load(root: Path) -> Dataset:
        base = root / "msmarco-passage-trecdl"
        dataset = trec_dataset(
            short, base / "topics-and-qrels" / topics, base / "topics-and-qrels" / qrels,
            [base / "bm25-top100" / f"retrieve_results_{short}.json"], base / "bm25-top100" / f"trec_results_{short}.txt",
            judged_only=True, source=str(base),
        )
        dataset.recipe = DL_YEAR_RECIPE
        return dataset

    return load


def dl_years(root: Path) -> Dataset:
    """TREC DL 2019, 2020 and 2021 passage as one dataset with one split per year (``2019``, ``2020``,
    ``2021``), like Microblog's: the default protocol trains on two years' graded judgments and re-ranks the
    third (:func:`pipeline.engine.protocols.make_protocol`). Query ids and passage ids of the three years are
    disjoint (DL21 passages are MS MARCO v2 ids), so the years are merged as they are."""
    years = {year: dl_year_loader(year)(root) for year in DL_YEARS}
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
