"""What the endpoints do, without HTTP: validate a decoded body, score through the batcher, shape the
answer of each API (the project's, text-embeddings-inference's, Cohere's/Jina's)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import math
import sys
import threading
import uuid
from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from infra.checkpoints import project_version

from ..core.errors import ConfigError, PipelineError
from ..core.records import Doc, Query
from .batcher import DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT_MS, ScoringBatcher
from .models import ServedModel
from .schemas import (CohereRerankRequest, RequestError, RerankRequest, SearchRequest, TEIRerankRequest, clean_text,
                      json_kind, validation_message)

DEFAULT_MAX_DOCS = 1000


def _text_key(kind: str, text: str) -> str:
    """An id that only this text can have: models may cache by id (word-level models keep a document's
    tokens under its id), and clients reuse ids for other texts, so the model never sees a client's id."""
    return f"{kind}:{hashlib.blake2b(text.encode('utf-8'), digest_size=16).hexdigest()}"


def sigmoid(score: float) -> float:
    """``1 / (1 + e^-score)`` without overflow: the (0, 1) relevance TEI (without ``raw_scores``) and Cohere
    report; monotone, so the order is the raw scores' order."""
    if score >= 0:
        return 1.0 / (1.0 + math.exp(-score))
    small = math.exp(score)
    return small / (1.0 + small)


