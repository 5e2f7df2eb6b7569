"""Names of a run's files: the default run name (dataset, split, first stage, re-ranker) and the parts that
keep the runs of different settings apart, so that one setting never overwrites another's run: the first
stage's options when not the defaults (readable for analysis, BM25 and RM3: ``-stem.none``, ``-stopwords``,
``-k1.1.2-b.0.75``, ``-fb20x10w0.5``; ``-opts.<hash>`` of every other option, :mod:`indexes.options`), the
training options (``-seed1``, ``-3fold``, ``-set.<hash>`` for ``--set``/``--config``),
``-model.<name>.<hash>`` for ``--model`` (its file or folder name, or hub id, and a hash of where it is, so two
models never share a run), and ``-alone``, ``-interp<W>``, ``-top<D>``, ``-int8``. A ``run:PATH`` first stage is
named after the file."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from indexes import first_stage_options
from indexes.options import changed_options

from .config import RUN_NAME_CHARACTERS, RunConfig
from .stacking_rules import ANCHOR, FALLBACK, STACK
from ..core.errors import ConfigError
from ..core.filenames import safe_name

#: the options whose defaults add nothing to a name
DEFAULTS = RunConfig.__dataclass_fields__
#: ``--zero-shot-rule`` -> what joins the run name and the zero-shot model's label
RULE_JOINS = {STACK: "-on-", FALLBACK: "-or-", ANCHOR: "-at-"}


def _default(name: str):
    return DEFAULTS[name].default


def _short_hash(value) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:6]


def first_stage_label(config: RunConfig | None, first_stage: str) -> str:
    """The first stage's part of a run name: ``run:PATH`` as ``run-<file stem>``; a first stage with the
    options that differ from its defaults (the first stage's own options dataclass, so that a changed option
    always changes the name): analysis, BM25 and RM3 readably, every other option as ``opts.<hash>``.

    Raises:
        ConfigError: an option the first stage does not have (``--fs-set``), before any work.
    """
    if first_stage.startswith("run:"):
        return "run-" + safe_name(Path(first_stage[4:]).stem, keep=RUN_NAME_CHARACTERS)
    spec, pool = (first_stage[:-len("-pool")], "-pool") if first_stage.endswith("-pool") else (first_stage, "")
    if ":" in spec:  # bm25:INDEX: an existing index, named after its folder
        kind, _, location = spec.partition(":")
        first_stage = f"{kind}-index.{safe_name(Path(location).name, keep=RUN_NAME_CHARACTERS)}{pool}"
    if config is None:
        return first_stage
    try:
        changed = changed_options(first_stage_options(spec, config.first_stage_settings()))
    except ConfigError as error:
        raise ConfigError(f"--fs-set: {error}") from None
    parts = [first_stage]
    if "stemmer" in changed:
        parts.append(f"stem.{changed.pop('stemmer')}")
    if changed.pop("keep_stopwords", False):
        parts.append("stopwords")
    if "k1" in changed or "b" in changed:
        options = first_stage_options(spec, config.first_stage_settings())
        changed.pop("k1", None), changed.pop("b", None)
        parts.append(f"k1.{options.k1:g}-b.{options.b:g}")
    if {"fb_terms", "fb_docs", "original_query_weight"} & set(changed):
        options = first_stage_options(spec, config.first_stage_settings())
        for name in ("fb_terms", "fb_docs", "original_query_weight"):
            changed.pop(name, None)
        parts.append(f"fb{options.fb_terms}x{options.fb_docs}w{options.original_query_weight:g}")
    if changed:
        parts.append(f"opts.{_short_hash(changed)}")
    return "-".join(parts)


def training_label(config: RunConfig) -> str:
    """The training options' part of a re-ranker run's name (empty with the defaults)."""
    parts = []
    if config.seed != _default("seed"):
        parts.append(f"seed{config.seed}")
    if config.folds != _default("folds"):
        parts.append(f"{config.folds}fold")
    if config.overrides or config.config_file:
        config_text = Path(config.config_file).read_text(encoding="utf-8") if config.config_file else ""
        parts.append(f"set.{_short_hash([list(config.overrides), config_text])}")
    return "-".join(parts)


def model_label(model: str) -> str:
    """The ``--model`` part of a run name: ``model.<name>.<hash>``, the name being the checkpoint's file stem,
    the model folder's name or the hub id's last part, and the hash (6 hex digits) that of the resolved path
    (or of the id, for a name that is no path), so that two models of the same file name in different folders
    still write different runs.

    Example:
        >>> model_label("models/a/model.pt").startswith("model.model.")
        True
    """
    location = Path(model).expanduser()
    if location.exists():
        identity = str(location.resolve())
        stem = location.resolve().stem if location.is_file() else location.resolve().name
    else:  # a hub id or a name the re-ranker resolves (all-MiniLM-L6-v2)
        identity = model
        stem = model.rstrip("/").rsplit("/", 1)[-1]
    stem = safe_name(stem, keep=RUN_NAME_CHARACTERS)[:40] or "model"
    return f"model.{stem}.{hashlib.sha1(identity.encode()).hexdigest()[:6]}"


def default_run_name(dataset: str, first_stage: str, reranker: str, split: str | None) -> str:
    """``<dataset>[-<split>]-<first stage>[-<reranker>]`` with file-name-safe characters."""
    parts = [dataset, split, first_stage_label(None, first_stage), None if reranker == "none" else reranker]
    return safe_name("-".join(p for p in parts if p), keep=RUN_NAME_CHARACTERS)


def run_precision(config: RunConfig) -> str:
    """The precision ``config``'s re-ranker scores in, resolved as :func:`pipeline.engine.stages.scoring_precision`
    resolves it (``--precision auto`` is ``bf16`` only for a torch re-ranker where bfloat16 is native): the
    run name says which, so the float32 and bfloat16 runs of one setting never overwrite each other."""
    from rerankers import reranker_class

    from ..core.runtime import resolve_precision

    supports_bf16 = True
    if config.reranker not in ("auto", "none"):
        supports_bf16 = hasattr(reranker_class(config.reranker), "score_in_bf16")
    return resolve_precision(config.precision, config.bf16, config.int8, supports_bf16)


def run_names(config: RunConfig, dataset: str, first_stage: str, split: str | None,
              interpolation: str | float | None, depth: int) -> tuple[str, str | None]:
    """``(final, alone)``: the name of the run written as the result and, when a re-ranker's scores are
    interpolated, the name of the re-ranker's own run (else ``None``).

    ``--name`` is used as given (the re-ranker's own run is ``<name>-alone``); the default name says what
    differs between runs of one dataset: ``-int8`` or ``-bf16`` by the precision the re-ranker scores in
    (:func:`run_precision`, after ``--precision auto`` is resolved: such a run must not overwrite the float32
    run it is compared with), ``-alone`` (the re-ranker's own scores are the result), ``-interp<W>`` (a fixed weight;
    the tuned ``auto`` weight is the default and adds nothing), ``-top<D>`` (re-ranked to depth D) and
    ``-on-<model label>`` (stacked on the zero-shot combination of ``--zero-shot-base``), ``-or-<model label>``
    (``--zero-shot-rule fallback``: that combination where the re-ranker's own is unproven) or ``-at-<model label>``
    (``--zero-shot-rule anchor``: the re-ranker combined at that model's weight).
    """
    given = config.name is not None
    name = config.name or default_run_name(dataset, first_stage_label(config, first_stage), config.reranker, split)
    if not given and config.reranking and training_label(config):
        name += "-" + training_label(config)
    if not given and config.reranking and config.model:
        name += "-" + model_label(config.model)
    if not given and config.reranking:
        precision = run_precision(config)
        name += "" if precision == "float32" else f"-{precision}"
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
    if config.zero_shot_base and not given:  # the re-ranker's own run is the same as without the base
        name += RULE_JOINS[config.zero_shot_rule] + model_label(config.zero_shot_base)
    return name, alone
