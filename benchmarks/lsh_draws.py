"""How much the random hyperplanes of ``hash_head="lsh"`` binary codes matter: several draws, two kinds.

    python benchmarks/lsh_draws.py [--datasets nfcorpus vaswani-npl] [--steps 100] [--bits 512]
                                   [--seeds 42 1 2 3 4] [--threads 1]
                                   [--output benchmarks/results/lsh_draws.md]

An ``lsh`` code index (``indexes.codes.hashed_from_float`` with no fine-tuning) stores ``sign(R v)`` for each
float token vector ``v`` of the ``colbert`` index trained with the same options, and searches with the
normalised ``R q``. This script builds exactly that from the cached ``colbert`` index (built by
``benchmarks/code_first_stage.py --steps N`` when missing) without re-encoding a document: for each seed it
draws ``R`` (orthogonal blocks, :func:`indexes.codes.random_hyperplanes`, as shipped; and independent
Gaussian normals for comparison), hashes the stored vectors, and runs the same two-step search (Hamming
kNN of each query token, then exact MaxSim against the +-1 codes). Reports nDCG@10 and R@100 per draw, their
mean and standard deviation, and the float index's scores. Seed 42 with orthogonal blocks is the draw the
``lsh`` index of ``code_first_stage.py --hash-head lsh --hash-steps 0`` uses (same seed as its options).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--quiet" in sys.argv:  # before anything imports tqdm, which reads TQDM_DISABLE once
    os.environ["TQDM_DISABLE"] = "1"

import numpy as np  # noqa: E402

from code_first_stage import code_options, machine_line, publish  # noqa: E402
from pipeline.datasets import load_dataset  # noqa: E402
from pipeline.evaluate import evaluate  # noqa: E402

MEASURES = ["nDCG@10", "R@100"]


def hyperplanes(kind: str, bits: int, dim: int, seed: int) -> np.ndarray:
    """``[bits, dim]`` normals: ``orthogonal`` (as shipped) or ``gaussian`` (independent N(0, 1) rows)."""
    import torch

    from indexes.codes import random_hyperplanes

    if kind == "orthogonal":
        return random_hyperplanes(bits, dim, seed).numpy().astype(np.float32)
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(bits, dim, generator=generator).numpy().astype(np.float32)


def hashed_search(retriever, float_vectors: np.ndarray, query_vectors: list, queries: list, planes: np.ndarray,
                  k: int) -> dict:
    """The run of the binary index ``sign(planes v)`` searched with normalised ``planes q``. Switches the
    float ``retriever`` to those codes in place (every field its search reads), so its float search must
    be run before the first call."""
    import faiss

    from indexes.codes import pack_codes

    bits = len(planes)
    packed = pack_codes(float_vectors @ planes.T)
    index = faiss.IndexBinaryFlat(bits)
    index.add(packed)
    retriever.binary, retriever.dim, retriever.vectors = True, bits, packed
    retriever.index = retriever._cpu_index = index
    run = {}
    for query, vectors in zip(queries, query_vectors):
        projected = vectors @ planes.T
        projected /= np.maximum(np.linalg.norm(projected, axis=1, keepdims=True), 1e-12)
        run[query.query_id] = retriever._ranking(query, projected, retriever.candidates(projected), k)
    return run


def benchmark(name: str, args) -> list[str]:
    from indexes.codes import CodeRetriever, build_code_index

    dataset = load_dataset(name)
    queries = list(dataset.queries.values())
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    options = code_options("colbert", SimpleNamespace(steps=args.steps, threads=args.threads, k_prime=args.k_prime,
                                                      quiet=args.quiet, straight_through=False))
    retriever = CodeRetriever(build_code_index(dataset, options), k_prime=args.k_prime, threads=args.threads)
    float_vectors = np.array(retriever.vectors)
    query_vectors = retriever.encode_queries([q.text for q in queries])
    reference = evaluate(retriever.search(queries, args.k), qrels, MEASURES).aggregate
    rows = [f"| {name} | float colbert | - | {reference['nDCG@10']:.4f} | {reference['R@100']:.4f} | |"]
    for kind in ("orthogonal", "gaussian"):
        scores = []
        for seed in args.seeds:
            planes = hyperplanes(kind, args.bits, float_vectors.shape[1], seed)
            run = hashed_search(retriever, float_vectors, query_vectors, queries, planes, args.k)
            result = evaluate(run, qrels, MEASURES).aggregate
            scores.append((result["nDCG@10"], result["R@100"]))
            rows.append(f"| {name} | {kind} | {seed} | {result['nDCG@10']:.4f} | {result['R@100']:.4f} "
                        f"| {reference['nDCG@10'] - result['nDCG@10']:+.4f} |")
        values = np.array(scores)
        rows.append(f"| {name} | **{kind}, mean ± sd** | {len(args.seeds)} draws | {values[:, 0].mean():.4f} ± "
                    f"{values[:, 0].std(ddof=1) if len(values) > 1 else 0:.4f} | {values[:, 1].mean():.4f} | "
                    f"{reference['nDCG@10'] - values[:, 0].mean():+.4f} (worst {reference['nDCG@10'] - values[:, 0].min():+.4f}) |")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    parser.add_argument("--steps", type=int, default=100, help="training steps of the float encoder (default 100)")
    parser.add_argument("--bits", type=int, default=512)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--k-prime", type=int, default=256)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--output", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    if args.bits <= 0 or args.bits % 8:
        parser.error(f"--bits must be a positive multiple of 8, got {args.bits}")
    from pipeline.training import set_threads

    set_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    started = time.perf_counter()
    rows = ["| dataset | hyperplanes | seed | nDCG@10 | R@100 | float - binary nDCG@10 |", "|---|---|---|---|---|---|"]
    for name in args.datasets:
        rows += benchmark(name, args)
    command = shlex.join(["python", "benchmarks/lsh_draws.py", *(argv if argv is not None else sys.argv[1:])])
    machine = machine_line(args.threads)
    text = "\n".join([
        f"<!-- {command} ({time.strftime('%Y-%m-%d')}, {time.perf_counter() - started:.0f} s) -->",
        f"# {args.bits}-bit random-hyperplane codes over the {args.steps}-step float encoder: draws ({machine})",
        f"Top {args.k} per query, {args.k_prime} neighbours per query token, exact MaxSim against the +-1 codes.",
        "", *rows,
    ])
    publish(text, args.output)


if __name__ == "__main__":
    main()
