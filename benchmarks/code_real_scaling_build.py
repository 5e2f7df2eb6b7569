"""Building the union's code index (``code_real_scaling.py estimate`` and ``simulate``): the encoding cost to
expect, then the documented multi-process build run end to end under ``torchrun``, each stage's end seen in the
cache."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from code_real_scaling_common import ENCODER_OPTIONS, INDEX_FLAGS, ROOT, UNION, code_root, load_union, now
from common import load_average


def encoder_checkpoint():
    """The cached (or newly trained) encoder of :data:`ENCODER_OPTIONS`: ``(checkpoint path, options)``."""
    from indexes.codes import CodeOptions, obtain_encoder, resolve_training

    options = CodeOptions(**ENCODER_OPTIONS, threads=1)
    source = resolve_training(load_union_dataset_stub(), options.train_dataset)
    checkpoint, _ = obtain_encoder(options, source, code_root())
    return checkpoint, options


def load_union_dataset_stub():
    """A dataset object only for :func:`resolve_training` (which needs the indexed dataset's name)."""
    from pipeline.core.datasets import Dataset

    return Dataset(name=UNION, queries={}, qrels=[], docs_factory=list, fingerprint="")


def estimate(work: Path, sample: int) -> dict:
    """Token vectors of every document and the encoder's speed on ``sample`` documents (one thread)."""
    import torch

    from indexes.codes import encode_documents, load_encoder_checkpoint

    torch.set_num_threads(1)
    dataset = load_union(work)
    checkpoint, options = encoder_checkpoint()
    tokenizer, model, _ = load_encoder_checkpoint(checkpoint, "cpu")
    texts, ids = [], []
    for doc in dataset.docs_iter():
        texts.append(doc.text)
        ids.append(doc.doc_id)
    per_prefix: dict[str, list[int]] = {}
    lengths = []
    for start in range(0, len(texts), 4096):
        encoded = tokenizer(texts[start:start + 4096], truncation=True, max_length=options.max_doc_length)["input_ids"]
        lengths += [max(0, len(row) - 2) for row in encoded]  # [CLS] and [SEP] get no vector
    for doc_id, length in zip(ids, lengths):
        per_prefix.setdefault(doc_id.split("-", 1)[0], []).append(length)
    started = time.perf_counter()
    vectors, counts = encode_documents(model, tokenizer, texts[:sample], options, "cpu")
    seconds = time.perf_counter() - started
    rate = int(counts.sum()) / seconds
    total = int(sum(lengths))
    return {"documents": len(texts), "vectors_estimated": total, "sample_documents": sample,
            "sample_vectors": int(counts.sum()), "sample_seconds": seconds, "vectors_per_second": rate,
            "estimated_encode_hours_one_thread": total / rate / 3600,
            "per_collection": {p: {"documents": len(v), "vectors": int(sum(v)), "mean": float(np.mean(v))}
                               for p, v in per_prefix.items()},
            "cumulative_vectors": np.cumsum(lengths)[::1024].tolist(), "load": load_average(), "date": now()}


class StageWatcher(threading.Thread):
    """Poll a code-index cache root while a build runs: when each shard, the trained quantizer, each rank's
    block of inverted lists and the finished index first appear (seconds since ``started``); every shard is
    hard-linked into ``keep`` as it appears."""

    def __init__(self, root: Path, keep: Path, started: float, period: float = 0.5):
        super().__init__(daemon=True)
        self.root, self.keep, self.started, self.period = root, keep, started, period
        self.wall = time.time() - (time.perf_counter() - started)
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def note(self, key: str) -> None:
        self.seen.setdefault(key, time.perf_counter() - self.started)

    def poll(self) -> None:
        for shards in self.root.glob(f".{UNION}-codes-*.shards"):
            self.note("shards_folder")
            for shard in shards.glob("shard-*.npz"):
                if f"shard/{shard.name}" not in self.seen:
                    target = self.keep / shard.name
                    try:
                        if not target.exists():
                            os.link(shard, target)
                    except OSError:  # renamed away meanwhile: seen next time or never
                        continue
                    self.note(f"shard/{shard.name}")
            blocks = shards / "ivf-blocks"
            if (blocks / "trained.index").is_file():
                self.note("trained")
            for block in blocks.glob("rank*.index"):
                self.note(f"block/{block.name}")
        for index in self.root.glob(f"{UNION}-codes-*"):
            # an index already in the cache (an earlier size's) is not this build's
            if (index / "code-index.json").is_file() and (index / "code-index.json").stat().st_mtime >= self.wall:
                self.note("index")
                self.seen.setdefault("index_path", str(index))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll()
            except OSError:
                pass
            self.stop.wait(self.period)


def simulate(work: Path, nproc: int, extra: list[str]) -> dict:
    """Run ``torchrun --nproc-per-node nproc -m pipeline.index`` on the union with the watcher."""
    keep = work / "shards"
    keep.mkdir(parents=True, exist_ok=True)
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--nproc-per-node", str(nproc), "-m", "pipeline.index", "--dataset",
               str(work / UNION), *INDEX_FLAGS, "--index-type", "ivf", "--threads", "1", *extra]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    load_before = load_average()
    started = time.perf_counter()
    watcher = StageWatcher(code_root(), keep, started)
    watcher.start()
    done = subprocess.run(command, cwd=ROOT, env=environment)
    elapsed = time.perf_counter() - started
    watcher.stop.set()
    watcher.join()
    watcher.poll()
    if done.returncode != 0:
        raise SystemExit(f"the build failed (exit {done.returncode}): {shlex.join(command)}")
    seen = watcher.seen
    shards = sorted(v for k, v in seen.items() if k.startswith("shard/"))
    blocks = sorted(v for k, v in seen.items() if k.startswith("block/"))
    stages = {"encode_s": (shards[-1] - seen.get("shards_folder", 0.0)) if shards else None,
              "kmeans_s": seen["trained"] - shards[-1] if "trained" in seen and shards else None,
              "add_s": blocks[-1] - seen["trained"] if blocks and "trained" in seen else None,
              "merge_s": seen["index"] - blocks[-1] if blocks and "index" in seen else None,
              "before_encoding_s": seen.get("shards_folder"), "total_s": elapsed}
    from indexes.codes import index_metadata

    meta = index_metadata(Path(seen["index_path"]))
    return {"command": shlex.join(["OMP_NUM_THREADS=1", "torchrun", *command[1:]]), "nproc": nproc,
            "date": now(), "load_before": load_before, "load_after": load_average(), "stages": stages,
            "shards_seen": len(shards), "blocks_seen": len(blocks), "index": seen["index_path"],
            "documents": meta["documents"], "vectors": meta["vectors"], "ivf_lists": meta.get("ivf_lists"),
            "index_bytes": meta["index_bytes"], "build_seconds_in_metadata": meta.get("seconds")}
