"""What the content checks of issue 34 cost, as a share of the work they protect (measured in one process,
check and work alternating, so that both see the same load).

    python benchmarks/content_checks.py [--lucene-dataset nfcorpus] [--rounds 3] [--rerank-queries 4] \\
        [--output benchmarks/results/reliability/content-checks.json]

Three entries, each checked whole as it is at every open:

* the Lucene index of ``--lucene-dataset`` (built first in ``PIPELINE_HOME``; use an empty one): Lucene's
  CRC32 of every file plus opening the commit and counting documents (``check_index(full=True)``), against
  opening the retriever and BM25-searching every query of the dataset (top 1,000);
* the headline's model, HCAN on Microblog with the recipe's options (``python -m pipeline.run --reranker hcan``),
  prepared on its training queries (the checkpoint of a trained one has the same tensors): ``load_checkpoint``
  (``torch.load`` and the SHA-256 over every tensor) against ``torch.load`` alone, and both against
  re-ranking ``--rerank-queries`` test queries' 1,000 tweets (scaled to the 80 queries the command re-ranks);
* a Hugging Face export of the bi-encoder on the packaged all-MiniLM-L6-v2 (90 MB): ``verify_export(full=True)``
  against reading the export back and scoring one query's 1,000 tweets.

Writes JSON (and a Markdown table beside it) with the command, the date and the load average.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core import filecheck  # noqa: E402
from pipeline.core.atomic import write_text  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def alternate(rounds: int, **calls) -> dict[str, float]:
    """Median seconds of each call, the calls run in turn ``rounds`` times."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            filecheck.forget_verified()
            times[name].append(timed(call))
    return {name: statistics.median(values) for name, values in times.items()}


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def lucene_part(name: str, rounds: int) -> dict:
    from indexes.lucene import BM25Retriever, LuceneOptions, build_index, index_metadata
    from indexes.lucene_check import check_index

    dataset = load_dataset(name)
    path = build_index(dataset, LuceneOptions())
    documents = index_metadata(path).get("indexed")
    queries = list(dataset.queries.values())

    def run():
        filecheck.remember_verified(path / "lucene", __import__("indexes.lucene_check", fromlist=["_files"])
                                    ._files(path / "lucene"))  # the open below skips its own check
        retriever = BM25Retriever(path)
        retriever.search(queries, 1000)
        retriever.close()

    medians = alternate(rounds, check=lambda: check_index(path, documents, full=True), run=run)
    return {"entry": f"Lucene index of {name}", "bytes": size_of(path / "lucene"), "queries": len(queries),
            "check_s": medians["check"], "protected_s": medians["run"],
            "protected": f"open + BM25 top 1,000 for {len(queries)} queries",
            "ratio": medians["check"] / medians["run"]}


def headline_model(home: Path):
    """The headline's HCAN, prepared on its training queries, saved as its checkpoint; and the dataset."""
    from pipeline.engine.model_cache import training_plan
    from pipeline.run import parse_config
    from pipeline.engine.fitting import untrained_reranker
    from rerankers import reranker_class
    from rerankers.training.data import RankingData

    config = parse_config(["--reranker", "hcan"])
    dataset = load_dataset(config.dataset)
    plan = training_plan(config, dataset)
    fold = plan.folds[0]
    reranker = untrained_reranker(reranker_class(plan.reranker), plan.options, plan.seed)
    reranker.prepare(RankingData.from_dataset(dataset, fold.train, dataset.first_stage), dataset)
    path = home / "hcan.pt"
    reranker.save(path)
    return reranker, dataset, fold, path


