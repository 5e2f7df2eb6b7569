"""Export a trained transformer re-ranker as a Hugging Face model directory (``save_pretrained`` layout).

Command line::

    python -m pipeline.export --checkpoint PATH.pt --output DIR
    python -m pipeline.export --dataset wikiqa --reranker cross-encoder --set epochs=2 --output DIR

With ``--checkpoint``, the checkpoint file (written by ``save()``: the model cache's ``.pt`` files) is
exported and no other model option is taken. Otherwise the flags of ``python -m pipeline.train`` pick the
model exactly as ``pipeline.run`` would: its cached checkpoint is exported, trained first when it is not
cached. A protocol with several folds (cross-validation) has one model per fold: each is written to
``DIR/<fold name>``. The cross-encoder becomes a standard sequence-classification model, ADDAX and the
bi-encoder their encoder plus the project's files (see :mod:`rerankers.hf_export`); every export reads
back with ``--model DIR`` (or ``Reranker.load(DIR)``) and scores exactly as the model it came from.

An existing ``DIR`` that is not empty is refused unless ``--force`` (then it is replaced as a whole, once
the new directory is complete). Bad input prints ``error: ...`` and exits with status 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Sequence

from rerankers import reranker_class

from .engine.config import RunConfig
from .engine.context import FirstStageContext
from .core.datasets import load_dataset
from .core.errors import ConfigError
from .core.runtime import seed_everything, set_threads
from .engine.model_cache import training_plan
from .engine.obtain import checkpoint_name, obtain_model
from .run import KEPT_ON_INTERRUPT, build_parser
from .shell import run_command
from .train import RUN_ONLY

#: this command's own flags (the others are pipeline.train's)
EXPORT_FLAGS = ("checkpoint", "output", "force")


def _defines_export(module: str, class_name: str, seen: set | None = None) -> bool | None:
    """Whether class ``class_name`` of ``module`` (or a base it imports from this project) defines
    ``save_pretrained``, read from the source without importing it (importing would load torch); ``None``
    when the source cannot tell (no source, a base from elsewhere)."""
    import ast
    import importlib.util

    seen = seen if seen is not None else set()
    if (module, class_name) in seen:
        return None
    seen.add((module, class_name))
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):  # unreadable here: importing it will tell (or fail clearly)
        return None
    imported = {alias.asname or alias.name: (importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                                         spec.parent), alias.name)
                for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            if any(isinstance(item, ast.FunctionDef) and item.name == "save_pretrained" for item in node.body):
                return True
            for base in node.bases:
                if not isinstance(base, ast.Name):
                    continue
                where = imported.get(base.id, (module, base.id))
                if where[0].split(".")[0] in ("rerankers", "pipeline") and _defines_export(*where, seen):
                    return True
            return False
    return None


def exportable_names() -> list[str]:
    """The registered re-rankers that export to a Hugging Face directory, found without importing torch
    (from their sources; a plugin whose source does not tell is imported to find out)."""
    from rerankers import REGISTRY

    names = []
    for name in REGISTRY.names():
        target = REGISTRY._entries.get(name)
        found = _defines_export(*target.split(":", 1)) if isinstance(target, str) else None
        if found is None:
            try:
                found = callable(getattr(reranker_class(name), "save_pretrained", None))
            except Exception:  # noqa: BLE001 - a plugin that cannot be imported cannot be exported either
                found = False
        if found:
            names.append(name)
    return names


def build_export_parser() -> argparse.ArgumentParser:
    """``pipeline.train``'s flags plus ``--checkpoint``, ``--output`` and ``--force``; ``--reranker`` lists
    only the re-rankers that export."""
    parser = build_parser(prog="python -m pipeline.export", description=__doc__.split("\n\n")[0], exclude=RUN_ONLY)
    for action in parser._actions:
        if action.dest == "reranker":
            action.help = (f"the transformer re-ranker to export: {', '.join(exportable_names())} (the others "
                           "have no Hugging Face form; default: none, which needs --checkpoint)")
    group = parser.add_argument_group("export")
    group.add_argument("--checkpoint", default=None, metavar="PATH",
                       help="export this checkpoint file (takes no model or dataset flags)")
    group.add_argument("--output", default=None, metavar="DIR", help="the directory to write (required)")
    group.add_argument("--force", action="store_true", help="replace an existing, non-empty DIR")
    return parser


def check_output(output: str | None, force: bool) -> Path:
    """The output directory, refused (:class:`ConfigError`) when missing, a file, or not empty without ``force``."""
    if not output:
        raise ConfigError("--output DIR: say where to write the model directory")
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--output {path}: exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ConfigError(f"--output {path}: exists and is not empty; --force replaces it")
    return path


def exportable(cls, what: str) -> None:
    """A :class:`ConfigError` unless re-ranker class ``cls`` writes Hugging Face directories."""
    if cls is None or not callable(getattr(cls, "save_pretrained", None)):
        name = getattr(cls, "name", "none")
        raise ConfigError(f"{what}: {name!r} is not a transformer re-ranker; only those (cross-encoder, "
                          f"bi-encoder, addax and its ablations) export to a Hugging Face model directory")


def export_checkpoint(checkpoint: str | Path, output: Path) -> Path:
    """Export the re-ranker saved in ``checkpoint`` to ``output``; returns the directory."""
    name = checkpoint_name(checkpoint)  # a missing, damaged or nameless file is a CheckpointError naming it
    cls = reranker_class(name)
    exportable(cls, f"--checkpoint {checkpoint}")  # before the weights are read
    return obtain_model(name, checkpoint, cls=cls).reranker.save_pretrained(output)


def export_trained(config: RunConfig, output: Path) -> list[Path]:
    """Export the models ``pipeline.run`` would use for ``config`` (cached ones loaded, missing ones trained):
    to ``output`` for one fold, to ``output/<fold>`` for each of several."""
    if not config.reranking:
        raise ConfigError("say what to export: --checkpoint PATH, or --reranker NAME with the dataset flags of "
                          "the model pipeline.run would use")
    cls = reranker_class(config.reranker)
    exportable(cls, f"--reranker {config.reranker}")
    seed_everything(config.seed)
    dataset = load_dataset(config.dataset, config.mirror)
    plan = training_plan(config, dataset, cls=cls)  # every option is checked before anything is trained
    set_threads(config.threads)
    several = len(plan.folds) > 1
    # one fold at a time, each exported as soon as it is there; the first stage is built once for all of them
    context = FirstStageContext(dataset, plan.first_stage, plan.settings)
    written = []
    for fold in plan.folds:
        model = obtain_model(plan.reranker, training=dataclasses.replace(plan, folds=[fold]), dataset=dataset,
                             context=context).folds[0]
        target = output / model.fold.name if several else output
        written.append(model.reranker.save_pretrained(target))
        print(f"{model.fold.name}: {model.cached or model.path} -> {target}", flush=True)
    return written


def given_model_flags(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> list[str]:
    """The flags of ``pipeline.train`` given a value other than their default (``--checkpoint`` takes none)."""
    return [action.option_strings[0] for action in parser._actions
            if action.option_strings and action.dest not in (*EXPORT_FLAGS, "help")
            and getattr(namespace, action.dest, action.default) != action.default]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (in the command shell, :func:`pipeline.shell.run_command`): bad options or
    input print ``error: ...`` and exit with status 2."""
    parser = build_export_parser()

    def work() -> None:
        namespace = parser.parse_args(argv)
        output = check_output(namespace.output, namespace.force)
        if namespace.checkpoint:
            extra = given_model_flags(parser, namespace)
            if extra:
                raise ConfigError(f"--checkpoint takes no model or dataset flags (got {', '.join(extra)}): the "
                                  f"checkpoint holds its model")
            written = export_checkpoint(namespace.checkpoint, output)
            print(f"{namespace.checkpoint} -> {written}")
        else:
            export_trained(RunConfig.from_namespace(namespace), output)

    # the directory is written atomically: a full disk leaves none
    return run_command(work, KEPT_ON_INTERRUPT, "no partial directory was kept")


if __name__ == "__main__":
    sys.exit(main())
