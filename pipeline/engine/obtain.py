"""The one way every command gets its re-ranker model: :func:`obtain_model`.

``pipeline.run``, ``pipeline.classify``, ``pipeline.export``, ``pipeline.serve``, :mod:`pipeline.pyterrier`
and :class:`pipeline.api.Reranker` all call it, so a model named the same way is the same model everywhere:

* a given model (``--model`` / ``--checkpoint`` / ``model=``): a checkpoint file (its re-ranker is the one
  the file records, checked against a name given with it), an export or Hugging Face directory, a hub id,
  or for the bi-encoder a sentence encoder by name (the packaged ``all-MiniLM-L6-v2`` when none is given);
* otherwise the models of a :class:`~pipeline.engine.model_cache.TrainingPlan`: cached checkpoints loaded, missing
  ones trained now and cached (:func:`pipeline.engine.model_cache.fold_models`, the one training path).

The scoring arithmetic (``--precision`` / ``--bf16`` / ``--int8``) is applied here too when asked, before
anything is scored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .context import FirstStageContext
from ..core.datasets import Dataset
from ..core.errors import CheckpointError, ConfigError
from .model_cache import FoldModel, TrainingPlan, fold_models
from .protocols import PerQueryReranker

#: the sentence encoder the bi-encoder uses zero-shot when no model is given (packaged with the project)
DEFAULT_BI_ENCODER = "all-MiniLM-L6-v2"


@dataclass
class ObtainedModel:
    """A re-ranker :func:`obtain_model` loaded or trained, and where it came from.

    Attributes:
        reranker: the model (``score``, ``score_many``, ...); with several folds a
            :class:`~pipeline.engine.protocols.PerQueryReranker` sending each query to the model trained without it.
        name: the re-ranker's registry name.
        cls: the re-ranker's class.
        source: the given model (path or id) it was loaded from; ``None`` when it came from the model cache.
        folds: the model cache's models, one per fold of the plan (empty for a given model).
        precision: the scoring arithmetic applied (``float32``, ``bf16``, ``int8``), ``None`` if none was asked.

    Example:
        >>> obtained = obtain_model("bi-encoder")
        >>> obtained.name, obtained.source
        ('bi-encoder', 'all-MiniLM-L6-v2')
    """

    reranker: Any
    name: str
    cls: type
    source: str | None = None
    folds: list[FoldModel] = field(default_factory=list)
    precision: str | None = None

    @property
    def checkpoint(self) -> Path | None:
        """The checkpoint file the model was read from or saved to: the given file, or the one fold's cached
        (or newly written) checkpoint; ``None`` for a directory, a hub id, or several folds."""
        if self.source is not None:
            path = Path(self.source).expanduser()
            return path if path.is_file() else None
        if len(self.folds) == 1:
            return self.folds[0].cached or self.folds[0].path
        return None

    @property
    def trained_now(self) -> bool:
        """True when some fold's model was trained by this call (not found in the cache, not given)."""
        return any(fold.cached is None for fold in self.folds)


def checkpoint_name(path: str | Path) -> str:
    """The re-ranker name a checkpoint file records (read with ``weights_only``; no code from the file runs).

    Args:
        path: a file written by a re-ranker's ``save``.

    Returns:
        its registry name, e.g. ``"knrm"``.

    Raises:
        CheckpointError: a missing, foreign or damaged file, or one that names no re-ranker.

    Example:
        >>> checkpoint_name("models/vaswani/knrm-fold1of5-seed42-5bda1765b70e.pt")
        'knrm'
    """
    from infra.checkpoints import load_checkpoint

    payload = load_checkpoint(path)
    name = payload.get("reranker")
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{path}: not a re-ranker checkpoint (it names no re-ranker)")
    return name


def _directory_model(directory: Path) -> tuple[str, Any]:
    """The re-ranker in a directory given alone: an export (its description names the re-ranker), else a
    Hugging Face model: a sequence classifier as a cross-encoder, any other encoder as a bi-encoder."""
    from rerankers import reranker_class
    from rerankers.hf_export import CONFIG_FILES, load_pretrained

    if any((directory / name).is_file() for name in CONFIG_FILES):
        loaded = load_pretrained(directory)
        return getattr(loaded, "name", type(loaded).__name__), loaded
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"{directory}: neither an export of a re-ranker ({', '.join(CONFIG_FILES)}) nor a "
                              f"Hugging Face model directory (config.json)")
    from infra.encoders import is_sequence_classifier, pretrained_config

    kind = "cross-encoder" if is_sequence_classifier(pretrained_config(str(directory))) else "bi-encoder"
    return kind, reranker_class(kind).load(directory)