def checkpoint_part(rounds: int, rerank_queries: int, home: Path) -> dict:
    import torch

    from infra.checkpoints import load_checkpoint

    reranker, dataset, fold, path = headline_model(home)
    store = dataset.doc_store()
    test = sorted(fold.test)[:rerank_queries]

    def rerank():
        for query_id in test:
            docs = [store[hit.doc_id] for hit in dataset.first_stage[query_id]]
            reranker.score(dataset.queries[query_id], docs)

    medians = alternate(rounds, checked=lambda: load_checkpoint(path),
                        plain=lambda: torch.load(path, map_location="cpu", weights_only=True), rerank=rerank)
    scale = 80 / len(test)  # the command re-ranks 55 test and 25 dev queries' candidates
    digest = max(medians["checked"] - medians["plain"], 0.0)
    return {"entry": "HCAN checkpoint of the headline command", "bytes": size_of(path),
            "check_s": digest, "load_with_check_s": medians["checked"], "load_without_check_s": medians["plain"],
            "protected_s": medians["rerank"] * scale,
            "protected": f"re-ranking 80 queries x ~1,000 tweets (measured on {len(test)}, scaled)",
            "ratio": digest / (medians["rerank"] * scale)}


def export_part(rounds: int, home: Path) -> dict:
    from pipeline.run import parse_config
    from rerankers.bi_encoder import BiEncoderReranker
    from rerankers.hf_export import verify_export
    from rerankers.training.data import RankingData

    config = parse_config(["--reranker", "hcan"])
    dataset = load_dataset(config.dataset)
    query_id = sorted(dataset.first_stage)[0]
    reranker = BiEncoderReranker.from_options({}, seed=1)
    reranker.prepare(RankingData.from_dataset(dataset, [query_id], dataset.first_stage), dataset)
    folder = reranker.save_pretrained(home / "bi-encoder")
    store = dataset.doc_store()
    docs = [store[hit.doc_id] for hit in dataset.first_stage[query_id]]

    def load_and_score():
        from rerankers.hf_export import clear_encoder_caches

        clear_encoder_caches()
        BiEncoderReranker.from_pretrained(folder).score(dataset.queries[query_id], docs)

    medians = alternate(rounds, check=lambda: verify_export(folder, full=True), run=load_and_score)
    return {"entry": "bi-encoder export (all-MiniLM-L6-v2)", "bytes": size_of(folder), "check_s": medians["check"],
            "protected_s": medians["run"], "protected": f"reading the export and scoring {len(docs)} tweets",
            "ratio": medians["check"] / medians["run"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lucene-dataset", default="nfcorpus")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rerank-queries", type=int, default=4)
    parser.add_argument("--parts", nargs="+", default=["lucene", "checkpoint", "export"])
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/reliability/content-checks.json"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("PIPELINE_THREADS", "1") or 1))
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        if "lucene" in args.parts:
            rows.append(lucene_part(args.lucene_dataset, args.rounds))
            print(rows[-1], flush=True)
        if "checkpoint" in args.parts:
            rows.append(checkpoint_part(args.rounds, args.rerank_queries, Path(scratch)))
            print(rows[-1], flush=True)
        if "export" in args.parts:
            rows.append(export_part(args.rounds, Path(scratch)))
            print(rows[-1], flush=True)
    result = {"command": shlex.join(["python", *sys.argv]), "date": datetime.datetime.now(datetime.timezone.utc)
              .isoformat(timespec="seconds"), "loadavg_before": load_before,
              "loadavg_after": Path("/proc/loadavg").read_text().split()[:3], "torch_threads": torch.get_num_threads(),
              "rounds": args.rounds, "rows": rows}
    lines = [f"Command: `{result['command']}` ({result['date']}, load average {' '.join(load_before)} before, "
             f"{' '.join(result['loadavg_after'])} after; medians of {args.rounds} alternating rounds)", "",
             "| entry | MB | content check (s) | work it protects | work (s) | check / work |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['entry']} | {row['bytes'] / 1e6:.1f} | {row['check_s']:.3f} | {row['protected']} | "
                     f"{row['protected_s']:.2f} | {100 * row['ratio']:.1f}% |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.output, json.dumps(result, indent=1) + "\n")
    write_text(args.output.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
