"""The service's request and response bodies (pydantic models, also the OpenAPI document's schemas), the
strict JSON decoding of a body, and a client's mistake as one clear message.

Three request shapes are served:

* the project's own: ``{query, documents: [{id, text}], top_k}`` -> ``{results: [{id, score}]}``;
* Hugging Face text-embeddings-inference's (TEI): ``{query, texts, raw_scores, return_text}`` ->
  ``[{index, score, text?}]``;
* Cohere's and Jina's: ``{query, documents: [str | {text}], top_n, return_documents, model}`` ->
  ``{id, model, results: [{index, relevance_score, document?}]}``.
"""
from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr,
                      ValidationError, field_validator, model_validator)
from typing_extensions import Annotated

#: integers of more digits than this are refused while the JSON is read: Python parses a long digit string
#: in quadratic time (and refuses over 4,300 digits with a ValueError), and no field here needs one
MAX_INTEGER_DIGITS = 30


class RequestError(Exception):
    """A client's mistake: answered with ``status`` (4xx) and ``{"error": message}``.

    Args:
        status: the HTTP status (400, 404, 408, 411, 413, 422).
        message: one line saying what was wrong and what was expected.
    """

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# ------------------------------------------------------------------------------------------ decoding


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise _TooLong(f"a number of {digits} digits; numbers here have at most {MAX_INTEGER_DIGITS}")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _TooLong(ValueError):
    """An integer literal longer than :data:`MAX_INTEGER_DIGITS`."""


