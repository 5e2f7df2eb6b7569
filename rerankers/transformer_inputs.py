"""How texts become a transformer re-ranker's inputs: the encoder config (which encoder, how many word pieces
of a query and of a document are kept) and the word-piece ids of queries and documents, tokenized with the
encoder's own tokenizer (no special tokens, truncated) and cached per query text and per document (bounded
LRU). :class:`rerankers.transformer_base.TransformerReranker` inherits the cache; the special tokens around
the ids come from :mod:`rerankers.wordpieces`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from pipeline.core.errors import PipelineError
from pipeline.core.records import Doc, Query

from infra.encoders import DEFAULT_ENCODER
from .lru import LRUCache


@dataclass
class EncoderConfig:
    """The encoder and how texts become its inputs (each can be set with ``--set name=value``).

    Attributes:
        encoder: a Hugging Face model name or a local directory (default: the packaged MiniLM).
        max_query_length: word pieces kept of a query (special tokens not counted).
        max_doc_length: word pieces kept of a document (special tokens not counted).
        doc_cache_size: documents whose encoder output a re-ranker that caches (ADDAX) keeps (LRU; 0: none).
    """

    encoder: str = DEFAULT_ENCODER
    max_query_length: int = 32
    max_doc_length: int = 180
    doc_cache_size: int = 4096

    def __post_init__(self):
        if self.max_query_length < 1 or self.max_doc_length < 1:
            raise PipelineError("max_query_length and max_doc_length must be at least 1")
        if self.doc_cache_size < 0:
            raise PipelineError("doc_cache_size must be >= 0 (0 disables the cache)")


class CachedWordPieces:
    """Word-piece ids of queries and documents through two LRU caches (a mixin of
    :class:`~rerankers.transformer_base.TransformerReranker`, which sets ``tokenizer``, ``encoder_config``,
    ``_query_tokens`` and ``_doc_tokens``)."""

    def _token_ids(self, cache: LRUCache, items: Sequence[tuple[Hashable, str]], limit: int) -> list[list[int]]:
        """Word-piece ids (no special tokens, at most ``limit``) of ``(key, text)`` items, through ``cache``;
        the texts not cached are tokenized in one call."""
        found = [cache.get(key) for key, _ in items]
        missing = [i for i, ids in enumerate(found) if ids is None]
        if missing:
            texts = [items[i][1] for i in missing]
            encoded = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=limit)["input_ids"]
            for i, ids in zip(missing, encoded):
                found[i] = list(ids)
                cache.put(items[i][0], found[i])
        return found

    @staticmethod
    def query_key(query: Query) -> Hashable:
        """The key a query's word pieces are cached under.

        Args:
            query: the query.

        Returns:
            Its text (the same text tokenizes the same whatever the query id).
        """
        return query.text

    @staticmethod
    def doc_key(doc: Doc) -> Hashable:
        """The key a document's word pieces (and cached outputs) are kept under.

        Args:
            doc: the document.

        Returns:
            ``(doc_id, text)``: a client may send another text under a known id.
        """
        return (doc.doc_id, doc.text)

    def query_ids(self, queries: Sequence[Query]) -> list[list[int]]:
        """Word-piece ids of ``queries`` (no special tokens, at most ``max_query_length``), cached.

        Args:
            queries: the queries.

        Returns:
            One id list per query.
        """
        return self._token_ids(self._query_tokens, [(self.query_key(q), q.text) for q in queries],
                               self.encoder_config.max_query_length)

    def doc_ids(self, docs: Sequence[Doc]) -> list[list[int]]:
        """Word-piece ids of ``docs`` (no special tokens, at most ``max_doc_length``), cached.

        Args:
            docs: the documents.

        Returns:
            One id list per document.
        """
        return self._token_ids(self._doc_tokens, [(self.doc_key(d), d.text) for d in docs],
                               self.encoder_config.max_doc_length)
