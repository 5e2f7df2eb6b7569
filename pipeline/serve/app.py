"""The HTTP routes (a FastAPI application): the project's ``/rerank`` and ``/search``, TEI's ``/rerank``,
Cohere's/Jina's ``/v1/rerank`` and ``/v2/rerank``, ``/health``, ``/ready``, ``/info``, ``/openapi.json`` and
``/docs``; every answer JSON, every client mistake a 4xx with one line saying what was wrong."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from infra.checkpoints import project_version

from ..core.errors import PipelineError
from .batcher import ServiceUnavailable
from .schemas import (REQUEST_MODELS, CohereRerankResponse, ErrorAnswer, Health, Readiness, RequestError,
                      RerankResponse, SearchResponse, TEIRank, decode_json)
from .service import RerankService

log = logging.getLogger("pipeline.serve")

#: request bodies above this are refused (413) before they are read: 1,000 documents of 30 KB each fit
MAX_BODY_BYTES = 32 * 1024 * 1024
#: seconds a request's body may take to arrive, in all (then 408 and the connection is closed)
BODY_TIMEOUT_S = 30.0

#: path -> the method it takes
ROUTES: dict[str, str] = {
    "/health": "GET",
    "/ready": "GET",
    "/info": "GET",
    "/rerank": "POST",
    "/search": "POST",
    "/v1/rerank": "POST",
    "/v2/rerank": "POST",
    "/openapi.json": "GET",
    "/docs": "GET",
}


class JSONAnswer(JSONResponse):
    """A JSON response that any string can be sent in: a lone surrogate (a client may post ``"\\ud800"``
    and get its id back) cannot be encoded as UTF-8, so such an answer is written with ASCII escapes."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        """The UTF-8 JSON of ``content``; escaped ASCII JSON when it holds a lone surrogate."""
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_answer(status: int, message: str, api: str = "project", headers: dict[str, str] | None = None) -> JSONAnswer:
    """``{"error": message}``; TEI's clients also read ``error_type``, Cohere's ``message``."""
    body: dict[str, Any] = {"error": message}
    if api == "tei":
        body["error_type"] = "Unhealthy" if status == 503 else "Backend" if status >= 500 else "Validation"
    elif api == "cohere":
        body["message"] = message
    return JSONAnswer(body, status_code=status, headers=headers)


class ServiceState:
    """The service the routes answer with: ``None`` until the model is loaded (``/ready`` is 503 and the
    scoring routes answer 503 meanwhile), then a :class:`RerankService`."""

    def __init__(self, service: RerankService | None = None):
        self.service = service

    def require(self) -> RerankService:
        """The loaded service; :class:`ServiceUnavailable` while the model loads."""
        if self.service is None:
            raise ServiceUnavailable("the model is still loading; GET /ready answers 200 once it is ready")
        return self.service


@dataclass(frozen=True)
class BodyLimits:
    """An ASGI middleware that reads each request's body before the routes see it, within a size and a
    time limit: a ``Content-Length`` over ``max_body_bytes`` is 413 at once, a body that grows past it is
    413, a body not complete ``body_timeout`` seconds after its headers is 408 (a client that announced more
    bytes than it sends, or trickles them); each of these closes the connection."""

    app: Callable
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float = BODY_TIMEOUT_S

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Buffer the body (or answer 408/413), then call the application with it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._refuse(scope, receive, send, 413, f"body of {int(length)} bytes; at most {self.max_body_bytes}")
            return
        chunks, size = [], 0
        deadline = time.monotonic() + self.body_timeout
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away: nobody to answer
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    await self._refuse(scope, receive, send, 413, f"body over {self.max_body_bytes} bytes")
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        except asyncio.CancelledError:
            # the shutdown deadline passed while this body was still coming: say so rather than a bare 500
            await self._refuse(scope, receive, send, 503, "the service is shutting down")
            return
        except TimeoutError:
            announced = f" of {int(length)}" if length is not None and length.isdigit() else ""
            await self._refuse(scope, receive, send, 408, f"the body did not arrive within {self.body_timeout:g} s "
                                                          f"({size}{announced} bytes came)")
            return
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope: dict, receive: Callable, send: Callable, status: int, message: str) -> None:
        await error_answer(status, message, headers={"Connection": "close"})(scope, receive, send)


def _rerank_api(payload: Any) -> str:
    """Whose error shape a ``/rerank`` body gets: TEI's for a body with ``texts``."""
    return "tei" if isinstance(payload, dict) and "texts" in payload and "documents" not in payload else "project"


async def _answer(state: ServiceState, request: Request, action: Callable[[RerankService, Any], Awaitable[Any]],
                  api: str | Callable[[Any], str] = "project", body: bool = True) -> JSONAnswer:
    """Run one endpoint: its body decoded, its client mistakes 4xx, a model not loaded 503, the service's
    own fault a logged 500; never an exception out of the route (which the server would log as a
    traceback)."""
    payload = None
    try:
        if body:
            headers = request.headers
            if "content-length" not in headers and "transfer-encoding" not in headers:
                raise RequestError(411, "a POST needs a Content-Length header and a JSON body")
            payload = decode_json(await request.body())
        service = state.require()
        return JSONAnswer(await action(service, payload))
    except asyncio.CancelledError:
        # cancelled by the server's shutdown deadline: the client is told, the connection closed
        return error_answer(503, "the service stopped before this request was answered", headers={"Connection": "close"})
    except Exception as error:  # noqa: BLE001 - answered below, never a traceback out of the route
        return _failure(error, request, api(payload) if callable(api) else api)


