"""How the binary token-code index scales: flat against IVF (``indexes/codes/ivf.py``) on synthetic codes.

Synthetic 512-bit codes with cluster structure (``--clusters`` random centres, by default one per 64 codes,
each code a centre with 15 % of its bits flipped; IVF lists ``--lists-factor`` x sqrt(codes)), written as the shards a real build writes, are indexed at growing sizes. Per size,
in a fresh process (so that its peak memory is its own): build time, bytes on disk, peak resident memory,
query latency (``--queries`` queries of 32 tokens, ``k'`` neighbours per token) and IVF's recall of the flat
index's neighbours (share of the flat index's ``k'`` labels per token that IVF returns too; ties at the
``k'``-th Hamming distance make this a slight underestimate) at several ``nprobe``. The reference (flat)
search and IVF search run in the same process, one after the other.

    python benchmarks/code_index_scaling.py --sizes 100000 1000000 4000000 --nprobe 1 4 16 --output benchmarks/results/codes/index-scaling.md
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BITS = 512
FLIP = 0.15
TOKENS_PER_QUERY = 32


def synthetic_codes(count: int, centres: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``count`` packed codes (``BITS / 8`` bytes): a random centre's bits, ``FLIP`` of them flipped."""
    clusters = len(centres)
    out = np.empty((count, BITS // 8), dtype=np.uint8)
    for start in range(0, count, 200_000):
        size = min(200_000, count - start)
        bits = centres[rng.integers(0, clusters, size=size)] ^ (rng.random((size, BITS)) < FLIP).astype(np.uint8)
        out[start:start + size] = np.packbits(bits, axis=1, bitorder="little")
    return out


def measure(size: int, clusters: int, queries: int, k_prime: int, nprobes: list[int], threads: int,
            lists_factor: float) -> dict:
    """One size, in this process: returns the measurements as a dict."""
    import faiss

    from indexes.codes import CodeOptions, ivf

    faiss.omp_set_num_threads(threads)
    rng = np.random.default_rng(size)
    clusters = clusters or max(1, size // 64)  # default: about 64 codes per cluster at every size
    centres = np.random.default_rng(0).integers(0, 2, size=(clusters, BITS), dtype=np.uint8)
    row = {"vectors": size}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        codes = synthetic_codes(size, centres, rng)
        shard_size = 500_000
        shards, counts = [], []
        for number, start in enumerate(range(0, size, shard_size)):
            part = codes[start:start + shard_size]
            shard = folder / f"shard-{number:05d}.npz"
            np.savez(shard, vectors=part)
            shards.append(shard)
            counts.append(len(part))
        # query tokens from the same centres as the collection's (as real query tokens share its vocabulary)
        probe = synthetic_codes(queries * TOKENS_PER_QUERY, centres, np.random.default_rng(1))
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        started = time.perf_counter()
        flat = faiss.IndexBinaryFlat(BITS)
        flat.add(codes)
        faiss.write_index_binary(flat, str(folder / "flat.index"))
        row["flat_build_s"] = time.perf_counter() - started
        row["flat_bytes"] = (folder / "flat.index").stat().st_size
        started = time.perf_counter()
        _, reference = flat.search(probe, k_prime)
        row["flat_ms_per_query"] = 1000 * (time.perf_counter() - started) / queries
        del flat

        options = CodeOptions(kind="codes", dim=BITS, index_type="ivf",
                              ivf_nlist=max(1, int(lists_factor * np.sqrt(size))))
        started = time.perf_counter()
        lists = ivf.assemble(shards, counts, options, folder, "ivf.index")
        row["ivf_build_s"] = time.perf_counter() - started
        row["ivf_lists"] = lists
        row["ivf_bytes"] = (folder / "ivf.index").stat().st_size + sum((folder / name).stat().st_size
                                                                       for name in ivf.layout(folder)[1])
        del codes
        for nprobe in nprobes:
            index, stored = ivf.open_index(folder, "ivf.index", True, nprobe, mmap=True)
            started = time.perf_counter()
            _, labels = index.search(probe, k_prime)
            row[f"ivf{nprobe}_ms_per_query"] = 1000 * (time.perf_counter() - started) / queries
            labels = stored.rows_of(labels)  # faiss ids -> rows (format 4 packs list numbers beside the row)
            found = [len(np.intersect1d(a[a >= 0], b[b >= 0])) / k_prime for a, b in zip(labels, reference)]
            row[f"ivf{nprobe}_recall"] = float(np.mean(found))
            del index
        row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        row["rss_before_mb"] = rss_before / 1024
    return row


def render(rows: list[dict], nprobes: list[int], command: str) -> str:
    head = ("| token vectors | flat build s | flat MB | flat ms/query | IVF lists | IVF build s | IVF MB (index + "
            "lists + ranks) | " + " | ".join(f"nprobe {n}: ms/query, recall" for n in nprobes) + " | peak RSS MB |")
    lines = [f"<!-- {command} -->", head, "|---" * (8 + len(nprobes)) + "|"]
    for r in rows:
        cells = [f"{r['vectors']:,}", f"{r['flat_build_s']:.1f}", f"{r['flat_bytes'] / 2**20:.0f}",
                 f"{r['flat_ms_per_query']:.1f}", f"{r['ivf_lists']}", f"{r['ivf_build_s']:.1f}",
                 f"{r['ivf_bytes'] / 2**20:.0f}"]
        cells += [f"{r[f'ivf{n}_ms_per_query']:.1f}, {r[f'ivf{n}_recall']:.3f}" for n in nprobes]
        cells.append(f"{r['peak_rss_mb']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 4_000_000])
    parser.add_argument("--clusters", type=int, default=0, help="cluster centres (default: size / 64)")
    parser.add_argument("--lists-factor", type=float, default=1.0, help="IVF lists = factor x sqrt(size)")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k-prime", type=int, default=64)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", help="write the Markdown table here (atomically)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child measuring one size
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.clusters, args.queries, args.k_prime, args.nprobe, args.threads,
                                 args.lists_factor)))
        return
    rows = []
    for size in args.sizes:
        child = [sys.executable, __file__, "--one", str(size), "--clusters", str(args.clusters), "--queries",
                 str(args.queries), "--k-prime", str(args.k_prime), "--threads", str(args.threads),
                 "--lists-factor", str(args.lists_factor), "--nprobe",
                 *map(str, args.nprobe)]
        done = subprocess.run(child, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        if done.returncode != 0:
            raise SystemExit(f"size {size}: {done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    command = "python benchmarks/code_index_scaling.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    table = render(rows, args.nprobe, command)
    if args.output:
        from pipeline.core.atomic import atomic_write

        with atomic_write(args.output) as handle:
            handle.write(table)
    print(table)


if __name__ == "__main__":
    main()
