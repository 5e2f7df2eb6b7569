"""Resident memory of the document store: the dict per process against the store on disk (SQLite).

    python benchmarks/doc_store_memory.py [--datasets nfcorpus vaswani-npl microblog-2014] [--lookups 2000]
        [--output benchmarks/results/codes/doc-store.md]

Per dataset and mode, one fresh process (so that nothing is shared between the measurements) loads the
dataset, records its resident set (``VmRSS``), calls ``dataset.doc_store(on_disk=...)`` and reads the texts of
``--lookups`` documents drawn with a fixed seed (as a re-ranker reads a ranking's candidates), then records
the resident set again: the difference is what holding the store costs the process. Also the time to get
the store (the disk store's first build is timed in a process of its own before the measured one opens it)
and the mean time per lookup. The disk stores are built under ``PIPELINE_HOME``'s ``cache/docstore``.
Results: Markdown at ``--output`` and JSON beside it, with the command, date and load average.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, machine_line, publish  # noqa: E402


def rss_mib(field: str = "RssAnon") -> float:
    """This process's resident memory, MiB: ``RssAnon`` (private: what the process alone pays for; the
    default), ``RssFile`` (pages of files it maps, shared with every process that reads them) or ``VmRSS``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(name: str, mode: str, lookups: int) -> dict:
    """One measurement in this process (see the module docstring)."""
    import gc

    import numpy as np

    from pipeline.core.datasets import load_dataset

    gc.collect()
    start = rss_mib()
    dataset = load_dataset(name)
    ids = [doc.doc_id for doc in dataset.docs_iter()]
    chosen = [ids[i] for i in np.random.default_rng(0).choice(len(ids), size=min(lookups, len(ids)), replace=False)]
    del ids
    gc.collect()
    before, file_before = rss_mib(), rss_mib("RssFile")
    started = time.perf_counter()
    store = dataset.doc_store(on_disk=mode == "disk")
    opened = time.perf_counter() - started
    started = time.perf_counter()
    characters = sum(len(store[doc_id].text) for doc_id in chosen)
    lookup = (time.perf_counter() - started) / len(chosen)
    gc.collect()
    file_pages = rss_mib("RssFile") - file_before
    return {"dataset": name, "mode": mode, "file_pages_mib": file_pages, "documents": len(store), "rss_start_mib": start,
            "process_mib": rss_mib() - start, "rss_before_mib": before,
            "rss_after_mib": rss_mib(), "store_mib": rss_mib() - before, "open_s": opened,
            "lookup_us": 1e6 * lookup, "characters_read": characters,
            "file_bytes": store.path.stat().st_size if mode == "disk" else None}


def run_child(name: str, mode: str, lookups: int) -> dict:
    """:func:`measure` in a fresh Python process."""
    output = subprocess.run([sys.executable, __file__, "--child", name, mode, str(lookups)], check=True,
                            capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(measure(argv[1], argv[2], int(argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl", "microblog-2014"])
    parser.add_argument("--lookups", type=int, default=2000, help="documents read per measurement (default 2000)")
    parser.add_argument("--output", help="Markdown file to write (and .json beside it)")
    args = parser.parse_args(argv)
    command = "python " + shlex.join(["benchmarks/doc_store_memory.py", *argv])
    load_before = load_average()
    rows = []
    for name in args.datasets:
        build = run_child(name, "disk", 1)  # builds the store when it is not there yet
        for mode in ("memory", "disk"):
            row = run_child(name, mode, args.lookups)
            row["first_open_s"] = build["open_s"] if mode == "disk" else row["open_s"]
            rows.append(row)
    load_after = load_average()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Document store: dict per process vs. on disk ({date}, {machine_line(1)})", "",
             f"Command: `{command}`. Load average (1, 5, 15 min) before / after: {' '.join(load_before)} / "
             f"{' '.join(load_after)}.", "",
             "Each row: a fresh process loads the dataset, then `dataset.doc_store(on_disk=...)` and reads "
             f"{args.lookups} documents drawn with seed 0. \"store MiB\": private resident memory (`RssAnon`) after minus before; \"file pages MiB\": the growth of `RssFile` meanwhile (the store file's pages in the page cache, shared by every process that reads them). "
             "\"process MiB\": private resident memory after minus before loading the dataset (what the loader keeps plus the "
             "store). "
             "\"first get\": the disk store's build (first use in an empty home) or the dict's construction; "
             "\"get\": the measured process's call (the disk store opened, the dict built again).", "",
             "| dataset | documents | store | store MiB (private) | file pages MiB (shared) | process MiB (private) "
             "| file MiB | first get (s) | get (s) | lookup (us) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        file_mib = f"{row['file_bytes'] / 2**20:.1f}" if row["file_bytes"] else "-"
        lines.append(f"| {row['dataset']} | {row['documents']:,} | {row['mode']} | {row['store_mib']:.1f} | "
                     f"{row['file_pages_mib']:.1f} | "
                     f"{row['process_mib']:.1f} | "
                     f"{file_mib} | {row['first_open_s']:.2f} | {row['open_s']:.3f} | {row['lookup_us']:.1f} |")
    text = "\n".join(lines)
    publish(text, args.output)
    if args.output:
        from pipeline.core.atomic import write_text

        write_text(Path(args.output).with_suffix(".json"), json.dumps(
            {"command": command, "date": date, "load_before": load_before, "load_after": load_after,
             "lookups": args.lookups, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
