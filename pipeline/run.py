"""End to end: load a dataset, build what is missing, retrieve, re-rank, write the run, evaluate.

Command line::

    python -m pipeline.run --reranker hcan        # Microblog 2014: QL, HCAN alone, HCAN + QL
    python -m pipeline.run --dataset cranfield --reranker none
    python -m pipeline.run --dataset microblog --split 2013 --first-stage shipped --metrics "AP P@30"
    # a model trained on another collection's queries (NFCorpus's dev split), at the zero-shot model's weight
    python -m pipeline.run --dataset nfcorpus --reranker bi-encoder --train-dataset nfcorpus-dev \
        --zero-shot-base all-MiniLM-L6-v2 --zero-shot-rule anchor

From Python, with a typed config (every flag is a field of :class:`~pipeline.engine.config.RunConfig`)::

    from pipeline.engine.config import RunConfig
    from pipeline.run import run_pipeline
    result = run_pipeline(RunConfig(dataset="cranfield", first_stage="bm25+rm3", k=1000))
    print(result.run_path, result.comparison.markdown())

Every step is a function a notebook can call one at a time::

    from pipeline import run as p
    dataset = p.load_dataset("cranfield")
    first = p.retrieve(dataset, "bm25", k=100)
    final = p.rerank(None, dataset, first)          # None: keep the first stage's ranking
    path = p.write_run("runs/cranfield-bm25.run", final, tag="bm25")
    print(p.evaluate(final, dataset.qrels, "AP nDCG@10").aggregate)
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from infra import distributed

from .engine import fusion
from .engine.cli_options import OptionParser, add_config_arguments
from .engine.config import RunConfig
from .engine.context import FirstStageContext
from .engine.first_stage_flags import add_first_stage_aliases
from .engine.config import parse_weight  # noqa: F401  (benchmarks/code_first_stage_rerank.py imports it from here)
from .core import evaluation
from .core.datasets import load_dataset
from .core.errors import ConfigError
from .core.evaluation import evaluate  # noqa: F401  (for notebooks: ``p.evaluate``, see above)
from .core.records import Run
from .core.runtime import seed_everything
from .core.formats import write_run
from .engine.model_cache import transferred_model
from .engine.obtain import obtain_model
from .engine.naming import default_run_name, first_stage_label
from .engine.plan import plan_run
from .engine.resolve import check_given_options
from .engine.stacking import stack_on_zero_shot
from .shell import run_command
from .engine.stages import append_tail, head, rerank, retrieve, set_scoring_arithmetic  # noqa: F401 (retrieve: p.retrieve)

log = logging.getLogger("pipeline.run")


def check_writable(directory: Path) -> None:
    """A :class:`ConfigError` now, before any work, when runs cannot be written to ``directory``."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise ConfigError(f"--output-dir {directory}: cannot write there ({error.strerror or error})") from None


