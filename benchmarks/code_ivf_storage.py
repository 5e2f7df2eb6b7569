"""The IVF code index's storage layouts on real codes: bytes per vector, resident memory and speed of the
format-4 layout (the list numbers carried in the faiss ids, in trees of 32 rows; 2 bytes per 32 rows of
roots) against format 3 (each vector's list number, uint16) and format 2 (each vector's position in list
order, uint32) on the same inverted lists.

Uses the shards and the union that ``code_real_scaling.py`` kept in ``--work`` (its ``simulate`` step's index
supplies the encoder). Steps, each a subcommand:

``build``
    At one size (a prefix of whole shards with at least ``--vectors`` vectors, 0: all): an IVF index of those
    codes in ``--work/storage/<size>/format-4`` (``indexes.codes.ivf``: quantizer trained, shards added,
    lists merged on disk, each stage timed) and its format-3 and format-2 copies on the same lists
    (``ivf.write_layout``) in ``format-3`` and ``format-2``; the bytes of every file, per vector.
``rss``
    One process per layout (``--index``): the retriever opened, ``--queries`` queries searched one at a
    time (``search([query], 100)``, one thread), then the process's peak resident set (``getrusage``
    ``ru_maxrss``) and its anonymous / file-backed parts; the same before the index was opened.
``time``
    The layouts in one process, one thread, rotating query by query (which goes first rotates too): ms/query
    end to end and of the exact MaxSim stage (where the vectors are read), the lookup alone (``vectors[rows]``
    for the rows of 256 documents drawn at random per query), whether every query's results are identical,
    nDCG@10 and R@100 of each.
``lookup``
    The row lookup alone (``vectors[rows]``, the stored vectors of 256 documents drawn at random, seeded),
    this thread's CPU time, four ways rotating call by call: format 4 with its bucket table, format 4
    searching each row's whole list (the table ignored), format 3, format 2.
``report``
    The tables (Markdown and JSON).

    python benchmarks/code_ivf_storage.py build --work /work/scratch/real-scaling --vectors 1000000 --ivf-nlist 1000
    python benchmarks/code_ivf_storage.py rss --work /work/scratch/real-scaling --vectors 1000000
    python benchmarks/code_ivf_storage.py time --work /work/scratch/real-scaling --vectors 1000000
    python benchmarks/code_ivf_storage.py report --work /work/scratch/real-scaling \\
        --output benchmarks/results/codes/ivf-storage.md
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import load_average, machine_line, publish  # noqa: E402
from code_real_scaling_common import K, SHARD_SIZE, command_line, load_union, now, write_json  # noqa: E402
from code_real_scaling_measure import Probe, shard_prefix, status_kib, write_index_dir  # noqa: E402
from indexes.codes.ivf import ASSIGN_FILE, RANKS_FILE, ROOTS_FILE  # noqa: E402
from indexes.codes.search import document_rows  # noqa: E402

#: the layouts compared: what a build writes (format 4), then its copies in the older layouts
LAYOUTS = ("format-4", "format-3", "format-2")
#: each layout's row-lookup file (beside the lists every layout has)
LOOKUP_FILES = {"format-4": ROOTS_FILE, "format-3": ASSIGN_FILE, "format-2": RANKS_FILE}
#: the ways the ``lookup`` step times (format 4 once more without its bucket table)
LOOKUP_WAYS = ("format 4", "format 4 without buckets", "format 3", "format 2")


def size_folder(work: Path, vectors: int) -> Path:
    return work / "storage" / (str(vectors) if vectors else "all")


def the_shards(work: Path, build_file: str) -> tuple[Path, list[Path]]:
    """``(the simulate step's index, its shards in order)``."""
    from indexes.codes import index_metadata

    full = Path(json.loads((work / build_file).read_text())["index"])
    documents = index_metadata(full)["documents"]
    return full, sorted((work / "shards").glob("shard-*.npz"))[: -(-documents // SHARD_SIZE)]


def file_bytes(folder: Path) -> dict:
    """Bytes of each file a search reads (the metadata's ``files``)."""
    from indexes.codes import index_metadata

    return {name: (folder / name).stat().st_size for name in index_metadata(folder)["files"]}


def build(work: Path, vectors: int, lists: int, seed: int, build_file: str) -> dict:
    """The format-4 IVF index of a shard prefix and its format-3 and format-2 copies; bytes per vector of
    each."""
    import faiss

    from indexes.codes import index_metadata, ivf

    faiss.omp_set_num_threads(1)
    full, shards = the_shards(work, build_file)
    part = shard_prefix(shards, vectors)
    folder = size_folder(work, vectors)
    load_before = load_average()
    times = write_index_dir(folder / "format-4", full, part, "ivf", lists, seed)
    if index_metadata(folder / "format-4")["format"] != 4:
        raise SystemExit(f"{folder / 'format-4'}: the build did not write format 4")
    for version in (3, 2):
        shutil.rmtree(folder / f"format-{version}", ignore_errors=True)
        started = time.perf_counter()
        ivf.write_layout(folder / "format-4", folder / f"format-{version}", code_size=512 // 8, version=version)
        times[f"format_{version}_copy_s"] = time.perf_counter() - started
    meta = index_metadata(folder / "format-4")
    count = meta["vectors"]
    layouts = {}
    every_ivf_file = ("faiss.index", *ivf.FILES, *ivf.FORMAT_3_FILES, *ivf.FORMAT_2_FILES)
    for layout in LAYOUTS:
        files = file_bytes(folder / layout)
        ivf_files = {n: b for n, b in files.items() if n in every_ivf_file}
        layouts[layout] = {"files": files, "ivf_bytes_per_vector": sum(ivf_files.values()) / count,
                           "bytes_per_vector": sum(files.values()) / count,
                           "per_file_per_vector": {n: b / count for n, b in files.items()}}
    return {"date": now(), "load_before": load_before, "load_after": load_average(), "vectors": count,
            "documents": meta["documents"], "shards": len(part), "ivf_lists": meta["ivf_lists"], "builds": times,
            "list_dtype": str(np.load(folder / "format-4" / ivf.ROOTS_FILE, mmap_mode="r").dtype),
            "list_bits": ivf.list_bits(meta["ivf_lists"]), "layouts": layouts}


def _queries(work: Path, count: int):
    dataset = load_union(work)
    return dataset, list(dataset.queries.values())[: count or None]


def rss_child(index: Path, work: Path, count: int, nprobe: int) -> dict:
    """In its own process: one layout's retriever, ``count`` queries, the process's memory."""
    import faiss
    import torch

    from indexes.codes import CodeRetriever

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    _, queries = _queries(work, count)
    before = status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM")
    retriever = CodeRetriever(index, threads=1, nprobe=nprobe)
    opened = status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM")
    started = time.perf_counter()
    for query in queries:
        retriever.search([query], K)
    seconds = time.perf_counter() - started
    return {"before_index_kib": before, "after_open_kib": opened,
            "after_queries_kib": status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM"), "queries": len(queries),
            "ms_per_query": 1000 * seconds / max(1, len(queries)), "nprobe": nprobe}


def rss(work: Path, vectors: int, count: int, nprobe: int) -> dict:
    """:func:`rss_child` for each layout, each in a new process (a peak resident set is per process)."""
    folder = size_folder(work, vectors)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    result = {"date": now(), "load_before": load_average()}
    for layout in LAYOUTS:
        done = subprocess.run([sys.executable, __file__, "rss-child", "--work", str(work), "--index",
                               str(folder / layout), "--queries", str(count), "--nprobe", str(nprobe)],
                              cwd=ROOT, env=environment, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the {layout} search process failed: {done.stderr[-2000:]}")
        result[layout] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_after"] = load_average()
    return result


def drawn_rows(offsets: np.ndarray, seed: int) -> np.ndarray:
    """The stored rows of 256 documents drawn at random with ``seed`` (as many as the re-scoring reads)."""
    documents = np.random.default_rng(seed).choice(len(offsets) - 1, size=256, replace=False)
    return document_rows(offsets, documents)[0]


def rotated(items: tuple, number: int) -> tuple:
    """``items`` started at ``number`` (mod their count): who goes first rotates call by call."""
    shift = number % len(items)
    return items[shift:] + items[:shift]


def timing(work: Path, vectors: int, count: int, nprobe: int) -> dict:
    """The layouts in one process, rotating query by query."""
    import faiss
    import torch

    from indexes.codes import CodeRetriever
    from pipeline.core.evaluation import evaluate
    from pipeline.core.progress import tqdm

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    folder = size_folder(work, vectors)
    dataset, queries = _queries(work, count)
    retrievers = {layout: CodeRetriever(folder / layout, threads=1, nprobe=nprobe) for layout in LAYOUTS}
    probes = {layout: Probe(r) for layout, r in retrievers.items()}
    for retriever in retrievers.values():
        retriever.search(queries[:5], K)  # warm-up: the model, the lists' pages
    ms = {layout: [] for layout in LAYOUTS}
    cpu = {layout: [] for layout in LAYOUTS}  # this thread's CPU time: what the load's preemption does not inflate
    lookup_cpu = {layout: [] for layout in LAYOUTS}
    maxsim = {layout: [] for layout in LAYOUTS}
    lookup = {layout: [] for layout in LAYOUTS}
    runs = {layout: {} for layout in LAYOUTS}
    identical, rows_read = 0, []
    first = LAYOUTS[0]
    for number, query in enumerate(tqdm(queries, desc=f"{len(retrievers[first].vectors):,} vectors", unit="query")):
        order = rotated(LAYOUTS, number)
        for layout in order:
            probes[layout].reset()
            started, cpu_started = time.perf_counter(), time.thread_time()
            hits = retrievers[layout].search([query], K)
            ms[layout].append(1000 * (time.perf_counter() - started))
            cpu[layout].append(1000 * (time.thread_time() - cpu_started))
            maxsim[layout].append(1000 * probes[layout].times["maxsim_scores"])
            runs[layout].update(hits)
        answers = [[(h.doc_id, h.score) for h in runs[layout][query.query_id]] for layout in LAYOUTS]
        identical += all(answer == answers[0] for answer in answers)
        # the lookup alone: the stored vectors of 256 documents (as many as the re-scoring reads), seeded
        offsets = retrievers[first].offsets
        rows = drawn_rows(offsets, number)
        rows_read.append(len(rows))
        for layout in order:
            started, cpu_started = time.perf_counter(), time.thread_time()
            retrievers[layout].vectors[rows]
            lookup[layout].append(1000 * (time.perf_counter() - started))
            lookup_cpu[layout].append(1000 * (time.thread_time() - cpu_started))
    qrels = [q for q in dataset.qrels if q.query_id in {q.query_id for q in queries}]
    scores = {layout: evaluate(runs[layout], qrels, "nDCG@10 R@100").aggregate for layout in LAYOUTS}
    summary = {layout: {"ms_per_query": float(np.mean(ms[layout])), "ms_median": float(np.median(ms[layout])),
                        "maxsim_ms": float(np.mean(maxsim[layout])), "lookup_ms": float(np.mean(lookup[layout])),
                        "lookup_ms_median": float(np.median(lookup[layout])),
                        "cpu_ms_per_query": float(np.mean(cpu[layout])), "cpu_ms_median": float(np.median(cpu[layout])),
                        "lookup_cpu_ms": float(np.mean(lookup_cpu[layout])),
                        "nDCG@10": scores[layout]["nDCG@10"], "R@100": scores[layout]["R@100"]} for layout in LAYOUTS}
    return {"date": now(), "load_before": None, "queries": len(queries), "nprobe": nprobe,
            "identical_queries": identical, "lookup_rows_mean": float(np.mean(rows_read)),
            "lookup_rows": "the stored vectors of 256 documents drawn at random per query (seeded)",
            "ms_ratio_format4_over_format3": float(np.mean(ms["format-4"]) / np.mean(ms["format-3"])),
            "cpu_ratio_format4_over_format3": float(np.mean(cpu["format-4"]) / np.mean(cpu["format-3"])),
            "layouts": summary}


def lookup(work: Path, vectors: int, calls: int) -> dict:
    """CPU time of ``vectors[rows]``: format 4 with and without its buckets, format 3 and format 2."""
    from indexes.codes import ivf

    folder = size_folder(work, vectors)
    whole_lists = ivf.ListVectors(folder / "format-4", True, 512)
    whole_lists.buckets = None
    ways = dict(zip(LOOKUP_WAYS, (ivf.ListVectors(folder / "format-4", True, 512), whole_lists,
                                  ivf.ListVectors(folder / "format-3", True, 512),
                                  ivf.ListVectors(folder / "format-2", True, 512))))
    offsets = np.load(folder / "format-4" / "doc_offsets.npy")
    cpu = {name: [] for name in ways}
    rows_read = []
    for number in range(calls):
        rows = drawn_rows(offsets, number)
        rows_read.append(len(rows))
        for name in rotated(LOOKUP_WAYS, number):
            started = time.thread_time()
            ways[name][rows]
            cpu[name].append(1000 * (time.thread_time() - started))
    return {"date": now(), "calls": calls, "rows_mean": float(np.mean(rows_read)),
            "cpu_ms": {name: float(np.mean(x)) for name, x in cpu.items()},
            "cpu_ms_median": {name: float(np.median(x)) for name, x in cpu.items()}}


def _loads(step: dict) -> str:
    return f"{' '.join(step['load_before'])} / {' '.join(step['load_after'])}"


def render(work: Path, command: str) -> tuple[str, dict]:
    results = []
    for folder in sorted((work / "storage").iterdir(), key=lambda p: (p.name == "all", p.name)):
        facts = {}
        for step in ("build", "rss", "time", "lookup"):
            if (folder / f"{step}.json").is_file():
                facts[step] = json.loads((folder / f"{step}.json").read_text())
        if "build" in facts:
            results.append(facts)
    results.sort(key=lambda r: r["build"]["vectors"])
    lines = [f"# IVF code index storage: format 4 (list numbers in the faiss ids) against formats 3 and 2 "
             f"({time.strftime('%Y-%m-%d', time.gmtime())}, {machine_line(1)})", "",
             f"Report command: `{command}`. The indexes: the real 512-bit codes of `code_real_scaling.py` (the union "
             "of the shipped collections, its kept shards), prefixes of whole shards, the list counts of its table; "
             "each size's IVF index built once (format 4, what a build writes) and copied to formats 3 and 2 on the "
             "same lists (`ivf.write_layout`). Steps and their commands are in `ivf-storage.json`.", "",
             "## Bytes per vector", "",
             "IVF: the faiss index file (quantizer, list table), the lists (`ivf.data`: 64-byte code + 8-byte faiss id "
             "per vector; format 4's id carries the row and two list numbers), the row lookup (format 4: "
             "`ivf_roots.npy`, the list number of every 32nd row, and the buckets; format 3: `ivf_assign.npy`, every "
             "row's list number, and the buckets; format 2: `ivf_ranks.npy`, every row's position) and the lists' "
             "table. All: with the document offsets and ids (everything a search reads but the encoder).", "",
             "| vectors | documents | lists | bits per list number | format 4 IVF | format 4 all | format 3 IVF | "
             "format 3 all | format 2 IVF | format 2 all | lookup file B/vector (4 / 3 / 2) | date | "
             "load before / after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        b = r["build"]
        cells = " | ".join(f"{b['layouts'][layout]['ivf_bytes_per_vector']:.2f} | "
                           f"{b['layouts'][layout]['bytes_per_vector']:.2f}" for layout in LAYOUTS)
        lookups = " / ".join(f"{b['layouts'][layout]['per_file_per_vector'][LOOKUP_FILES[layout]]:.2f}"
                             for layout in LAYOUTS)
        lines.append(f"| {b['vectors']:,} | {b['documents']:,} | {b['ivf_lists']} | {b['list_bits']} | {cells} | "
                     f"{lookups} | {b['date']} | {_loads(b)} |")
    lines += ["", "## Resident memory while searching", "",
              "Each layout in its own process: the retriever opened, the queries searched one at a time (top 100, "
              "one thread). Peak: `getrusage` `ru_maxrss` at the end; anon + file: `/proc/self/status` RssAnon + "
              "RssFile at the end (before the index was opened: the model and the libraries).", "",
              "| vectors | layout | queries | nprobe | peak RSS MiB | at the end: anon + file MiB | before the index: "
              "anon + file MiB | ms/query | date | load before / after |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    mib = 1024
    for r in results:
        if "rss" not in r:
            continue
        m = r["rss"]
        for layout in LAYOUTS:
            x = m[layout]
            end, start = x["after_queries_kib"], x["before_index_kib"]
            lines.append(f"| {r['build']['vectors']:,} | {layout} | {x['queries']} | {x['nprobe']} | "
                         f"{end['ru_maxrss'] / mib:.0f} | {end['RssAnon'] / mib:.0f} + {end['RssFile'] / mib:.0f} | "
                         f"{start['RssAnon'] / mib:.0f} + {start['RssFile'] / mib:.0f} | {x['ms_per_query']:.1f} | "
                         f"{m['date']} | {_loads(m)} |")
    lines += ["", "## Speed and results, the layouts in one process", "",
              "One thread, the layouts rotating query by query (which goes first rotates too). "
              "ms/query: `search([query], 100)` end to end, wall clock and this thread's CPU time (the load's "
              "preemption inflates the wall clock, not the CPU time); exact MaxSim: the stage that reads the "
              "candidates' vectors out of the lists; lookup: `vectors[rows]` alone for the stored vectors of 256 "
              "documents drawn at random per query. Identical: queries whose 100 results (ids and scores) are the "
              "same in every layout.", "",
              "| vectors | queries | nprobe | ms/query (mean / median), 4 / 3 / 2 | ratio 4 / 3 | CPU ms/query "
              "(4 / 3 / 2) | CPU ratio 4 / 3 | exact MaxSim ms (4 / 3 / 2) | lookup CPU ms (4 / 3 / 2), rows | "
              "identical | nDCG@10 (4 / 3 / 2) | R@100 (4 / 3 / 2) | date | load before / after |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def each(t: dict, key: str, digits: int) -> str:
        return " / ".join(f"{t['layouts'][layout][key]:.{digits}f}" for layout in LAYOUTS)

    for r in results:
        if "time" not in r:
            continue
        t = r["time"]
        wall = ", ".join(f"{t['layouts'][layout]['ms_per_query']:.1f} / {t['layouts'][layout]['ms_median']:.1f}"
                         for layout in LAYOUTS)
        lines.append(f"| {r['build']['vectors']:,} | {t['queries']} | {t['nprobe']} | {wall} | "
                     f"{t['ms_ratio_format4_over_format3']:.3f} | {each(t, 'cpu_ms_per_query', 1)} | "
                     f"{t['cpu_ratio_format4_over_format3']:.3f} | {each(t, 'maxsim_ms', 1)} | "
                     f"{each(t, 'lookup_cpu_ms', 2)}, {t['lookup_rows_mean']:,.0f} | "
                     f"{t['identical_queries']} of {t['queries']} | {each(t, 'nDCG@10', 4)} | {each(t, 'R@100', 4)} | "
                     f"{t['date']} | {_loads(t)} |")
    lines += ["", "The lookup alone (`lookup` step): `vectors[rows]` for the stored vectors of 256 documents drawn at "
              "random (seeded), this thread's CPU time, the four ways rotating call by call.", "",
              "| vectors | calls | rows per call | " + " | ".join(f"{way} CPU ms (mean / median)" for way in LOOKUP_WAYS)
              + " | date | load before / after |", "|---|---|---|" + "---|" * len(LOOKUP_WAYS) + "---|---|"]
    for r in results:
        if "lookup" not in r:
            continue
        x = r["lookup"]
        lines.append(f"| {r['build']['vectors']:,} | {x['calls']} | {x['rows_mean']:,.0f} | " + " | ".join(
            f"{x['cpu_ms'][n]:.2f} / {x['cpu_ms_median'][n]:.2f}" for n in LOOKUP_WAYS)
            + f" | {x['date']} | {_loads(x)} |")
    lines += ["", "| vectors | lists | k-means s | add s | merge s (format 4) | format-3 copy s | format-2 copy s |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        b = r["build"]["builds"]
        lines.append(f"| {r['build']['vectors']:,} | {r['build']['ivf_lists']} | {b['kmeans_s']:.1f} | {b['add_s']:.1f} | "
                     f"{b['merge_s']:.1f} | {b['format_3_copy_s']:.1f} | {b['format_2_copy_s']:.1f} |")
    commands = [r[s]["command"] for r in results for s in ("build", "rss", "time", "lookup") if s in r]
    lines += ["", "Commands: " + "; ".join(f"`{c}`" for c in commands) + "."]
    return "\n".join(lines), {"command": command, "date": now(), "sizes": results}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["build", "rss", "rss-child", "time", "lookup", "report"])
    parser.add_argument("--work", type=Path, required=True, help="code_real_scaling.py's work folder")
    parser.add_argument("--vectors", type=int, default=0, help="size: the first shards holding this many (0: all)")
    parser.add_argument("--ivf-nlist", type=int, default=0, help="build: IVF lists (0: the default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--simulate", default="simulate-4M.json", help="the simulate step's JSON (its encoder)")
    parser.add_argument("--queries", type=int, default=200,
                        help="rss / time: the first N queries of the union; lookup: calls")
    parser.add_argument("--nprobe", type=int, default=16, help="rss / time: lists visited per query token")
    parser.add_argument("--index", type=Path, help="rss-child: the index")
    parser.add_argument("--output", help="report: Markdown file (JSON beside it)")
    args = parser.parse_args(argv)
    work = args.work
    if args.step == "rss-child":
        print(json.dumps(rss_child(args.index, work, args.queries, args.nprobe)))
        return
    if args.step == "report":
        text, data = render(work, command_line("benchmarks/code_ivf_storage.py"))
        publish(text, args.output)
        if args.output:
            write_json(Path(args.output).with_suffix(".json"), data)
        return
    folder = size_folder(work, args.vectors)
    folder.mkdir(parents=True, exist_ok=True)
    if args.step == "build":
        result = build(work, args.vectors, args.ivf_nlist, args.seed, args.simulate)
    elif args.step == "rss":
        result = rss(work, args.vectors, args.queries, args.nprobe)
    elif args.step == "lookup":
        load_before = load_average()
        result = {**lookup(work, args.vectors, args.queries), "load_before": load_before, "load_after": load_average()}
    else:
        load_before = load_average()
        result = {**timing(work, args.vectors, args.queries, args.nprobe), "load_before": load_before,
                  "load_after": load_average()}
    write_json(folder / f"{args.step}.json", {**result, "command": command_line("benchmarks/code_ivf_storage.py")})
    print(json.dumps(result, indent=1)[:3000])


if __name__ == "__main__":
    main()
