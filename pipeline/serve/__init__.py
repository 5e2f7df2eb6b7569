"""An HTTP service (FastAPI on uvicorn) that serves a trained re-ranker, and optionally a first stage in
front of it.

Command line (``rerank-serve`` is the same command)::

    python -m pipeline.serve --checkpoint models/vaswani/knrm-fold1of5-seed42-0123abcd.pt --port 8000
    python -m pipeline.serve --reranker bi-encoder --model all-MiniLM-L6-v2 --port 0
    python -m pipeline.serve --reranker knrm --dataset vaswani --first-stage bm25 --threads 1

Endpoints (JSON in, JSON out; ``/openapi.json`` describes them, ``/docs`` shows them)::

    GET  /health      200 as soon as the port is open: {"status": "ok", "requests": N, "batches": M}
    GET  /ready       503 {"status": "loading"} until the model is loaded, then 200 {"status": "ready"}
    GET  /info        re-ranker name, class, options, checkpoint, first stage, limits, version
    POST /rerank      {"query", "documents": [{"id", "text"}], "top_k"} -> {"results": [{"id", "score"}]}
                      or text-embeddings-inference's {"query", "texts", "raw_scores", "return_text"}
                      -> [{"index", "score", "text"?}]
    POST /v1/rerank   Cohere's and Jina's {"query", "documents": [str | {"text"}], "top_n", "return_documents",
                      "model"} -> {"id", "model", "results": [{"index", "relevance_score", "document"?}]}
                      (also /v2/rerank, where Cohere's ClientV2 sends it)
    POST /search      {"query", "k", "top_k"} (with --dataset and --first-stage)
                      -> {"results": [{"id", "score", "first_stage_score", "first_stage_rank"}]}

The port opens before the model loads. Concurrent requests are scored together: one worker thread owns the
model (:mod:`.batcher`). A client's mistake is a 4xx ``{"error": "..."}``, never a 500; every wait has a
bound (:class:`.server.Limits`), the shutdown included. One job per module:

* :mod:`.models`: loading the served model; :mod:`.batcher`: cross-request batching;
* :mod:`.schemas`: request/response bodies and JSON decoding; :mod:`.service`: the endpoints' work;
* :mod:`.app`: the routes; :mod:`.server`: uvicorn and its limits; :mod:`.cli`: the command line.
"""
from __future__ import annotations

from infra.checkpoints import project_version

from .app import MAX_BODY_BYTES, ROUTES, ServiceState, create_app
from .batcher import ScoringBatcher, ServiceUnavailable
from .cli import (KEPT_ON_INTERRUPT, build_parser, build_service, check_options, limits_of, load_service, main,
                  prepare, run_config, serve)
from .models import ServedModel, checkpoint_reranker_name, load_checkpoint_model, model_options, served_model
from .schemas import RequestError, decode_json
from .server import DEFAULT_HOST, DEFAULT_PORT, STOP_MARGIN_S, Limits, RerankServer
from .service import RerankService

#: the served model's former name (``benchmarks/serve_load.py`` imports it); the model itself is obtained by
#: :func:`pipeline.engine.obtain.obtain_model`, like every command's
obtain_model = served_model

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "KEPT_ON_INTERRUPT", "MAX_BODY_BYTES", "ROUTES", "STOP_MARGIN_S", "Limits",
           "RequestError", "RerankServer", "RerankService", "ScoringBatcher", "ServedModel", "ServiceState",
           "ServiceUnavailable", "build_parser", "build_service", "check_options", "checkpoint_reranker_name",
           "create_app", "decode_json", "limits_of", "load_checkpoint_model", "load_service", "main", "model_options",
           "obtain_model", "prepare", "project_version", "run_config", "serve", "served_model"]
