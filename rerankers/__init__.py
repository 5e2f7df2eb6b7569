"""Neural re-rankers: one protocol, one registry by name.

A re-ranker scores (query, candidate) texts; the pipeline re-orders the first stage's top-k by those
scores. ``--reranker NAME`` on the command line picks an entry of :data:`REGISTRY`; ``none`` keeps the
first stage's ranking and scores. Entries are ``"module:Class"`` strings imported on first use, so that
listing the choices (and running BM25 alone) never imports torch. Other packages add re-rankers through
entry points (README, "Adding a re-ranker").
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from pipeline.core.errors import PipelineError
from pipeline.core.plugins import Registry
from pipeline.core.records import Doc, Query


@runtime_checkable
class Reranker(Protocol):
    """What every re-ranker offers.

    ``score`` returns one float per document (higher = more relevant); ``fit`` trains on a training set
    with an optional dev set for early stopping; ``save``/``load`` write and read a self-describing
    checkpoint (atomically; a mismatched checkpoint is a :class:`~pipeline.core.errors.CheckpointError`).
    """

    name: str

    def score(self, query: Query, docs: Sequence[Doc]) -> Sequence[float]:
        """Relevance scores of ``docs`` for ``query``, in the order given.

        Args:
            query: the query.
            docs: its candidate documents.

        Returns:
            One float per document (higher = more relevant).
        """
        ...

    def fit(self, train: Any, dev: Any = None, state_path: Any = None) -> Any:
        """Train on ``train`` with early stopping on ``dev``.

        Args:
            train: the training set (queries, candidates, judgments).
            dev: the dev set for early stopping (``None``: none).
            state_path: where training keeps its state after every epoch, so an interrupted fit resumes.

        Returns:
            A training report.
        """
        ...

    def save(self, path) -> None:
        """Write a checkpoint to ``path`` atomically.

        Args:
            path: the checkpoint file.
        """
        ...

    @classmethod
    def load(cls, path) -> "Reranker":
        """Read a checkpoint written by :meth:`save`.

        Args:
            path: the checkpoint file.

        Returns:
            The re-ranker, ready to score.

        Raises:
            CheckpointError: the file is missing, damaged or holds another model.
        """
        ...


#: built-in name -> "module:Class" (``none``, no re-ranking, is not an entry: the first stage's run is kept)
BUILTIN: dict[str, str] = {
    "hcan": "rerankers.hcan:HCANReranker",
    "knrm": "rerankers.knrm:KNRMReranker",
    "conv-knrm": "rerankers.knrm:ConvKNRMReranker",
    "drmm": "rerankers.drmm:DRMMReranker",
    "matchpyramid": "rerankers.matchpyramid:MatchPyramidReranker",
    "mvlstm": "rerankers.mvlstm:MVLSTMReranker",
    "amvlstm": "rerankers.mvlstm:AMVLSTMReranker",
    "iasm": "rerankers.iasm:IASMReranker",
    "iasm-static": "rerankers.iasm:IASMStaticReranker",
    "match-srnn": "rerankers.match_srnn:MatchSRNNReranker",
    "bi-match-srnn": "rerankers.match_srnn:BiMatchSRNNReranker",
    "cross-encoder": "rerankers.cross_encoder:CrossEncoderReranker",
    "bi-encoder": "rerankers.bi_encoder:BiEncoderReranker",
    "addax": "rerankers.addax:AddaxReranker",
    "addax-no-mags": "rerankers.addax:AddaxNoMAGSReranker",
    "addax-no-hw": "rerankers.addax:AddaxNoHighwayReranker",
    "addax-no-hd": "rerankers.addax:AddaxNoHashingReranker",
    "addax-att-mags": "rerankers.addax:AddaxAttentionMAGSReranker",
}


#: the re-rankers by name: the built-in ones, those added with :func:`register`, and those of installed
#: packages' entry points of group ``neural_rerank.rerankers`` (name = "module:Class")
REGISTRY = Registry("re-ranker", "neural_rerank.rerankers", BUILTIN)


def register(name: str, target) -> None:
    """Add a re-ranker, selectable as ``--reranker NAME``.

    Args:
        name: its name (not ``none``, which means no re-ranking).
        target: ``"module:Class"`` (imported lazily) or the class itself.

    Raises:
        PipelineError: ``name`` is ``none``.

    Example:
        >>> register("my-model", "my_package.models:MyReranker")   # doctest: +SKIP
    """
    if name == "none":
        raise PipelineError("'none' means no re-ranking; it cannot be registered")
    REGISTRY.register(name, target)


def available() -> list[str]:
    """Every re-ranker name, plugins included.

    Returns:
        The CLI's ``--reranker`` choices, ``none`` first.

    Example:
        >>> available()[0], "knrm" in available()
        ('none', True)
    """
    return ["none", *REGISTRY.names()]


def reranker_class(name: str):
    """The class registered under ``name``.

    Args:
        name: a re-ranker name (see :func:`available`).

    Returns:
        The class, imported on first use; ``None`` for ``none``.

    Raises:
        ConfigError: an unknown name; the message lists the known ones.

    Example:
        >>> reranker_class("knrm").__name__
        'KNRMReranker'
    """
    if name == "none":
        return None
    return REGISTRY.load(name, available())
