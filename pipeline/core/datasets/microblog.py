"""TREC Microblog 2011-2014 from the data root: HCAN's candidate pairs (QL top 1000 per query, the shipped
first stage) with the official NIST judgments, one split per year.

``microblog-url`` is the same data with each tweet followed by the words of the page it links to
(``url.txt``, line-aligned with ``id.txt``; about half of the tweets have one). HCAN's released code
reads those URLs as an extra input channel on Microblog (``with_url``), which the paper does not mention;
this dataset gives any word-level model that signal as plain text.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, Iterable

from ..errors import DataFormatError
from ..records import Doc
from ..textio import iter_lines
from .dataset import Dataset
from .fingerprint import files_fingerprint
from .pair_format import pair_dataset
from .recipes import MICROBLOG_RECIPE

MICROBLOG_YEARS = ("2011", "2012", "2013", "2014")

#: parts of a URL that name no content (scheme, host boilerplate, file types)
_URL_NOISE = frozenset({"http", "https", "www", "com", "org", "net", "html", "htm", "php", "asp", "aspx",
                        "index", "article", "story", "news", "utm", "source", "medium", "campaign", "twitterfeed",
                        "feedburner", "twitter", "feed"})
_URL_WORD = re.compile(r"[a-z]+")


def url_words(url: str) -> list[str]:
    """The content words of a URL: ``http://www.thehindu.com/water-scarcity-worries/article4520714.ece`` ->
    ``thehindu water scarcity worries ece``; letters only, without scheme and boilerplate parts."""
    return [w for w in _URL_WORD.findall(url.lower()) if w not in _URL_NOISE and len(w) > 1]


def _tweet_urls(folder: Path) -> dict[str, str]:
    """Doc id -> URL words of one year's folder (``id.txt`` and ``url.txt`` are line-aligned)."""
    ids = [line.split() for _, line in iter_lines(folder / "id.txt")]
    urls = [line for _, line in iter_lines(folder / "url.txt")]
    if len(ids) != len(urls):
        raise DataFormatError(folder / "url.txt", min(len(ids), len(urls)) + 1,
                              f"{len(urls)} lines where id.txt has {len(ids)}; url.txt must be line-aligned with id.txt")
    return {parts[2]: " ".join(url_words(url)) for parts, url in zip(ids, urls) if len(parts) > 2 and url.strip()}


def microblog_loader(years: Iterable[str], with_urls: bool = False) -> Callable[[Path], Dataset]:
    """A data-root loader of some Microblog years: ``microblog`` (all four, with HCAN's recipe) or
    ``microblog-<year>`` (one); ``with_urls`` appends each tweet's URL words to its text (``microblog-url``)."""
    years = tuple(years)

    def load(root: Path) -> Dataset:
        base = root / "trec-microblog-hcan"
        name = "microblog" if len(years) == len(MICROBLOG_YEARS) else f"microblog-{years[0]}"
        folders = {year: base / f"trec-{year}" for year in years}
        dataset = pair_dataset(
            name + ("-url" if with_urls else ""),
            folders,
            [base / "topics-and-qrels" / f"qrels.microblog{year}.txt" for year in years],
            source=str(base),
        )
        if len(years) == len(MICROBLOG_YEARS):
            dataset.recipe = MICROBLOG_RECIPE
        if with_urls:
            dataset = _with_url_words(dataset, folders.values())
        return dataset

    return load


def _with_url_words(dataset: Dataset, folders: Iterable[Path]) -> Dataset:
    """``dataset`` whose tweets are followed by their URL words; its fingerprint covers the ``url.txt`` files."""
    folders = list(folders)
    urls: dict[str, str] = {}
    for folder in folders:
        urls.update(_tweet_urls(folder))
    plain = dataset.docs_factory
    return dataclasses.replace(
        dataset,
        docs_factory=lambda: (Doc(d.doc_id, f"{d.text} {urls[d.doc_id]}") if urls.get(d.doc_id) else d
                              for d in plain()),
        fingerprint=f"{dataset.fingerprint}-url-{files_fingerprint(folder / 'url.txt' for folder in folders)}",
        _store=None,
    )