def _load_given(name: str | None, model: str | Path | None, cls: type | None) -> tuple[str, type, Any, str]:
    """``(name, class, model, source)`` of a given model (see :func:`obtain_model`)."""
    from rerankers import REGISTRY, available, reranker_class

    from ..core.suggest import unknown_name

    if name is not None:
        cls = cls or reranker_class(name)
        if model is None:
            if name == "bi-encoder":
                return name, cls, cls.load(DEFAULT_BI_ENCODER), DEFAULT_BI_ENCODER
            trained = "a checkpoint (rerank-train, the model cache) or a rerank-export directory"
            zero_shot = (" or a Hugging Face sequence-classification model (directory or hub id)"
                         if name == "cross-encoder" else "")
            raise ConfigError(f"re-ranker {name!r} needs model=: {trained}{zero_shot}")
        location = Path(model).expanduser()
        if location.is_file():
            try:
                found = checkpoint_name(location)
            except CheckpointError:  # not this project's format (a plugin's own): its class's load judges it
                found = name
            if found != name:
                raise CheckpointError(f"{model}: holds a {found!r} model, not {name!r}")
        return name, cls, cls.load(str(location) if location.exists() else str(model)), str(model)
    if model is None:
        raise ConfigError("obtain_model: name a re-ranker, give a model, or give a training plan")
    text = str(model)
    location = Path(text).expanduser()
    if location.is_file():
        name = checkpoint_name(location)
        cls = reranker_class(name)
        return name, cls, cls.load(location), text
    if location.is_dir():
        name, loaded = _directory_model(location)
        return name, type(loaded), loaded, text
    if "/" in text and not text.startswith((".", "/", "~")):  # a hub id: org/model
        cls = reranker_class("cross-encoder")
        return "cross-encoder", cls, cls.load(text), text
    raise ConfigError(unknown_name("re-ranker", text, REGISTRY.names(), [n for n in available() if n != "none"])
                      + "; or give a checkpoint file, a model directory or a Hugging Face hub id")


def obtain_model(reranker: str | None = None, model: str | Path | None = None, *,
                 training: TrainingPlan | None = None, dataset: Dataset | None = None,
                 context: FirstStageContext | None = None, cls: type | None = None,
                 arithmetic: Any = None) -> ObtainedModel:
    """The re-ranker model a command uses: given, or from the model cache (trained now when missing).

    Args:
        reranker: the re-ranker's registry name; ``None`` with a given ``model`` whose file or directory
            says which it is.
        model: a given model: a checkpoint file (checked to hold ``reranker`` when both are given), an export
            or Hugging Face directory, a Hugging Face hub id (a cross-encoder), or for the bi-encoder a
            sentence encoder's name. ``None`` with ``training``, or for the bi-encoder alone (the packaged
            ``all-MiniLM-L6-v2``, zero-shot).
        training: the models of a protocol (:func:`pipeline.engine.model_cache.training_plan`): each fold's cached
            checkpoint is loaded, a missing one trained on the plan's candidates and cached. A caller wanting
            fewer folds (a service serves the first) passes a plan with only those.
        dataset: the dataset ``training`` trains on (required with it).
        context: the run's first stage (:class:`~pipeline.engine.context.FirstStageContext`), so the training
            candidates come from the retriever the run already built; ``None``: a new one when needed.
        cls: the re-ranker's class when the caller already looked it up (the run plan's), else looked up
            here from ``reranker``.
        arithmetic: a :class:`~pipeline.engine.config.RunConfig` (or any object with ``precision``/``bf16``/``int8``)
            whose scoring arithmetic is applied to the model before it is returned
            (:func:`pipeline.engine.stages.set_scoring_arithmetic`); ``None`` leaves the model as loaded.

    Returns:
        an :class:`ObtainedModel`: the model (one fold's model, or a
        :class:`~pipeline.engine.protocols.PerQueryReranker` over several), its name, class, source and folds.

    Raises:
        ConfigError: nothing to obtain, an unknown name, or ``model`` and ``training`` both given.
        CheckpointError: a missing, foreign or damaged checkpoint, or one holding another re-ranker.

    Example:
        >>> obtain_model("knrm", "models/cranfield/knrm-fold1of5-seed42-0123456789ab.pt").name
        'knrm'
        >>> plan = training_plan(RunConfig(dataset="cranfield", reranker="knrm"), dataset)
        >>> len(obtain_model("knrm", training=plan, dataset=dataset).folds)
        5
    """
    if model is not None and training is not None:
        raise ConfigError("obtain_model: give a model or a training plan, not both")
    if training is None:
        name, cls, loaded, source = _load_given(reranker, model, cls)
        obtained = ObtainedModel(loaded, name, cls, source)
    else:
        if dataset is None:
            raise ConfigError("obtain_model: a training plan needs the dataset it trains on")
        from rerankers import reranker_class

        cls = cls or training.cls or reranker_class(training.reranker)
        folds = list(fold_models(training, dataset, context=context))
        loaded = (folds[0].reranker if len(folds) == 1 else
                  PerQueryReranker(training.reranker, {q: fold.reranker for fold in folds for q in fold.fold.test}))
        obtained = ObtainedModel(loaded, training.reranker, cls, None, folds)
    if arithmetic is not None:
        from .stages import set_scoring_arithmetic

        obtained.precision = set_scoring_arithmetic(obtained.reranker, arithmetic)
    return obtained
