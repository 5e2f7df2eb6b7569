"""First stages by name: the built-in ones, those added with :func:`register`, and those of installed
packages' entry points of group ``neural_rerank.first_stages`` (name = "module:factory"). A factory takes
``(dataset, settings)`` (a :class:`~pipeline.core.datasets.Dataset` and a
:class:`~indexes.options.FirstStageSettings` whose ``options`` is an instance of the factory's ``Options``
dataclass, or ``None`` for its defaults; see :mod:`indexes.options`) and returns a
:class:`~indexes.base.Retriever`. ``run:PATH`` (a TREC run file) and ``auto`` are forms of the command line,
not registry entries."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.plugins import Registry
from pipeline.core.formats import read_run

from .base import BM25Settings, Retriever, RunRetriever
from .options import FirstStageSettings, NoOptions, stage_options

#: the command line's forms beside the registered names
SPECIAL_FORMS = ("auto", "run:PATH")


def shipped_first_stage(dataset: Dataset, settings: FirstStageSettings) -> Retriever:
    """The run that comes with the data (Microblog QL top-1000, DL BM25 top-100); it takes no options.

    Args:
        dataset: a dataset that ships a first-stage run.
        settings: ignored (the shipped run has no options).

    Returns:
        A :class:`~indexes.base.RunRetriever` serving the shipped run.

    Raises:
        PipelineError: the dataset ships no first-stage run.
    """
    if not dataset.first_stage:
        raise PipelineError(f"dataset {dataset.name!r} ships no first-stage run; use bm25 or run:PATH")
    return RunRetriever("shipped", dataset.first_stage)


shipped_first_stage.Options = NoOptions


REGISTRY = Registry("first stage", "neural_rerank.first_stages", {
    "shipped": shipped_first_stage,
    "bm25": "indexes.lucene:bm25_first_stage",
    "bm25+rm3": "indexes.lucene:bm25_rm3_first_stage",
    "bm25s": "indexes.bm25s:bm25s_first_stage",
    "codes": "indexes.codes.first_stage:codes_first_stage",
    "colbert": "indexes.codes.first_stage:colbert_first_stage",
    "dense": "indexes.dense:dense_first_stage",
    "hybrid": "indexes.hybrid:hybrid_first_stage",
})


def register(name: str, target) -> None:
    """Add a first stage, selectable as ``--first-stage NAME``.

    Args:
        name: its name (not ``auto``, ``none`` or ``run:...``, which are forms of the command line).
        target: ``"module:factory"`` (imported lazily) or the factory itself: a callable taking
            ``(dataset, settings)`` and returning a :class:`~indexes.base.Retriever`.

    Raises:
        PipelineError: ``name`` is a form of the command line.

    Example:
        >>> register("my-bm25", "my_package.first_stages:my_bm25")   # doctest: +SKIP
    """
    if name in ("auto", "none") or name.startswith("run:"):
        raise PipelineError(f"{name!r} is a form of the command line; it cannot be registered")
    REGISTRY.register(name, target)


def available() -> list[str]:
    """Every first-stage name, plugins included, then the command line's forms (``auto``, ``run:PATH``).

    Returns:
        The names, in the order ``--first-stage`` lists them.

    Example:
        >>> "bm25" in available() and available()[-2:] == ["auto", "run:PATH"]
        True
    """
    return [*REGISTRY.names(), *SPECIAL_FORMS]


def resolve_first_stage(spec: str, dataset: Dataset) -> str:
    """The first stage ``spec`` means for ``dataset``.

    Args:
        spec: a first-stage name or form.
        dataset: the dataset to search.

    Returns:
        ``auto`` -> ``shipped`` when the dataset comes with a first-stage run, else ``bm25``; any other
        ``spec`` unchanged.
    """
    if spec == "auto":
        return "shipped" if dataset.first_stage else "bm25"
    return spec


#: ``KIND:PATH`` first stages that search an existing Lucene index instead of building one
EXISTING_INDEX_KINDS = ("bm25", "bm25+rm3")


def check_first_stage(spec: str) -> None:
    """Refuse a ``spec`` that names no first stage (no index is built, no file read).

    Args:
        spec: a first-stage name or form (``auto``, ``run:PATH``, ``KIND:INDEX``).

    Raises:
        ConfigError: ``spec`` names no first stage (with the closest known names), or its path is missing.
    """
    if spec == "auto" or spec in REGISTRY:
        return
    if spec.startswith("run:"):
        if not spec[4:]:
            raise ConfigError("--first-stage run:PATH needs a path after 'run:'")
        return
    if spec.partition(":")[0] in EXISTING_INDEX_KINDS and ":" in spec:
        if not spec.partition(":")[2]:
            raise ConfigError(f"--first-stage {spec}PATH needs the path of a Lucene index")
        if not Path(spec.partition(":")[2]).is_dir():
            raise ConfigError(f"--first-stage {spec}: no such index directory")
        return
    from pipeline.core.suggest import unknown_name

    raise ConfigError(unknown_name("first stage", spec, REGISTRY.names(),
                                   [*available(), *(f"{kind}:INDEX" for kind in EXISTING_INDEX_KINDS)]))


def factory_of(spec: str):
    """The factory that builds first stage ``spec``; loads the factory's module (no index).

    Args:
        spec: a first-stage name (``auto`` counts as ``bm25``, ``bm25:INDEX`` as ``bm25``).

    Returns:
        The factory, or ``None`` for ``run:PATH``, which takes no options.

    Raises:
        ConfigError: ``spec`` names no first stage.
    """
    spec = "bm25" if spec == "auto" else spec
    if spec.startswith("run:"):
        return None
    if ":" in spec and spec.partition(":")[0] in EXISTING_INDEX_KINDS:
        spec = spec.partition(":")[0]
    return REGISTRY.load(spec, available())


def first_stage_options(spec: str, settings: FirstStageSettings | BM25Settings | None = None):
    """The checked options of first stage ``spec`` in ``settings`` (an instance of its ``Options``
    dataclass; ``None``: none given, the defaults apply). Builds nothing.

    Args:
        spec: a first-stage name as :func:`make_first_stage` takes it (``auto``: checked as ``bm25``).
        settings: the settings (a legacy :class:`BM25Settings` is converted).

    Returns:
        The options instance, or ``None``.

    Raises:
        ConfigError: an option the first stage does not have (with the closest known name) or refuses.

    Example:
        >>> first_stage_options("bm25", FirstStageSettings({"k1": "1.2"})).k1
        1.2
    """
    settings = as_settings(spec, settings)
    return stage_options(spec, factory_of(spec), settings)


def legacy_settings(settings: BM25Settings, kind: str) -> FirstStageSettings:
    """The :class:`FirstStageSettings` of first stage ``kind`` from the older :class:`BM25Settings`.

    The built-in first stages get their own options dataclass from its fields, any other first stage its
    Lucene fields that are not the defaults as aliases (applied where it has options of those names).

    Args:
        settings: the older settings object.
        kind: a registered first-stage name.

    Returns:
        The settings of that first stage.

    Raises:
        PipelineError: ``dense`` or ``hybrid`` hold something other than their options dataclass.
    """
    from .options import BM25Options, RM3Options

    lucene = {"k1": settings.k1, "b": settings.b, "stemmer": settings.stemmer,
              "keep_stopwords": settings.keep_stopwords}
    bm25 = BM25Options(**lucene)
    for name, expected in (("dense", "DenseOptions"), ("hybrid", "HybridOptions")):
        value = getattr(settings, name)
        if value is not None and type(value).__name__ != expected:
            raise PipelineError(f"settings.{name} must be a {expected}, got {type(value).__name__}")
    options, aliases = None, {}
    if kind == "bm25":
        options = bm25
    elif kind == "bm25+rm3":
        options = RM3Options(**lucene, fb_terms=settings.fb_terms, fb_docs=settings.fb_docs,
                             original_query_weight=settings.original_query_weight)
    elif kind == "bm25s":
        from .bm25s import Bm25sOptions

        options = Bm25sOptions(**lucene)
    elif kind == "dense":
        options = settings.dense
    elif kind == "hybrid":
        from .dense import DenseOptions
        from .hybrid import HybridOptions, HybridStageOptions

        fusion = settings.hybrid or HybridOptions()
        options = HybridStageOptions(**{f.name: getattr(fusion, f.name) for f in dataclasses.fields(fusion)},
                                     dense=settings.dense or DenseOptions(), bm25=bm25)
    elif kind in ("codes", "colbert"):
        options = settings.codes
    else:
        defaults = BM25Settings()
        aliases = {name: getattr(settings, name) for name in ("k1", "b", "stemmer", "keep_stopwords", "fb_terms",
                                                             "fb_docs", "original_query_weight")
                   if getattr(settings, name) != getattr(defaults, name)}
    return FirstStageSettings(options, aliases, settings.threads, settings.index_root)


def as_settings(spec: str, settings: FirstStageSettings | BM25Settings | None) -> FirstStageSettings:
    """``settings`` as a :class:`FirstStageSettings`.

    Args:
        spec: the first stage the settings are for.
        settings: new or legacy settings (a :class:`BM25Settings` gives the options of ``spec``'s kind from
            its fields), or ``None`` for the defaults.

    Returns:
        The settings.
    """
    if settings is None:
        return FirstStageSettings()
    if isinstance(settings, BM25Settings):
        return legacy_settings(settings, spec.partition(":")[0] if not spec.startswith("run:") else spec)
    return settings


def make_first_stage(spec: str, dataset: Dataset, settings: FirstStageSettings | BM25Settings | None = None
                     ) -> Retriever:
    """Build the first stage named by ``spec`` (a registered name, ``auto``, ``run:PATH`` or ``KIND:INDEX``)
    for ``dataset``, with the options of ``settings`` checked against the first stage's ``Options``.

    Args:
        spec: the first stage's name.
        dataset: the dataset it searches.
        settings: its options and where its indexes go (``None``: the defaults).

    Returns:
        The first stage (an index is built when missing).

    Raises:
        ConfigError: ``spec`` names no first stage, or an option it does not have.

    Example:
        >>> make_first_stage("bm25", dataset, FirstStageSettings({"k1": 1.2})).search(queries, 10)  # doctest: +SKIP
    """
    spec = resolve_first_stage(spec, dataset)
    check_first_stage(spec)
    settings = as_settings(spec, settings)
    if spec.startswith("run:"):
        stage_options(spec, None, settings)  # a given run takes no options
        path = Path(spec[4:])
        return RunRetriever(f"run:{path.name}", read_run(path, dataset.doc_store(), dataset.queries))
    factory = factory_of(spec)
    settings = dataclasses.replace(settings, options=stage_options(spec, factory, settings))
    if ":" in spec and spec.partition(":")[0] in EXISTING_INDEX_KINDS:
        from .lucene import existing_index_first_stage

        return existing_index_first_stage(spec, settings)
    return factory(dataset, settings)
