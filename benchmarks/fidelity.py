"""The reproduction gaps that remain, as numbers: ``benchmarks/results/fidelity.json``.

Each key is a 3-seed mean read from a result file that ``benchmarks/reproduce.py`` or
``benchmarks/titles_full_ranking.py`` wrote (the command is in the file), beside the paper's number:

- ``hcan_alone_mb2013_map`` / ``hcan_alone_mb2014_map``: HCAN alone (no QL interpolation), MAP on TREC
  Microblog 2013 / 2014, HCAN's protocol (train on the other years), against Rao et al. Table 3;
- ``hcan_cosine_alone_mb2013_map`` / ``..._mb2014_map``: the same with ``--set rm_softmax_over=none`` (the RM
  features read from the cosine matrix, no softmax; not the paper's: the change the exact-match probe
  points to);
- ``iasm_titles_p1`` / ``drmm_titles_p1``: P@1 of IASM-Dynamic (3 layers, the paper's depth for PubMed) /
  DRMM ranking all 338 test abstracts for each NFCorpus title (the closest setting to IASM's PubMed task),
  against Zhao et al. Table III;
- ``iasm_softmax_titles_p1``: the same IASM with ``--set aggregation=softmax`` (not the paper's; the
  change the exact-match probe points to), against the same paper number.

    python benchmarks/fidelity.py                           # rewrite benchmarks/results/fidelity.json
    python benchmarks/fidelity.py --update BENCHMARKS.md    # ... and the table between the fidelity markers
    python benchmarks/fidelity.py --check BENCHMARKS.md     # exit 1 if either is stale
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from effectiveness import replace_block  # noqa: E402  (the marked blocks every BENCHMARKS.md renderer rewrites)

RESULTS = Path(__file__).resolve().parent / "results"
OUTPUT = RESULTS / "fidelity.json"

HCAN_2013 = (0.2920, "Rao et al., EMNLP 2019, Table 3, HCAN (deep encoder), TREC-2013 MAP")
HCAN_2014 = (0.4365, "Rao et al., EMNLP 2019, Table 3, HCAN (deep encoder), TREC-2014 MAP")
IASM_PUBMED = (0.2474, "Zhao et al., ICDM 2020, Table III, IASM-Dynamic, PubMed P@1 (its own sample)")
DRMM_PUBMED = (0.1246, "Zhao et al., ICDM 2020, Table III, DRMM, PubMed P@1 (its own sample)")

#: key -> (result file, row, measure, (the paper's value, what the paper's value is))
SOURCES = {
    "hcan_alone_mb2013_map": ("microblog/2013-hcan-hinge-all.json", "hcan-HCAN", "AP", HCAN_2013),
    "hcan_alone_mb2014_map": ("microblog/2014-hcan-hinge-all.json", "hcan-HCAN", "AP", HCAN_2014),
    "hcan_cosine_alone_mb2013_map": ("microblog/2013-hcan-cosine-hinge.json", "hcan-HCAN-cosine", "AP", HCAN_2013),
    "hcan_cosine_alone_mb2014_map": ("microblog/2014-hcan-cosine-hinge.json", "hcan-HCAN-cosine", "AP", HCAN_2014),
    "iasm_titles_p1": ("nfcorpus/titles-full-ranking-iasm-3layers.json", "iasm", "P@1", IASM_PUBMED),
    "drmm_titles_p1": ("nfcorpus/titles-full-ranking-drmm.json", "drmm", "P@1", DRMM_PUBMED),
    "iasm_softmax_titles_p1": ("nfcorpus/titles-full-ranking-iasm-softmax.json", "iasm", "P@1", IASM_PUBMED),
}
NAME = "fidelity"
BEGIN, END = f"<!-- {NAME}:begin -->", f"<!-- {NAME}:end -->"


def build() -> dict:
    """The fidelity record from the result files (raises if a file, row or seed is missing)."""
    record = {}
    for key, (name, row, measure, (paper, paper_source)) in SOURCES.items():
        data = json.loads((RESULTS / name).read_text())
        values = data["results"][row][measure]
        seeds = data["results"][row]["seeds"]
        if len(values) < 3:
            raise ValueError(f"{name}: {row} has {len(values)} seed(s) of {measure}; fidelity needs 3")
        record[key] = {
            "mean": round(statistics.mean(values), 4),
            "sd": round(statistics.stdev(values), 4),
            "per_seed": [round(v, 4) for v in values],
            "seeds": seeds,
            "paper": paper,
            "paper_source": paper_source,
            "result_file": f"benchmarks/results/{name}",
            "command": data["command"],
        }
    return record


def render(record: dict) -> str:
    """The Markdown table of ``record``: key, ours (mean ± sd, per seed), the paper's, and the command."""
    lines = ["| key (`benchmarks/results/fidelity.json`) | ours, 3 seeds | per seed | paper | command |",
             "|---|---|---|---|---|"]
    for key, entry in record.items():
        seeds = " / ".join(f"{v:.4f}" for v in entry["per_seed"])
        lines.append(f"| `{key}` | {entry['mean']:.4f} ± {entry['sd']:.4f} | {seeds} | {entry['paper']:.4f} "
                     f"({entry['paper_source']}) | `python {entry['command']}` |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", metavar="MARKDOWN", help="also rewrite the fidelity table in this file")
    parser.add_argument("--check", metavar="MARKDOWN", help="exit 1 if the JSON or this file's table is stale")
    args = parser.parse_args()
    record = build()
    text = json.dumps(record, indent=1) + "\n"
    table = render(record)
    if args.check:
        markdown = Path(args.check).read_text(encoding="utf-8")
        stale = [str(OUTPUT)] if not OUTPUT.is_file() or OUTPUT.read_text() != text else []
        if replace_block(markdown, NAME, table, args.check) != markdown:
            stale.append(args.check)
        if stale:
            print(f"stale: {', '.join(stale)}; run python benchmarks/fidelity.py --update {args.check}", file=sys.stderr)
            return 1
        return 0
    from pipeline.core.atomic import write_text

    write_text(OUTPUT, text)
    if args.update:
        write_text(args.update, replace_block(Path(args.update).read_text(encoding="utf-8"), NAME, table, args.update))
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