def decode_json(raw: bytes) -> Any:
    """The JSON value of a request body, strictly: UTF-8, standard JSON (no ``NaN``), no huge integers.

    Args:
        raw: the body.

    Returns:
        the decoded value (lone surrogates written as ``\\ud800`` escapes are kept; :func:`clean_text`
        handles them where texts reach a model).

    Raises:
        RequestError: 400 for bytes that are not UTF-8 or not JSON, 422 for an integer of too many digits.

    Example:
        >>> decode_json(b'{"query": "q"}')
        {'query': 'q'}
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(400, f"the body is not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except _TooLong as error:
        raise RequestError(422, f"the body holds {error}") from None
    except json.JSONDecodeError as error:
        raise RequestError(400, f"malformed JSON: {error}") from None
    except ValueError as error:
        raise RequestError(400, f"malformed JSON: {error}") from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None


def clean_text(text: str) -> str:
    """``text`` with lone UTF-16 surrogates (``"\\ud800"`` in JSON decodes to one) replaced by U+FFFD: they
    cannot be encoded as UTF-8, which every tokenizer needs. A valid pair was already joined by the JSON
    decoder, so any surrogate left is a lone one."""
    if text.isascii():
        return text
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value (``"array"``, ``"string"``...), for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


# ----------------------------------------------------------------------------------------- requests


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty")
    return value


class DocumentIn(BaseModel):
    """A document of the project's ``POST /rerank``: a client's id and the text to score."""

    model_config = ConfigDict(extra="forbid")
    id: StrictStr = Field(description="the client's id, returned with the score (unique within a request)")
    text: StrictStr = Field(description="the document's text")

    @field_validator("id")
    @classmethod
    def _id_not_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("is empty")
        return value


class RerankRequest(BaseModel):
    """``POST /rerank`` (the project's shape): documents with ids, re-ranked for the query."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "cheap flights", "documents": [{"id": "d1", "text": "flights to Oslo"}], "top_k": 10}]})
    query: StrictStr = Field(description="the query text")
    documents: list[DocumentIn] = Field(description="the documents to score (at most --max-docs)")
    top_k: Optional[Annotated[StrictInt, Field(ge=1)]] = Field(None, description="keep the best top_k (default: all)")

    _query = field_validator("query")(_not_blank)

    @model_validator(mode="after")
    def _unique_ids(self) -> "RerankRequest":
        seen: set[str] = set()
        for position, document in enumerate(self.documents):
            if document.id in seen:
                raise ValueError(f"documents[{position}]: id {document.id!r} appears twice")
            seen.add(document.id)
        return self


class SearchRequest(BaseModel):
    """``POST /search``: the first stage's top ``k`` for the query, re-ranked."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"query": "cheap flights", "k": 100,
                                                                              "top_k": 10}]})
    query: StrictStr = Field(description="the query text")
    k: Optional[Annotated[StrictInt, Field(ge=1)]] = Field(
        None, description="candidates from the first stage (default: the service's --k; at most --max-docs)")
    top_k: Optional[Annotated[StrictInt, Field(ge=1)]] = Field(None, description="keep the best top_k (default: all)")

    _query = field_validator("query")(_not_blank)


class TEIRerankRequest(BaseModel):
    """``POST /rerank`` in text-embeddings-inference's shape (told apart by its ``texts`` field).

    ``truncate`` and ``truncation_direction`` are accepted for compatibility: the re-ranker always truncates
    a text to its model's length, from the end."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"query": "cheap flights", "texts": ["flights to Oslo", "a cookbook"], "raw_scores": False}]})
    query: StrictStr = Field(description="the query text")
    texts: list[StrictStr] = Field(description="the texts to score (at most --max-docs)")
    raw_scores: StrictBool = Field(False, description="the model's raw scores; false: their sigmoid, in (0, 1)")
    return_text: StrictBool = Field(False, description="echo each text in its result")
    truncate: Optional[StrictBool] = Field(None, description="accepted; texts are always truncated to the model's length")
    truncation_direction: Optional[Literal["Left", "Right", "left", "right"]] = Field(
        None, description="accepted; the model truncates from the end (Right)")

    _query = field_validator("query")(_not_blank)


class CohereDocument(BaseModel):
    """A document object of Cohere's and Jina's API: its ``text`` is scored, other fields are returned
    unchanged with ``return_documents``."""

    model_config = ConfigDict(extra="allow")
    text: StrictStr


def _documents_of_cohere(value: Any) -> Any:
    # one message per mistake instead of pydantic's report on each member of the union
    if isinstance(value, list):
        for position, item in enumerate(value):
            if isinstance(item, dict):
                if "text" not in item:
                    raise ValueError(f"documents[{position}]: missing field 'text'")
                if not isinstance(item["text"], str):
                    raise ValueError(f"documents[{position}].text must be a string, got a JSON {json_kind(item['text'])}")
            elif not isinstance(item, str):
                raise ValueError(f"documents[{position}] must be a string or an object with 'text', got a JSON "
                                 f"{json_kind(item)}")
    return value


class CohereRerankRequest(BaseModel):
    """``POST /v1/rerank`` and ``/v2/rerank``: Cohere's and Jina's re-rank API."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "served", "query": "cheap flights", "documents": ["flights to Oslo", {"text": "a cookbook"}],
         "top_n": 3, "return_documents": True}]})
    query: StrictStr = Field(description="the query text")
    documents: Annotated[list[Union[StrictStr, CohereDocument]], BeforeValidator(_documents_of_cohere)] = Field(
        description="strings, or objects with a 'text' field (at most --max-docs)")
    top_n: Optional[Annotated[StrictInt, Field(ge=1)]] = Field(None, description="keep the best top_n (default: all)")
    return_documents: StrictBool = Field(False, description="echo each document in its result")
    model: Optional[StrictStr] = Field(None, description="accepted and echoed; the service serves one model")
    rank_fields: Optional[list[StrictStr]] = Field(None, description="only ['text'] (or absent) is supported")

    _query = field_validator("query")(_not_blank)

    @field_validator("rank_fields")
    @classmethod
    def _text_only(cls, value: Optional[list[str]]) -> Optional[list[str]]:
        if value and value != ["text"]:
            raise ValueError("only ['text'] is supported: documents are ranked on their 'text'")
        return value


# ---------------------------------------------------------------------------------------- responses


class ScoredId(BaseModel):
    """One result of the project's ``/rerank``: a client's id and its score."""

    id: str
    score: float


class RerankResponse(BaseModel):
    """The project's ``/rerank`` answer: results best first (ties keep the posted order)."""

    results: list[ScoredId]


class SearchHit(BaseModel):
    """One result of ``/search``: the re-ranker's score and the first stage's score and rank."""

    id: str
    score: float
    first_stage_score: float
    first_stage_rank: int


class SearchResponse(BaseModel):
    """The ``/search`` answer: results best first."""

    results: list[SearchHit]


class TEIRank(BaseModel):
    """One result of TEI's ``/rerank``: the text's position in the request, its score, and its text when
    ``return_text``."""

    index: int
    score: float
    text: Optional[str] = None


class CohereResultDocument(BaseModel):
    """The document echoed in a Cohere/Jina result (``return_documents``)."""

    model_config = ConfigDict(extra="allow")
    text: str


class CohereResult(BaseModel):
    """One result of Cohere's/Jina's re-rank: the document's position, its relevance in (0, 1)."""

    index: int
    relevance_score: float
    document: Optional[CohereResultDocument] = None


class CohereRerankResponse(BaseModel):
    """Cohere's/Jina's re-rank answer: results best first."""

    id: str
    model: str
    results: list[CohereResult]


class Health(BaseModel):
    """``GET /health``: the process is alive; requests scored and ``score_many`` calls so far."""

    status: str
    requests: int
    batches: int


class Readiness(BaseModel):
    """``GET /ready``: ``ready`` (200) once the model is loaded, ``loading`` (503) before."""

    status: str


class ErrorAnswer(BaseModel):
    """Every error: one line saying what was wrong."""

    error: str


REQUEST_MODELS = (RerankRequest, TEIRerankRequest, SearchRequest, CohereRerankRequest)


# ------------------------------------------------------------------------------------------- errors


def _where(loc: tuple) -> str:
    if len(loc) == 1:
        return repr(loc[0]) if isinstance(loc[0], str) else f"[{loc[0]}]"
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


#: the names pydantic gives a union's members in an error's location
_UNION_TAGS = {"str", "CohereDocument"}

_EXPECTED = {"string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
             "list_type": "an array", "model_type": "an object", "dict_type": "an object", "float_type": "a number",
             "literal_error": None}


def validation_message(error: ValidationError, fields: tuple[str, ...] = ()) -> str:
    """The first mistake of a pydantic validation, as one line in the project's words.

    Args:
        error: pydantic's error for a request body.
        fields: the body's field names, listed after an unknown one.

    Returns:
        e.g. ``"missing field 'query'"``, ``"documents[0].id must be a string, got a JSON number"``,
        ``"'top_k' must be at least 1, got 0"``.
    """
    first = error.errors(include_url=False)[0]
    kind, loc, value = first["type"], tuple(first["loc"]), first.get("input")
    # a union's member name (e.g. 'str', 'CohereDocument') is pydantic's bookkeeping, not the client's field
    loc = tuple(part for part in loc if part not in _UNION_TAGS)
    parent, name = loc[:-1], loc[-1] if loc else None
    if kind == "missing":
        return f"{_where(parent) + ': ' if parent else ''}missing field {name!r}"
    if kind == "extra_forbidden":
        listing = f" (fields: {', '.join(fields)})" if fields and not parent else " (fields: id, text)" if parent else ""
        return f"{_where(parent) + ': ' if parent else ''}unknown field {name!r}{listing}"
    where = _where(loc) if loc else "the body"
    if kind in _EXPECTED and _EXPECTED[kind]:
        return f"{where} must be {_EXPECTED[kind]}, got a JSON {json_kind(value)}"
    if kind == "greater_than_equal":
        return f"{where} must be at least {first['ctx']['ge']}, got {value}"
    if kind == "less_than_equal":
        return f"{where} must be at most {first['ctx']['le']}, got {value}"
    if kind == "value_error":
        message = str(first["ctx"]["error"])
        return f"{where} {message}" if loc and message == "is empty" else message if not loc or message.startswith(
            "documents[") else f"{where}: {message}"
    return f"{where}: {first['msg']}"
