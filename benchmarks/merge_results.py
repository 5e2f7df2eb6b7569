"""Merge the result files of several ``reproduce.py`` runs of one protocol into one table.

    python benchmarks/merge_results.py benchmarks/results/wikiqa/parts/long-ce-seed1.json \\
        benchmarks/results/wikiqa/parts/long-ce-seed2.json benchmarks/results/wikiqa/parts/long-ce-seed3.json \\
        --output benchmarks/results/wikiqa/long-ce-3seeds.md

Long benchmarks are split across processes (one per core, or one per seed) or stopped at the end of a
session and finished by a later run; each run writes its own ``.json`` (per-seed values). This script
joins them, and refuses to join what does not belong together:

* every run must have the same protocol: the ``reproduce.py`` options that change a number (dataset,
  split, variants, metrics, ``--set`` options, first stage, depth, interpolation, threads); only the
  re-rankers, seeds and output paths may differ;
* the first-stage scores must agree;
* a (model, seed) measured twice must have the same values (the same seed trains the same model), and is
  kept once.

Rows keep the order in which the models first appear; seeds are sorted. The merged ``.json`` lists the
commands it came from.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from reproduce import reproduce_parser, write_outputs  # noqa: E402

from pipeline.core.errors import PipelineError  # noqa: E402

# reproduce.py options that may differ between runs of one protocol
RUN_ONLY_OPTIONS = {"reranker", "seeds", "output", "output_dir"}
TOLERANCE = 1e-9


def protocol_of(command: str, source: Path) -> dict:
    """The protocol options of a ``reproduce.py`` command line as recorded in a result file."""
    words = shlex.split(command)
    if not words or not words[0].endswith("reproduce.py"):
        raise PipelineError(f"{source}: 'command' is not a reproduce.py command line: {command!r}")
    try:
        args = reproduce_parser().parse_args(_rejoin_metrics(words[1:]))
    except SystemExit as error:
        raise PipelineError(f"{source}: cannot parse its reproduce.py command line {command!r}") from error
    options = {name: value for name, value in vars(args).items() if name not in RUN_ONLY_OPTIONS}
    if options.get("metrics"):  # None: the dataset recipe's metrics
        options["metrics"] = " ".join(sorted(options["metrics"].split()))
    return options


def _rejoin_metrics(words: list[str]) -> list[str]:
    """Result files written before commands were recorded with quoting hold ``--metrics P@1 RR AP``
    unquoted: the words after ``--metrics`` up to the next option are one value."""
    joined, index = [], 0
    while index < len(words):
        joined.append(words[index])
        if words[index] == "--metrics":
            end = index + 1
            while end < len(words) and not words[end].startswith("--"):
                end += 1
            joined.append(" ".join(words[index + 1:end]))
            index = end
        else:
            index += 1
    return joined


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.0, abs_tol=TOLERANCE)


def load_result(path: Path) -> dict:
    """One ``reproduce.py`` result file, checked for the fields a merge needs."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise PipelineError(f"{path}: not a readable JSON result file ({error})") from error
    for key in ("command", "first_stage", "results"):
        if key not in data:
            raise PipelineError(f"{path}: no '{key}' field; expected a reproduce.py result file")
    for name, row in data["results"].items():
        if "seeds" not in row and "seeds" in data:
            # older reproduce.py files hold one top-level seeds list, shared by every row
            row["seeds"] = list(data["seeds"])
        if "seeds" not in row:
            raise PipelineError(f"{path}: row '{name}' has no 'seeds' list; its per-seed values cannot be "
                                "matched to seeds")
        for measure, values in row.items():
            if len(values) != len(row["seeds"]):
                raise PipelineError(f"{path}: row '{name}' has {len(values)} values of {measure} for "
                                    f"{len(row['seeds'])} seeds")
    return data


def merge(paths: list[Path]) -> tuple[dict, dict, list[str]]:
    """``(first-stage scores, merged rows, commands)`` of the result files ``paths``."""
    if not paths:
        raise PipelineError("nothing to merge: give at least one result file")
    loaded = [(path, load_result(path)) for path in paths]
    first_path, first = loaded[0]
    protocol = protocol_of(first["command"], first_path)
    baseline = first["first_stage"]
    per_seed: dict[str, dict[int, dict[str, float]]] = {}
    for path, data in loaded:
        other = protocol_of(data["command"], path)
        differing = sorted(k for k in protocol.keys() | other.keys() if protocol.get(k) != other.get(k))
        if differing:
            detail = "; ".join(f"{k}: {protocol.get(k)!r} vs {other.get(k)!r}" for k in differing)
            raise PipelineError(f"{path}: protocol differs from {first_path} ({detail})")
        if data["first_stage"].keys() != baseline.keys() or not all(
                _same(baseline[m], data["first_stage"][m]) for m in baseline):
            raise PipelineError(f"{path}: first-stage scores {data['first_stage']} differ from {first_path}'s "
                                f"{baseline}")
        for name, row in data["results"].items():
            measures = [m for m in row if m != "seeds"]
            for index, seed in enumerate(row["seeds"]):
                values = {m: row[m][index] for m in measures}
                known = per_seed.setdefault(name, {}).get(seed)
                if known is not None and (known.keys() != values.keys()
                                          or not all(_same(known[m], values[m]) for m in known)):
                    raise PipelineError(f"{path}: {name} seed {seed} = {values}, but an earlier file has "
                                        f"{known}; the same seed must give the same numbers")
                per_seed[name][seed] = values
    results = {}
    for name, seeds in per_seed.items():
        order = sorted(seeds)
        row = {"seeds": order}
        for measure in seeds[order[0]]:
            row[measure] = [seeds[s][measure] for s in order]
        results[name] = row
    return baseline, results, [data["command"] for _, data in loaded]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="reproduce.py .json result files")
    parser.add_argument("--output", required=True, help="merged Markdown table (and .json beside it)")
    args = parser.parse_args(argv)
    baseline, results, commands = merge(args.results)
    header = (f"merged by benchmarks/merge_results.py ({time.strftime('%Y-%m-%d')}) from "
              + ", ".join(str(p) for p in args.results) + "; commands: " + " | ".join(commands))
    write_outputs(args.output, header, baseline, results, " | ".join(commands))
    print(Path(args.output).read_text(), end="")


if __name__ == "__main__":
    try:
        main()
    except PipelineError as error:
        sys.exit(f"merge_results.py: {error}")
