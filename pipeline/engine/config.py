"""What one run of the pipeline is asked to do: :class:`RunConfig`, every option of ``python -m pipeline.run``
as a typed field with its default and its help text (the command line is built from these fields, see
:mod:`pipeline.engine.cli_options`, so the two cannot drift).

A config checks itself when it is made: a bad value is a :class:`~pipeline.core.errors.ConfigError` naming
the option and what is allowed, raised before any retrieval or training. What can only be checked against
the dataset (its splits, the model options of its recipe) is checked by :func:`pipeline.engine.plan.plan_run`,
also before any work. A config is frozen: the pipeline never changes it (``dataclasses.replace`` makes a
changed copy).

No field belongs to one first stage: a first stage's options are ``first_stage_overrides`` (``--fs-set
NAME=VALUE``), fields of the chosen first stage's options dataclass (:mod:`indexes.options`), as a
re-ranker's are ``overrides`` (``--set``). The older per-option flags (``--k1``, ``--stemmer``,
``--code-set``, ...) are deprecated aliases the command line turns into ``--fs-set`` entries
(:mod:`pipeline.engine.first_stage_flags`).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from indexes import FirstStageSettings, check_first_stage, first_stage_options
from indexes import available as first_stage_names
from rerankers import available as reranker_names

from ..core.errors import ConfigError
from ..core.evaluation import DEFAULT_MEASURES, parse_measures
from ..core.home import runs_root
from ..core.options import parse_overrides
from ..core.filenames import safe_name
from ..core.runtime import environment_precision, requested_precision
from ..core.suggest import unknown_name
from .stacking_rules import ANCHOR, RULES as ZERO_SHOT_RULES, STACK

#: the dataset of the headline command ``python -m pipeline.run --reranker hcan`` (see README: why Microblog)
DEFAULT_DATASET = "microblog"
#: metrics when neither the config nor the dataset's recipe names any (the first is the main one)
DEFAULT_METRICS = DEFAULT_MEASURES  # one default set for pipeline.run and pipeline.evaluate
#: characters a run name may hold besides letters and digits (``+`` as in ``bm25+rm3``)
RUN_NAME_CHARACTERS = "._+-"

GENERAL = "general"
TRAINING = "re-ranker training (when no cached model exists)"
SCORING = "re-ranker scoring (changes no trained model and no cache key)"
FIRST_STAGE = "first-stage options"


def option(default: Any, help: str | Callable[[], str], group: str = GENERAL, **cli: Any) -> Any:
    """A :class:`RunConfig` field: its default, its help (a callable is read when the parser is built, e.g.
    to list the names registered by then) and what the command line needs beyond its type (``group``,
    ``flag`` when it is not ``--<name>``, ``metavar``)."""
    return field(default=default, metadata={"help": help, "group": group, **cli})


def parse_weight(text: str) -> float:
    """A fixed interpolation weight: a number in [0, 1] (the first stage's share of the final score)."""
    try:
        weight = float(text)
    except ValueError:
        raise ConfigError(f"--interpolate takes 'auto', 'none' or a weight in [0, 1], got {text!r}") from None
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"--interpolate weight must be in [0, 1], got {weight}")
    return weight


def parse_interpolation(text: str) -> str | float:
    """``--interpolate``'s value: ``"auto"``, ``"none"`` or a weight in [0, 1] (a float)."""
    return text if text in ("auto", "none") else parse_weight(text)


def check_run_name(name: str) -> None:
    """A :class:`ConfigError` unless ``name`` is one safe file name (the run's files are ``<name>.run`` and
    ``<name>.eval.*`` inside the output directory, never elsewhere)."""
    if safe_name(name, keep=RUN_NAME_CHARACTERS) != name or name.startswith("."):
        raise ConfigError(f"--name {name!r}: a run name is one file name of letters, digits and "
                          f"{' '.join(RUN_NAME_CHARACTERS)} (no '/', whitespace or leading '.'), "
                          f"e.g. {safe_name(name.lstrip('.'), keep=RUN_NAME_CHARACTERS)!r}")


