"""End-to-end latency of the code first stage with and without pruning before exact MaxSim, on one index.

    python benchmarks/code_latency.py [--datasets nfcorpus vaswani-npl] [--steps 100] [--bits 512]
        [--hash-head lsh] [--depths 0 32 64 128 256] [--onnx-depths 256] [--ivf-lists 720 --nprobe 4
        --ivf-depths 64 --ivf-onnx-depths 64 32 --int8-depths 32] [--k 100] [--k-prime 256] [--threads 1]
        [--output benchmarks/results/codes/latency.md]

Per dataset, one :class:`indexes.codes.CodeRetriever` over one built (or cached) index is searched query by
query with every ``rescore_depth`` of ``--depths`` (0: exact MaxSim over every kNN candidate, the search
before pruning); the configurations alternate query by query in this one process (same index, same pages
in memory, same load), so their ratios are fair. Each time is ``retriever.search([query], k)`` end to end:
query encoding, the kNN step, the approximate scores and the pruning, exact MaxSim over the kept
candidates, the sort. Also per configuration: nDCG@10 and R@100 (pipeline.evaluate), the documents scored
exactly per query, and a breakdown of the time into those stages (one more pass, each stage timed alone).
The rows named "ONNX Runtime queries" encode queries with ``query_runtime="onnx"`` (the default where it is
installed); every other row encodes them in PyTorch, as the search before pruning did.
The index's bytes per stored vector and the process's peak resident memory (``VmHWM``) are reported too.
Encoders and indexes are the ones ``code_first_stage.py`` builds with the same options (shared cache).
Results: Markdown at ``--output`` and the same numbers as JSON beside it.
``python benchmarks/code_latency.py --combine PART.md ... OUTPUT.md`` puts runs made side by side (one
dataset per process) into one file.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--quiet" in sys.argv:  # before anything imports tqdm, which reads TQDM_DISABLE once
    os.environ["TQDM_DISABLE"] = "1"

from code_first_stage import add_code_arguments, code_options, describe_codes  # noqa: E402
from common import add_search_arguments, load_average, machine_line, publish, set_all_threads  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402

MEASURES = "nDCG@10 R@100"


def peak_rss_mib() -> float:
    """This process's peak resident set (``VmHWM``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def legacy_maxsim_scores(self, query_vectors: np.ndarray, doc_numbers: np.ndarray, chunk: int = 256) -> np.ndarray:
    """``CodeRetriever.maxsim_scores`` as it was before pruning (commit 2443cba), for the "before" row: the
    codes unpacked to a +-1 float array, then the product with the query's vectors."""
    import math

    scale = 1.0 / math.sqrt(self.dim) if self.binary and not self.model.centred else 1.0
    scores = np.zeros(len(doc_numbers), dtype=np.float32)
    if len(query_vectors) == 0:
        return scores
    for start in range(0, len(doc_numbers), chunk):
        part = doc_numbers[start : start + chunk]
        vectors, counts = self.doc_vectors(part)
        sims = self._centred_similarity(vectors, query_vectors) if self.model.centred else vectors @ query_vectors.T
        bounds = np.concatenate([[0], np.cumsum(counts)[:-1]])
        scores[start : start + len(part)] = np.maximum.reduceat(sims, bounds, axis=0).sum(axis=1) * scale
    return scores


class Config:
    """One search configuration: a rescore depth, with today's or the former exact MaxSim."""

    def __init__(self, label: str, depth: int, legacy: bool = False, retriever=None):
        self.label, self.depth, self.legacy, self.retriever = label, depth, legacy, retriever

    def apply(self, retriever):
        """Set ``retriever`` (or this configuration's own) up for this configuration; returns it."""
        retriever = self.retriever or retriever
        retriever.rescore_depth = self.depth
        if self.legacy:
            retriever.maxsim_scores = legacy_maxsim_scores.__get__(retriever)
        else:
            retriever.__dict__.pop("maxsim_scores", None)
        return retriever


