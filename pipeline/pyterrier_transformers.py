"""The PyTerrier transformers' logic (:mod:`pipeline.pyterrier` builds them by name and is the public path):
a re-ranker, a first stage and a text loader over PyTerrier frames, the column checks and errors, and the
public classes made by combining each with ``pt.Transformer`` when first used (PyTerrier is optional)."""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from .api import check_scorer
from .core.datasets import Dataset
from .core.errors import ConfigError, PipelineError
from .core.records import Doc, Query, ScoredDoc
from .engine.stages import rerank

# the transformers' public module and logger: users import and configure them as pipeline.pyterrier's
PUBLIC_MODULE = "pipeline.pyterrier"
log = logging.getLogger(PUBLIC_MODULE)

if TYPE_CHECKING:  # only for annotations: pandas comes with PyTerrier, which is optional
    import pandas as pd

#: what to install for this module (the extra of this project's pyproject.toml, and what it requires)
INSTALL_HINT = ("PyTerrier is not installed: pip install 'neural-rerank-pipeline[pyterrier]' "
                "(in a clone: pip install -e '.[pyterrier]'; it requires pyterrier>=1.1.2,<2)")

#: the name of the frame a re-ranker scores, in its error messages (see :func:`pipeline.engine.stages.rerank`)
FRAME_NAME = "the PyTerrier frame"


class PyTerrierMissing(PipelineError, ImportError):
    """PyTerrier is not installed (an :class:`ImportError` too, so ``except ImportError`` sees it)."""


class MissingColumnError(PipelineError, ValueError):
    """An input frame lacks a column a transformer needs: names the column, the transformer and the columns
    the frame has."""

    def __init__(self, column: str, transformer: str, present: Sequence[str], hint: str = ""):
        self.column = column
        self.transformer = transformer
        self.present = list(present)
        message = (f"{transformer}: the input frame has no {column!r} column "
                   f"(it has {', '.join(map(repr, self.present)) or 'no columns'})")
        super().__init__(message + (f"; {hint}" if hint else ""))


def pyterrier_module():
    """The ``pyterrier`` module, imported now; a :class:`PyTerrierMissing` error when it is not installed."""
    try:
        import pyterrier
    except ImportError as error:
        raise PyTerrierMissing(INSTALL_HINT) from error
    return pyterrier


def _pandas():
    pyterrier_module()  # pandas is PyTerrier's dependency, not the project's: say what to install
    import pandas

    return pandas


def _require(present: Iterable[str], columns: Sequence[str], transformer: str, hints: Mapping[str, str]) -> None:
    have = list(present)
    for column in columns:
        if column not in have:
            raise MissingColumnError(column, transformer, have, hints.get(column, ""))


def _with_ranks(frame: "pd.DataFrame", scores: Sequence[float]) -> "pd.DataFrame":
    """``frame`` with ``score`` set to ``scores`` and ``rank`` recomputed per query: 0-based, by score
    descending, ties by ``docno`` ascending (then input order); queries in order of first appearance."""
    out = frame.copy()
    out["score"] = _pandas().Series([float(s) for s in scores], index=out.index, dtype="float64")
    order = "__query_order"
    out[order] = out["qid"].map({qid: n for n, qid in enumerate(dict.fromkeys(out["qid"]))})
    out["__docno"] = out["docno"].astype(str)
    out = out.sort_values([order, "score", "__docno"], ascending=[True, False, True], kind="mergesort")
    out["rank"] = out.groupby(order, sort=False).cumcount().astype("int64")
    return out.drop(columns=[order, "__docno"]).reset_index(drop=True)


def _without_duplicate_docs(frame: "pd.DataFrame", transformer: str) -> "pd.DataFrame":
    """``frame`` without the later rows of a ``docno`` that appears twice for one ``qid`` (a ranking holds a
    document once; scoring it twice would put it twice in the output), with a warning naming them."""
    keys = _pandas().DataFrame({"qid": frame["qid"].astype(str), "docno": frame["docno"].astype(str)})
    repeated = keys.duplicated(keep="first")
    if not repeated.any():
        return frame
    first = keys[repeated].iloc[0]
    log.warning("%s: %d rows repeat a docno already given for their query (e.g. query %r, docno %r): each "
                "document is scored once, the repeated rows are dropped", transformer, int(repeated.sum()),
                first["qid"], first["docno"])
    return frame[~repeated.to_numpy()]


# ------------------------------------------------------------------------------- transformer logic
# The behaviour of each transformer lives in a plain class here; the public class (same name without the
# underscore) is this class combined with ``pt.Transformer``, made when first used (see
# ``pipeline.pyterrier.__getattr__``), so that importing this module never imports PyTerrier.