def at_least(option_name: str, value: int | float | None, low: int | float) -> None:
    """A :class:`ConfigError` when ``value`` (``None``: not given) is below ``low``."""
    if value is not None and value < low:
        raise ConfigError(f"{option_name} must be at least {low}, got {value}")


@dataclass(frozen=True)
class RunConfig:
    """Every option of one pipeline run (``python -m pipeline.run``; the flag is ``--<field-name>`` with ``-``
    for ``_`` unless said otherwise). ``None`` means "not given": the dataset's recipe or the documented
    default applies."""

    dataset: str = option(DEFAULT_DATASET, f"dataset name, ir_datasets id or directory (default: {DEFAULT_DATASET}: "
                          "TREC Microblog, HCAN's own data, re-ranking 2014 with models trained on 2011-2013)")
    split: str | None = option(None, "run only this split's queries (e.g. test, 2013, raw-test); with a "
                               "re-ranker, the protocol's test split (default: the dataset's)")
    reranker: str = option("none", lambda: f"re-ranker: {', '.join(reranker_names())}, or auto: the recommended "
                           "pipeline for the collection (the zero-shot bi-encoder combined with the first stage, or "
                           "the collection's measured best; docs/recommendations.md) (default: none)", metavar="NAME")
    first_stage: str = option("auto", lambda: f"first stage: {', '.join(first_stage_names())} (default: auto)",
                              metavar="NAME")
    k: int | None = option(None, "candidates per query from the first stage, at least 1 (default: the dataset's, "
                           "else 1000, or 100 with a re-ranker)")
    rerank_depth: int = option(0, "re-rank only each query's top D candidates; the rest follow in first-stage "
                               "order (default 0: all k)", metavar="D")
    metrics: str | None = option(None, "ir-measures names, the first is the main one; {k} is replaced by --k "
                                 f"(default: the dataset's, else {DEFAULT_METRICS!r})")
    output_dir: Path | None = option(None, "where runs and reports go (default: <home>/runs, the home being "
                                     "PIPELINE_HOME or the repository)")
    name: str | None = option(None, "run name: one file name, the run is <output-dir>/<name>.run (default: "
                              "derived from dataset, split, first stage, re-ranker)")
    seed: int = option(42, "random seed (same seed -> same run file)")
    threads: int = option(0, "torch CPU threads for training/scoring (env PIPELINE_THREADS; default 0: torch's)")
    mirror: str | None = option(None, "offline mirror directory for ir_datasets archives (env PIPELINE_MIRROR)")

    overrides: tuple[str, ...] = option((), "model/text/training option, e.g. --set matching=rm --set epochs=5 "
                                        "(repeatable)", TRAINING, flag="--set", metavar="NAME=VALUE")
    config_file: str | None = option(None, "JSON/YAML file of model options (--set wins)", TRAINING,
                                     flag="--config", metavar="CONFIG")
    folds: int = option(5, "k for k-fold training on datasets without splits (at least 2 to re-rank; "
                           "pipeline.train --folds 1: one model on every judged query, for --model on another "
                           "collection)", TRAINING)
    retrain: bool = option(False, "train even when a cached model exists", TRAINING)
    model: str | None = option(None, "re-rank with this saved model (e.g. trained on another dataset) instead "
                               "of training", TRAINING, metavar="CHECKPOINT")
    train_dataset: str | None = option(
        None, "train the re-ranker on every judged query of this other collection (what pipeline.train --folds 1 "
        "trains and caches) and re-rank --dataset with that model, as --model would (e.g. --dataset nfcorpus "
        "--train-dataset nfcorpus-dev)", TRAINING, metavar="DATASET")
    interpolate: str | None = option(
        None, "final score = W * first stage + (1 - W) * re-ranker, both min-max normalised per query. 'auto' "
        "(default, unless the dataset's recipe says otherwise) tunes W on the protocol's dev queries (never the "
        "test queries) by the main metric; 'none' keeps the re-ranker's own scores. The re-ranker alone is "
        "written and evaluated beside the combination (same scores)", TRAINING, metavar="auto|W|none")
    zero_shot_base: str | None = option(
        None, "stack the re-ranker on a zero-shot combination: MODEL (a sentence encoder, e.g. all-MiniLM-L6-v2, "
        "scored by the bi-encoder, nothing trained) is combined with the first stage first, its weight tuned by "
        "the safe rule on each fold's training and dev queries; the re-ranker is then combined with that ranking, "
        "its weight tuned on the dev queries (it enters only with a proven gain). Needs --interpolate auto "
        "(pipeline.engine.stacking)", TRAINING, metavar="MODEL")
    zero_shot_rule: str = option(
        STACK, "with --zero-shot-base: 'stack' (default) combines the re-ranker with the zero-shot combination; "
        "'fallback' combines it with the first stage and keeps that only when its gain is proven on the dev "
        "queries, else the fold keeps the zero-shot combination; 'anchor' combines it with the first stage at the "
        "zero-shot model's weight, tuning nothing on the dev queries (both for the bi-encoder fine-tuned from the "
        "zero-shot model: --reranker bi-encoder; pipeline.engine.stacking)", TRAINING,
        metavar="|".join(ZERO_SHOT_RULES))

    batch_size: int | None = option(None, "scoring batch in (query, document) pairs, filled across queries "
                                    "(default: the model's score_batch_size)", SCORING, metavar="N")
    int8: bool = option(False, "score with int8 dynamically quantized linear layers (transformer re-rankers, "
                        "CPU only; faster, slightly different scores)", SCORING)
    bf16: bool = option(False, "score with bfloat16 matrix products (any torch re-ranker; several times faster "
                        "on CPUs with AMX or AVX512-BF16, slower on others; slightly different scores)", SCORING)
    precision: str = option("auto", "scoring arithmetic: auto, float32, bf16 or int8 (--bf16 / --int8 are "
                            "shortcuts); auto is bf16 where the CPU (AMX or AVX512-BF16) or GPU computes bfloat16 "
                            "natively and the re-ranker is a torch model, else float32 (default: auto)", SCORING,
                            metavar="auto|float32|bf16|int8")

    first_stage_overrides: tuple[str, ...] = option(
        (), "an option of the first stage, a field of its options dataclass, e.g. --fs-set k1=1.2 (bm25), "
        "--fs-set index_type=hnsw (dense), --fs-set fusion=rrf --fs-set dense.encoder=DIR (hybrid), --fs-set "
        "dim=512 (codes); an unknown name is refused with the closest known one (repeatable, the last wins; "
        "docs/first-stages.md lists every first stage's options)", FIRST_STAGE, flag="--fs-set",
        metavar="NAME=VALUE")

    def __post_init__(self) -> None:
        # normalise what the command line and callers give in looser types (a list of --set items, a str path)
        object.__setattr__(self, "overrides", tuple(self.overrides or ()))
        object.__setattr__(self, "first_stage_overrides", tuple(self.first_stage_overrides or ()))
        if self.output_dir is not None:
            object.__setattr__(self, "output_dir", Path(self.output_dir))
        self.check()

    def check(self) -> None:
        """Every check that needs no dataset; the first failing one is a :class:`ConfigError`."""
        known = reranker_names()
        if self.reranker not in known and self.reranker != "auto":  # auto: settled per dataset (pipeline.engine.presets)
            raise ConfigError(f"--reranker: {unknown_name('re-ranker', self.reranker, known)}")
        try:
            check_first_stage(self.first_stage)
        except ConfigError as error:
            raise ConfigError(f"--first-stage: {error}") from None
        at_least("--k", self.k, 1)
        at_least("--rerank-depth", self.rerank_depth, 0)
        if self.metrics is not None:
            try:
                parse_measures(self.metrics.replace("{k}", "1000"))
            except ConfigError as error:
                raise ConfigError(f"--metrics {self.metrics!r}: {error}") from None
        if self.name is not None:
            check_run_name(self.name)
        at_least("--threads", self.threads, 0)
        at_least("--folds", self.folds, 1)
        if self.interpolate is not None:
            parse_interpolation(self.interpolate)
        at_least("--batch-size", self.batch_size, 1)
        try:
            requested_precision(self.precision, self.bf16, self.int8)
            environment_precision()
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if self.zero_shot_base is not None:
            if self.reranker == "none":
                raise ConfigError("--zero-shot-base needs --reranker: the model stacked on the zero-shot combination")
            if self.interpolate is not None and self.interpolate != "auto":
                raise ConfigError(f"--zero-shot-base tunes both weights: it needs --interpolate auto, got "
                                  f"--interpolate {self.interpolate}")
        if self.zero_shot_rule not in ZERO_SHOT_RULES:
            raise ConfigError(f"--zero-shot-rule: expected one of {', '.join(ZERO_SHOT_RULES)}, got "
                              f"{self.zero_shot_rule!r}")
        if self.zero_shot_rule != STACK and self.zero_shot_base is None:
            raise ConfigError(f"--zero-shot-rule {self.zero_shot_rule} needs --zero-shot-base MODEL: the zero-shot "
                              f"combination it falls back to")
        if self.zero_shot_rule == ANCHOR and self.reranker != "bi-encoder":
            raise ConfigError(f"--zero-shot-rule anchor gives the re-ranker the zero-shot model's weight, which fits "
                              f"only a model on the same score scale: the bi-encoder fine-tuned from it (--reranker "
                              f"bi-encoder), not {self.reranker!r}")
        if self.model and self.reranker == "none":
            raise ConfigError("--model needs --reranker: the name of the re-ranker the checkpoint holds")
        if self.train_dataset:
            if self.reranker in ("none", "auto"):
                raise ConfigError(f"--train-dataset needs --reranker NAME: the re-ranker to train on it, not "
                                  f"{self.reranker!r}")
            if self.model:
                raise ConfigError("--train-dataset trains the model that --model would give: give one of them")
        if self.first_stage_overrides:
            try:
                first_stage_options(self.first_stage, self.first_stage_settings())
            except ConfigError as error:
                raise ConfigError(f"--fs-set: {error}") from None

    @property
    def run_dir(self) -> Path:
        """Where this run's files go: ``--output-dir``, else ``<home>/runs`` (:mod:`pipeline.core.home`)."""
        return self.output_dir if self.output_dir is not None else runs_root()

    @property
    def reranking(self) -> bool:
        """Whether a re-ranker is asked for (``--reranker`` other than ``none``)."""
        return self.reranker != "none"

    def first_stage_settings(self) -> FirstStageSettings:
        """The first stage's options, ``--fs-set``'s (the deprecated per-option flags such as ``--k1`` are
        ``--fs-set`` entries by the time a config is made, :mod:`pipeline.engine.first_stage_flags`; later
        entries win), checked against the first stage when it is built (:func:`indexes.make_first_stage`) or
        asked for (:func:`indexes.first_stage_options`).

        Returns:
            The settings; their ``options`` are ``name -> value`` as given (empty: the first stage's defaults).

        Example:
            >>> RunConfig(first_stage="hybrid", first_stage_overrides=("dense.index_type=hnsw",)
            ...           ).first_stage_settings().options
            {'dense.index_type': 'hnsw'}
        """
        return FirstStageSettings(options=parse_overrides(self.first_stage_overrides, flag="--fs-set"))

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> "RunConfig":
        """The config of parsed command-line arguments (see :func:`pipeline.run.build_parser`); attributes
        that are no field are ignored, missing ones take the field's default.

        Args:
            namespace: what ``parse_args`` returned.

        Returns:
            The checked config.

        Raises:
            ConfigError: a value a field refuses.
        """
        given = vars(namespace)
        return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given})