def ivf_copy(retriever, path: Path, lists: int) -> Path:
    """A format-2 IVF index over the very codes of the flat index at ``path`` (its encoder, documents and ids
    linked, nothing re-encoded), beside it; built once, then found."""
    import shutil

    from indexes.codes import (ENCODER_FILE, FAISS_FILE, META_FILE, VERIFIED_FILES, CodeOptions, index_metadata,
                               index_size_bytes, ivf)
    from pipeline.core.filecheck import describe

    target = path.parent / f"{path.name}-ivf{lists}"
    if (target / META_FILE).is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    codes = np.asarray(retriever.vectors)
    shards, counts = [], []
    for number, start in enumerate(range(0, len(codes), 100_000)):
        shards.append(target / f".shard-{number:03d}.npz")
        np.savez(shards[-1], vectors=codes[start:start + 100_000])
        counts.append(len(codes[start:start + 100_000]))
    options = CodeOptions(kind="codes", dim=retriever.dim, index_type="ivf", ivf_nlist=lists)
    made = ivf.assemble(shards, counts, options, target, FAISS_FILE, seed=0)
    for shard in shards:
        shard.unlink()
    for name in (*VERIFIED_FILES[1:], ENCODER_FILE):
        shutil.copyfile(path / name, target / name)
    meta = index_metadata(path)
    version, ivf_files = ivf.layout(target)
    meta.update(options={**meta["options"], "index_type": "ivf", "ivf_nlist": lists}, ivf_lists=made,
                format=version, files=describe(target, VERIFIED_FILES + ivf_files),
                index_bytes=index_size_bytes(target),
                note=f"IVF copy of {path.name}'s codes made by benchmarks/code_latency.py")
    (target / META_FILE).write_text(json.dumps(meta, indent=1))
    return target


def stage_times(retriever, query, depth: int, k: int) -> dict:
    """Seconds of each stage of one search of ``query`` (the stages of ``CodeRetriever.search``, each timed)."""
    times = {}
    started = time.perf_counter()
    vectors = retriever.encode_queries([query.text])[0]
    times["encode"] = time.perf_counter() - started
    started = time.perf_counter()
    labels, sims = retriever.neighbours(vectors)
    times["knn"] = time.perf_counter() - started
    started = time.perf_counter()
    found, approximate = retriever.approximate_scores(labels, sims)
    tail = None
    if depth and len(found) > depth:  # as CodeRetriever.split_candidates, on the neighbours timed above
        order = np.lexsort((found, -approximate))
        tail = (found[order[depth:max(k, depth)]], approximate[order[depth:max(k, depth)]])
        found = np.sort(found[order[:depth]])
    times["prune"] = time.perf_counter() - started
    started = time.perf_counter()
    retriever._ranking(query, vectors, found, k, tail)
    times["exact"] = time.perf_counter() - started
    times["scored"] = len(found)
    return times