def _best_first(scores: list[float], top: int | None) -> list[int]:
    """Positions by score, best first; ties keep the posted order (``sorted`` is stable)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:top]


class RerankService:
    """Re-rank posted documents, search with a first stage and re-rank, describe the model.

    Args:
        model: the loaded model.
        retriever: a first stage (``search(queries, k)``) for ``/search``; ``None``: ``/search`` is a 404.
        documents: the texts of the documents the first stage returns, by id (required with ``retriever``).
        first_stage: the first stage's name for ``/info``.
        k: the candidates ``/search`` re-ranks when the request gives no ``k`` (capped at ``max_docs``).
        max_docs: documents per request, at most (more is a 413).
        max_batch, max_wait_ms, batch_size, threads: the :class:`ScoringBatcher`'s.

    Example:
        >>> service = RerankService(load_checkpoint_model("knrm.pt"), max_docs=100)
        >>> asyncio.run(service.rerank({"query": "q", "documents": [{"id": "a", "text": "w1"}]}))
        {'results': [{'id': 'a', 'score': 0.31}]}
    """

    def __init__(self, model: ServedModel, *, retriever: Any = None, documents: Mapping[str, Doc] | None = None,
                 first_stage: str | None = None, k: int = 100, max_docs: int = DEFAULT_MAX_DOCS,
                 max_batch: int = DEFAULT_MAX_BATCH, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
                 batch_size: int | None = None, threads: int = 0):
        if max_docs < 1:
            raise ConfigError(f"--max-docs must be at least 1, got {max_docs}")
        if k < 1:
            raise ConfigError(f"--k must be at least 1, got {k}")
        if retriever is not None and documents is None:
            raise ConfigError("a first stage needs the documents it returns (their texts, by id)")
        self.model = model
        self.retriever = retriever
        self.documents = documents
        self.first_stage = first_stage or (getattr(retriever, "name", None) if retriever is not None else None)
        self.k = min(k, max_docs)
        self.max_docs = max_docs
        self.batcher = ScoringBatcher(model.reranker, max_batch, max_wait_ms, batch_size, threads)
        # one thread runs every first-stage search: Lucene is reached through pyjnius, whose threads attach
        # to the JVM; one long-lived thread attaches once and serialises access to the searcher
        self._searcher = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="first-stage")
                          if retriever is not None else None)
        self._searches = 0
        self._search_lock = threading.Lock()

    # -- answers ------------------------------------------------------------------------------------
    def health(self) -> dict:
        """``GET /health``: alive, with the requests scored and the ``score_many`` calls made so far."""
        return {"status": "ok", "requests": self.batcher.requests, "batches": self.batcher.batches}

    def info(self) -> dict:
        """``GET /info``: the model, the first stage and the service's limits."""
        return {**self.model.info, "first_stage": self.first_stage, "k": self.k if self.first_stage else None,
                "max_docs": self.max_docs, "max_batch": self.batcher.max_batch,
                "max_wait_ms": self.batcher.max_wait * 1000.0, "batch_size": self.batcher.batch_size,
                "version": project_version()}

    async def rerank(self, payload: Any) -> Any:
        """``POST /rerank``: the project's shape, or TEI's when the body has ``texts``."""
        if isinstance(payload, dict) and "texts" in payload and "documents" not in payload:
            return await self.rerank_texts(payload)
        return await self.rerank_documents(payload)

    async def rerank_documents(self, payload: Any) -> dict:
        """The project's ``/rerank``: the posted documents by score, best first, cut to ``top_k``."""
        request = self._validate(RerankRequest, payload, "documents", 400)
        texts = [document.text for document in request.documents]
        scores = await self._scores(request.query, texts, [document.id for document in request.documents])
        return {"results": [{"id": request.documents[i].id, "score": scores[i]}
                            for i in _best_first(scores, request.top_k)]}

    async def rerank_texts(self, payload: Any) -> list:
        """TEI's ``/rerank``: ``[{index, score, text?}]`` best first; ``score`` is the sigmoid of the raw
        score unless ``raw_scores``."""
        request = self._validate(TEIRerankRequest, payload, "texts", 422)
        scores = await self._scores(request.query, request.texts, [f"texts[{i}]" for i in range(len(request.texts))])
        results = []
        for i in _best_first(scores, None):
            result: dict[str, Any] = {"index": i, "score": scores[i] if request.raw_scores else sigmoid(scores[i])}
            if request.return_text:
                result["text"] = request.texts[i]
            results.append(result)
        return results

    async def rerank_cohere(self, payload: Any) -> dict:
        """Cohere's/Jina's ``/v1/rerank`` (and ``/v2/rerank``): ``{id, model, results: [{index,
        relevance_score, document?}]}`` best first, cut to ``top_n``; ``relevance_score`` is the sigmoid of the
        raw score."""
        request = self._validate(CohereRerankRequest, payload, "documents", 422)
        texts = [document if isinstance(document, str) else document.text for document in request.documents]
        scores = await self._scores(request.query, texts, [f"documents[{i}]" for i in range(len(texts))])
        results = []
        for i in _best_first(scores, request.top_n):
            result: dict[str, Any] = {"index": i, "relevance_score": sigmoid(scores[i])}
            if request.return_documents:
                document = request.documents[i]
                result["document"] = {"text": document} if isinstance(document, str) else document.model_dump()
            results.append(result)
        return {"id": str(uuid.uuid4()), "model": request.model or self.model.info.get("reranker", "served"),
                "results": results}

    async def search(self, payload: Any) -> dict:
        """``POST /search``: the first stage's top ``k`` for the query, re-ranked, cut to ``top_k``."""
        if self.retriever is None:
            raise RequestError(404, "no first stage: start the service with --dataset D --first-stage NAME "
                                    "to use /search (POST /rerank re-ranks documents you send)")
        request = self._validate(SearchRequest, payload, None, 400)
        k = self.k if request.k is None else request.k
        if k > self.max_docs:
            raise RequestError(400, f"'k' must be at most {self.max_docs}, got {k}")
        with self._search_lock:
            self._searches += 1
            query_id = f"search-{self._searches}"
        query = Query(query_id, clean_text(request.query))
        found = self._searcher.submit(self.retriever.search, [query], k)
        hits = (await asyncio.wrap_future(found)).get(query_id, [])
        missing = [hit.doc_id for hit in hits if hit.doc_id not in self.documents]
        if missing:
            raise PipelineError(f"the first stage returned documents the dataset lacks: {missing[:5]}")
        scores = await self._scores(request.query, [self.documents[hit.doc_id].text for hit in hits],
                                    [hit.doc_id for hit in hits])
        return {"results": [{"id": hits[i].doc_id, "score": scores[i], "first_stage_score": hits[i].score,
                             "first_stage_rank": i + 1} for i in _best_first(scores, request.top_k)]}

    # -- helpers --------------------------------------------------------------------------------------
    def _validate(self, model: type[BaseModel], payload: Any, listed: str | None, status: int) -> Any:
        required = [name for name, info in model.model_fields.items() if info.is_required()]
        if not isinstance(payload, dict):
            raise RequestError(400, f"the body must be a JSON object with {', '.join(repr(n) for n in required)}, "
                                    f"got a JSON {json_kind(payload)}")
        # counted before each document is checked: an oversized request costs no validation
        if listed and isinstance(payload.get(listed), list) and len(payload[listed]) > self.max_docs:
            raise RequestError(413, f"{len(payload[listed])} documents; at most {self.max_docs} per request (--max-docs)")
        try:
            return model.model_validate(payload)
        except ValidationError as error:
            raise RequestError(status, validation_message(error, tuple(model.model_fields))) from None

    async def _scores(self, query: str, texts: list[str], ids: list[str]) -> list[float]:
        if not texts:
            return []
        query_text = clean_text(query)
        docs = [Doc(_text_key("d", text), text) for text in map(clean_text, texts)]
        scores = await asyncio.wrap_future(self.batcher.submit(Query(_text_key("q", query_text), query_text), docs))
        for doc_id, score in zip(ids, scores):
            if not math.isfinite(score):  # JSON has no NaN; and such a score is the model's fault, not the client's
                raise PipelineError(f"the re-ranker gave document {doc_id!r} a non-finite score ({score})")
        return scores

    def close(self, timeout: float | None = None) -> bool:
        """Answer what is queued, then stop scoring and searching.

        Args:
            timeout: seconds to wait for the scoring worker, at most (``None``: until it is done).

        Returns:
            whether everything stopped within ``timeout``.
        """
        finished = self.batcher.close(timeout)
        if self._searcher is not None:
            detached = self._searcher.submit(_detach_from_jvm)
            try:
                detached.result(timeout)
            except concurrent.futures.TimeoutError:
                finished = False
            self._searcher.shutdown(wait=False)
        return finished


def _detach_from_jvm() -> None:
    """Detach the calling thread from the JVM when pyjnius attached it (a thread that ends attached can
    hang the JVM's shutdown); nothing when Java was never used."""
    jnius = sys.modules.get("jnius")
    if jnius is not None and hasattr(jnius, "detach"):
        jnius.detach()
