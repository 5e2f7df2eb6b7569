"""Summarise the per-seed tables of ``code_first_stage_rerank.py`` over seeds.

    python benchmarks/merge_rerank_seeds.py benchmarks/results/codes/parts/first-stage-rerank-candpos-full-w60-seed1.md \\
        benchmarks/results/codes/parts/first-stage-rerank-candpos-full-w60-seed2.md \\
        benchmarks/results/codes/parts/first-stage-rerank-candpos-full-w60-seed3.md \\
        --output benchmarks/results/codes/first-stage-rerank-candpos-full-w60-3seeds.md

``code_first_stage_rerank.py`` trains one re-ranker per ``--seed`` (two hours on two CPU cores for a full
ADDAX), so each seed runs in its own process and writes its own table. This script reads those tables and
writes, per (dataset, first stage): the first stage's scores (which must agree: the first stages do not
depend on the re-ranker's seed), the mean ± sample standard deviation over seeds of the re-ranked and
interpolated scores, each seed's interpolated nDCG@10, and how many seeds beat the first stage alone with
p < .05 (each seed's own paired t-test). It refuses tables of different protocols: every option but
``--seed`` and ``--output`` must be the same, and each seed may appear once.
"""
from __future__ import annotations

import argparse
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import publish  # noqa: E402
from pipeline.core.errors import DataFormatError, PipelineError  # noqa: E402

SCRIPT = "benchmarks/code_first_stage_rerank.py"
COMMAND = re.compile(r"^<!-- python " + re.escape(SCRIPT) + r" (?P<args>.*) \(\d{4}-\d\d-\d\d, \d+ s\) -->$")
WEIGHT = re.compile(r"Interpolation weight (?P<weight>[0-9.]+) on the first stage")
SIGNIFICANCE = 0.05
#: per-seed options; every other option of the command is the protocol and must be the same in every table
SEED_OPTIONS = ("--seed", "--output")


def split_command(args: str) -> tuple[int, list[str]]:
    """``(seed, protocol)`` of a command line: its ``--seed`` and its other tokens without ``--output``."""
    tokens, seed, protocol = shlex.split(args), 42, []
    iterator = iter(tokens)
    for token in iterator:
        name, has_value, value = token.partition("=")
        if name in SEED_OPTIONS:
            value = value if has_value else next(iterator, "")
            if name == "--seed":
                seed = int(value)
            continue
        protocol.append(token)
    return seed, protocol


def read_table(path: Path) -> dict:
    """One table of ``code_first_stage_rerank.py``: seed, protocol, interpolation weight and rows by
    ``(dataset, first stage)`` (column name -> text)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    match = COMMAND.match(lines[0]) if lines else None
    if match is None:
        raise DataFormatError(path, 1, f"expected the '<!-- python {SCRIPT} ... (date, N s) -->' line that "
                                       "code_first_stage_rerank.py writes first")
    seed, protocol = split_command(match["args"])
    weight = WEIGHT.search("\n".join(lines[:4]))
    table = [(number, line) for number, line in enumerate(lines, 1) if line.startswith("|")]
    if len(table) < 3:
        raise DataFormatError(path, None, f"expected a Markdown table (header, separator, rows), found "
                                          f"{len(table)} table lines")
    header = [cell.strip() for cell in table[0][1].strip("|").split("|")]
    rows = {}
    for number, line in table[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != len(header):
            raise DataFormatError(path, number, f"{len(cells)} cells, expected {len(header)} like the header")
        row = dict(zip(header, cells))
        rows[(row["dataset"], row["first stage"])] = row
    return {"path": path, "seed": seed, "protocol": protocol,
            "weight": float(weight["weight"]) if weight else None, "header": header, "rows": rows}


def merge(paths: list[Path]) -> list[dict]:
    """The tables of ``paths`` sorted by seed, checked to be one protocol with agreeing first stages."""
    tables = sorted((read_table(Path(p)) for p in paths), key=lambda t: t["seed"])
    first = tables[0]
    seen: dict[int, Path] = {}
    for table in tables:
        if table["protocol"] != first["protocol"]:
            raise PipelineError(f"{table['path']}: another protocol than {first['path']}: "
                                f"{shlex.join(table['protocol'])!r} vs {shlex.join(first['protocol'])!r}")
        if table["seed"] in seen:
            raise PipelineError(f"seed {table['seed']} appears twice: {seen[table['seed']]} and {table['path']}")
        seen[table["seed"]] = table["path"]
        if table["rows"].keys() != first["rows"].keys():
            raise PipelineError(f"{table['path']}: rows {sorted(table['rows'])} differ from {first['path']}'s")
        for key, row in table["rows"].items():
            for column in ("nDCG@10", "R@100"):
                if row[column] != first["rows"][key][column]:
                    raise PipelineError(f"{table['path']}: first stage {key[1]} on {key[0]} has {column} "
                                        f"{row[column]}, {first['path']} has {first['rows'][key][column]}; the "
                                        "first stages must be the same in every seed")
    return tables


def mean_sd(values: list[float]) -> str:
    """``mean ± sd`` (sample standard deviation; the mean alone for one value)."""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def summary(tables: list[dict]) -> list[str]:
    """The Markdown rows of the merged table."""
    header = tables[0]["header"]
    reranked = [c for c in header if c.startswith("nDCG@10 + ")]
    interpolated = "nDCG@10 interpolated" in header
    columns = ["dataset", "first stage", "nDCG@10", "R@100", *reranked]
    if interpolated:
        columns += ["nDCG@10 interpolated", "interpolated, per seed", f"seeds better than the first stage (p < {SIGNIFICANCE})"]
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key, row in tables[0]["rows"].items():
        cells = [*key, row["nDCG@10"], row["R@100"]]
        cells += [mean_sd([float(t["rows"][key][c]) for t in tables]) for c in reranked]
        if interpolated:
            values = [float(t["rows"][key]["nDCG@10 interpolated"]) for t in tables]
            better = sum(float(t["rows"][key]["nDCG@10 interpolated"]) > float(row["nDCG@10"])
                         and float(t["rows"][key]["p vs first stage alone (nDCG@10)"]) < SIGNIFICANCE for t in tables)
            cells += [mean_sd(values), " / ".join(f"{v:.4f}" for v in values), f"{better} of {len(tables)}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", help="Markdown tables written by code_first_stage_rerank.py --output")
    parser.add_argument("--output", help="also write the merged table to this Markdown file")
    args = parser.parse_args(argv)
    tables = merge(args.tables)
    seeds = ", ".join(str(t["seed"]) for t in tables)
    weights = ", ".join("-" if t["weight"] is None else f"{t['weight']:g}" for t in tables)
    command = "python benchmarks/merge_rerank_seeds.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    text = "\n".join([
        f"<!-- {command} ({time.strftime('%Y-%m-%d')}) -->",
        f"# {SCRIPT} over seeds {seeds}",
        f"Protocol: `{shlex.join(tables[0]['protocol'])}`; one table per seed ({', '.join(str(t['path']) for t in tables)}). "
        f"Interpolation weight on the first stage, per seed: {weights}. Re-ranked and interpolated nDCG@10: mean ± sample "
        "standard deviation over the seeds; the last column counts the seeds whose interpolation beats the first "
        "stage alone with p < .05 in that seed's paired t-test.",
        "", *summary(tables),
    ])
    publish(text, args.output)


if __name__ == "__main__":
    main()
