"""Re-rank plain strings from Python: load any registered re-ranker by name or path, score or rank documents
given as strings (or dicts), no dataset, query or document records needed.

Example::

    from pipeline import Reranker

    ranker = Reranker.load("cross-encoder", model="path/to/hf-cross-encoder")   # zero-shot, nothing trained
    ranker = Reranker.load("bi-encoder")                        # the packaged all-MiniLM-L6-v2, zero-shot
    ranker = Reranker.load("models/cranfield/knrm-....pt")      # a trained checkpoint: its re-ranker is read from it
    ranker = Reranker.load("exported-dir/")                     # a rerank-export directory
    results = ranker.rank("who founded the band", ["a text", {"id": "d7", "text": "another"}], top_k=5)
    for result in results:
        print(result.index, result.doc_id, round(result.score, 3), result.text[:40])
    scores = ranker.score("who founded the band", ["a text", "another"])

What can be loaded (:meth:`Reranker.load`):

* a checkpoint file written by a re-ranker's ``save`` (the model cache's ``.pt`` files, ``rerank-train``):
  its re-ranker is the one the file names; ``Reranker.load("knrm", model=PATH)`` checks that it is one;
* a directory written by ``rerank-export`` / ``save_pretrained`` (cross-encoder, bi-encoder, ADDAX);
* a Hugging Face sequence-classification model (directory or hub id) as a zero-shot ``cross-encoder``, and
  a sentence encoder as a zero-shot ``bi-encoder`` (``Reranker.load("bi-encoder")`` uses the packaged
  ``all-MiniLM-L6-v2``); a Hugging Face directory given alone is read as a cross-encoder when it has a
  classification head, else as a bi-encoder.

Word-level models (KNRM, DRMM, HCAN, ...) learn their vocabulary and weights on a collection, so they load
from a checkpoint only. Scores are the model's raw scores (higher = more relevant), exactly those of
``python -m pipeline.run`` for the same model and texts; documents are cut to the model's ``max_doc_length``
word pieces or words (180 for the transformers by default, where sentence-transformers' ``CrossEncoder`` keeps
512), and a cross-encoder's score is its logit (``CrossEncoder.predict`` applies a sigmoid unless
``activation_fn=torch.nn.Identity()``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .core.errors import ConfigError, PipelineError
from .core.records import Doc, Query

#: keys a document dict may give its id and its text under (first found wins)
ID_KEYS = ("id", "doc_id", "docno", "_id")
TEXT_KEYS = ("text", "contents", "body", "document")
#: the keyword options of :meth:`Reranker.load` (scoring settings, not model options)
SCORING_OPTIONS = ("batch_size", "threads", "bf16", "int8", "precision")


@dataclass(frozen=True)
class Result:
    """One ranked document.

    Attributes:
        index: its position in the ``docs`` given to :meth:`Reranker.rank`.
        doc_id: its id (a dict's ``id``, else ``str(index)``).
        score: the re-ranker's score (higher = more relevant).
        text: its text, as scored.
    """

    index: int
    doc_id: str
    score: float
    text: str


def as_docs(docs: Sequence[str | Mapping[str, Any]]) -> list[Doc]:
    """``docs`` as :class:`Doc` records.

    Args:
        docs: strings, or dicts with a text under ``text``/``contents``/``body``/``document`` and an optional
            id under ``id``/``doc_id``/``docno``/``_id``.

    Returns:
        One record per document; a string's id is its position.

    Raises:
        ConfigError: a document of another type, or a dict without a text; the message names it.

    Example:
        >>> as_docs(["tigers", {"id": "d7", "text": "power station"}])
        [Doc(doc_id='0', text='tigers'), Doc(doc_id='d7', text='power station')]
    """
    if isinstance(docs, (str, bytes)) or not isinstance(docs, Sequence):
        raise ConfigError(f"docs: a list of strings or dicts, got {type(docs).__name__}")
    records = []
    for index, doc in enumerate(docs):
        if isinstance(doc, str):
            records.append(Doc(str(index), doc))
        elif isinstance(doc, Mapping):
            text = next((doc[key] for key in TEXT_KEYS if key in doc), None)
            if not isinstance(text, str):
                raise ConfigError(f"docs[{index}]: a dict needs its text (a string) under one of "
                                  f"{', '.join(TEXT_KEYS)}; got keys {', '.join(map(str, doc)) or 'none'}")
            identifier = next((doc[key] for key in ID_KEYS if key in doc), index)
            records.append(Doc(str(identifier), text))
        else:
            raise ConfigError(f"docs[{index}]: a string or a dict with a 'text', got {type(doc).__name__}")
    return records


def check_scorer(owner: str, reranker: Any, batch_size: int | None) -> None:
    """Refuse what cannot re-rank: a ``reranker`` without ``score(query, docs)`` or a ``batch_size`` below 1.

    Args:
        owner: the class that takes them (named in the message).
        reranker: the re-ranker.
        batch_size: the scoring batch in (query, document) pairs, or ``None`` (the model's).

    Raises:
        ConfigError: either is wrong.
    """
    if not callable(getattr(reranker, "score", None)):
        raise ConfigError(f"{owner} needs a re-ranker with score(query, docs), got {reranker!r}")
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")


class Reranker:
    """A loaded re-ranker that scores plain strings (see the module docstring).

    Args:
        model: a re-ranker object of this project (anything with ``score(Query, [Doc])``).
        batch_size: scoring batch in (query, document) pairs (default: the model's).
    """

    def __init__(self, model: Any, batch_size: int | None = None):
        check_scorer("Reranker", model, batch_size)
        self.model = model
        self.batch_size = batch_size

    @property
    def name(self) -> str:
        """The registered name of the re-ranker (``knrm``, ``cross-encoder``, ...)."""
        return getattr(self.model, "name", type(self.model).__name__)

    def __repr__(self) -> str:
        return f"Reranker({self.name})"

    # ------------------------------------------------------------------------------------------ loading
    @classmethod
    def load(cls, name_or_path: str | Path, model: str | Path | None = None, **options: Any) -> "Reranker":
        """A ready re-ranker.

        Args:
            name_or_path: a registered re-ranker name (``cross-encoder``, ``knrm``, ...), a checkpoint file,
                or a model directory (see the module docstring).
            model: with a name: the checkpoint, export directory, Hugging Face model or hub id to load as
                that re-ranker (required for all but the bi-encoder, whose default is the packaged
                ``all-MiniLM-L6-v2``).
            **options: scoring settings: ``batch_size`` (pairs per batch), ``threads`` (torch CPU threads),
                ``precision`` (``auto``, ``float32``, ``bf16`` or ``int8``, as ``--precision``: ``auto``
                is bf16 for a torch re-ranker where bfloat16 is native, else float32), ``bf16`` or ``int8``
                (as ``--bf16`` / ``--int8``).

        Returns:
            A :class:`Reranker`.

        Raises:
            ConfigError: an unknown name (with the closest known one) or option, a name that needs ``model``.
            CheckpointError: a file or directory that holds no model this project reads.

        Example:
            >>> Reranker.load("bi-encoder").name
            'bi-encoder'
        """
        unknown = sorted(set(options) - set(SCORING_OPTIONS))
        if unknown:
            raise ConfigError(f"Reranker.load: unknown option(s) {', '.join(unknown)}; choose from "
                              f"{', '.join(SCORING_OPTIONS)} (model options are fixed by the model loaded)")
        from .core.runtime import environment_precision, requested_precision, resolve_precision

        if options.get("bf16") and options.get("int8"):
            raise ConfigError("Reranker.load: bf16 and int8 exclude each other")
        try:
            asked = requested_precision(options.get("precision") or "auto", bool(options.get("bf16")),
                                        bool(options.get("int8")))
            environment_precision()
        except ValueError as error:
            raise ConfigError(f"Reranker.load: {error}") from None
        loaded = load_model(str(name_or_path), None if model is None else str(model))
        if options.get("threads"):
            from .core.runtime import set_threads

            set_threads(int(options["threads"]))
        torch_model = callable(getattr(loaded, "score_in_bf16", None))
        precision = resolve_precision(asked, supports_bf16=torch_model)
        if precision != "float32":
            if not torch_model:
                raise ConfigError(f"{loaded.name}: bf16/int8 apply to torch re-rankers only")
            if precision == "int8":
                if not callable(getattr(loaded, "quantize_int8", None)):
                    raise ConfigError(f"{loaded.name}: int8 applies to the transformer re-rankers only")
            from types import SimpleNamespace

            from .engine.stages import set_scoring_arithmetic  # the one place a precision is applied to a model

            set_scoring_arithmetic(loaded, SimpleNamespace(precision=precision, bf16=False, int8=False))
        return cls(loaded, batch_size=options.get("batch_size"))

    # ------------------------------------------------------------------------------------------ scoring
    def score(self, query: str, docs: Sequence[str | Mapping[str, Any]]) -> list[float]:
        """The re-ranker's score of each document for ``query``, in the order given.

        Args:
            query: the query text.
            docs: strings, or dicts with ``text`` (and optionally ``id``).

        Returns:
            One float per document (higher = more relevant).

        Raises:
            ConfigError: an empty query, or documents of the wrong shape.
            PipelineError: the model returned a wrong number of scores or a non-finite one.

        Example:
            >>> ranker.score("power station", ["the power station band", "tigers"])  # doctest: +SKIP
            [2.31, -0.87]
        """
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f"query: a non-empty string, got {query!r}")
        records = as_docs(docs)
        if not records:
            return []
        record = Query("query", query)
        score_many = getattr(self.model, "score_many", None)
        if score_many is not None:
            scores = score_many([(record, records)], self.batch_size)[0]
        else:
            scores = self.model.score(record, records)
        scores = [float(score) for score in scores]
        if len(scores) != len(records):
            raise PipelineError(f"{self.name} returned {len(scores)} scores for {len(records)} documents")
        bad = next((i for i, score in enumerate(scores) if not math.isfinite(score)), None)
        if bad is not None:
            raise PipelineError(f"{self.name} gave a non-finite score ({scores[bad]}) to docs[{bad}]")
        return scores

    def rank(self, query: str, docs: Sequence[str | Mapping[str, Any]], top_k: int | None = None) -> list[Result]:
        """``docs`` ranked by the re-ranker's score for ``query``, best first (ties keep the order given).

        Args:
            query: the query text.
            docs: strings, or dicts with ``text`` (and optionally ``id``).
            top_k: keep only the best ``top_k`` (default: all).

        Returns:
            :class:`Result` s: each document's position in ``docs``, id, score and text.

        Raises:
            ConfigError: an empty query, documents of the wrong shape, or a ``top_k`` that is no positive integer.

        Example:
            >>> [r.index for r in ranker.rank("power station", ["tigers", "the power station band"])]  # doctest: +SKIP
            [1, 0]
        """
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ConfigError(f"top_k: a positive integer or None, got {top_k!r}")
        records = as_docs(docs)
        scores = self.score(query, docs)
        order = sorted(range(len(records)), key=lambda i: -scores[i])  # stable: ties keep the given order
        results = [Result(i, records[i].doc_id, scores[i], records[i].text) for i in order]
        return results if top_k is None else results[:top_k]


def load_model(name_or_path: str, model: str | None = None) -> Any:
    """The project's re-ranker object :meth:`Reranker.load` wraps, obtained by
    :func:`pipeline.engine.obtain.obtain_model` (the one way every command gets its model).

    Args:
        name_or_path: a registered re-ranker name, a checkpoint file, or a model directory.
        model: with a name: what to load as that re-ranker.

    Returns:
        The loaded re-ranker (``score(Query, [Doc])``, ``score_many``, ...).

    Example:
        >>> load_model("bi-encoder").name
        'bi-encoder'
    """
    from rerankers import REGISTRY

    from .core.suggest import unknown_name
    from .engine.obtain import obtain_model

    if name_or_path in REGISTRY:
        return obtain_model(name_or_path, model).reranker
    if model is not None:
        raise ConfigError(unknown_name("re-ranker", name_or_path, REGISTRY.names())
                          + " (model= goes with a re-ranker name)")
    return obtain_model(None, name_or_path).reranker
