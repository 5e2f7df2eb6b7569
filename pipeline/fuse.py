"""Fuse two or more TREC run files into one: min-max interpolation (a weighted sum of per-query min-max
normalised scores) or reciprocal rank fusion, over the union of the runs' candidates, as ``ranx.fuse`` does.

Command line::

    python -m pipeline.fuse runs/a.run runs/b.run --method interpolate --weight 0.3 --output runs/fused.run
    python -m pipeline.fuse runs/a.run runs/b.run runs/c.run --method rrf --output runs/rrf.run
    python -m pipeline.fuse runs/a.run runs/b.run --tune --qrels qrels.txt --dev-queries dev-ids.txt \\
        --metric nDCG@10 --output runs/fused.run

* ``interpolate``: ``score(d) = sum_i w_i * minmax(run_i)(d)`` per query; a document a run does not return
  scores 0 there (after min-max). With two runs ``--weight W`` is the first run's share (the second gets
  ``1 - W``); ``--weights`` gives one weight per run. Equals ``ranx.fuse(runs, norm="min-max", method="wsum",
  params={"weights": [...]})``.
* ``rrf``: ``score(d) = sum_i 1 / (k + rank_i(d))`` over the runs that return ``d`` (rank from 1; ties in a
  run's scores ranked by doc id descending, as trec_eval does). Equals ``ranx.fuse(runs, method="rrf",
  params={"k": k})``.
* ``--tune``: the weights (interpolate) or ``k`` (rrf) with the best mean ``--metric`` on the ``--dev-queries``
  judged in ``--qrels`` (grid: weights 0, 0.05, ..., 1 for two runs, steps of 0.1 for more; ``k`` in
  10, 20, ..., 100); the chosen value fuses every query and is printed. Tune on queries you do not report.

A query missing from some runs is fused from the runs that have it (ranx refuses such runs). Bad input
prints ``error: ...`` and exits with status 2; the output is written atomically.
"""
from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path
from typing import Mapping, Sequence

from .engine.cli_options import OptionParser
from .core.errors import ConfigError
from .core.records import Qrel, Run, ScoredDoc, ranked
from .core.formats import read_qrels, read_run, write_run
from .core.textio import iter_lines
from .engine.fusion import DEFAULT_GRID, weighted_sum
from .shell import run_command

log = logging.getLogger("pipeline.fuse")

METHODS = ("interpolate", "rrf")
#: RRF's k when not tuned: Cormack et al.'s (and ranx's) default
DEFAULT_RRF_K = 60
#: values of k tried by ``--tune --method rrf``
RRF_GRID = tuple(range(10, 101, 10))


def rrf(runs: Sequence[Run], k: float = DEFAULT_RRF_K) -> Run:
    """Reciprocal rank fusion of ``runs``: per query, ``sum_i 1 / (k + rank_i(d))`` over the runs that return
    ``d``, ranks from 1 in each run's own order (score descending, ties by doc id descending).

    Args:
        runs: two or more runs (``query_id -> hits``); a query may be missing from some.
        k: RRF's constant (at least 0).

    Returns:
        The fused run, each query ranked by the fused score.

    Example:
        >>> a = {"q": [ScoredDoc("q", "x", 2.0), ScoredDoc("q", "y", 1.0)]}
        >>> b = {"q": [ScoredDoc("q", "y", 5.0)]}
        >>> [(h.doc_id, round(h.score, 4)) for h in rrf([a, b], k=60)["q"]]
        [('y', 0.0325), ('x', 0.0164)]
    """
    if k < 0:
        raise ConfigError(f"--rrf-k must be at least 0, got {k}")
    fused: Run = {}
    for query_id in _queries(runs):
        scores: dict[str, float] = {}
        for run in runs:
            for rank, hit in enumerate(ranked(run.get(query_id, [])), start=1):
                scores[hit.doc_id] = scores.get(hit.doc_id, 0.0) + 1.0 / (k + rank)
        fused[query_id] = ranked(ScoredDoc(query_id, doc_id, score) for doc_id, score in scores.items())
    return fused


def interpolate(runs: Sequence[Run], weights: Sequence[float]) -> Run:
    """Min-max interpolation of ``runs``: per query, ``sum_i weights[i] * minmax(run_i)(d)`` over the union
    of the documents (0 for a document a run lacks), as :func:`pipeline.engine.fusion.weighted_sum`.

    Args:
        runs: two or more runs; a query may be missing from some.
        weights: one non-negative weight per run.

    Returns:
        The fused run.

    Example:
        >>> a = {"q": [ScoredDoc("q", "x", 2.0), ScoredDoc("q", "y", 1.0)]}
        >>> b = {"q": [ScoredDoc("q", "y", 5.0), ScoredDoc("q", "z", 4.0)]}
        >>> [(h.doc_id, h.score) for h in interpolate([a, b], [0.5, 0.5])["q"]]
        [('y', 0.5), ('x', 0.5), ('z', 0.0)]
    """
    check_weights(weights, len(runs))
    return {query_id: weighted_sum([run.get(query_id, []) for run in runs], weights, query_id)
            for query_id in _queries(runs)}


