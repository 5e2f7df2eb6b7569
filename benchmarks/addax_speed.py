"""Re-ranking speed of ADDAX (cold and warm document cache) against the cross-encoder on WikiQA.

    python benchmarks/addax_speed.py [--queries 50] [--threads 1] [--output FILE.md]

In one process, the first ``--queries`` questions of WikiQA's ``test-filtered`` split (sorted by id) have
their shipped candidates re-ranked three times: by ADDAX with an empty document cache (every candidate
goes through the encoder once), by the same ADDAX again (warm cache: only the questions are encoded, the
candidates' encoder states are reused), and by the cross-encoder (one encoder pass per pair). Weights are
untrained: speed does not depend on them. Both models use the same encoder (default: the packaged MiniLM)
and the same length limits; each model first scores one question outside the measured set (warm-up, then
ADDAX's cache is cleared). The goal is ADDAX-warm at least 3x the cross-encoder's pairs per second.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from common import publish  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from rerankers.addax import AddaxReranker  # noqa: E402
from rerankers.cross_encoder import CrossEncoderReranker  # noqa: E402
from infra.encoders import DEFAULT_ENCODER  # noqa: E402

GOAL = 3.0


def rerank_all(reranker, work) -> tuple[float, list[list[float]]]:
    """Seconds to score every ``(query, docs)`` of ``work``, and the scores."""
    started = time.perf_counter()
    scores = [reranker.score(query, docs) for query, docs in work]
    return time.perf_counter() - started, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=50, help="questions to re-rank (default 50)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help="encoder of both models")
    parser.add_argument("--split", default="test-filtered")
    parser.add_argument("--output", help="also write the Markdown report here")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ["PIPELINE_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)

    dataset = load_dataset("wikiqa")
    store = dataset.doc_store()
    query_ids = sorted(q for q in dataset.splits[args.split] if dataset.first_stage.get(q))
    if len(query_ids) < 2:
        raise SystemExit(f"wikiqa {args.split}: not enough questions with candidates")
    warmup_id, measured = query_ids[-1], query_ids[: min(args.queries, len(query_ids) - 1)]

    def job(query_id):
        hits = sorted(dataset.first_stage[query_id], key=lambda h: (-h.score, h.doc_id))
        return dataset.queries[query_id], [store[h.doc_id] for h in hits]

    work = [job(q) for q in measured]
    warmup = job(warmup_id)
    pairs = sum(len(docs) for _, docs in work)
    distinct = len({doc.doc_id for _, docs in work for doc in docs})

    options = {"encoder": args.encoder, "doc_cache_size": max(4096, distinct + 1)}
    addax = AddaxReranker.from_options(options, seed=1)
    addax.prepare()
    addax.score(*warmup)
    addax.clear_cache()
    cold_s, cold_scores = rerank_all(addax, work)
    cached = len(addax.doc_cache)
    warm_s, warm_scores = rerank_all(addax, work)
    drift = max((abs(a - b) for xs, ys in zip(cold_scores, warm_scores) for a, b in zip(xs, ys)), default=0.0)
    del addax

    cross = CrossEncoderReranker.from_options({"encoder": args.encoder}, seed=1)
    cross.prepare()
    cross.score(*warmup)
    cross_s, _ = rerank_all(cross, work)

    rate = {"addax-cold": pairs / cold_s, "addax-warm": pairs / warm_s, "cross-encoder": pairs / cross_s}
    seconds = {"addax-cold": cold_s, "addax-warm": warm_s, "cross-encoder": cross_s}
    ratio_warm = rate["addax-warm"] / rate["cross-encoder"]
    ratio_cold = rate["addax-cold"] / rate["cross-encoder"]
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} "
               f"thread{'s' if args.threads != 1 else ''}")
    lines = [
        f"# ADDAX vs cross-encoder re-ranking speed ({time.strftime('%Y-%m-%d')})",
        "",
        f"WikiQA `{args.split}`, {len(work)} questions, {pairs} (question, candidate) pairs, {distinct} distinct "
        f"candidates; encoder `{args.encoder}`; {machine}; untrained weights.",
        "",
        "| run | seconds | pairs/s |",
        "|---|---|---|",
        *[f"| {name} | {seconds[name]:.2f} | {rate[name]:.1f} |" for name in rate],
        "",
        f"* ADDAX-warm / cross-encoder: **{ratio_warm:.2f}x** (goal >= {GOAL:.0f}x: "
        f"{'met' if ratio_warm >= GOAL else 'NOT met'}); ADDAX-cold / cross-encoder: {ratio_cold:.2f}x.",
        f"* Document cache after the cold pass: {cached} entries; largest |cold - warm| score difference "
        f"{drift:.2e}.",
    ]
    text = "\n".join(lines)
    publish(text, args.output)


if __name__ == "__main__":
    main()
