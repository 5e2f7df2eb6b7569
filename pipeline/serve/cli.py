"""``python -m pipeline.serve`` / ``rerank-serve``: options, the checks that need no model, then the port
opened, the model loaded (``/ready`` turns 200), and serving until SIGINT or SIGTERM."""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from indexes import make_first_stage
from rerankers import reranker_class

from ..engine.cli_options import OptionParser
from ..engine.config import RunConfig
from ..core.datasets import load_dataset
from ..core.errors import ConfigError, PipelineError
from ..core.runtime import PRECISIONS, set_threads
from ..engine.resolve import RERANK_DEPTH, check_scoring_arithmetic
from ..shell import run_command
from ..engine.stages import set_scoring_arithmetic
from .batcher import DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT_MS
from .models import checkpoint_reranker_name, load_checkpoint_model, served_model
from .server import DEFAULT_HOST, DEFAULT_PORT, STOP_MARGIN_S, Limits, RerankServer
from .service import DEFAULT_MAX_DOCS, RerankService

log = logging.getLogger("pipeline.serve")

KEPT_ON_INTERRUPT = "service stopped after answering the requests in flight; nothing to resume"
DESCRIPTION = "An HTTP service that serves a trained re-ranker, and optionally a first stage in front of it."


def build_parser() -> argparse.ArgumentParser:
    """The ``rerank-serve`` argument parser (its errors are :class:`ConfigError` s).

    Returns:
        the parser.
    """
    defaults = Limits()
    # OptionParser shows the console script's name when started as one, and every default
    parser = OptionParser(prog="python -m pipeline.serve", description=DESCRIPTION)
    model = parser.add_argument_group("the model (--checkpoint, or --reranker with --model or --dataset)")
    model.add_argument("--checkpoint", metavar="PATH",
                       help="a file written by a re-ranker's save() (e.g. under models/); its re-ranker is read from it")
    model.add_argument("--reranker", metavar="NAME", help="re-ranker name (rerank-run --help lists them)")
    model.add_argument("--model", metavar="CHECKPOINT",
                       help="with --reranker: load this checkpoint, or for bi-encoder a pre-trained encoder by name "
                            "(e.g. all-MiniLM-L6-v2)")
    model.add_argument("--dataset", help="dataset whose cached model is served (trained now when missing, as "
                                         "rerank-run would) and whose documents --first-stage searches")
    model.add_argument("--split", help="the protocol's test split the model is trained for (default: the dataset's)")
    model.add_argument("--set", dest="overrides", action="append", default=None, metavar="NAME=VALUE",
                       help="model/text/training option of the model trained or looked up (repeatable)")
    model.add_argument("--config", dest="config_file", metavar="CONFIG", help="JSON/YAML file of model options")
    model.add_argument("--seed", type=int, default=42, help="seed of the model trained or looked up")
    model.add_argument("--folds", type=int, default=5,
                       help="k of the k-fold protocol on datasets without splits; fold 1's model is served")
    model.add_argument("--mirror", help="offline mirror directory for ir_datasets archives (env PIPELINE_MIRROR)")
    search = parser.add_argument_group("first stage (POST /search)")
    search.add_argument("--first-stage", metavar="NAME", help="serve /search with this first stage over --dataset "
                                                              "(e.g. bm25); also the model's training candidates")
    search.add_argument("--k", type=int, default=None,
                        help="candidates /search re-ranks when the request gives no 'k' (default: the dataset's, else 100)")
    serving = parser.add_argument_group("serving")
    serving.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (0.0.0.0 in a container)")
    serving.add_argument("--port", type=int, default=DEFAULT_PORT,
                         help="port (0 picks a free one); 'serving http://HOST:PORT' is printed once it is open")
    serving.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                         help="requests scored together in one score_many call, at most")
    serving.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_MS,
                         help="how long the first request of a batch waits for others (0: only those already waiting)")
    serving.add_argument("--batch-size", type=int, default=None,
                         help="(query, document) pairs per forward pass (default: the model's score_batch_size)")
    serving.add_argument("--max-docs", type=int, default=DEFAULT_MAX_DOCS,
                         help="documents per request, at most (more is a 413)")
    serving.add_argument("--threads", type=int, default=0,
                         help="torch CPU threads for scoring (env PIPELINE_THREADS; 0: torch's default)")
    serving.add_argument("--bf16", action="store_true",
                         help="score with bfloat16 matrix products (as rerank-run --bf16: several times faster on "
                              "CPUs with AMX or AVX512-BF16)")
    serving.add_argument("--int8", action="store_true",
                         help="score with int8 linear layers (as rerank-run --int8; transformer re-rankers)")
    serving.add_argument("--precision", choices=PRECISIONS, default="auto",
                         help="scoring arithmetic (as rerank-run --precision; --bf16 / --int8 are shortcuts): auto "
                              "is bf16 where the CPU or GPU computes bfloat16 natively, else float32")
    limits = parser.add_argument_group("limits (every wait is bounded)")
    limits.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes,
                        help="request bodies above this are refused (413)")
    limits.add_argument("--body-timeout", type=float, default=defaults.body_timeout,
                        help="seconds a request body may take to arrive (then 408 and the connection is closed)")
    limits.add_argument("--header-timeout", type=float, default=defaults.header_timeout,
                        help="seconds a connection may take to send a request's headers (then it is closed)")
    limits.add_argument("--keep-alive", type=float, default=defaults.keep_alive,
                        help="seconds an idle HTTP/1.1 connection is kept open")
    limits.add_argument("--shutdown-timeout", type=float, default=defaults.shutdown_timeout,
                        help="seconds SIGTERM/Ctrl-C waits for the requests in flight before cancelling them; the "
                             f"process ends within this + {STOP_MARGIN_S:g} s")
    return parser