def _queries(runs: Sequence[Run]) -> list[str]:
    """Every query of ``runs`` once, in the order first met."""
    return list(dict.fromkeys(query_id for run in runs for query_id in run))


def check_weights(weights: Sequence[float], count: int) -> None:
    """A :class:`ConfigError` unless ``weights`` holds ``count`` non-negative numbers, not all 0."""
    if len(weights) != count:
        raise ConfigError(f"--weights gives {len(weights)} weight(s) for {count} run(s); give one per run, in order")
    if any(w < 0 for w in weights) or not any(weights):
        raise ConfigError(f"--weights must be non-negative and not all 0, got {' '.join(f'{w:g}' for w in weights)}")


def weight_grid(count: int) -> list[tuple[float, ...]]:
    """The weights ``--tune`` tries for ``count`` runs: ``(w, 1 - w)`` for w in 0, 0.05, ..., 1 with two runs,
    every split of 1 in steps of 0.1 with more."""
    if count == 2:
        return [(w, round(1 - w, 2)) for w in DEFAULT_GRID]
    steps = 10
    return [tuple(part / steps for part in parts) for parts in itertools.product(range(steps + 1), repeat=count)
            if sum(parts) == steps]


def mean_metric(run: Run, qrels: Sequence[Qrel], metric: str, queries: Sequence[str]) -> float:
    """Mean ``metric`` (an ir-measures name) of ``run`` over ``queries``, judged by ``qrels`` (a query the
    run does not answer counts 0)."""
    import ir_measures

    measure = ir_measures.parse_measure(metric)
    wanted = set(queries)
    judged = [ir_measures.Qrel(q.query_id, q.doc_id, q.relevance) for q in qrels if q.query_id in wanted]
    scored = [ir_measures.ScoredDoc(h.query_id, h.doc_id, h.score) for query_id in queries
              for h in run.get(query_id, [])]
    per_query = {m.query_id: m.value for m in ir_measures.iter_calc([measure], judged, scored)}
    judged_queries = {q.query_id for q in judged}
    return sum(per_query.get(q, 0.0) for q in judged_queries) / len(judged_queries)


def tune(runs: Sequence[Run], method: str, qrels: Sequence[Qrel], dev_queries: Sequence[str],
         metric: str = "AP") -> tuple[tuple[float, ...] | float, float]:
    """The weights (``interpolate``) or k (``rrf``) with the best mean ``metric`` over the judged
    ``dev_queries``, and that mean. Ties go to the first in grid order (for two runs: the smaller weight
    of the first run; the smaller k)."""
    judged = {q.query_id for q in qrels}
    dev = [q for q in dict.fromkeys(dev_queries) if q in judged]
    if not dev:
        raise ConfigError("--tune: none of the --dev-queries is judged in --qrels; nothing to tune on")
    dev_runs = [{q: run[q] for q in dev if q in run} for run in runs]
    candidates = weight_grid(len(runs)) if method == "interpolate" else RRF_GRID
    best, best_value = None, -1.0
    for candidate in candidates:
        fused = interpolate(dev_runs, candidate) if method == "interpolate" else rrf(dev_runs, candidate)
        value = mean_metric(fused, qrels, metric, dev)
        if value > best_value:
            best, best_value = candidate, value
    return best, best_value


def read_query_ids(items: Sequence[str]) -> list[str]:
    """``--dev-queries``: query ids, or one file of ids (one per line, the first column; ``#`` comments)."""
    if len(items) == 1 and Path(items[0]).is_file():
        ids = []
        for _, line in iter_lines(items[0]):
            text = line.split("#", 1)[0].split()
            if text:
                ids.append(text[0])
        if not ids:
            raise ConfigError(f"--dev-queries {items[0]}: the file holds no query id")
        return ids
    return list(items)


def fuse_files(paths: Sequence[str], method: str = "interpolate", weights: Sequence[float] | None = None,
               rrf_k: float = DEFAULT_RRF_K, tune_on: Mapping | None = None) -> tuple[Run, dict]:
    """Read the run files ``paths`` and fuse them; returns the fused run and what was used (``method``,
    ``weights`` or ``k``, and when tuned the dev metric).

    Args:
        paths: two or more TREC run files.
        method: ``interpolate`` or ``rrf``.
        weights: interpolation weights, one per run (default: equal).
        rrf_k: RRF's k.
        tune_on: ``{"qrels": [...], "dev_queries": [...], "metric": "AP"}`` to tune the weights or k.
    """
    if len(paths) < 2:
        raise ConfigError(f"fusion needs at least two runs, got {len(paths)}")
    if method not in METHODS:
        raise ConfigError(f"--method {method!r}: choose one of {', '.join(METHODS)}")
    runs = [read_run(path) for path in paths]
    used: dict = {"method": method, "runs": [str(p) for p in paths]}
    if tune_on is not None:
        best, value = tune(runs, method, tune_on["qrels"], tune_on["dev_queries"], tune_on.get("metric", "AP"))
        used.update({"tuned_on": len(tune_on["dev_queries"]), "metric": tune_on.get("metric", "AP"),
                     "dev_value": value})
        if method == "interpolate":
            weights = best
        else:
            rrf_k = best
    if method == "interpolate":
        weights = tuple(weights) if weights is not None else tuple(1.0 / len(runs) for _ in runs)
        used["weights"] = list(weights)
        return interpolate(runs, weights), used
    used["k"] = rrf_k
    return rrf(runs, rrf_k), used


