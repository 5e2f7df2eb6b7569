"""Names to loaders: :func:`load_dataset` resolves a dataset name, and :func:`register_dataset` and the
``neural_rerank.datasets`` entry points let code outside this package add names.

Order of resolution: a directory path (:func:`~pipeline.core.datasets.local.load_local`); a built-in name
of the data root (:data:`BUILTIN_DATASETS`); a name registered in this process or by an installed package's
entry point; an ir_datasets id, falling back to the data root's copy of the same collection
(:data:`IR_DATASETS_EQUIVALENTS`) when the download is unavailable.
"""
from __future__ import annotations

import contextlib

import logging
import os
from pathlib import Path
from typing import Callable

from ..errors import ConfigError, DataFormatError, DatasetNotFoundError
from ..plugins import Registry
from .answer_selection import answer_selection_loader
from .classic import vaswani_npl
from .dataset import Dataset
from .. import suggest
from .irds import failed_archive, ir_dataset_ids, ir_datasets_home, is_download_failure, load_ir_dataset
from .local import load_local
from .locations import data_root, mirror_dir
from .microblog import MICROBLOG_YEARS, microblog_loader
from .nfcorpus import nfcorpus_loader, nfcorpus_titles
from .recipes import TRECQA_RECIPE
from .trec_dl import dl_year_loader, dl_years

log = logging.getLogger(__name__)

#: The entry-point group an installed package declares datasets in: ``name = "module:function"``, where the
#: function takes no argument and returns a :class:`Dataset`. Imported only when that name is loaded; a
#: built-in name wins over an entry point of the same name.
ENTRY_POINT_GROUP = "neural_rerank.datasets"

#: Built-in names for the folders of the data root: name -> loader taking the data root.
BUILTIN_DATASETS: dict[str, Callable[[Path], Dataset]] = {
    "microblog": microblog_loader(MICROBLOG_YEARS),
    **{f"microblog-{year}": microblog_loader([year]) for year in MICROBLOG_YEARS},
    "microblog-url": microblog_loader(MICROBLOG_YEARS, with_urls=True),
    "wikiqa": answer_selection_loader("wikiqa-castorini", ("train", "dev", "test"), "wikiqa", filtered=("test", "dev")),
    "trecqa": answer_selection_loader("trecqa-hcan", ("train", "raw-dev", "raw-test", "clean-dev", "clean-test"),
                                      "trecqa", recipe=TRECQA_RECIPE),
    "dl": dl_years,
    "dl19": dl_year_loader("2019"),
    "dl20": dl_year_loader("2020"),
    "dl21": dl_year_loader("2021"),
    "nfcorpus": nfcorpus_loader("test"),
    "nfcorpus-dev": nfcorpus_loader("dev"),
    "nfcorpus-titles": nfcorpus_titles,
    "vaswani-npl": vaswani_npl,
}

#: ir_datasets ids whose collection the data root also holds (used when the download is unavailable).
#: ir_datasets ids read from the offline mirror (``../shared/data``) without a download
MIRRORED_IR_DATASETS = ("cranfield", "vaswani")

IR_DATASETS_EQUIVALENTS = {
    "vaswani": "vaswani-npl",
    "nfcorpus/test": "nfcorpus",
    "beir/nfcorpus/test": "nfcorpus",
    "nfcorpus/dev": "nfcorpus-dev",
    "msmarco-passage/trec-dl-2019/judged": "dl19",
    "msmarco-passage/trec-dl-2020/judged": "dl20",
    "msmarco-passage-v2/trec-dl-2021/judged": "dl21",
    "tweets2013-ia/trec-mb-2013": "microblog-2013",
    "tweets2013-ia/trec-mb-2014": "microblog-2014",
}

#: Names added by code outside this package: in process (:func:`register_dataset`) or by an installed
#: package's entry point. Each maps to a loader taking no argument, or its ``"module:function"``.
DATASET_PLUGINS = Registry("dataset", ENTRY_POINT_GROUP)


def register_dataset(name: str, loader: Callable[[], Dataset] | str) -> None:
    """Add a dataset name that :func:`load_dataset` (and ``--dataset``) then accepts.

    Args:
        name: the name (non-empty, no surrounding spaces, not a built-in name).
        loader: a function of no argument returning a :class:`Dataset`, or its ``"module:function"``
            (imported when the name is first loaded).

    Raises:
        ConfigError: a built-in name, a malformed loader, or a name registered to another loader.

    Example:
        >>> register_dataset("my-collection", "my_package.data:load_my_collection")   # doctest: +SKIP
    """
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ConfigError(f"dataset name must be a non-empty string without surrounding spaces, got {name!r}")
    if isinstance(loader, str):
        module, _, attribute = loader.partition(":")
        if not module or not attribute:
            raise ConfigError(f"dataset {name!r}: loader {loader!r} is not 'module:function'")
    elif not callable(loader):
        raise ConfigError(f"dataset {name!r}: loader must be a function or 'module:function', got {loader!r}")
    if name in BUILTIN_DATASETS:
        raise ConfigError(f"dataset {name!r} is a built-in name; register the loader under another name")
    DATASET_PLUGINS.register(name, loader)


