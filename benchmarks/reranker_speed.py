"""Speed of the word-level re-rankers on the CPU: scoring pairs per second, the time to re-rank the 1,000
candidates of one Microblog query, and training pairs per second (forward + backward + Adam step).

    python benchmarks/reranker_speed.py [--models hcan knrm ...] [--threads 2] [--output FILE.md]

Models are prepared (vocabulary, IDF, GloVe embeddings) on Microblog 2013 but not trained: speed does
not depend on the weights. The query is the 2013 topic with the most candidates; every model scores the
same 1,000 tweets. Each timing is the median of ``--repeats`` runs after one warm-up.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from common import publish  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from rerankers.training.data import RankingData  # noqa: E402
from rerankers.training.loop import Trainer
from rerankers import available, reranker_class  # noqa: E402


def median_time(function, repeats: int) -> float:
    function()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(name: str, dataset, query, docs, train: RankingData, repeats: int) -> dict:
    import random

    reranker = reranker_class(name).from_options({"epochs": 1}, seed=1)
    reranker.prepare(train, dataset)
    rerank_seconds = median_time(lambda: reranker.score(query, docs), repeats)
    trainer = Trainer(reranker, reranker.train_config, seed=1)
    units = trainer.epoch_units(train, random.Random(1))[:512]
    batches = trainer.batches(units, random.Random(1))
    optimizer = torch.optim.Adam([p for p in reranker.module.parameters() if p.requires_grad], lr=1e-4)
    reranker.module.train()

    def train_pass():
        for batch_units in batches:
            pairs = [(q, d) for q, ds, _ in batch_units for d in ds]
            loss = trainer.loss(reranker.forward(reranker.encode(pairs)), batch_units)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    pairs = sum(len(u[1]) for u in units)
    train_seconds = median_time(train_pass, max(1, repeats // 2))
    return {"model": name, "rerank_1000_s": rerank_seconds * 1000 / len(docs), "score_pairs_s": len(docs) / rerank_seconds,
            "train_pairs_s": pairs / train_seconds,
            "parameters": sum(p.numel() for p in reranker.module.parameters())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=[n for n in available() if n != "none"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    torch.set_num_threads(args.threads)
    os.environ["PIPELINE_THREADS"] = str(args.threads)
    dataset = load_dataset("microblog")
    test = dataset.splits["2013"]
    query_id = max(test, key=lambda q: len(dataset.first_stage[q]))
    store = dataset.doc_store()
    hits = sorted(dataset.first_stage[query_id], key=lambda h: -h.score)[:1000]
    docs = [store[h.doc_id] for h in hits]
    train = RankingData.from_dataset(dataset, dataset.splits["2014"][:20], dataset.first_stage)
    rows = [measure(name, dataset, dataset.queries[query_id], docs, train, args.repeats) for name in args.models]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads"
    lines = [f"# Re-ranker speed ({time.strftime('%Y-%m-%d')}, {machine}; query {query_id}, {len(docs)} candidates)",
             "| model | parameters | re-rank time per 1,000 candidates (s) | scoring pairs/s | training pairs/s |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['parameters']:,} | {r['rerank_1000_s']:.2f} | {r['score_pairs_s']:.0f} | "
              f"{r['train_pairs_s']:.0f} |" for r in rows]
    text = "\n".join(lines)
    publish(text, args.output)


if __name__ == "__main__":
    main()
