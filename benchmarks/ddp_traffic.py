"""What data-parallel training sends per step, and what a step costs, 1 against 2 processes (issue 32 item 5).

Trains a re-ranker (default KNRM, GloVe 50d embeddings, its default pairwise training) for ``--steps``
optimizer steps on fold 0 of a dataset, under ``torchrun --nproc-per-node 1|2`` (gloo, one thread per rank),
and records:

* bytes all-reduced per step: with DistributedDataParallel, the buckets its communication hook receives
  (a counting copy of torch's default ``allreduce_hook``); with the hand-written sync of earlier commits
  (``--tree`` pointing at a checkout of one), the tensors handed to ``torch.distributed.all_reduce``;
* seconds per step (median over the steps after the first ``--warmup``), measured on rank 0 between
  optimizer steps, so every rank's forward, backward, communication and step is inside.

The driver (no torchrun in the environment) runs every combination of ``--trees`` x worlds x embeddings
(trainable, frozen) as a subprocess and writes ``benchmarks/results/distributed/ddp_traffic.{json,md}``
with the command, the date and the load average before and after.

    python benchmarks/ddp_traffic.py --dataset wikiqa --steps 40 --trees new=. old=/tmp/old-checkout
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "distributed"


def worker(args) -> None:
    """One measured training under torchrun (or alone); rank 0 writes ``args.out``."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from pipeline.core.datasets import load_dataset
    from pipeline.engine.protocols import make_protocol
    from rerankers import reranker_class
    from infra import distributed
    from rerankers.training.data import RankingData

    torch.set_num_threads(1)
    distributed.init_from_environment()
    sent = {"bytes": 0, "calls": 0}
    plain_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor, *a, **k):  # the hand-written sync's flat all_reduce
        sent["bytes"] += tensor.numel() * tensor.element_size()
        sent["calls"] += 1
        return plain_all_reduce(tensor, *a, **k)

    dist.all_reduce = counting_all_reduce

    def counting_hook(state, bucket):  # torch's allreduce_hook on the uncounted all_reduce, each bucket counted once
        tensor = bucket.buffer().div_(dist.get_world_size())
        sent["bytes"] += tensor.numel() * tensor.element_size()
        sent["calls"] += 1
        return plain_all_reduce(tensor, async_op=True).get_future().then(lambda done: done.value()[0])

    plain_init = DistributedDataParallel.__init__

    def init_with_counting_hook(self, *a, **k):
        plain_init(self, *a, **k)
        self.register_comm_hook(None, counting_hook)

    DistributedDataParallel.__init__ = init_with_counting_hook
    stamps, sent_at_step = [], []

    def after_step(optimizer, *_):
        stamps.append(time.perf_counter())
        sent_at_step.append(sent["bytes"])

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(after_step)

    dataset = load_dataset(args.dataset)
    fold = make_protocol(dataset, None, 42)[0]
    cls = reranker_class(args.reranker)
    reranker = cls.from_options({"epochs": 1, "freeze_embeddings": args.frozen}, seed=42)
    batch = reranker.train_config.batch_size
    units = batch // (2 if reranker.train_config.loss == "hinge" else 1)  # hinge: a unit is a pair of documents
    reranker.train_config.max_examples_per_epoch = units * args.steps
    train = RankingData.from_dataset(dataset, fold.train, dataset.first_stage)
    reranker.prepare(train, dataset)
    trainable = sum(p.numel() for p in reranker.module.parameters() if p.requires_grad)
    dense = sum(p.numel() for p in reranker.module.parameters())
    reranker.fit(train, None)
    if distributed.is_main():
        per_step = [b - a for a, b in zip(stamps[args.warmup:], stamps[args.warmup + 1:])]
        sent_per_step = [b - a for a, b in zip(sent_at_step[args.warmup:], sent_at_step[args.warmup + 1:])]
        result = {"world": distributed.world_size(), "steps": len(stamps), "parameters": dense,
                  "trainable_parameters": trainable, "frozen_embeddings": args.frozen,
                  "bytes_per_step": statistics.median(sent_per_step) if sent_per_step else 0,
                  "collectives": sent["calls"], "median_step_s": statistics.median(per_step),
                  "mean_step_s": statistics.fmean(per_step), "batch": batch}
        Path(args.out).write_text(json.dumps(result))
    distributed.shutdown()


def driver(args) -> None:
    """Every combination as a subprocess; the results table."""
    import socket

    rows, load_before = [], Path("/proc/loadavg").read_text().split()[:3]
    for label, tree in (t.split("=", 1) for t in args.trees):
        for frozen in (False, True):
            for world in (1, 2):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    port = sock.getsockname()[1]
                out = OUT / f".{label}-{world}-{frozen}.json"
                command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world),
                           "--master-port", str(port), str(Path(__file__).resolve()), "--worker", "--out", str(out),
                           "--dataset", args.dataset, "--reranker", args.reranker, "--steps", str(args.steps),
                           "--warmup", str(args.warmup)] + (["--frozen"] if frozen else [])
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "OMP_NUM_THREADS": "1",
                       "TQDM_DISABLE": "1"}
                started = time.perf_counter()
                done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=Path(tree).resolve())
                if done.returncode != 0:
                    raise SystemExit(f"{label} world {world}: failed\n{done.stderr[-3000:]}")
                row = {"code": label, **json.loads(out.read_text()), "wall_s": round(time.perf_counter() - started, 1)}
                out.unlink()
                print(json.dumps(row), flush=True)
                rows.append(row)
    record = {"command": "python " + " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%d %H:%M UTC"), "loadavg_before": load_before,
              "loadavg_after": Path("/proc/loadavg").read_text().split()[:3], "dataset": args.dataset,
              "reranker": args.reranker, "note": args.note, "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ddp_traffic.json").write_text(json.dumps(record, indent=1))
    write_table(record)


def write_table(record: dict) -> None:
    """``ddp_traffic.md`` from a driver's record."""
    lines = [f"# Bytes all-reduced per step and seconds per step, {record['reranker']} on {record['dataset']}", "",
             f"`{record['command']}` ({record['date']}; load average {' '.join(record['loadavg_before'])} before, "
             f"{' '.join(record['loadavg_after'])} after, on 2 cores shared with other jobs; gloo on CPU, one "
             f"thread per rank). {record.get('note') or ''}".rstrip(), "",
             "| code | embeddings | processes | trainable parameters | bytes all-reduced per step | collectives per step | median s per step |",
             "|---|---|---|---|---|---|---|"]
    for row in record["rows"]:
        lines.append(f"| {row['code']} | {'frozen' if row['frozen_embeddings'] else 'trained'} | {row['world']} | "
                     f"{row['trainable_parameters']:,} | {row['bytes_per_step']:,.0f} | "
                     f"{row['collectives'] / max(1, row['steps']):.1f} | {row['median_step_s']:.4f} |")
    (OUT / "ddp_traffic.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--frozen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", default="wikiqa")
    parser.add_argument("--reranker", default="knrm")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--trees", nargs="+", default=[f"ddp={ROOT}"],
                        help="LABEL=DIRECTORY of a checkout to measure (e.g. the commit before DDP)")
    parser.add_argument("--note", default="", help="recorded with the results (e.g. which commits the trees are)")
    parser.add_argument("--table-only", action="store_true", help="rewrite the .md table from the .json")
    args = parser.parse_args()
    if args.table_only:
        record = json.loads((OUT / "ddp_traffic.json").read_text())
        record["note"] = args.note or record.get("note", "")
        (OUT / "ddp_traffic.json").write_text(json.dumps(record, indent=1))
        write_table(record)
    else:
        worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    main()