@contextlib.contextmanager
def quiet_ir_datasets():
    """No log line up to WARNING for the ``with`` body: ir_datasets prints one per download retry, from loggers
    it makes (at INFO, not propagating) on first use, so only the global switch reaches them."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def known_datasets() -> list[str]:
    """Every name :func:`load_dataset` knows without ir_datasets (listing them imports nothing).

    Returns:
        The built-in names, then the registered ones and those of entry points.
    """
    return [*BUILTIN_DATASETS, *(name for name in DATASET_PLUGINS.names() if name not in BUILTIN_DATASETS)]


def load_dataset(name: str, mirror: str | os.PathLike | None = None) -> Dataset:
    """Load a dataset by directory path, built-in name, registered name or ir_datasets id (see the module
    docstring).

    Args:
        name: a directory, a built-in or registered name, or an ir_datasets id.
        mirror: the offline mirror of ir_datasets' archives (default :func:`mirror_dir`).

    Returns:
        The dataset: queries, qrels, splits and lazily read documents.

    Raises:
        DatasetNotFoundError: an unknown name (with the closest known one), or archives neither
            downloadable nor in the mirror.

    Example:
        >>> dataset = load_dataset("vaswani")          # doctest: +SKIP
        >>> len(dataset.queries)                       # doctest: +SKIP
        93
    """
    mirror_path = mirror_dir(mirror)
    candidate = Path(name).expanduser()
    if candidate.is_dir():
        return load_local(candidate)
    if name in BUILTIN_DATASETS:
        return _load_builtin(name)
    if name in DATASET_PLUGINS:
        return _load_plugin(name)
    try:
        if name in IR_DATASETS_EQUIVALENTS:  # a local copy exists: ir_datasets' retry lines are noise
            with quiet_ir_datasets():
                return load_ir_dataset(name, mirror_path)
        return load_ir_dataset(name, mirror_path)
    except DatasetNotFoundError:
        if name in IR_DATASETS_EQUIVALENTS:
            return _load_builtin(IR_DATASETS_EQUIVALENTS[name], requested=name)
        names = [*known_datasets(), *MIRRORED_IR_DATASETS, *IR_DATASETS_EQUIVALENTS, *ir_dataset_ids()]
        hint = suggest.hint(name, names, cutoff=0.75)
        raise DatasetNotFoundError(
            f"unknown dataset {name!r}: {hint}not a directory, not a known name ({', '.join(known_datasets())}; "
            f"ir_datasets ids that work offline: {', '.join(MIRRORED_IR_DATASETS)}) and not an ir_datasets id"
        ) from None
    except Exception as error:  # ir_datasets raises plain RuntimeErrors for failed downloads
        if not is_download_failure(error):
            raise
        if name in IR_DATASETS_EQUIVALENTS and data_root() is not None:
            log.info("ir_datasets could not download %s; using the local copy %s from %s",
                        name, IR_DATASETS_EQUIVALENTS[name], data_root())
            return _load_builtin(IR_DATASETS_EQUIVALENTS[name], requested=name)
        archive = failed_archive(error)
        fetch = (f"fetch {archive} (elsewhere) and put {archive.rsplit('/', 1)[-1]} " if archive
                 else "put the archive ir_datasets downloads ")
        raise DatasetNotFoundError(
            f"ir_datasets could not download {name!r} and no offline copy was found: {fetch}into a mirror "
            f"directory (PIPELINE_MIRROR or --mirror; searched: {mirror_path}) or into {ir_datasets_home()}"
        ) from None


def _load_plugin(name: str) -> Dataset:
    """Call the loader registered under ``name`` (importing it first if needed) and check that it returned
    a Dataset: a plugin's mistake is named here, not at some later use of the result."""
    loader = DATASET_PLUGINS.load(name)
    dataset = loader()
    if not isinstance(dataset, Dataset):
        raise ConfigError(f"dataset {name!r}: its loader {getattr(loader, '__qualname__', loader)!r} returned a "
                          f"{type(dataset).__name__}, not a pipeline.core.datasets.Dataset")
    return dataset


def _load_builtin(name: str, requested: str | None = None) -> Dataset:
    """A built-in dataset from the data root (named ``requested`` when it stands in for an ir_datasets id);
    a missing data root or file is a DatasetNotFoundError saying which."""
    root = data_root()
    if root is None or not root.is_dir():
        raise DatasetNotFoundError(
            f"dataset {name!r} lives in the data root, which was not found: set PIPELINE_DATA to the folder "
            "holding trec-microblog-hcan/, wikiqa-castorini/, ... (default ../shared/data beside the repo)"
        )
    try:
        dataset = BUILTIN_DATASETS[name](root)
    except DataFormatError as error:
        if error.detail == "file not found":
            raise DatasetNotFoundError(f"dataset {name!r}: missing file {error.path}") from None
        raise
    if requested:
        dataset.name = requested
    return dataset