class _RerankerTransformer:
    """A re-ranker (anything with ``score(query, docs)``; ``score_many`` batches across queries) as a PyTerrier
    transformer: takes a result frame with ``qid``, ``query``, ``docno`` and ``text_field`` (``score``/``rank``
    optional) and returns it with ``score`` replaced by the re-ranker's and ``rank`` recomputed (0-based, ties
    by ``docno``), sorted by query (in input order) then rank. ``batch_size``: scoring batch in pairs (default:
    the model's ``score_batch_size``; it changes speed and memory, not the scores); ``verbose``: show a progress
    bar while scoring (as pyterrier_t5 / pyterrier_dr's ``verbose``)."""

    def __init__(self, reranker: Any, text_field: str = "text", batch_size: int | None = None, verbose: bool = False):
        check_scorer("RerankerTransformer", reranker, batch_size)
        self.reranker = reranker
        self.text_field = text_field
        self.batch_size = batch_size
        self.verbose = bool(verbose)

    def __repr__(self) -> str:
        return f"RerankerTransformer({getattr(self.reranker, 'name', type(self.reranker).__name__)})"

    def _check(self, columns: Iterable[str]) -> None:
        hint = "add pipeline.pyterrier.text_loader(dataset) before the re-ranker"
        columns = list(columns)
        validate = getattr(pyterrier_module(), "validate", None)
        if validate is not None:  # PyTerrier's own check of a result frame (pyterrier-alpha's, merged in 1.0)
            try:
                validate.result_frame(columns, extra_columns=["query", self.text_field], context=self)
            except validate.InputValidationError as error:
                missing = next((c for c in ("qid", "query", "docno", self.text_field) if c not in columns), None)
                if missing is None:  # a requirement of PyTerrier's beyond these columns: its own message
                    raise
                raise MissingColumnError(missing, repr(self), columns,
                                         hint if missing == self.text_field else "") from error
        _require(columns, ("qid", "query", "docno", self.text_field), repr(self), {self.text_field: hint})

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        """The output columns for ``input_columns`` (PyTerrier's inspection; nothing is scored)."""
        self._check(input_columns)
        return [*input_columns, *(c for c in ("score", "rank") if c not in input_columns)]

    def transform(self, inp: "pd.DataFrame") -> "pd.DataFrame":
        """Re-score every row of ``inp`` (see the class)."""
        self._check(inp.columns)
        if len(inp) == 0:
            return _with_ranks(inp, [])
        inp = _without_duplicate_docs(inp, repr(self))
        queries: dict[str, Query] = {}
        docs: dict[str, Doc] = {}
        first: dict[str, list[ScoredDoc]] = {}
        for qid, query, docno, text in zip(inp["qid"].astype(str), inp["query"], inp["docno"].astype(str),
                                           inp[self.text_field]):
            if not isinstance(query, str):
                raise PipelineError(f"{self!r}: query {qid!r} has no text in column 'query' (got {query!r})")
            if not isinstance(text, str):  # NaN: a document the text loader did not find, or a missing field
                raise PipelineError(f"{self!r}: document {docno!r} of query {qid!r} has no text in column "
                                    f"{self.text_field!r} (got {text!r})")
            known = queries.setdefault(qid, Query(qid, query))
            if known.text != query:
                raise PipelineError(f"{self!r}: query {qid!r} has two texts in column 'query': "
                                    f"{known.text!r} and {query!r}")
            doc = docs.setdefault(docno, Doc(docno, text))
            if doc.text != text:
                raise PipelineError(f"{self!r}: document {docno!r} has two different texts in column "
                                    f"{self.text_field!r}")
            first.setdefault(qid, []).append(ScoredDoc(qid, docno, 0.0))
        frame = Dataset(FRAME_NAME, queries, [], lambda: docs.values(), "", _store=docs)
        scored = rerank(self.reranker, frame, first, batch_size=self.batch_size, progress=self.verbose)
        # rerank keeps each query's candidates in their order: walk the rows the same way to pair them up
        position = {qid: iter(hits) for qid, hits in scored.items()}
        scores = [next(position[qid]).score for qid in inp["qid"].astype(str)]
        return _with_ranks(inp, scores)