def benchmark(name: str, args) -> dict:
    """Every depth of ``args.depths`` on ``name``'s index: a dict of the measurements."""
    from indexes.codes import CodeRetriever, build_code_index, index_metadata, storage_bytes

    dataset = load_dataset(name)
    queries = list(dataset.queries.values())[: args.max_queries or None]
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    options = code_options("codes", args)
    path = build_code_index(dataset, options)
    meta = index_metadata(path)
    def variant(index_path, prefix, depths, **settings):
        """Configurations at ``depths`` on one more retriever over ``index_path`` (warmed up, which also
        exports an ONNX graph or finds it cached)."""
        searcher = CodeRetriever(index_path, k_prime=args.k_prime, threads=args.threads, **settings)
        searcher.search(queries[:2], args.k)
        return [Config(prefix + ("every candidate" if depth == 0 else str(depth)), depth, retriever=searcher)
                for depth in depths]

    # the search before pruning encoded queries in PyTorch: the rows without "ONNX Runtime" do too
    retriever = CodeRetriever(path, k_prime=args.k_prime, threads=args.threads, query_runtime="torch")
    retriever.search(queries[:2], args.k)  # warm-up: the model's first call, the index's pages
    configs = ([Config("before: every candidate, MaxSim of 2443cba", 0, legacy=True)] if args.before else [])
    configs += [Config("every candidate" if depth == 0 else str(depth), depth) for depth in args.depths]
    if args.onnx_depths:  # the same flat index, queries encoded by ONNX Runtime (the default where installed)
        configs += variant(path, "ONNX Runtime queries, ", args.onnx_depths, query_runtime="onnx")
    if args.ivf_lists:
        ivf_path = ivf_copy(retriever, path, args.ivf_lists)
        ivf = f"IVF ({args.ivf_lists} lists, nprobe {args.nprobe}), "
        configs += variant(ivf_path, ivf, args.ivf_depths, nprobe=args.nprobe, query_runtime="torch")
        if args.int8_depths:  # the same IVF index, queries encoded by the int8 transformer
            configs += variant(ivf_path, ivf + "int8 queries, ", args.int8_depths, nprobe=args.nprobe,
                               query_precision="int8")
        if args.ivf_onnx_depths:
            configs += variant(ivf_path, ivf + "ONNX Runtime queries, ", args.ivf_onnx_depths, nprobe=args.nprobe,
                               query_runtime="onnx")
    runs = {c.label: {} for c in configs}
    seconds = {c.label: [] for c in configs}
    blocks = [queries[start:start + args.block] for start in range(0, len(queries), args.block)]
    for number, block in enumerate(blocks):
        # rotate the order so that no configuration always runs first (caches warmed by the one before); a
        # block of --block queries per turn: 1 query, every search follows another configuration's (cold
        # caches: the former search's arrays evicted the encoder's weights and the index's pages)
        for config in configs[number % len(configs):] + configs[: number % len(configs)]:
            searcher = config.apply(retriever)
            for query in block:
                started = time.perf_counter()
                runs[config.label].update(searcher.search([query], args.k))
                seconds[config.label].append(time.perf_counter() - started)
    rows = []
    for config in configs:
        searcher = config.apply(retriever)
        depth = config.depth
        stages = [stage_times(searcher, q, depth, args.k) for q in queries[: args.stage_queries]]
        scores = evaluate(runs[config.label], qrels, MEASURES).aggregate
        rows.append({
            "config": config.label, "rescore_depth": config.depth, "legacy_maxsim": config.legacy,
            "nDCG@10": scores["nDCG@10"], "R@100": scores["R@100"],
            "ms_per_query": 1000 * float(np.mean(seconds[config.label])),
            "ms_median": 1000 * float(np.median(seconds[config.label])),
            "scored_per_query": float(np.mean([s["scored"] for s in stages])),
            "stages_ms": {stage: 1000 * float(np.mean([s[stage] for s in stages]))
                          for stage in ("encode", "knn", "prune", "exact")},
        })
    exact = rows[0]  # the reference: the first configuration (the search before pruning)
    for row in rows:
        row["speedup"] = exact["ms_per_query"] / row["ms_per_query"]
        row["nDCG@10_change"] = row["nDCG@10"] - exact["nDCG@10"]
    stored = storage_bytes(path)
    return {"dataset": dataset.name, "queries": len(queries), "documents": meta["documents"],
            "vectors": meta["vectors"], "index": path.name, "index_format": meta.get("format", 1),
            "storage_bytes": stored, "bytes_per_vector": stored / meta["vectors"],
            "faiss_bytes": retriever.index_bytes, "peak_rss_mib": peak_rss_mib(), "rows": rows}