def check_options(options: argparse.Namespace) -> None:
    """Every check that needs no file or model.

    Args:
        options: the parsed command line.

    Raises:
        ConfigError: the first failing check, in one line.
    """
    if bool(options.checkpoint) == bool(options.reranker):
        raise ConfigError("give either --checkpoint PATH or --reranker NAME (with --model, or --dataset to use "
                          "the model rerank-run trains)")
    if options.checkpoint:
        for flag, value in (("--model", options.model), ("--set", options.overrides), ("--config", options.config_file)):
            if value:
                raise ConfigError(f"{flag} does not go with --checkpoint: the checkpoint holds its model and options")
        if not Path(options.checkpoint).is_file():
            raise ConfigError(f"--checkpoint {options.checkpoint}: no such file")
    if options.reranker == "none":
        raise ConfigError("--reranker none: a service needs a re-ranker to score with")
    if options.model and (options.overrides or options.config_file):
        raise ConfigError("--set/--config do not go with --model: the saved model holds its options")
    if options.reranker and not options.model and not options.dataset:
        raise ConfigError(f"--reranker {options.reranker} needs --model CHECKPOINT or --dataset D (whose cached or "
                          "newly trained model is served)")
    if options.first_stage and not options.dataset:
        raise ConfigError("--first-stage needs --dataset: the collection it searches")
    if options.split and not options.dataset:
        raise ConfigError("--split needs --dataset")
    if not 0 <= options.port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535], got {options.port}")
    for flag, value, low in (("--max-batch", options.max_batch, 1), ("--max-docs", options.max_docs, 1),
                             ("--threads", options.threads, 0), ("--batch-size", options.batch_size, 1),
                             ("--k", options.k, 1), ("--folds", options.folds, 2),
                             ("--max-body-bytes", options.max_body_bytes, 1)):
        if value is not None and value < low:
            raise ConfigError(f"{flag} must be at least {low}, got {value}")
    if not options.max_wait_ms >= 0 or not math.isfinite(options.max_wait_ms):
        raise ConfigError(f"--max-wait-ms must be a number >= 0, got {options.max_wait_ms}")
    for flag, value in (("--body-timeout", options.body_timeout), ("--header-timeout", options.header_timeout),
                        ("--keep-alive", options.keep_alive), ("--shutdown-timeout", options.shutdown_timeout)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{flag} must be a number of seconds > 0, got {value}")


def limits_of(options: argparse.Namespace) -> Limits:
    """The server's :class:`Limits` from the command line."""
    return Limits(max_body_bytes=options.max_body_bytes, body_timeout=options.body_timeout,
                  header_timeout=options.header_timeout, keep_alive=options.keep_alive,
                  shutdown_timeout=options.shutdown_timeout)


def run_config(options: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` the model is looked up (or trained) with: the same cache key as ``rerank-run``
    with these options (names checked here, before any work)."""
    given = {"reranker": options.reranker, "model": options.model, "split": options.split, "seed": options.seed,
             "folds": options.folds, "overrides": tuple(options.overrides or ()), "config_file": options.config_file,
             "k": options.k, "threads": options.threads, "mirror": options.mirror, "int8": options.int8,
             "bf16": options.bf16, "precision": getattr(options, "precision", "auto")}
    if options.dataset:
        given["dataset"] = options.dataset
    if options.first_stage:
        given["first_stage"] = options.first_stage
    return RunConfig(**given)


@dataclass
class Plan:
    """What :func:`prepare` checked: the run configuration (``None`` with ``--checkpoint``), the first
    stage's configuration, and the checkpoint's re-ranker name."""

    config: RunConfig | None
    search_config: RunConfig | None
    checkpoint_reranker: str | None


def prepare(options: argparse.Namespace) -> Plan:
    """Every check that needs no model loaded: options, names, the scoring arithmetic (``--bf16``/``--int8``)
    against the re-ranker (a checkpoint's name is read from it, without its weights).

    Raises:
        ConfigError: or another :class:`PipelineError`, before the port is opened.
    """
    check_options(options)
    config = run_config(options) if options.reranker else None
    # the first stage's name and BM25 options are checked now, before a model is loaded or trained
    search_config = (config or RunConfig(dataset=options.dataset, first_stage=options.first_stage)
                     if options.first_stage else None)
    name = None
    if options.checkpoint:
        name = checkpoint_reranker_name(options.checkpoint)
        check_scoring_arithmetic(RunConfig(reranker=name, int8=options.int8, bf16=options.bf16,
                                                     precision=getattr(options, "precision", "auto")), reranker_class(name))
    else:
        check_scoring_arithmetic(config, reranker_class(config.reranker))   # before any training
    return Plan(config, search_config, name)


def load_service(options: argparse.Namespace, plan: Plan) -> RerankService:
    """Load (or train) the model and build the first stage the options ask for."""
    if options.threads:  # read by the re-rankers when they first score or train
        os.environ["PIPELINE_THREADS"] = str(options.threads)
        set_threads(options.threads)
    # the dataset is read only when something uses it: the model's training (or cache key), or the first stage
    needed = options.first_stage or (options.reranker and not options.model)
    dataset = load_dataset(options.dataset, options.mirror) if options.dataset and needed else None
    model = load_checkpoint_model(options.checkpoint) if options.checkpoint else served_model(plan.config, dataset)
    precision = set_scoring_arithmetic(model.reranker, options)
    model.info["arithmetic"] = "fp32" if precision == "float32" else precision
    retriever, documents, k = None, None, RERANK_DEPTH
    if plan.search_config is not None:
        retriever = make_first_stage(options.first_stage, dataset, plan.search_config.first_stage_settings())
        documents = dataset.doc_store()
        k = options.k or dataset.recipe.k or RERANK_DEPTH
        model.info["dataset"] = dataset.name
    elif options.dataset and not needed:
        log.info("--dataset %s is not used: the model comes from --checkpoint/--model and there is no --first-stage",
                 options.dataset)
    return RerankService(model, retriever=retriever, documents=documents, first_stage=options.first_stage, k=k,
                         max_docs=options.max_docs, max_batch=options.max_batch, max_wait_ms=options.max_wait_ms,
                         batch_size=options.batch_size, threads=options.threads)


def build_service(options: argparse.Namespace) -> RerankService:
    """The service the options ask for, loaded now (for use from Python; the command opens its port first).

    Raises:
        ConfigError: bad options, before anything is loaded.

    Example:
        >>> service = build_service(build_parser().parse_args(["--checkpoint", "knrm.pt"]))
    """
    return load_service(options, prepare(options))


def serve(options: argparse.Namespace, announce: Callable[[str], None] = print) -> None:
    """Check the options, open the port and ``announce`` the URL (one line), load the model (``/ready``
    turns 200), serve until interrupted; on the way out the requests in flight are answered (within
    ``--shutdown-timeout``) before the model stops.

    Raises:
        PipelineError: bad options (before the port opens) or a model that cannot be loaded.
    """
    plan = prepare(options)
    server = RerankServer(None, options.host, options.port, limits_of(options))
    try:
        server.start_background()
        announce(f"serving {server.url}")
        # loaded in this (the main) thread: Ctrl-C or SIGTERM during a long load or training stops it
        # cleanly, as in every other command
        server.attach(load_service(options, plan))
        log.info("ready: %s (%s)", server.service.model.info.get("reranker"),
                 server.service.model.info.get("checkpoint") or server.service.model.info.get("model"))
        stopped = threading.Event()
        while server.running():
            stopped.wait(0.5)
        raise PipelineError("the HTTP server stopped unexpectedly")
    finally:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: the arguments (``None``: the process's command line, and then the process ends here).

    Returns:
        0; a bad option or an unloadable model prints ``error: ...`` (one line) and gives 2; Ctrl-C and
        ``kill`` stop the service cleanly (130 / 143).
    """
    try:
        code = run_command(lambda: serve(build_parser().parse_args(argv), lambda line: print(line, flush=True)),
                           KEPT_ON_INTERRUPT)
    except SystemExit as stop:  # the shell's 130 / 143 (Ctrl-C, kill)
        if argv is not None:
            raise
        code = stop.code if isinstance(stop.code, int) else 1
    if argv is None:
        _end_process(code)
    return code


def _end_process(code: int) -> None:
    """End the command now that the service has stopped: the interpreter's own teardown (collecting torch's,
    transformers' and the JVM bridge's objects) takes seconds on a busy machine and would stretch the bound
    that --shutdown-timeout promises; nothing is left to clean up by then."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
