"""How much the random hyperplanes of ``hash_head="lsh"`` binary codes matter: several draws, three kinds.

    python benchmarks/lsh_draws.py [--datasets nfcorpus vaswani-npl] [--steps 100] [--bits 512]
                                   [--seeds 42 1 2 3 4] [--kinds orthogonal gaussian centred] [--select K] [--threads 1]
                                   [--output benchmarks/results/codes/lsh-draws.md]

An ``lsh`` code index (``indexes.codes.hashed_from_float`` with no fine-tuning) stores ``sign(R v)`` for each
float token vector ``v`` of the ``colbert`` index trained with the same options, and searches with the
normalised ``R q``. This script builds exactly that from the cached ``colbert`` index (built by
``benchmarks/code_first_stage.py --steps N`` when missing) without re-encoding a document: for each seed it
draws ``R`` (orthogonal blocks, :func:`indexes.codes.random_hyperplanes`, as shipped; and independent
Gaussian normals for comparison), hashes the stored vectors, and runs the same two-step search (Hamming
kNN of each query token, then exact MaxSim against the +-1 codes). Reports nDCG@10 and R@100 per draw, their
mean and standard deviation, and the float index's scores. Seed 42 with orthogonal blocks is the draw the
``lsh`` index of ``code_first_stage.py --hash-head lsh --hash-steps 0`` uses (same seed as its options).

Each orthogonal draw also gets its *agreement*: the mean Kendall tau between the float encoder's MaxSim
scores and the draw's hashed scores over training queries' BM25 candidates
(:func:`indexes.codes.hyperplane_agreement`, no relevance labels, the training queries of the encoder, not
the test queries). ``--select K`` then plays ``hash_draws=K`` from each ``--seeds`` value: of the K draws
:func:`indexes.codes.draw_seeds` gives, the one with the highest agreement is kept and evaluated, which
shows whether choosing a draw by agreement avoids the bad draws without looking at the test queries.

The ``centred`` kind is ``hash_center=True`` (:func:`indexes.codes.hashed_from_float` with the
:func:`indexes.codes.center_sample` of the collection, as the index takes it): orthogonal
blocks over ``v - mu``, searched with ``R (q - mu)`` and scored by :func:`indexes.codes.centred_similarity`,
exactly as such an index would be.
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
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402

MEASURES = ["nDCG@10", "R@100"]
_AGREEMENT: dict[tuple, float] = {}  # (training source, seed) -> agreement, shared by the datasets
_CENTER: dict[str, object] = {}  # dataset name -> center_sample's token vectors
KINDS = ("orthogonal", "gaussian", "centred")


def hyperplanes(kind: str, bits: int, dim: int, seed: int) -> np.ndarray:
    """``[bits, dim]`` normals: ``orthogonal`` (as shipped) or ``gaussian`` (independent N(0, 1) rows)."""
    import torch

    from indexes.codes import random_hyperplanes

    if kind in ("orthogonal", "centred"):
        return random_hyperplanes(bits, dim, seed).numpy().astype(np.float32)
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(bits, dim, generator=generator).numpy().astype(np.float32)


def hashed_search(retriever, float_vectors: np.ndarray, query_vectors: list, queries: list, planes: np.ndarray,
                  k: int, centred=None) -> dict:
    """The run of the binary index ``sign(planes v)`` searched with normalised ``planes q`` or, with a
    ``centred`` encoder (:func:`indexes.codes.hashed_from_float` with a sample, same planes), of
    ``sign(planes (v - mu))`` searched as its index is. Switches the float ``retriever`` to those codes in
    place (every field its search reads), so its float search must be run before the first call."""
    import faiss
    import torch

    from indexes.codes import pack_codes

    bits = len(planes)
    retriever.model = centred or retriever.__dict__.setdefault("float_model", retriever.model)
    if centred is None:
        packed = pack_codes(float_vectors @ planes.T)
    else:
        with torch.inference_mode():
            packed = pack_codes(centred.hash_unit_vectors(torch.from_numpy(float_vectors)).numpy())
    index = faiss.IndexBinaryFlat(bits)
    index.add(packed)
    retriever.binary, retriever.dim, retriever.vectors = True, bits, packed
    retriever.index = retriever._cpu_index = index
    run = {}
    for query, vectors in zip(queries, query_vectors):
        if centred is None:
            vectors = vectors @ planes.T
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        run[query.query_id] = retriever._ranking(query, vectors, retriever.candidates(vectors), k)
    return run


def centred_encoder(retriever, dataset, options, bits: int, seed: int):
    """The ``hash_center`` encoder an ``lsh`` index of ``dataset`` with ``options`` and hyperplane seed ``seed``
    would use (its center from a sample of the collection, computed once per dataset)."""
    from indexes.codes import center_sample, hashed_from_float

    float_model = retriever.__dict__.setdefault("float_model", retriever.model)
    if dataset.name not in _CENTER:
        _CENTER[dataset.name] = center_sample(float_model, retriever.tokenizer, dataset, options, retriever.device)[0]
    return hashed_from_float(float_model, bits, options.alpha, seed, _CENTER[dataset.name])


def agreements(retriever, dataset, options, seeds, bits: int) -> dict[int, float]:
    """Agreement of each seed's hyperplanes with ``retriever``'s float encoder on its training queries
    (computed once per training source and seed, then reused by the next dataset)."""
    from indexes.codes import agreement_sample, bm25_negatives, hyperplane_agreement, resolve_training

    source = resolve_training(dataset, options.train_dataset)
    missing = [seed for seed in dict.fromkeys(seeds) if (source.key(), seed) not in _AGREEMENT]
    if missing:
        negatives = bm25_negatives(source.dataset, source.query_ids, options.negative_depth)
        sample = agreement_sample(source, negatives, options.seed)
        values = hyperplane_agreement(retriever.model, retriever.tokenizer, sample, bits, missing, options,
                                      retriever.device)
        _AGREEMENT.update({(source.key(), seed): value for seed, value in zip(missing, values)})
    return {seed: _AGREEMENT[(source.key(), seed)] for seed in seeds}


def benchmark(name: str, args) -> list[str]:
    from indexes.codes import CodeRetriever, build_code_index, draw_seeds

    dataset = load_dataset(name)
    queries = list(dataset.queries.values())
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    options = code_options("colbert", SimpleNamespace(steps=args.steps, threads=args.threads, k_prime=args.k_prime,
                                                      quiet=args.quiet, straight_through=False))
    retriever = CodeRetriever(build_code_index(dataset, options), k_prime=args.k_prime, threads=args.threads)
    pools = {seed: draw_seeds(seed, args.select) for seed in args.seeds} if args.select > 1 else {}
    agreement = agreements(retriever, dataset, options, [*args.seeds, *(s for pool in pools.values() for s in pool)],
                           args.bits)
    float_vectors = np.array(retriever.vectors)
    query_vectors = retriever.encode_queries([q.text for q in queries])
    reference = evaluate(retriever.search(queries, args.k), qrels, MEASURES).aggregate
    rows = [f"| {name} | float colbert | - | {reference['nDCG@10']:.4f} | {reference['R@100']:.4f} | | |"]
    cache: dict[tuple[str, int], dict] = {}

    def draw(kind: str, seed: int) -> dict:
        if (kind, seed) not in cache:
            planes = hyperplanes(kind, args.bits, float_vectors.shape[1], seed)
            centred = centred_encoder(retriever, dataset, options, args.bits, seed) if kind == "centred" else None
            run = hashed_search(retriever, float_vectors, query_vectors, queries, planes, args.k, centred)
            cache[(kind, seed)] = evaluate(run, qrels, MEASURES).aggregate
        return cache[(kind, seed)]

    def summary(label: str, results: list[dict]) -> str:
        values = np.array([(r["nDCG@10"], r["R@100"]) for r in results])
        return (f"| {name} | **{label}, mean ± sd** | {len(results)} draws | {values[:, 0].mean():.4f} ± "
                f"{values[:, 0].std(ddof=1) if len(values) > 1 else 0:.4f} | {values[:, 1].mean():.4f} | "
                f"{reference['nDCG@10'] - values[:, 0].mean():+.4f} (worst "
                f"{reference['nDCG@10'] - values[:, 0].min():+.4f}) | |")

    for kind in args.kinds:
        results = []
        for seed in args.seeds:
            result = draw(kind, seed)
            results.append(result)
            tau = f"{agreement[seed]:.4f}" if kind == "orthogonal" else ""
            log(f"{name}: {kind} draw {seed}: nDCG@10 {result['nDCG@10']:.4f}")
            rows.append(f"| {name} | {kind} | {seed} | {result['nDCG@10']:.4f} | {result['R@100']:.4f} "
                        f"| {reference['nDCG@10'] - result['nDCG@10']:+.4f} | {tau} |")
        rows.append(summary(kind, results))
    if pools:
        chosen = []
        for first, pool in pools.items():
            best = max(pool, key=lambda seed: agreement[seed])
            log(f"{name}: pool from {first}: agreement {[round(agreement[s], 4) for s in pool]}, keeping {best}")
            result = draw("orthogonal", best)
            chosen.append(result)
            rows.append(f"| {name} | best of {args.select} by agreement, from {first} | {best} | "
                        f"{result['nDCG@10']:.4f} | {result['R@100']:.4f} | "
                        f"{reference['nDCG@10'] - result['nDCG@10']:+.4f} | {agreement[best]:.4f} |")
        rows.append(summary(f"best of {args.select} by agreement", chosen))
        rows.append(f"| {name} | agreement of every pooled draw | | | | | "
                    f"{', '.join(f'{s}: {agreement[s]:.4f}' for pool in pools.values() for s in pool)} |")
    evaluated = sorted(seed for kind, seed in cache if kind == "orthogonal")
    if len(evaluated) > 2:
        pairs = np.array([(agreement[seed], cache[("orthogonal", seed)]["nDCG@10"]) for seed in evaluated])
        rows.append(f"| {name} | Pearson r(agreement, nDCG@10) over the {len(evaluated)} orthogonal draws evaluated "
                    f"| | | | | {np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]:.2f} |")
    return rows


def log(message: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    parser.add_argument("--steps", type=int, default=100, help="training steps of the float encoder (default 100)")
    parser.add_argument("--bits", type=int, default=512)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2, 3, 4])
    parser.add_argument("--kinds", nargs="+", default=["orthogonal", "gaussian"], choices=KINDS,
                        help="hyperplane kinds to evaluate for --seeds (default orthogonal gaussian; centred: "
                             "orthogonal blocks over v - mu, hash_center)")
    parser.add_argument("--select", type=int, default=1,
                        help="also keep, from each --seeds value, the best of this many draws by agreement")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--k-prime", type=int, default=256)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--output", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    if args.bits <= 0 or args.bits % 8:
        parser.error(f"--bits must be a positive multiple of 8, got {args.bits}")
    from pipeline.core.runtime import set_threads

    set_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    started = time.perf_counter()
    if args.select < 1:
        parser.error(f"--select must be at least 1, got {args.select}")
    rows = ["| dataset | hyperplanes | seed | nDCG@10 | R@100 | float - binary nDCG@10 | agreement (tau) |",
            "|---|---|---|---|---|---|---|"]
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