#: what an interrupted run keeps, printed with the exit status 130 (Ctrl-C) or 143 (kill)
KEPT_ON_INTERRUPT = ("trained models and finished training epochs are kept in the model cache, built indexes in "
                     "theirs, no partial run file; run the same command to resume")


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` produced."""

    run_path: Path
    run: Run
    comparison: evaluation.Comparison | None
    timings: dict[str, float] = field(default_factory=dict)
    #: with ``--interpolate``: the re-ranker's own run (``run`` is the interpolated one); otherwise None
    reranked: Run | None = None
    #: with ``--zero-shot-base``: the first stage combined with the zero-shot model (``run`` stacks the
    #: re-ranker on it); otherwise None
    zero_shot_combined: Run | None = None


def run_pipeline(config: RunConfig | argparse.Namespace) -> PipelineResult:
    """The whole pipeline for ``config`` (not changed). Every option is checked before any retrieval or
    training (a bad one is a :class:`~pipeline.core.errors.ConfigError`). For one release, parsed
    command-line arguments (``run_pipeline(build_parser().parse_args([...]))``) are accepted too."""
    if isinstance(config, argparse.Namespace):
        config = RunConfig.from_namespace(config)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    seed_everything(config.seed)
    check_given_options(config)
    dataset = load_dataset(config.dataset, config.mirror)
    plan = plan_run(config, dataset)  # every option checked before a model is trained on --train-dataset
    config = plan.config  # --reranker auto settled to the model it stands for
    check_writable(config.run_dir)
    if config.threads:  # read by the re-rankers when they first score or train (torch is not loaded yet)
        os.environ["PIPELINE_THREADS"] = str(config.threads)
    timings["load"] = time.perf_counter() - started
    if config.train_dataset:  # its one model, trained (with the threads above) or cached, is this run's --model
        started = time.perf_counter()
        trained = transferred_model(config)
        plan = plan_run(replace(config, model=str(trained.cached or trained.path), train_dataset=None), dataset)
        config = plan.config
        timings["train_on_other"] = time.perf_counter() - started

    started = time.perf_counter()
    # one first stage for the whole run: test, training and tuning candidates, each query retrieved once
    context = FirstStageContext(dataset, plan.first_stage, plan.settings)
    first = context.search(plan.queries, plan.k)
    timings["first_stage"] = time.perf_counter() - started

    reranker = None
    if plan.reranker_class is not None:
        started = time.perf_counter()
        # the scoring arithmetic is set before any scoring: the dev queries tuning the interpolation too
        reranker = obtain_model(config.reranker, config.model, training=plan.training, dataset=dataset,
                                context=context, cls=plan.reranker_class, arithmetic=config).reranker
        timings["train_or_load"] = time.perf_counter() - started
    started = time.perf_counter()
    top = head(first, plan.depth)
    final = rerank(reranker, dataset, top, batch_size=config.batch_size)
    timings["rerank"] = time.perf_counter() - started

    reranked = zero_shot_combined = None
    if reranker is not None and plan.interpolation is not None:
        # the re-ranker alone is reported beside the interpolation: the same scores, no second scoring pass
        reranked = final
        started = time.perf_counter()
        weight = plan.interpolation
        if config.zero_shot_base:  # the plan made sure the weights are tuned ("auto")
            zero_shot = obtain_model("bi-encoder", config.zero_shot_base, arithmetic=config).reranker
            stacked = stack_on_zero_shot(plan.folds, zero_shot, reranker, dataset, context, plan.depth or plan.k,
                                         top, final, plan.main_metric, given_model=bool(config.model),
                                         rule=config.zero_shot_rule)
            zero_shot_combined, final = stacked.zero_shot_combined, stacked.final
        else:
            if weight == "auto":
                weight = fusion.fold_weights(plan.folds, reranker, dataset, plan.first_stage, plan.depth or plan.k,
                                             plan.settings, metric=plan.main_metric, given_model=bool(config.model),
                                             context=context)
            final = fusion.interpolate(top, final, weight)
        timings["interpolate"] = time.perf_counter() - started
    if reranker is not None and plan.depth:
        final = append_tail(final, first)
        if reranked is not None:
            reranked = append_tail(reranked, first)
        if zero_shot_combined is not None:
            zero_shot_combined = append_tail(zero_shot_combined, first)
    run_path = config.run_dir / f"{plan.name}.run"
    if distributed.is_main():  # under torchrun every rank holds the merged run; rank 0 writes it
        if reranked is not None:
            write_run(config.run_dir / f"{plan.alone_name}.run", reranked, tag=plan.alone_name[:60])
        run_path = write_run(run_path, final, tag=plan.name[:60])

    comparison = None
    evaluated = dataset.subset([q.query_id for q in plan.queries])
    if evaluated.qrels:
        runs = {plan.name: final}
        baseline = None
        if reranker is not None:
            # labelled with its depth: the first stage's own run (default k 1000) is another baseline
            baseline = (f"{default_run_name(dataset.name, first_stage_label(config, plan.first_stage), 'none', plan.split)}"
                        f" (top {plan.k})")
            runs = {baseline: first, **({plan.alone_name: reranked} if reranked is not None else {}),
                    **({f"{baseline} + {config.zero_shot_base}": zero_shot_combined}
                       if zero_shot_combined is not None else {}), plan.name: final}
        comparison = evaluation.compare(runs, evaluated.qrels, plan.metrics, baseline)
        if distributed.is_main():
            evaluation.save_report(comparison, config.run_dir, f"{plan.name}.eval")
    return PipelineResult(run_path, final, comparison, timings, reranked, zero_shot_combined)


def build_parser(prog: str = "python -m pipeline.run", description: str | None = None,
                 exclude: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The ``python -m pipeline.run`` argument parser: one flag per :class:`RunConfig` field (help and
    re-ranker / first-stage names read from the registries now, so plugins are listed). Its errors are
    :class:`~pipeline.core.errors.ConfigError` s; :meth:`RunConfig.from_namespace` turns its result into a
    config. With ``--fs-set`` come its deprecated aliases (``--k1``, ``--stemmer``, ``--code-set``, ...), which
    it turns into ``--fs-set`` entries (:mod:`pipeline.engine.first_stage_flags`)."""
    parser = OptionParser(prog=prog, description=description or __doc__.split("\n\n")[0])
    add_config_arguments(parser, RunConfig, exclude)
    if "first_stage_overrides" not in exclude:
        add_first_stage_aliases(parser)
    return parser


def parse_config(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> RunConfig:
    """The :class:`RunConfig` of command-line arguments ``argv`` (default: ``sys.argv[1:]``)."""
    return RunConfig.from_namespace((parser or build_parser()).parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (in the command shell, :func:`pipeline.shell.run_command`): a bad option or
    input prints ``error: ...`` and exits with status 2. Under torchrun: training data-parallel, scoring dealt
    to the ranks, rank 0 writes and reports."""
    def work() -> None:
        result = run_pipeline(parse_config(argv))
        if distributed.is_main():
            print(f"run: {result.run_path}")
            if result.comparison is not None:
                print(result.comparison.markdown())

    return run_command(work, KEPT_ON_INTERRUPT, "no partial run or cache entry was kept", distributed=True)


if __name__ == "__main__":
    sys.exit(main())
