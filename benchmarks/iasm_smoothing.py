"""IASM's smoothing statistic (Table VII): the share of test pairs whose matching-matrix variance drops after
the interactive attention layers, for the IASM models trained by ``benchmarks/reproduce.py`` (cached under
``models/``; missing ones are trained with the same protocol and options).

    python benchmarks/iasm_smoothing.py --dataset wikiqa --split test-filtered --seeds 1 2 3 \\
        --set max_examples_per_epoch=6400
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.run import build_parser  # noqa: E402
from rerankers.training.data import RankingData  # noqa: E402
from pipeline.engine.model_cache import obtain_reranker
from rerankers.iasm import matrix_variance_drop  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="wikiqa")
    parser.add_argument("--split", default="test-filtered")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    dataset = load_dataset(args.dataset)
    print("| model | pairs | share with lower variance, all pairs | relevant pairs only | seeds |")
    print("|---|---|---|---|---|")
    for name in ("iasm", "iasm-static"):
        shares, relevant = [], []
        for seed in args.seeds:
            argv = ["--dataset", args.dataset, "--split", args.split, "--reranker", name, "--seed", str(seed)]
            for option in args.set:
                argv += ["--set", option]
            run_args = build_parser().parse_args(argv)
            run_args.k = run_args.k or 100
            reranker = obtain_reranker(run_args, dataset)
            data = RankingData.from_dataset(dataset, dataset.splits[args.split], dataset.first_stage)
            shares.append(matrix_variance_drop(reranker, data))
            relevant.append(matrix_variance_drop(reranker, data, relevant_only=True))
        pairs = sum(len(data.candidates[q]) for q in data.queries)
        print(f"| {name} | {pairs} | {statistics.mean(shares):.3f} ({', '.join(f'{s:.3f}' for s in shares)}) | "
              f"{statistics.mean(relevant):.3f} | {len(args.seeds)} |")


if __name__ == "__main__":
    main()
