"""PyTerrier integration (optional extra): the project's re-rankers and first stages as ``pt.Transformer``\\ s.

Every re-ranker of the registry and every first stage can be used in PyTerrier pipelines (``>>``) and in
``pt.Experiment``::

    import pyterrier as pt
    from pipeline import pyterrier as ptx

    bm25 = ptx.first_stage("bm25", dataset="vaswani", k=100)
    knrm = ptx.reranker("knrm", dataset="vaswani")            # trained on the protocol, or loaded from the cache
    pipe = bm25 >> ptx.text_loader("vaswani") >> knrm
    pt.Experiment([bm25, pipe], ptx.topics("vaswani"), ptx.qrels("vaswani"), eval_metrics=["map"], baseline=0)

* :class:`RerankerTransformer` takes a result frame (``qid``, ``query``, ``docno``, the text column; ``score``
  and ``rank`` optional), replaces ``score`` by the re-ranker's and recomputes ``rank`` (0-based, PyTerrier's
  convention; ties by ``docno``, as this project's run writers order them). Scoring goes through
  :func:`pipeline.engine.stages.rerank`: pairs of many queries fill each batch (``score_many``), and non-finite
  scores are an error, as in ``python -m pipeline.run``.
* :class:`FirstStageTransformer` takes a query frame (``qid``, ``query``) and returns each query's top ``k``.
* :class:`TextLoader` adds the text column from a dataset's documents: a first stage gives only ``docno``.
* :func:`reranker`, :func:`first_stage`, :func:`text_loader` build them by name the way ``pipeline.run`` does;
  :func:`topics` and :func:`qrels` give a dataset's queries and judgments as PyTerrier frames (no download:
  the project's own loaders and offline mirror).

PyTerrier is imported only when a transformer is built (importing this module costs nothing); without it a
:class:`PyTerrierMissing` error says what to install. Nothing here needs Java or Terrier: PyTerrier's
transformer algebra, ``pt.Experiment`` and its dataframes are pure Python, and the first stages are this
project's own (BM25 through Pyserini's Lucene, ...). PyTerrier's Terrier retrievers (``pt.terrier.Retriever``)
download the Terrier jar from Maven on first use and so do not work offline; nothing here uses them.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from indexes import make_first_stage
from rerankers import reranker_class

from .engine.config import RunConfig
from .engine.first_stage_flags import settings_of
from .core.datasets import Dataset, load_dataset, select_queries
from .core.errors import ConfigError
from .core.runtime import seed_everything, set_threads
from .engine.model_cache import training_plan
from .engine.obtain import obtain_model
from .engine.resolve import check_scoring_arithmetic, model_options
# the transformers' logic has a module of its own; this module is their public path
from .pyterrier_transformers import (INSTALL_HINT, FRAME_NAME, MissingColumnError, PyTerrierMissing,  # noqa: F401
                                     _IMPLEMENTATIONS, _FirstStageTransformer, _RerankerTransformer, _TextLoader,
                                     _pandas, pyterrier_module, transformer_class)

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # only for annotations: pandas comes with PyTerrier, which is optional
    import pandas as pd


def __getattr__(name: str):
    """``RerankerTransformer``, ``FirstStageTransformer`` and ``TextLoader`` are made on first access (module
    ``__getattr__``, PEP 562), so that importing this module does not import PyTerrier."""
    if name in _IMPLEMENTATIONS:
        return transformer_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------------- by name, like pipeline.run


def _dataset(dataset: str | Dataset, mirror: str | None = None) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    if not isinstance(dataset, str):
        raise ConfigError(f"dataset: a name, ir_datasets id or directory (str), or a loaded Dataset; got {dataset!r}")
    return load_dataset(dataset, mirror)


def _run_config(dataset: Dataset, options: Mapping[str, Any], **fields: Any) -> RunConfig:
    """A :class:`RunConfig` of ``fields`` and the caller's ``options`` (other field names; ``overrides`` may be
    a mapping of ``--set`` values); an unknown name is a :class:`ConfigError` listing the known ones."""
    known = set(RunConfig.__dataclass_fields__) - {"dataset", *fields}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown run option(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    options = dict(options)
    overrides = options.get("overrides")
    if isinstance(overrides, Mapping):
        options["overrides"] = tuple(f"{name}={value}" for name, value in overrides.items())
    elif isinstance(overrides, str):
        options["overrides"] = (overrides,)
    return RunConfig(dataset=dataset.name, **fields, **options)


#: the options :func:`reranker` takes without a dataset (a model is loaded, nothing is trained)
ZERO_SHOT_OPTIONS = ("model", "batch_size", "int8", "bf16", "precision", "threads", "seed")


def reranker(name: str, dataset: str | Dataset | None = None, text_field: str = "text", batch_size: int | None = None,
             verbose: bool = False, **options: Any):
    """A :class:`RerankerTransformer` of re-ranker ``name``, obtained as ``python -m pipeline.run --reranker
    NAME --dataset DATASET`` obtains it: with ``model=PATH_OR_NAME`` that checkpoint (or, for the bi-encoder,
    a pre-trained sentence encoder used zero-shot, e.g. ``model="all-MiniLM-L6-v2"``); otherwise the cached
    models of the dataset's protocol, trained now when missing (:func:`pipeline.engine.obtain.obtain_model`).

    Without ``dataset``, nothing is trained: ``model=`` is loaded as :func:`pipeline.engine.obtain.obtain_model` loads it (a
    checkpoint, an export directory, a Hugging Face cross-encoder directory or hub id, a sentence encoder for
    the bi-encoder, whose default is the packaged all-MiniLM-L6-v2), e.g.
    ``ptx.reranker("cross-encoder", model="cross-encoder-dir")``; only ``model``, ``batch_size``, ``int8``,
    ``bf16``, ``precision``, ``threads`` and ``seed`` apply then. ``batch_size``: scoring batch in pairs; ``verbose``: a
    progress bar while scoring.

    ``options`` are :class:`~pipeline.engine.config.RunConfig` fields (``seed``, ``folds``, ``split``, ``k``,
    ``first_stage``, ``threads``, ``batch_size``, ``int8``, ``bf16``, ``precision`` (``auto``: bf16 where it is
    native, as ``--precision``), ``overrides`` as ``("epochs=3", ...)`` or
    ``{"epochs": 3}``, ...). On a k-fold dataset (Cranfield, Vaswani, NFCorpus) each query is scored by the
    model trained without it, so the frame's ``qid`` must be the dataset's query ids. Train the model on the
    candidates it will re-rank: the same first stage and ``k`` as the pipeline's.

    Args:
        name: a re-ranker name (``knrm``, ``cross-encoder``, ``bi-encoder``, plugins, ...).
        dataset: a dataset name or object whose protocol trains the model (``None``: load ``model=`` only).
        text_field: the frame's column holding the document text.
        batch_size: scoring batch in (query, document) pairs.
        verbose: a progress bar while scoring.
        **options: :class:`~pipeline.engine.config.RunConfig` fields, and ``model``/``mirror``.

    Returns:
        A PyTerrier transformer that adds ``score`` and ``rank`` to a frame of ``qid``, ``query``, ``docno``
        and ``text_field``.

    Raises:
        ConfigError: an unknown name or option, ``none``, or options that need a dataset.

    Example:
        >>> import pipeline.pyterrier as ptx                                           # doctest: +SKIP
        >>> knrm = ptx.reranker("knrm", "vaswani")                                     # doctest: +SKIP
        >>> pipe = ptx.first_stage("bm25", "vaswani") >> ptx.text_loader("vaswani") >> knrm  # doctest: +SKIP
    """
    pyterrier_module()  # before any training: fail at once when the result could not be used
    if batch_size is not None:
        options["batch_size"] = batch_size
    if dataset is None:
        return _zero_shot_reranker(name, text_field, verbose, options)
    data = _dataset(dataset, options.get("mirror"))
    config = _run_config(data, options, reranker=name)
    if not config.reranking:
        raise ConfigError("reranker: 'none' is no re-ranker; leave the re-ranker out of the pipeline instead")
    cls = reranker_class(config.reranker)
    check_scoring_arithmetic(config, cls)
    checked = model_options(config, data, cls)  # an unknown --set name is a mistake with a given model too
    seed_everything(config.seed)
    set_threads(config.threads)
    training = None if config.model else training_plan(config, data, options=checked, cls=cls)
    model = obtain_model(config.reranker, config.model, training=training, dataset=data, cls=cls, arithmetic=config).reranker
    return transformer_class("RerankerTransformer")(model, text_field=text_field, batch_size=config.batch_size,
                                                    verbose=verbose)


def _zero_shot_reranker(name: str, text_field: str, verbose: bool, options: Mapping[str, Any]):
    """:func:`reranker` without a dataset: the model given (see there) loaded, nothing trained."""
    extra = sorted(set(options) - set(ZERO_SHOT_OPTIONS))
    if extra:
        raise ConfigError(f"reranker({name!r}): {', '.join(extra)} need(s) dataset= (a model to train or find in "
                          f"the cache); without a dataset only {', '.join(ZERO_SHOT_OPTIONS)} apply")
    config = RunConfig(dataset="(no dataset)", reranker=name, **options)  # checks the name, batch size, ...
    if not config.reranking:
        raise ConfigError("reranker: 'none' is no re-ranker; leave the re-ranker out of the pipeline instead")
    if config.model is None and name != "bi-encoder":
        zero_shot = ", a Hugging Face cross-encoder (directory or hub id)" if name == "cross-encoder" else ""
        raise ConfigError(f"reranker({name!r}): give dataset= (the model pipeline.run trains or finds cached for "
                          f"it) or model= (a checkpoint, a rerank-export directory{zero_shot})")
    cls = reranker_class(name)
    check_scoring_arithmetic(config, cls)
    seed_everything(config.seed)
    set_threads(config.threads)
    model = obtain_model(name, config.model, cls=cls, arithmetic=config).reranker
    return transformer_class("RerankerTransformer")(model, text_field=text_field, batch_size=config.batch_size,
                                                    verbose=verbose)


def first_stage(name: str, dataset: str | Dataset, k: int = 1000, mirror: str | None = None, **options: Any):
    """A :class:`FirstStageTransformer` of first stage ``name`` (``bm25``, ``bm25+rm3``, ``shipped``,
    ``run:PATH``, ``auto``, ``dense``, ``hybrid``, ``codes``, ``colbert``, plugins) over ``dataset``, returning
    ``k`` documents per query; its index is built when missing.

    Args:
        name: the first stage, as ``--first-stage`` names it.
        dataset: a dataset name or object.
        k: documents per query.
        mirror: where the dataset's files are (default: the configured data location).
        **options: the first stage's options, fields of its options dataclass as ``--fs-set`` sets them
            (docs/first-stages.md; a grouped one by its dotted name, ``**{"dense.index_type": "hnsw"}``),
            checked before the dataset is read; ``rm3_weight`` (``original_query_weight``) and, for
            ``hybrid``, ``k1``/``b``/``stemmer``/``keep_stopwords`` (its ``bm25`` group) are accepted under
            their older names.

    Returns:
        A PyTerrier transformer from a frame of ``qid`` and ``query`` to each query's top ``k``.

    Raises:
        ConfigError: an unknown first stage, or an option it does not have (naming it and every option it
            has) or refuses.

    Example:
        >>> rm3 = first_stage("bm25+rm3", "vaswani", k=100, fb_terms=20, stemmer="krovetz")  # doctest: +SKIP
    """
    pyterrier_module()
    RunConfig(dataset="(no dataset)", first_stage=name, k=k)  # checks the name and k
    try:
        settings = settings_of(name, options)
    except ConfigError as error:
        raise ConfigError(f"first_stage: {error}") from None
    data = _dataset(dataset, mirror)
    retriever = make_first_stage(name, data, settings)
    return transformer_class("FirstStageTransformer")(retriever, k=k)


def text_loader(dataset: str | Dataset, text_field: str = "text", mirror: str | None = None):
    """A :class:`TextLoader` adding ``text_field`` from ``dataset``'s documents.

    Put it between a first stage, which gives ``docno`` only, and a re-ranker.

    Args:
        dataset: a dataset name or object.
        text_field: the column to add.
        mirror: where the dataset's files are (default: the configured data location).

    Returns:
        The PyTerrier transformer.
    """
    pyterrier_module()
    return transformer_class("TextLoader")(_dataset(dataset, mirror), text_field=text_field)


def topics(dataset: str | Dataset, split: str | None = None, mirror: str | None = None) -> "pd.DataFrame":
    """``dataset``'s queries as a PyTerrier topics frame.

    Args:
        dataset: a dataset name or object.
        split: only this split's queries (``None``: all).
        mirror: where the dataset's files are (default: the configured data location).

    Returns:
        A frame with columns ``qid`` and ``query``.

    Example:
        >>> topics("vaswani").columns.tolist()   # doctest: +SKIP
        ['qid', 'query']
    """
    data = _dataset(dataset, mirror)
    rows = [(q.query_id, q.text) for q in select_queries(data, split)]
    return _pandas().DataFrame(rows, columns=["qid", "query"]).astype({"qid": str, "query": str})


def qrels(dataset: str | Dataset, mirror: str | None = None) -> "pd.DataFrame":
    """``dataset``'s judgments as a PyTerrier qrels frame.

    Args:
        dataset: a dataset name or object.
        mirror: where the dataset's files are (default: the configured data location).

    Returns:
        A frame with columns ``qid``, ``docno`` and ``label`` (graded or negative as judged).
    """
    data = _dataset(dataset, mirror)
    rows = [(q.query_id, q.doc_id, int(q.relevance)) for q in data.qrels]
    return _pandas().DataFrame(rows, columns=["qid", "docno", "label"]).astype({"qid": str, "docno": str,
                                                                                "label": "int64"})
