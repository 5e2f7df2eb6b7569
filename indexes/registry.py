"""First stages by name: the built-in ones, those added with :func:`register`, and those of installed
packages' entry points of group ``neural_rerank.first_stages`` (name = "module:factory"). A factory takes
``(dataset, settings)`` (a :class:`~pipeline.core.datasets.Dataset` and a :class:`~indexes.base.BM25Settings`)
and returns a :class:`~indexes.base.Retriever`. ``run:PATH`` (a TREC run file) and ``auto`` are forms of the
command line, not registry entries."""
from __future__ import annotations

from pathlib import Path

from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.plugins import Registry
from pipeline.core.trec import read_run

from .base import BM25Settings, Retriever, RunRetriever

#: the command line's forms beside the registered names
SPECIAL_FORMS = ("auto", "run:PATH")


def shipped_first_stage(dataset: Dataset, settings: BM25Settings) -> Retriever:
    """The run that comes with the data (Microblog QL top-1000, DL BM25 top-100)."""
    if not dataset.first_stage:
        raise PipelineError(f"dataset {dataset.name!r} ships no first-stage run; use bm25 or run:PATH")
    return RunRetriever("shipped", dataset.first_stage)


REGISTRY = Registry("first stage", "neural_rerank.first_stages", {
    "shipped": shipped_first_stage,
    "bm25": "indexes.lucene:bm25_first_stage",
    "bm25+rm3": "indexes.lucene:bm25_rm3_first_stage",
    "bm25s": "indexes.bm25s:bm25s_first_stage",
    "codes": "indexes.codes:codes_first_stage",
    "colbert": "indexes.codes:colbert_first_stage",
    "dense": "indexes.dense:dense_first_stage",
    "hybrid": "indexes.hybrid:hybrid_first_stage",
})


def register(name: str, target) -> None:
    """Add a first stage (``target``: ``"module:factory"``, imported lazily, or the factory itself)."""
    if name in ("auto", "none") or name.startswith("run:"):
        raise PipelineError(f"{name!r} is a form of the command line; it cannot be registered")
    REGISTRY.register(name, target)


def available() -> list[str]:
    """Every first-stage name, plugins included, then the command line's forms (``auto``, ``run:PATH``)."""
    return [*REGISTRY.names(), *SPECIAL_FORMS]


def resolve_first_stage(spec: str, dataset: Dataset) -> str:
    """``auto`` -> ``shipped`` when the dataset comes with a first-stage run, else ``bm25``."""
    if spec == "auto":
        return "shipped" if dataset.first_stage else "bm25"
    return spec


#: ``KIND:PATH`` first stages that search an existing Lucene index instead of building one
EXISTING_INDEX_KINDS = ("bm25", "bm25+rm3")


def check_first_stage(spec: str) -> None:
    """A :class:`ConfigError` unless ``spec`` names a first stage (no index is built, no file read)."""
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


def make_first_stage(spec: str, dataset: Dataset, settings: BM25Settings | None = None) -> Retriever:
    """Build the first stage named by ``spec`` (a registered name, ``auto`` or ``run:PATH``) for ``dataset``."""
    settings = settings or BM25Settings()
    spec = resolve_first_stage(spec, dataset)
    check_first_stage(spec)
    if spec.startswith("run:"):
        path = Path(spec[4:])
        return RunRetriever(f"run:{path.name}", read_run(path, dataset.doc_store(), dataset.queries))
    if ":" in spec and spec.partition(":")[0] in EXISTING_INDEX_KINDS:
        from .lucene import existing_index_first_stage

        return existing_index_first_stage(spec, settings)
    return REGISTRY.load(spec, available())(dataset, settings)