def _failure(error: Exception, request: Request, api: str) -> JSONAnswer:
    """The answer to an exception out of an endpoint: 4xx for a client's mistake, 503 while the model loads
    or the service stops, else 500 (the service's own fault, logged: one line for a known fault, with its
    traceback for an unexpected one)."""
    if isinstance(error, RequestError):
        return error_answer(error.status, error.message, api)
    if isinstance(error, ServiceUnavailable):
        return error_answer(503, str(error), api, headers={"Retry-After": "1"})
    if isinstance(error, PipelineError):
        log.error("%s %s failed: %s", request.method, request.url.path, error)
    else:
        log.exception("%s %s failed", request.method, request.url.path)
    return error_answer(500, f"internal error: {error}", api)


def create_app(state: ServiceState, max_body_bytes: int = MAX_BODY_BYTES,
               body_timeout: float = BODY_TIMEOUT_S) -> FastAPI:
    """The FastAPI application answering with ``state``'s service.

    Args:
        state: holds the service once the model is loaded.
        max_body_bytes: request bodies above this are 413.
        body_timeout: seconds a body may take to arrive, in all (then 408).

    Returns:
        the application (an ASGI callable for uvicorn).

    Example:
        >>> app = create_app(ServiceState(service))
        >>> uvicorn.run(app, port=8000)
    """
    app = FastAPI(title="neural-rerank-pipeline re-ranking service", version=project_version(),
                  description="Re-ranks documents for a query with the served re-ranker. The project's own "
                              "/rerank and /search, text-embeddings-inference's /rerank (a body with 'texts'), "
                              "Cohere's and Jina's /v1/rerank (and /v2/rerank).",
                  openapi_url="/openapi.json", docs_url="/docs", redoc_url=None, default_response_class=JSONAnswer)
    errors = {status: {"model": ErrorAnswer} for status in (400, 408, 411, 413, 422, 500, 503)}

    def body_of(*models: type) -> dict:
        refs = [{"$ref": f"#/components/schemas/{model.__name__}"} for model in models]
        schema = refs[0] if len(refs) == 1 else {"oneOf": refs}
        return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}

    @app.get("/health", response_model=None, responses={200: {"model": Health}},
             summary="Liveness: 200 as soon as the port is open")
    async def health(request: Request) -> JSONAnswer:
        service = state.service
        return JSONAnswer(service.health() if service else {"status": "ok", "requests": 0, "batches": 0})

    @app.get("/ready", response_model=None, responses={200: {"model": Readiness}, 503: {"model": Readiness}},
             summary="Readiness: 503 until the model is loaded, then 200")
    async def ready(request: Request) -> JSONAnswer:
        if state.service is None:
            return JSONAnswer({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})
        return JSONAnswer({"status": "ready"})

    @app.get("/info", response_model=None, responses={503: errors[503]},
             summary="The model, its options and checkpoint, the first stage, the limits, the version")
    async def info(request: Request) -> JSONAnswer:
        return await _answer(state, request, lambda service, _: _now(service.info()), body=False)

    @app.post("/rerank", response_model=None,
              responses={200: {"model": Union[RerankResponse, list[TEIRank]]}, **errors},
              openapi_extra=body_of(REQUEST_MODELS[0], REQUEST_MODELS[1]),
              summary="Re-rank posted documents: the project's shape, or text-embeddings-inference's "
                      "(a body with 'texts')")
    async def rerank(request: Request) -> JSONAnswer:
        return await _answer(state, request, lambda service, payload: service.rerank(payload), api=_rerank_api)

    @app.post("/search", response_model=None, responses={200: {"model": SearchResponse}, 404: errors[400], **errors},
              openapi_extra=body_of(REQUEST_MODELS[2]),
              summary="Search with the first stage (--first-stage), then re-rank its top k")
    async def search(request: Request) -> JSONAnswer:
        return await _answer(state, request, lambda service, payload: service.search(payload))

    for path in ("/v1/rerank", "/v2/rerank"):
        async def cohere(request: Request) -> JSONAnswer:
            return await _answer(state, request, lambda service, payload: service.rerank_cohere(payload), api="cohere")

        app.add_api_route(path, cohere, methods=["POST"], response_model=None,
                          responses={200: {"model": CohereRerankResponse}, **errors},
                          openapi_extra=body_of(REQUEST_MODELS[3]), name=f"cohere_rerank_{path[2]}",
                          summary="Re-rank documents: Cohere's and Jina's API (what their clients send)")

    @app.exception_handler(StarletteHTTPException)
    async def routing_error(request: Request, error: StarletteHTTPException) -> JSONAnswer:
        path = request.url.path
        if error.status_code == 404:
            return error_answer(404, f"unknown path {path!r} (paths: {', '.join(ROUTES)})")
        if error.status_code == 405 and path in ROUTES:
            return error_answer(405, f"{path} takes {ROUTES[path]}, not {request.method}", headers={"Allow": ROUTES[path]})
        return error_answer(error.status_code, str(error.detail))

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            _, definitions = models_json_schema([(model, "validation") for model in REQUEST_MODELS],
                                                ref_template="#/components/schemas/{model}")
            schema.setdefault("components", {}).setdefault("schemas", {}).update(definitions.get("$defs", {}))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    app.add_middleware(BodyLimits, max_body_bytes=max_body_bytes, body_timeout=body_timeout)
    return app


async def _now(value: Any) -> Any:
    return value
