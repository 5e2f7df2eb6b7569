"""Text for word-level models: one tokenizer, a vocabulary with OOV handling, and IDF statistics of
words and phrases (n-grams) over a collection.

The tokenizer is consistent with the pretokenized data the papers use (Microblog, WikiQA and TrecQA
come lowercased with punctuation split off, tweets with ``@url``/``@names`` placeholders): applied to
such text it returns the whitespace tokens unchanged, and applied to raw text (Cranfield, DL passages)
it produces the same kind of tokens.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# a word (letters/digits/underscore, with inner ' - . kept: "n't", "e-mail", "3.3"), optionally led by @ or #
# (tweet placeholders and hashtags), or a single punctuation character
_TOKEN = re.compile(r"[@#]?\w+(?:['\-.]\w+)*|'\w+|[^\w\s]")

PAD, OOV = "<pad>", "<oov>"
PAD_ID, OOV_ID = 0, 1


def tokenize(text: str) -> list[str]:
    """Lowercased tokens of ``text`` (see the module docstring).

    Args:
        text: any text.

    Returns:
        The tokens, in order.

    Example:
        >>> tokenize("The Cat's 2 hats!")
        ['the', "cat's", '2', 'hats', '!']
    """
    return _TOKEN.findall(text.lower())


@dataclass
class Vocabulary:
    """Token <-> id. Id 0 is padding, id 1 stands for every out-of-vocabulary token."""

    tokens: list[str] = field(default_factory=lambda: [PAD, OOV])
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.tokens[:2] != [PAD, OOV]:
            raise ValueError(f"a vocabulary starts with {PAD!r}, {OOV!r}")
        self._index = {token: i for i, token in enumerate(self.tokens)}
        if len(self._index) != len(self.tokens):
            raise ValueError("duplicate tokens in vocabulary")

    @classmethod
    def build(cls, texts: Iterable[Sequence[str]], min_count: int = 1, max_size: int | None = None) -> "Vocabulary":
        """Tokens seen at least ``min_count`` times, most frequent first (ties alphabetical, so the ids
        depend only on the texts, not on iteration order of a set).

        Args:
            texts: tokenized texts.
            min_count: the fewest occurrences a token needs.
            max_size: the most ids, padding and OOV included (``None``: no limit).

        Returns:
            The vocabulary.

        Example:
            >>> Vocabulary.build([["b", "a", "b"]]).tokens
            ['<pad>', '<oov>', 'b', 'a']
        """
        counts: Counter = Counter()
        for tokens in texts:
            counts.update(tokens)
        ranked = sorted((t for t, c in counts.items() if c >= min_count and t not in (PAD, OOV)),
                        key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max(0, max_size - 2)]
        return cls([PAD, OOV, *ranked])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._index

    def id(self, token: str) -> int:
        """The token's id.

        Args:
            token: a token.

        Returns:
            Its id, or :data:`OOV_ID`.
        """
        return self._index.get(token, OOV_ID)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of ``tokens``.

        Args:
            tokens: tokens.

        Returns:
            Their ids (OOV tokens map to :data:`OOV_ID`).
        """
        index = self._index
        return [index.get(t, OOV_ID) for t in tokens]


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """All contiguous n-grams of ``tokens``.

    Args:
        tokens: tokens.
        n: the n-gram length.

    Returns:
        The n-grams as tuples (none when ``tokens`` is shorter than n).

    Example:
        >>> ngrams(["a", "b", "c"], 2)
        [('a', 'b'), ('b', 'c')]
    """
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@dataclass
class IDFStatistics:
    """Document frequencies of words and of selected phrases over a collection, and IDF from them.

    ``idf(df) = log(1 + (N - df + 0.5) / (df + 0.5))`` (the BM25/Lucene form: positive, largest for
    unseen terms). Phrase document frequencies are counted only for the phrases asked for when the
    statistics are built (e.g. every n-gram of every query of a dataset): counting all n-grams of a large
    collection would not fit in memory. For a phrase that was not counted, the document frequency of its
    rarest word is used: an upper bound, since no phrase is in more documents than each of its words.
    """

    num_docs: int
    word_df: dict[str, int]
    phrase_df: dict[tuple[str, ...], int] = field(default_factory=dict)

    @classmethod
    def build(cls, docs: Iterable[Sequence[str]], phrases: Iterable[Sequence[str]] = (), max_n: int = 1) -> "IDFStatistics":
        """Count words in tokenized ``docs``, and the given ``phrases`` of 2..``max_n`` tokens.

        Args:
            docs: tokenized documents.
            phrases: the phrases whose document frequency is wanted.
            max_n: the longest phrase counted.

        Returns:
            The statistics.
        """
        wanted = {tuple(p) for p in phrases if 2 <= len(p) <= max_n}
        lengths = sorted({len(p) for p in wanted})
        # a phrase can only start at a word that starts some wanted phrase: checking those positions alone
        # counts the same, without building every n-gram of every document (most of the time on 170k tweets)
        starts = {p[0] for p in wanted}
        word_df: Counter = Counter()
        phrase_df: Counter = Counter()
        num_docs = 0
        for tokens in docs:
            num_docs += 1
            word_df.update(set(tokens))
            if wanted:
                present = set()
                end = len(tokens)
                for i, token in enumerate(tokens):
                    if token in starts:
                        present.update(g for n in lengths if i + n <= end
                                       for g in (tuple(tokens[i : i + n]),) if g in wanted)
                phrase_df.update(present)
        return cls(num_docs, dict(word_df), dict(phrase_df))

    def df(self, phrase: Sequence[str]) -> int:
        """Document frequency of a word or phrase (see the class docstring for unseen ones).

        Args:
            phrase: a word (a string or a 1-tuple) or a phrase (a tuple of tokens).

        Returns:
            The number of documents holding it.
        """
        if isinstance(phrase, str):
            return self.word_df.get(phrase, 0)
        phrase = tuple(phrase)
        if len(phrase) == 1:
            return self.word_df.get(phrase[0], 0)
        if phrase in self.phrase_df:
            return self.phrase_df[phrase]
        return min(self.word_df.get(w, 0) for w in phrase)

    def idf(self, phrase: Sequence[str] | str) -> float:
        """IDF of a word or phrase.

        Args:
            phrase: a word (a string or a 1-tuple) or a phrase (a tuple of tokens).

        Returns:
            ``log(1 + (N - df + 0.5) / (df + 0.5))``.
        """
        df = self.df(phrase)
        return math.log(1.0 + (self.num_docs - df + 0.5) / (df + 0.5))

    def to_json(self) -> dict:
        """A JSON-able form for checkpoints.

        Returns:
            ``num_docs``, ``word_df`` and ``phrase_df`` (phrases joined with a space).
        """
        return {"num_docs": self.num_docs, "word_df": self.word_df,
                "phrase_df": {" ".join(p): c for p, c in self.phrase_df.items()}}

    @classmethod
    def from_json(cls, data: dict) -> "IDFStatistics":
        """Inverse of :meth:`to_json`.

        Args:
            data: what :meth:`to_json` returned.

        Returns:
            The statistics.
        """
        return cls(int(data["num_docs"]), dict(data["word_df"]),
                   {tuple(p.split(" ")): int(c) for p, c in data["phrase_df"].items()})
