"""The served model: a re-ranker loaded from a checkpoint, by name, or from the model cache, and what
``GET /info`` says about it."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rerankers import reranker_class

from ..engine.config import RunConfig
from ..core.datasets import Dataset
from ..core.errors import CheckpointError
from ..core.home import home, model_root
from ..engine.model_cache import training_plan
from ..engine.obtain import obtain_model


@dataclass
class ServedModel:
    """A loaded re-ranker and what ``GET /info`` says about it (name, options, checkpoint, ...).

    Example:
        >>> ServedModel(reranker, {"reranker": "knrm"}).info["reranker"]
        'knrm'
    """

    reranker: Any
    info: dict[str, Any] = field(default_factory=dict)


def model_options(reranker: Any) -> dict[str, Any]:
    """Every option of a torch re-ranker (its config dataclasses' fields, the targets of ``--set``).

    Args:
        reranker: a loaded re-ranker.

    Returns:
        ``{option: value}`` (a path option, e.g. ``embeddings``, by :func:`shown_path`); ``{}`` for a
        re-ranker without ``option_configs``.
    """
    configs = reranker.option_configs() if hasattr(reranker, "option_configs") else []
    options = {f.name: getattr(config, f.name) for config in configs if dataclasses.is_dataclass(config)
               for f in dataclasses.fields(config)}
    return {name: shown_path(value) if isinstance(value, str) and Path(value).is_absolute() else value
            for name, value in options.items()}


def shown_path(path: str | Path) -> str:
    """How ``/info`` names a model file: relative to the model cache (``models/...``) or to the pipeline's
    home when it lies there, else by its file name alone: the service's clients need to tell models apart,
    not to learn the server's directory layout.

    Args:
        path: the checkpoint or model directory the service loaded.

    Returns:
        e.g. ``models/vaswani/knrm-fold1of5-seed42-5bda1765b70e.pt`` or ``knrm.pt``.
    """
    resolved = Path(path).expanduser().resolve()
    for root, prefix in ((model_root(), "models"), (home(), "")):
        try:
            relative = resolved.relative_to(Path(root).expanduser().resolve())
        except ValueError:
            continue
        return str(Path(prefix) / relative) if prefix else str(relative)
    return resolved.name


def _brief(error: BaseException) -> str:
    """One line of a torch loading error: torch's own messages run over several lines of advice."""
    text = str(error).strip()
    refused = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
    if refused:
        return f"the safe unpickler refused it: {refused.group(1).strip()}"
    first = text.splitlines()[0] if text else type(error).__name__
    return first.split(". ")[0][:300]


def checkpoint_reranker_name(path: str | Path) -> str:
    """The re-ranker name a checkpoint written by a re-ranker's ``save`` records (its ``"reranker"`` entry).

    The file is read with ``weights_only=True`` (no pickled code runs); the class is then looked up by that
    name in the registry, never imported from a name the file gives.

    Args:
        path: the checkpoint file.

    Returns:
        the registry name, e.g. ``"knrm"``.

    Raises:
        CheckpointError: a missing, foreign or nameless file, in one line naming it.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found (--checkpoint takes a file written by a re-ranker's "
                              "save(), e.g. from models/)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch raises many types for truncated or foreign files
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(error).__name__}: {_brief(error)})") from None
    name = payload.get("reranker") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{path}: not a re-ranker checkpoint (it names no re-ranker)")
    return name


def load_checkpoint_model(path: str | Path) -> ServedModel:
    """The re-ranker saved at ``path``, whichever it is.

    Its name is read from the checkpoint (:func:`checkpoint_reranker_name`), its class is the registry's
    entry for that name, and the model is obtained as every command obtains one
    (:func:`pipeline.engine.obtain.obtain_model`); the class's ``load`` checks the rest (format, configs, weights).

    Args:
        path: a file written by a re-ranker's ``save()``.

    Returns:
        the loaded model, its info naming the checkpoint by :func:`shown_path`.

    Example:
        >>> load_checkpoint_model("models/vaswani/knrm-fold1of5-seed42-5bda1765b70e.pt").info["reranker"]
        'knrm'
    """
    obtained = obtain_model(checkpoint_reranker_name(path), path)
    cls = obtained.cls
    return ServedModel(obtained.reranker, {"reranker": obtained.name, "class": f"{cls.__module__}:{cls.__qualname__}",
                                           "options": model_options(obtained.reranker), "checkpoint": shown_path(path)})


def served_model(config: RunConfig, dataset: Dataset | None) -> ServedModel:
    """The re-ranker ``config`` names, obtained by :func:`pipeline.engine.obtain.obtain_model`.

    ``config.model`` is loaded by the re-ranker's class (a checkpoint, or for the bi-encoder a pre-trained
    encoder by name); without it, the model ``pipeline.run`` would use for ``dataset`` is loaded from the
    model cache or trained now and cached (``pipeline.engine.model_cache``, the one training path). A protocol of
    several folds (k-fold on a dataset without splits) gives one model per fold, each meant for the queries
    it did not see; a service gets unseen queries, so it serves the first fold's model (the same cached file
    ``pipeline.run`` uses for that fold) rather than training every fold.

    Args:
        config: the run configuration (re-ranker, model, options, seed, folds).
        dataset: the dataset whose model is served; ``None`` with ``config.model``.

    Returns:
        the loaded model and its info.

    Example:
        >>> served_model(RunConfig(reranker="bi-encoder", model="all-MiniLM-L6-v2"), None).info["reranker"]
        'bi-encoder'
    """
    cls = reranker_class(config.reranker)
    described = {"reranker": config.reranker, "class": f"{cls.__module__}:{cls.__qualname__}"}
    if config.model:
        reranker = obtain_model(config.reranker, config.model, cls=cls).reranker
        local = Path(config.model).expanduser().exists()
        return ServedModel(reranker, {**described, "options": model_options(reranker),
                                      "model": shown_path(config.model) if local else config.model,
                                      "checkpoint": shown_path(config.model) if Path(config.model).is_file() else None})
    plan = training_plan(config, dataset, cls=cls)
    folds = len(plan.folds)
    obtained = obtain_model(config.reranker, training=dataclasses.replace(plan, folds=plan.folds[:1]),
                            dataset=dataset, cls=cls)
    trained = obtained.folds[0]
    return ServedModel(trained.reranker, {**described, "options": model_options(trained.reranker),
                                          "overrides": dict(plan.options), "checkpoint": shown_path(obtained.checkpoint),
                                          "dataset": dataset.name, "fold": trained.fold.name,
                                          "folds": folds, "trained_now": obtained.trained_now})