def build_parser() -> OptionParser:
    """The ``python -m pipeline.fuse`` argument parser."""
    parser = OptionParser(prog="python -m pipeline.fuse", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="two or more TREC run files")
    parser.add_argument("--method", choices=METHODS, default="interpolate",
                        help="interpolate: weighted sum of per-query min-max normalised scores; rrf: reciprocal "
                             "rank fusion")
    parser.add_argument("--weight", type=float, metavar="W",
                        help="with two runs: the first run's share in [0, 1], the second's is 1 - W (default 0.5)")
    parser.add_argument("--weights", type=float, nargs="+", metavar="W",
                        help="one non-negative weight per run, in order (default: equal weights)")
    parser.add_argument("--rrf-k", type=float, default=DEFAULT_RRF_K, metavar="K", help="RRF's constant k")
    parser.add_argument("--tune", action="store_true",
                        help="choose the weights (or k) by --metric on --dev-queries judged in --qrels")
    parser.add_argument("--qrels", help="TREC qrels file for --tune")
    parser.add_argument("--dev-queries", nargs="+", metavar="ID",
                        help="query ids to tune on, or one file of ids (one per line)")
    parser.add_argument("--metric", default="AP", help="ir-measures name of the measure --tune maximises")
    parser.add_argument("--k", type=int, metavar="N", help="keep each query's top N fused documents (default: all)")
    parser.add_argument("--output", required=True, metavar="OUT", help="the fused run file to write")
    parser.add_argument("--tag", default=None, help="the run tag written in the last column (default: fuse-METHOD)")
    return parser


def check_arguments(args) -> tuple[list[float] | None, dict | None]:
    """``(weights, tune_on)`` of parsed arguments; an inconsistent combination is a :class:`ConfigError`."""
    from .core.evaluation import parse_measures

    if len(args.runs) < 2:
        raise ConfigError(f"give at least two run files to fuse, got {len(args.runs)}")
    if args.weight is not None and args.weights is not None:
        raise ConfigError("give --weight (two runs) or --weights (one per run), not both")
    weights = None
    if args.weight is not None:
        if len(args.runs) != 2:
            raise ConfigError(f"--weight is the first run's share of two runs; with {len(args.runs)} runs give "
                              f"--weights (one per run)")
        if not 0.0 <= args.weight <= 1.0:
            raise ConfigError(f"--weight must be in [0, 1], got {args.weight}")
        weights = [args.weight, 1.0 - args.weight]
    elif args.weights is not None:
        check_weights(args.weights, len(args.runs))
        weights = list(args.weights)
    if (weights is not None or args.rrf_k != DEFAULT_RRF_K) and args.tune:
        raise ConfigError("--tune chooses the weights (or k) itself: give --tune or fixed values, not both")
    if weights is not None and args.method != "interpolate":
        raise ConfigError("--weight/--weights apply to --method interpolate, not rrf")
    if args.k is not None and args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}")
    if not args.tune:
        if args.qrels or args.dev_queries:
            raise ConfigError("--qrels and --dev-queries are for --tune; add --tune or leave them out")
        return weights, None
    if not args.qrels or not args.dev_queries:
        raise ConfigError("--tune needs --qrels FILE and --dev-queries (ids or a file of ids)")
    parse_measures(args.metric)
    tune_on = {"qrels": read_qrels(args.qrels), "dev_queries": read_query_ids(args.dev_queries),
               "metric": str(parse_measures(args.metric)[0])}
    return weights, tune_on


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring): bad options or input print ``error: ...`` and
    exit with status 2."""
    def work() -> None:
        args = build_parser().parse_args(argv)
        weights, tune_on = check_arguments(args)
        for path in args.runs:
            if not Path(path).is_file():
                raise ConfigError(f"{path}: run file not found")
        fused, used = fuse_files(args.runs, args.method, weights, args.rrf_k, tune_on)
        if args.k is not None:
            fused = {query_id: hits[: args.k] for query_id, hits in fused.items()}
        tag = args.tag or f"fuse-{args.method}"
        written = write_run(args.output, fused, tag=tag)
        chosen = (f"weights {' '.join(f'{w:g}' for w in used['weights'])}" if args.method == "interpolate"
                  else f"k {used['k']:g}")
        if "dev_value" in used:
            chosen += f" (tuned: {used['metric']} {used['dev_value']:.4f} on {used['tuned_on']} dev queries)"
        print(f"{args.method} of {len(args.runs)} runs, {chosen}")
        print(f"run: {written}")

    return run_command(work, on_write_error="no partial run was kept")


if __name__ == "__main__":
    sys.exit(main())
