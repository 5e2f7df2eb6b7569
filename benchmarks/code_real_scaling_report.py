"""The scaling report (``code_real_scaling.py report``): the Markdown tables and their JSON, from the JSON the
other steps wrote into ``--work``."""
from __future__ import annotations

import json
import time
from pathlib import Path

from code_real_scaling_common import K, now
from common import machine_line


def later_steps(work: Path) -> list[Path]:
    """The ``grow-N.json`` and ``simulate-*.json`` files in the order the steps ran (their dates)."""
    paths = [*work.glob("grow-*.json"), *work.glob("simulate-*.json")]
    return sorted(paths, key=lambda path: json.loads(path.read_text()).get("date", ""))


def step_commands(work: Path) -> list[str]:
    """The commands of the steps whose JSON is in ``work``, in the order they ran."""
    found = []
    for path in [work / "union.json", work / "estimate.json", work / "cut.json", work / "simulate.json",
                 *later_steps(work), *sorted(work.glob("measure-*.json"))]:
        if path.is_file():
            facts = json.loads(path.read_text())
            if path.name == "cut.json":  # the interrupted first build came before the cut
                found.append(facts["command"].replace(" cut ", " simulate ").split(" --ivf-nlist")[0]
                             + " --nproc 2 --ivf-nlist 2048  # stopped when the time ran out")
            elif path.name == "union.json" and "# " in facts["command"]:  # rewritten by the cut or the growth
                found.append(facts["command"].split(" --")[0].rsplit(" ", 1)[0] + " union --work " + str(work))
                continue
            found.append(facts.get("runner") or facts["command"])
    return found


