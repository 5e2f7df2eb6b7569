"""Names of a run's files: the default run name (dataset, split, first stage, re-ranker) and the suffixes
that keep the runs of different settings apart (``-alone``, ``-interp<W>``, ``-top<D>``, ``-int8``)."""
from __future__ import annotations

from .config import RUN_NAME_CHARACTERS, RunConfig
from .core.names import safe_name


def default_run_name(dataset: str, first_stage: str, reranker: str, split: str | None) -> str:
    """``<dataset>[-<split>]-<first stage>[-<reranker>]`` with file-name-safe characters."""
    parts = [dataset, split, first_stage.replace("run:", "run-"), None if reranker == "none" else reranker]
    return safe_name("-".join(p for p in parts if p), keep=RUN_NAME_CHARACTERS)


def run_names(config: RunConfig, dataset: str, first_stage: str, split: str | None,
              interpolation: str | float | None, depth: int) -> tuple[str, str | None]:
    """``(final, alone)``: the name of the run written as the result and, when a re-ranker's scores are
    interpolated, the name of the re-ranker's own run (else ``None``).

    ``--name`` is used as given (the re-ranker's own run is ``<name>-alone``); the default name says what
    differs between runs of one dataset: ``-int8`` (an int8 run must not overwrite the float run it is
    compared with), ``-alone`` (the re-ranker's own scores are the result), ``-interp<W>`` (a fixed weight;
    the tuned ``auto`` weight is the default and adds nothing) and ``-top<D>`` (re-ranked to depth D).
    """
    given = config.name is not None
    name = config.name or default_run_name(dataset, first_stage, config.reranker, split)
    if config.int8 and not given:
        name += "-int8"
    if not config.reranking:
        return name, None
    alone = None
    if interpolation is not None:
        alone = f"{name}-alone"
        if not given and interpolation != "auto":
            name += f"-interp{interpolation:g}"
    elif not given:
        name += "-alone"
    if depth and not given:
        name += f"-top{depth}"
        alone = f"{alone}-top{depth}" if alone else None
    return name, alone