class _FirstStageTransformer:
    """A first stage (a :class:`~indexes.base.Retriever`: ``search(queries, k) -> Run``) as a PyTerrier
    transformer: takes a query frame (``qid``, ``query``; other query columns are kept) and returns each
    query's top ``k`` as a result frame (``qid``, ``query``, ..., ``docno``, ``score``, ``rank``; 0-based, ties
    by ``docno``). Document columns of the input (a result frame) are dropped: each query is searched anew."""

    def __init__(self, retriever: Any, k: int = 1000):
        if not callable(getattr(retriever, "search", None)):
            raise ConfigError(f"FirstStageTransformer needs a retriever with search(queries, k), got {retriever!r}")
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"k must be an integer of at least 1, got {k!r}")
        self.retriever = retriever
        self.k = k

    def __repr__(self) -> str:
        return f"FirstStageTransformer({getattr(self.retriever, 'name', type(self.retriever).__name__)}, k={self.k})"

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        """The output columns for ``input_columns`` (PyTerrier's inspection; nothing is retrieved)."""
        _require(input_columns, ("qid", "query"), repr(self), {})
        kept = pyterrier_module().model.query_columns(_pandas().DataFrame(columns=input_columns))
        return [*kept, "docno", "score", "rank"]

    def transform(self, inp: "pd.DataFrame") -> "pd.DataFrame":
        """The top ``k`` of every query of ``inp`` (see the class)."""
        pd = _pandas()
        _require(inp.columns, ("qid", "query"), repr(self), {})
        kept = list(pyterrier_module().model.query_columns(inp))
        topics = inp[kept].drop_duplicates(subset="qid", keep="first").reset_index(drop=True)
        topics["qid"] = topics["qid"].astype(str)
        queries = []
        for qid, text in zip(topics["qid"], topics["query"]):
            if not isinstance(text, str):
                raise PipelineError(f"{self!r}: query {qid!r} has no text in column 'query' (got {text!r})")
            queries.append(Query(qid, text))
        run = self.retriever.search(queries, self.k) if queries else {}
        rows = [(hit.query_id, hit.doc_id, float(hit.score)) for query in queries
                for hit in run.get(query.query_id, [])[: self.k]]
        results = pd.DataFrame(rows, columns=["qid", "docno", "score"]).astype({"qid": str, "docno": str,
                                                                                "score": "float64"})
        bad = next((r for r in rows if not math.isfinite(r[2])), None)
        if bad is not None:
            raise PipelineError(f"{self!r} gave a non-finite score to doc {bad[1]!r} of query {bad[0]!r}")
        merged = topics.merge(results, on="qid", how="inner")
        return _with_ranks(merged, merged["score"].tolist())


class _TextLoader:
    """Adds column ``text_field`` to a result frame: the text of each ``docno`` in ``dataset``'s documents
    (replacing a column of that name). A ``docno`` the dataset lacks is an error naming it."""

    def __init__(self, dataset: Dataset, text_field: str = "text"):
        self.dataset = dataset
        self.text_field = text_field

    def __repr__(self) -> str:
        return f"TextLoader({self.dataset.name})"

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        """The output columns for ``input_columns`` (PyTerrier's inspection; no document is read)."""
        _require(input_columns, ("docno",), repr(self), {})
        return [*input_columns, *([self.text_field] if self.text_field not in input_columns else [])]

    def transform(self, inp: "pd.DataFrame") -> "pd.DataFrame":
        """``inp`` with the text column filled from the dataset (see the class)."""
        _require(inp.columns, ("docno",), repr(self), {})
        store = self.dataset.doc_store()
        docnos = inp["docno"].astype(str)
        missing = [d for d in dict.fromkeys(docnos) if d not in store]
        if missing:
            shown = ", ".join(map(repr, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise PipelineError(f"{self!r}: {len(missing)} docno(s) not in dataset {self.dataset.name!r}: {shown}")
        out = inp.copy()
        out[self.text_field] = [store[d].text for d in docnos]
        return out


_IMPLEMENTATIONS = {"RerankerTransformer": _RerankerTransformer, "FirstStageTransformer": _FirstStageTransformer,
                    "TextLoader": _TextLoader}
_CLASSES: dict[str, type] = {}


def transformer_class(name: str) -> type:
    """The public transformer class ``name`` (``RerankerTransformer``, ``FirstStageTransformer``, ``TextLoader``):
    its logic combined with ``pt.Transformer`` (PyTerrier imported now, made once)."""
    if name not in _CLASSES:
        base = _IMPLEMENTATIONS[name]
        _CLASSES[name] = type(name, (base, pyterrier_module().Transformer),
                              {"__module__": PUBLIC_MODULE, "__doc__": base.__doc__, "__qualname__": name})
    return _CLASSES[name]
