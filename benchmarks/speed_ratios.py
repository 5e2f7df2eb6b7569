"""Build ``benchmarks/results/speed/ratios.json``: the speed ratios of issue 37, measured in one process on one
machine, with the load average at each measurement.

    python benchmarks/speed_ratios.py [--groups srnn bm25s] [--matchzoo matchzoo-py-1.1.1.tar.gz]
        [--output benchmarks/results/speed/ratios.json]

Each group of keys is one function in :data:`GROUPS` that measures and returns ``{key: value}`` plus its
details; a group not run (not named in ``--groups``, or one whose function is not in this file yet) keeps
the keys the existing file has, so groups can be added or re-measured one at a time. The file holds
``{key: value}`` at the top level, and under ``"measured"`` for every key the date, the command and the load
average (1, 5, 15 min) when its group finished; ``"details"`` holds each group's rows.

Groups:

* ``srnn``: ``srnn_min_ratio_fp32``, ``srnn_min_ratio_bf16``: the smallest ratio MatchZoo-py's SpatialGRU
  time / the wavefront's over every shape, hidden size and pass (scoring forward, training forward+backward)
  of ``benchmarks/match_srnn_wavefront.py`` (which this group runs; it also rewrites that benchmark's
  result files). Needs MatchZoo-py 1.1.1's source (``--matchzoo``; see that script).
* ``demo``: ``demo_wall_s_before``, ``demo_wall_s_after``: ``make demo``'s command from an empty
  ``PIPELINE_HOME``, in a worktree of ``--demo-before`` and then in this checkout, back to back (idle machine).
* ``ce``: ``ce_bf16_vs_st_bf16``, ``ce_bf16_vs_st_fp32``, ``ce_bf16_gflops``, ``bf16_peak_gflops``: the
  cross-encoder's bf16 scoring of DL19 BM25 pairs against sentence-transformers' ``CrossEncoder`` (float32 and
  bf16 autocast) and the one-thread bf16 matmul peak (``benchmarks/cross_encoder_bf16_speed.py``).
* ``bm25s``: ``bm25s_qps_ratio``: the smallest bm25s / Lucene queries-per-second ratio over the collections
  of ``benchmarks/bm25s_first_stage.py`` (cranfield, vaswani, nfcorpus, microblog-2014, dl19; its result files
  are rewritten too).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TQDM_DISABLE", "1")

from pipeline.core.atomic import write_text  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUTPUT = RESULTS / "speed" / "ratios.json"


def srnn_group(args) -> tuple[dict, dict]:
    """``srnn_min_ratio_fp32`` / ``_bf16`` and the table's rows (also written as the wavefront benchmark's files)."""
    import torch

    import match_srnn_wavefront as bench
    from pipeline.core.runtime import native_bf16

    if not args.matchzoo:
        raise SystemExit(f"error: the srnn group needs --matchzoo: {bench.DOWNLOAD_HINT}")
    torch.set_num_threads(1)
    rows = bench.measure(args.matchzoo, progress=lambda row: print(bench.table([row])[-1], flush=True))
    minima = bench.minimum_ratios(rows)
    command = f"python benchmarks/speed_ratios.py {' '.join(sys.argv[1:])} (group srnn)"
    lines = [f"# Match-SRNN spatial GRU: wavefront vs MatchZoo-py's SpatialGRU ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"{machine()}, torch {torch.__version__} on 1 thread, native bf16: {native_bf16()})",
             f"Command: `{command}` (the defaults of benchmarks/match_srnn_wavefront.py)", "",
             "h_MN of one spatial GRU (c = 10, batch 32, random rectified s_ij, same weights) by `SpatialGRU.corners` "
             "and by MatchZoo-py 1.1.1's `SpatialGRU.forward`; median of 2 alternating runs after a warm-up; ratio "
             "= MatchZoo-py time / wavefront time. fwd: scoring under inference_mode; fwd+bwd: forward and backward "
             "down to s and the weights. bf16: both forwards under CPU bfloat16 autocast, backward outside it"
             + ("" if native_bf16() else "; this CPU has no bfloat16 matrix instructions, so the wavefront's "
                "recursion stays float32 under autocast while the anchor's products follow it (the ratio against "
                "the anchor's float32 time of the fp32 row is beside)") + ". Float32 outputs agree to 1e-6 "
             "(asserted); the column 'max abs diff' is against the anchor in float32.", "",
             *bench.table(rows), "",
             "Smallest ratio over every shape and pass: " + ", ".join(f"{k} {v:.2f}x" for k, v in minima.items())]
    folder = RESULTS / "match-srnn"
    write_text(folder / "wavefront-speed.md", "\n".join(lines) + "\n")
    write_text(folder / "wavefront-speed.json", json.dumps({"command": command, "rows": rows, "min_ratio": minima,
                                                            "native_bf16": native_bf16()}, indent=1) + "\n")
    values = {f"srnn_min_ratio_{precision}": round(value, 3) for precision, value in minima.items()}
    return values, {"srnn": rows}


def bm25s_group(args) -> tuple[dict, dict]:
    """``bm25s_qps_ratio`` and the per-collection rows (also written as the first-stage benchmark's files)."""
    import bm25s_first_stage as bench

    rows = []
    for name in args.bm25s_datasets:
        rows.append(bench.compare(name))
        print(bench.table(rows)[-1], flush=True)
    command = f"python benchmarks/speed_ratios.py {' '.join(sys.argv[1:])} (group bm25s)"
    lines = [f"# bm25s vs Lucene first stage ({time.strftime('%Y-%m-%d %H:%M')}, {machine()})",
             f"Command: `{command}` (the defaults of benchmarks/bm25s_first_stage.py)", "",
             "Every query's top 1000, Lucene and bm25s (2 search threads each, the first stage default) "
             "alternately, median of 3 after a warm-up; both built with their defaults before timing (build seconds: the first build).", "",
             *bench.table(rows)]
    folder = RESULTS / "first-stage"
    write_text(folder / "bm25s.md", "\n".join(lines) + "\n")
    write_text(folder / "bm25s.json", json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    return {"bm25s_qps_ratio": round(min(r["qps_ratio"] for r in rows), 2)}, {"bm25s": rows}


def demo_group(args) -> tuple[dict, dict]:
    """``demo_wall_s_before`` / ``demo_wall_s_after``: the wall seconds of ``make demo``'s command
    (``python -m pipeline.run --reranker hcan``) from a fresh clone, i.e. an empty ``PIPELINE_HOME``, run back
    to back on this machine: first in a git worktree of ``--demo-before`` (the code before issue 37's item 3),
    then in this checkout. Meaningful on an idle machine only (the load average is recorded with each)."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parent.parent
    python = str(root / ".venv" / "bin" / "python") if (root / ".venv" / "bin" / "python").is_file() else sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch) / "before"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(before), args.demo_before],
                       check=True, capture_output=True)
        try:
            for label, tree in (("before", before), ("after", root)):
                home = Path(scratch) / f"home-{label}"
                home.mkdir()
                environment = {**os.environ, "PIPELINE_HOME": str(home), "PIPELINE_DATA": str(args.demo_data)}
                start_load = [round(x, 2) for x in os.getloadavg()]
                start = time.perf_counter()
                done = subprocess.run([python, "-m", "pipeline.run", "--reranker", "hcan"], cwd=tree, env=environment,
                                      capture_output=True, text=True)
                wall = time.perf_counter() - start
                if done.returncode != 0:
                    raise SystemExit(f"error: the demo ({label}) failed: {done.stderr[-2000:]}")
                table = [line for line in done.stdout.splitlines() if line.startswith("|")]
                rows.append({"code": label, "commit": args.demo_before if label == "before" else "working tree",
                             "wall_s": round(wall, 1), "load_start": start_load,
                             "load_end": [round(x, 2) for x in os.getloadavg()], "table": table})
                print(rows[-1], flush=True)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(before)], capture_output=True)
    return {"demo_wall_s_before": rows[0]["wall_s"], "demo_wall_s_after": rows[1]["wall_s"]}, {"demo": rows}


def ce_group(args) -> tuple[dict, dict]:
    """``ce_bf16_vs_st_bf16``, ``ce_bf16_vs_st_fp32``, ``ce_bf16_gflops``, ``bf16_peak_gflops``: the cross-encoder's
    bf16 scoring against sentence-transformers' ``CrossEncoder`` and the measured matmul peak
    (``benchmarks/cross_encoder_bf16_speed.py``, whose report it also writes)."""
    import cross_encoder_bf16_speed as bench
    from common import publish

    result = bench.measure(args.ce_pairs)
    command = f"python benchmarks/speed_ratios.py {' '.join(sys.argv[1:])} (group ce)"
    publish(bench.report(result, command), RESULTS / "speed" / "cross-encoder-bf16.md", result)
    keys = ("ce_bf16_vs_st_bf16", "ce_bf16_vs_st_fp32", "ce_bf16_gflops", "bf16_peak_gflops")
    return {key: round(result[key], 2) for key in keys}, {"ce": result}


#: key group -> function(args) -> ({key: value}, {detail name: rows})
GROUPS = {"srnn": srnn_group, "bm25s": bm25s_group, "demo": demo_group, "ce": ce_group}


def machine() -> str:
    """The machine in words: architecture, cores, and on Linux the CPU's model and its bfloat16 instructions
    (AMX, AVX512-BF16), on which the bf16 keys depend."""
    words = f"{platform.machine()}, {os.cpu_count()} cores (shared)"
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return words
    first_cpu = info.split("\n\n", 1)[0]
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first_cpu.splitlines())}
    model, flags = fields.get("model name", ""), set(fields.get("flags", "").split())
    bf16 = [name for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16")) if flag in flags]
    return f"{words}, {model or 'CPU'}, bf16 instructions: {' + '.join(bf16) or 'none (emulated)'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", nargs="+", default=list(GROUPS), choices=list(GROUPS))
    parser.add_argument("--matchzoo", default=os.environ.get("MATCHZOO_SDIST"),
                        help="MatchZoo-py 1.1.1 sdist for the srnn group ($MATCHZOO_SDIST)")
    parser.add_argument("--bm25s-datasets", nargs="+",
                        default=["cranfield", "vaswani", "nfcorpus", "microblog-2014", "dl19"])
    parser.add_argument("--ce-pairs", type=int, default=600, help="ce group: DL19 BM25 pairs (default 600)")
    parser.add_argument("--demo-before", default="47b812d",
                        help="demo group: the commit whose demo is 'before' (default: the code before issue 37 item 3)")
    parser.add_argument("--demo-data", default=os.environ.get("PIPELINE_DATA", str(Path(__file__).resolve().parents[2]
                                                                                  / "shared" / "data")),
                        help="demo group: the data directory (PIPELINE_DATA)")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT))
    args = parser.parse_args()
    output = Path(args.output)
    try:
        existing = json.loads(output.read_text(encoding="utf-8")) if output.is_file() else {}
    except ValueError:
        print(f"error: {output} is not JSON; move it away to rebuild it", file=sys.stderr)
        sys.exit(2)
    result = {key: value for key, value in existing.items() if key not in ("measured", "details", "machine")}
    measured, details = dict(existing.get("measured", {})), dict(existing.get("details", {}))
    command = "python benchmarks/speed_ratios.py " + " ".join(sys.argv[1:])
    for group in args.groups:
        values, rows = GROUPS[group](args)
        stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": command, "group": group,
                 "loadavg": [round(v, 2) for v in os.getloadavg()], "machine": machine()}
        for key, value in values.items():
            result[key] = value
            measured[key] = stamp
        details.update(rows)
        # written after every group, so a later group's failure keeps what was measured
        write_text(output, json.dumps({**result, "measured": measured, "details": details}, indent=1) + "\n")
        print(json.dumps({key: values[key] for key in values}), flush=True)


if __name__ == "__main__":
    main()