def render(work: Path, command: str) -> tuple[str, dict]:
    """The report of the steps whose JSON is in ``work``: ``(Markdown, the JSON written beside it)``."""
    union = json.loads((work / "union.json").read_text())
    estimate_ = json.loads((work / "estimate.json").read_text()) if (work / "estimate.json").is_file() else None
    built = json.loads((work / "simulate.json").read_text())
    sizes = sorted((json.loads(p.read_text()) for p in work.glob("measure-*.json")), key=lambda r: r["vectors"])
    lines = [f"# The code index on real codes: every shipped collection in one index "
             f"({time.strftime('%Y-%m-%d', time.gmtime())}, {machine_line(1)})", "",
             f"Report command: `{command}`. Each step's command, date and load average are below and in "
             "`real-scaling.json`.", "",
             "Steps run, in order: " + "; ".join(f"`{c}`" for c in step_commands(work)) + ".", "",
             "## The index", ""]
    lines.append(f"One encoder for every collection: all-MiniLM-L6-v2 + linear projection to 128 floats trained 10 "
                 f"steps on NFCorpus's dev queries, hashed by 512 random hyperplanes (512-bit codes; the encoder of "
                 f"`code_latency.py`). Documents (the union, ids prefixed by collection, in a seeded random order, "
                 f"`union` step, {union['date']}):")
    lines += ["", "| collection | documents | in the index | queries |", "|---|---|---|---|"]
    for prefix, facts in union["collections"].items():
        lines.append(f"| {facts['dataset']} | {facts['documents']:,} | {facts['kept']:,} | {facts['queries']} |")
    lines.append(f"| **all** | {sum(f['documents'] for f in union['collections'].values()):,} | "
                 f"{union['documents']:,} | {union['queries']} |")
    if union.get("max_docs") and union["documents"] < sum(f["documents"] for f in union["collections"].values()):
        lines += ["", f"Only the first {union['max_docs']:,} documents of the random order were indexed (what the "
                      "time allowed: see the estimate below), a uniform sample of every collection."]
    if estimate_:
        lines += ["", f"Estimate (`estimate`, {estimate_['date']}, load {' '.join(estimate_['load'])}): "
                      f"{estimate_['vectors_estimated']:,} token vectors in all; the encoder did "
                      f"{estimate_['vectors_per_second']:.0f} vectors/s on one thread ({estimate_['sample_documents']} "
                      f"documents), {estimate_['estimated_encode_hours_one_thread']:.2f} h for everything. Vectors per "
                      "document: " + ", ".join(f"{p} {v['mean']:.1f}" for p, v in estimate_["per_collection"].items())
                      + "."]
    stages = built["stages"]
    cutting = json.loads((work / "cut.json").read_text()) if (work / "cut.json").is_file() else None
    if cutting:
        lines += ["", f"The build was stopped when the time ran out ({cutting['date']}, `cut` step) with "
                      f"{cutting['shards']} shards of 1,024 documents encoded; the union was cut to those documents "
                      "and the same command resumed after them (the shards are the resumable unit of a build)."]
    for growing in (json.loads(path.read_text()) for path in later_steps(work) if path.name.startswith("grow-")):
        lines += ["", f"The union was then grown to {growing['documents']:,} documents ({growing['shards']} shards, "
                      f"`grow` step, {growing['date']}): the same command, started again, kept the "
                      f"{growing['already_encoded']} shards already encoded and encoded only the rest, then built "
                      "the index of that size (its stages: the table of later builds below)."]
    lines += ["", "## Built as 4 GPUs would build MS MARCO: 2 processes on the CPU", "",
              f"`{built['command']}` ({built['date']}, load before / after {' '.join(built['load_before'])} / "
              f"{' '.join(built['load_after'])}): {built['documents']:,} documents, {built['vectors']:,} token vectors, "
              f"{built['ivf_lists']} lists, {built['index_bytes'] / 2**20:.0f} MiB of faiss index (lists included). "
              "Stage ends seen in the cache (polled every 0.5 s):", "",
              "| stage | seconds | what |", "|---|---|---|",
              f"| before encoding | {stages['before_encoding_s']:.1f} | start, dataset read, encoder loaded (cached) |"
              if not cutting else "| before encoding | | (first run: start, dataset read, encoder loaded; not recorded) |",
              f"| encode | {stages['encode_s']:.1f} | both ranks, 1 thread each, every other shard of 1,024 documents |"
              if not cutting else
              f"| encode | {cutting['encode_s']:.1f} | first run: both ranks, 1 thread each, every other shard of 1,024 "
              f"documents, until the time ran out ({cutting['shards']} shards, {cutting['vectors']:,} vectors) |",
              f"| k-means | {stages['kmeans_s']:.1f} | rank 0: sample of the shards, quantizer trained (the other rank waits)"
              + (": with the resumed run's start-up (dataset read, encoder loaded, every shard found and checked) |"
                 if cutting else " |"),
              f"| add | {stages['add_s']:.1f} | each rank adds its own shards to a copy of the quantizer |",
              f"| merge | {stages['merge_s']:.1f} | rank 0 merges the blocks' lists on disk, writes the index |",
              f"| total | {stages['total_s']:.1f} | torchrun start to exit |"]
    rebuilds = [json.loads(path.read_text()) for path in later_steps(work) if path.name.startswith("simulate-")]
    if rebuilds:
        lines += ["", "Later builds (the same command after each growth; encode: the new shards only):", "",
                  "| documents | vectors | IVF lists | encode s | k-means s | add s | merge s | total s | date | "
                  "load before / after |", "|---|---|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join([f"{build['documents']:,}", f"{build['vectors']:,}", str(build['ivf_lists']),
                                     *(f"{build['stages'][stage]:.1f}" for stage in
                                       ("encode_s", "kmeans_s", "add_s", "merge_s", "total_s")),
                                     build["date"], f"{' '.join(build['load_before'])} / "
                                                    f"{' '.join(build['load_after'])}"]) + " |"
                  for build in rebuilds]
    lines += ["", "## Flat against IVF at growing size", "",
              f"Prefixes of the index (whole shards, a uniform sample of the union), each in its own process; "
              f"queries: the union's {sizes[0]['queries'] if sizes else 0} (40 judged queries of each collection), "
              f"top {K} documents, k' {sizes[0]['k_prime'] if sizes else ''} neighbours per query token, rescore_depth "
              f"{sizes[0]['rescore_depth'] if sizes else ''} (the defaults), one thread, the configurations "
              "alternating query by query, queries encoded by the default query_runtime (ONNX Runtime where it is "
              "installed; recorded per size as `query_runtime` since 2026-11-26). ms/query: "
              "`CodeRetriever.search([query], 100)` end to end; recall: share "
              "of the flat search's top 100 documents the IVF search returns (docs), and of the flat index's k' "
              "neighbours per query token (tokens).", "",
              "| vectors | documents | configuration | ms/query (mean / median) | encode | kNN | exact MaxSim "
              "(docs, vectors) | recall@100 docs | recall@k' tokens | nDCG@10 | R@100 | bytes / vector | "
              "RSS MiB (anon + file) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        memory = size["memory_kib_ivf_only"]
        for row in size["rows"]:
            kind = "flat" if row["nprobe"] is None else "ivf"
            st = row["stages_ms"]
            start = size.get("memory_kib_start", {})
            rss = (f"{memory.get('RssAnon', 0) / 1024:.0f} + {memory.get('RssFile', 0) / 1024:.0f} (before the "
                   f"index: {start.get('RssAnon', 0) / 1024:.0f} + {start.get('RssFile', 0) / 1024:.0f})") \
                if kind == "ivf" else f"peak {size['memory_kib_end'].get('VmHWM', 0) / 1024:.0f} (with flat loaded)"
            lines.append(
                f"| {size['vectors']:,} | {size['documents']:,} | {row['config']} | {row['ms_per_query']:.1f} / "
                f"{row['ms_median']:.1f} | {st['encode_queries']:.1f} | {st['neighbours']:.1f} | "
                f"{st['maxsim_scores']:.1f} ({row['scored_docs']:.0f}, {row['scored_vectors']:,.0f}) | {row['doc_recall@100']:.3f} | {row['token_recall']:.3f} | "
                f"{row['nDCG@10']:.4f} | {row['R@100']:.4f} | {size['bytes_per_vector'][kind]:.1f} | {rss} |")
    lines += ["", "| vectors | IVF lists | flat build s | IVF k-means s | IVF add s | IVF merge s | date | load before / after |",
              "|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        b = size["builds"]
        lines.append(f"| {size['vectors']:,} | {size['ivf_lists']} | {b['flat']['add_s']:.1f} | "
                     f"{b['ivf'].get('kmeans_s', float('nan')):.1f} | {b['ivf'].get('add_s', float('nan')):.1f} | "
                     f"{b['ivf'].get('merge_s', float('nan')):.1f} | {size['date']} | {' '.join(size['load_before'])} / "
                     f"{' '.join(size['load_after'])} |")
    data = {"command": command, "date": now(), "union": union, "estimate": estimate_, "simulate": built,
            "cut": cutting, "later_builds": rebuilds, "sizes": sizes,
            "growths": [json.loads(path.read_text()) for path in later_steps(work) if path.name.startswith("grow-")]}
    return "\n".join(lines), data