def render(results: list[dict], args, command: str) -> str:
    """The Markdown of :func:`benchmark`'s results."""
    lines = [
        f"# Code first stage: pruning before exact MaxSim ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{machine_line(args.threads)})",
        "",
        f"Command: `{command}`. Load average (1, 5, 15 min) before / after: {' '.join(args.load_before)} / "
        f"{' '.join(args.load_after)}.",
        "",
        f"Top {args.k} per query, {args.k_prime} neighbours per query token (flat index), {describe_codes(args)}. "
        "ms/query: `CodeRetriever.search([query], k)` end to end (query encoding, kNN, approximate scores and "
        "pruning, exact MaxSim, sort), one query at a time, the configurations alternating "
        + ("query by query" if args.block == 1 else f"in blocks of {args.block} queries")
        + " in one process. \"before\": exact MaxSim over every candidate with the MaxSim code of 2443cba (the "
        "search before this change, the reference of the speed-up and nDCG change columns); \"every candidate\": the "
        "same candidates with today's MaxSim; N: only the N candidates with the best score estimated from "
        "the kNN results are scored exactly (below k: the rest of the top k follow in estimated order, so R@k is "
        "that of depth k); \"int8 queries\": query_precision int8; \"ONNX Runtime queries\": query_runtime onnx (the "
        "same float32 encoder run by ONNX Runtime, the default where it is installed; the other rows encode in "
        "PyTorch). Stage columns: a second pass over the first "
        f"{args.stage_queries} queries, each stage timed alone (means, ms).",
        "",
        "| dataset | configuration (rescore_depth) | docs scored exactly / query | nDCG@10 | change | R@100 | ms/query (mean) "
        "| median | speed-up | encode | kNN | prune | exact MaxSim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for row in result["rows"]:
            stages = row["stages_ms"]
            label = row["config"]
            lines.append(
                f"| {result['dataset']} | {label} | {row['scored_per_query']:.0f} | {row['nDCG@10']:.4f} "
                f"| {row['nDCG@10_change']:+.4f} | {row['R@100']:.4f} | {row['ms_per_query']:.1f} "
                f"| {row['ms_median']:.1f} | {row['speedup']:.1f}x | {stages['encode']:.1f} | {stages['knn']:.1f} "
                f"| {stages['prune']:.1f} | {stages['exact']:.1f} |")
    lines += ["", "| dataset | queries | documents | vectors | index format | bytes on disk / vector | "
              "faiss file bytes | peak RSS (MiB, whole process) |", "|---|---|---|---|---|---|---|---|"]
    for result in results:
        lines.append(f"| {result['dataset']} | {result['queries']} | {result['documents']:,} | {result['vectors']:,} "
                     f"| {result['index_format']} | {result['bytes_per_vector']:.1f} | {result['faiss_bytes']:,} "
                     f"| {result['peak_rss_mib']:.0f} |")
    return "\n".join(lines)


def combine(parts: list[str], output: str) -> None:
    """Write ``output`` (.md and .json) from the results of runs made in separate processes (one dataset each):
    their Markdown one after the other, their JSON as a list."""
    from pipeline.core.atomic import write_text

    texts = [Path(part).with_suffix(".md").read_text(encoding="utf-8") for part in parts]
    runs = [json.loads(Path(part).with_suffix(".json").read_text(encoding="utf-8")) for part in parts]
    title = "# Code first stage: pruning before exact MaxSim, end to end\n\n" + (
        f"{len(parts)} runs, each in its own process; each section below is one run with its own command, date and "
        "load (compare configurations within a run).\n\n")
    write_text(Path(output).with_suffix(".md"), title + "\n".join("#" + text for text in texts))
    write_text(Path(output).with_suffix(".json"), json.dumps({"runs": runs}, indent=1) + "\n")


def main(argv=None) -> None:
    if argv is None and sys.argv[1:2] == ["--combine"] or argv and argv[:1] == ["--combine"]:
        arguments = (argv if argv is not None else sys.argv[1:])[1:]
        combine(arguments[:-1], arguments[-1])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    add_code_arguments(parser)
    parser.add_argument("--depths", type=int, nargs="+", default=[0, 100, 256],
                        help="rescore_depth values (0: exact MaxSim over every candidate; below k: k)")
    parser.add_argument("--no-before", dest="before", action="store_false",
                        help="leave out the search before pruning (every candidate, the former MaxSim code)")
    parser.add_argument("--ivf-lists", type=int, default=0,
                        help="also search an IVF index of the same codes with this many lists (0: no)")
    parser.add_argument("--nprobe", type=int, default=4, help="IVF lists visited per query token (default 4)")
    parser.add_argument("--ivf-depths", type=int, nargs="+", default=[100],
                        help="rescore_depth values searched on the IVF index (default 100)")
    parser.add_argument("--block", type=int, default=1,
                        help="queries each configuration searches in a row before the next one's turn (default 1: "
                             "alternate query by query)")
    parser.add_argument("--int8-depths", type=int, nargs="*", default=[],
                        help="rescore_depth values searched on the IVF index with query_precision int8 (default: "
                             "none)")
    parser.add_argument("--onnx-depths", type=int, nargs="*", default=[],
                        help="rescore_depth values searched on the flat index with query_runtime onnx (default: none)")
    parser.add_argument("--ivf-onnx-depths", type=int, nargs="*", default=[],
                        help="rescore_depth values searched on the IVF index with query_runtime onnx (default: none)")
    parser.add_argument("--stage-queries", type=int, default=30,
                        help="queries of the per-stage breakdown pass (default 30)")
    add_search_arguments(parser, threads=1)
    parser.add_argument("--k", type=int, default=100, help="documents retrieved per query (default 100)")
    parser.add_argument("--output", help="write the table to this Markdown file (and the numbers to .json beside it)")
    args = parser.parse_args(argv)
    set_all_threads(args.threads)
    command = "python " + shlex.join(["benchmarks/code_latency.py", *(argv if argv is not None else sys.argv[1:])])
    args.load_before = load_average()
    results = [benchmark(name, args) for name in args.datasets]
    args.load_after = load_average()
    publish(render(results, args, command), args.output,
            {"command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "load_before": args.load_before, "load_after": args.load_after, "threads": args.threads,
             "k": args.k, "k_prime": args.k_prime, "results": results})


if __name__ == "__main__":
    main()
