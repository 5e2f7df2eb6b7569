"""What a :class:`~pipeline.engine.config.RunConfig` leaves unsaid, settled against the dataset: the split, the
candidate depth, the metrics, the interpolation, the model options and the first stage. Each value comes
from the config, else the dataset's recipe, else the documented default, and is checked: a bad one is a
:class:`~pipeline.core.errors.ConfigError` naming the option, raised before any retrieval or training."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from indexes import first_stage_options, resolve_first_stage

from .config import DEFAULT_METRICS, RunConfig, parse_interpolation
from ..core.datasets import Dataset
from ..core.errors import ConfigError
from ..core.evaluation import canonical_measures, parse_measures
from ..core.options import parse_overrides
from ..core.runtime import requested_precision
from .fitting import untrained_reranker

#: candidates per query when neither the config nor the recipe says: a full ranking, or a re-ranker's depth
FULL_DEPTH, RERANK_DEPTH = 1000, 100


def check_split(dataset: Dataset, split: str | None) -> None:
    """A :class:`ConfigError` unless ``split`` is ``None`` (all queries) or one of ``dataset``'s splits."""
    if split is not None and split not in dataset.splits:
        known = ", ".join(dataset.splits) or "none"
        raise ConfigError(f"--split: dataset {dataset.name!r} has no split {split!r} (its splits: {known})")


def run_split(config: RunConfig, dataset: Dataset) -> str | None:
    """The split whose queries are run: ``--split``, else with a re-ranker the recipe's test split, else
    ``None`` (every query)."""
    split = config.split or (dataset.recipe.split if config.reranking else None)
    check_split(dataset, split)
    return split


def candidate_depth(config: RunConfig, dataset: Dataset) -> int:
    """Candidates per query: ``--k``, else the recipe's, else :data:`RERANK_DEPTH` with a re-ranker and
    :data:`FULL_DEPTH` without."""
    return config.k or dataset.recipe.k or (RERANK_DEPTH if config.reranking else FULL_DEPTH)


def metric_list(config: RunConfig, dataset: Dataset, k: int) -> str:
    """The ir-measures names evaluated (``{k}`` replaced by ``k``; the first is the main one): ``--metrics``,
    else the recipe's, else :data:`DEFAULT_METRICS`; every name is parsed here."""
    source = "--metrics" if config.metrics else f"the metrics of dataset {dataset.name!r}"
    metrics = (config.metrics or dataset.recipe.metrics or DEFAULT_METRICS).replace("{k}", str(k))
    try:
        parse_measures(metrics)
    except ConfigError as error:
        raise ConfigError(f"{source} {metrics!r}: {error}") from None
    return canonical_measures(metrics)  # trec_eval names (map, P_10 ...) as ir-measures names


def interpolation(config: RunConfig, dataset: Dataset) -> str | float | None:
    """How the re-ranker's scores meet the first stage's: ``"auto"`` (weight tuned on dev queries), a fixed
    weight in [0, 1], or ``None`` (the re-ranker's own scores; always without a re-ranker)."""
    value = parse_interpolation(config.interpolate or dataset.recipe.interpolate)
    return None if value == "none" or not config.reranking else value


def model_options(config: RunConfig, dataset: Dataset, reranker_class: type) -> dict[str, Any]:
    """The options a new model is built with: the recipe's training options, then ``--config``, then
    ``--set``. They are checked by building the model's configs (no data is read, nothing is prepared), so
    an unknown name or a bad value is a :class:`ConfigError` listing the known ones. A re-ranker without
    ``from_options`` takes none: the recipe's are left out and any given option is an error."""
    given = parse_overrides(config.overrides, config.config_file)
    options = {**dataset.recipe.train, **given} if hasattr(reranker_class, "from_options") else given
    untrained_reranker(reranker_class, options, config.seed)
    return options


def check_given_options(config: RunConfig) -> None:
    """Refuse a bad ``--set`` / ``--config`` name of a named re-ranker before any dataset is read (a typo is
    answered in about the time of importing torch, not after loading a collection): the given options alone
    are checked as :func:`model_options` checks them with the recipe's. ``auto``, ``none`` and ``--model``
    are left to the run plan (their options are refused or settled there)."""
    from .presets import AUTO

    if not config.reranking and (config.overrides or config.config_file):
        # without a re-ranker nothing reads them: running anyway would hide the user's mistake
        given = "--set" if config.overrides else "--config"
        raise ConfigError(f"{given}: model options need a re-ranker, and --reranker is none; name one "
                          "(e.g. --reranker hcan) or drop the option")
    if not config.reranking or config.reranker == AUTO or config.model:
        return
    given = parse_overrides(config.overrides, config.config_file)
    if given:
        from rerankers import reranker_class

        untrained_reranker(reranker_class(config.reranker), given, config.seed)


def check_scoring_arithmetic(config: RunConfig, reranker_class: type | None) -> None:
    """A :class:`ConfigError` unless ``--int8`` / ``--bf16`` can apply to ``reranker_class`` (at most one of
    them; int8 for the transformer re-rankers, bfloat16 for every torch re-ranker)."""
    # --precision auto never fails here: it falls back to float32 where bfloat16 does not apply
    try:
        asked = requested_precision(getattr(config, "precision", "auto"), config.bf16, config.int8)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if asked == "int8" and not hasattr(reranker_class, "quantize_int8"):
        raise ConfigError("--int8 applies to the transformer re-rankers (cross-encoder, bi-encoder, addax*)")
    if asked == "bf16" and not hasattr(reranker_class, "score_in_bf16"):
        raise ConfigError(f"--bf16 applies to the neural (torch) re-rankers, not to {config.reranker!r}")


def first_stage_name(config: RunConfig, dataset: Dataset) -> str:
    """The first stage for ``dataset`` (``auto`` settled); one that cannot serve it is a :class:`ConfigError`."""
    name = resolve_first_stage(config.first_stage, dataset)
    if name == "shipped" and not dataset.first_stage:
        raise ConfigError(f"--first-stage shipped: dataset {dataset.name!r} ships no first-stage run; "
                          "use bm25 or run:PATH")
    if name.startswith("run:") and not Path(name[4:]).is_file():
        raise ConfigError(f"--first-stage {name}: no such run file")
    if config.first_stage == "auto" and name != "bm25" and config.first_stage_overrides:
        # the config checked auto's options as bm25's; this dataset settles auto to its shipped run
        try:
            first_stage_options(name, config.first_stage_settings())
        except ConfigError as error:
            raise ConfigError(f"--fs-set: --first-stage auto is {name!r} for dataset {dataset.name!r} (it ships a "
                              f"first-stage run): {error}; name the first stage, e.g. --first-stage bm25") from None
    return name
