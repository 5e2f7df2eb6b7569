"""The union of the shipped collections as one BEIR folder (``code_real_scaling.py union``), and the steps that
resize it between builds while keeping the shards already encoded (``cut``, ``grow``)."""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np

from code_real_scaling_common import (COLLECTIONS, ENCODER_OPTIONS, SHARD_SIZE, UNION, code_root, command_line,
                                      load_union, now, write_json)
from common import load_average


def write_union(folder: Path, queries_per: int, seed: int, max_docs: int) -> dict:
    """Write the union of :data:`COLLECTIONS` into ``folder`` as a BEIR folder; returns its summary."""
    from pipeline.core.atomic import atomic_write
    from pipeline.core.datasets import load_dataset

    rng = random.Random(seed)
    docs, queries, qrels, counts = [], [], [], {}
    for prefix, name in COLLECTIONS:
        dataset = load_dataset(name)
        seen = set()
        for doc in dataset.docs_iter():
            if doc.doc_id not in seen and doc.text.strip():
                seen.add(doc.doc_id)
                docs.append((f"{prefix}-{doc.doc_id}", " ".join(doc.text.split())))
        judged = sorted({q.query_id for q in dataset.qrels if q.relevance > 0 and q.query_id in dataset.queries})
        chosen = sorted(rng.sample(judged, min(queries_per, len(judged))))
        queries += [(f"{prefix}-{qid}", " ".join(dataset.queries[qid].text.split())) for qid in chosen]
        keep = set(chosen)
        qrels += [(f"{prefix}-{q.query_id}", f"{prefix}-{q.doc_id}", q.relevance) for q in dataset.qrels
                  if q.query_id in keep]
        counts[prefix] = {"dataset": name, "documents": len(seen), "queries": len(chosen)}
        print(f"{name}: {len(seen)} documents, {len(chosen)} queries", flush=True)
    rng.shuffle(docs)
    if max_docs:
        docs = docs[:max_docs]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    with atomic_write(folder / "corpus.jsonl") as handle:
        for doc_id, text in docs:
            handle.write(json.dumps({"_id": doc_id, "text": text}) + "\n")
    with atomic_write(folder / "queries.jsonl") as handle:
        for qid, text in queries:
            handle.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with atomic_write(folder / "qrels" / "test.tsv") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for qid, doc_id, relevance in qrels:
            handle.write(f"{qid}\t{doc_id}\t{relevance}\n")
    kept = {prefix: sum(1 for doc_id, _ in docs if doc_id.startswith(prefix + "-")) for prefix, _ in COLLECTIONS}
    for prefix in counts:
        counts[prefix]["kept"] = kept[prefix]
    return {"collections": counts, "documents": len(docs), "queries": len(queries), "seed": seed,
            "max_docs": max_docs}


def cut(work: Path, nlist: int, queries_per: int, seed: int) -> dict:
    """After an interrupted ``simulate`` (the time ran out): the union cut to the documents of the longest
    run of finished shards, and those shards moved to where the build of the cut union looks for them, so
    that ``simulate`` again resumes after them (:mod:`indexes.shards`) instead of encoding anew."""
    from indexes.codes import CodeOptions, index_path, resolve_training

    root = code_root()
    (old,) = [p for p in root.glob(f".{UNION}-codes-*.shards")]
    manifest = json.loads((old / "manifest.json").read_text())
    began = (old / "manifest.json").stat().st_mtime  # written as the first run's encoding started
    present = {int(p.stem.split("-")[1]) for p in old.glob("shard-*.npz")}
    count = 0
    while count in present:
        count += 1
    times = sorted(p.stat().st_mtime for p in old.glob("shard-*.npz") if int(p.stem.split("-")[1]) < count)
    summary = write_union(work / UNION, queries_per, seed, count * SHARD_SIZE)
    write_json(work / "union.json", {**summary, "command": command_line() + "  # the cut", "date": now()})
    dataset = load_union(work)
    options = CodeOptions(**ENCODER_OPTIONS, index_type="ivf", ivf_nlist=nlist)  # what simulate's command builds
    path = index_path(dataset, options, resolve_training(dataset, options.train_dataset), root)
    new = root / f".{path.name}.shards"
    new.mkdir()
    first_ids = [doc.doc_id for _, doc in zip(range(SHARD_SIZE), dataset.docs_iter())]
    with np.load(old / "shard-00000.npz", allow_pickle=False) as stored:
        if stored["doc_ids"].tolist() != first_ids:
            raise SystemExit("the cut union's documents are not the shards' (another order?)")
    for number in range(count):
        os.rename(old / f"shard-{number:05d}.npz", new / f"shard-{number:05d}.npz")
    (new / "manifest.json").write_text(json.dumps({**manifest, "index": path.name}))
    shutil.rmtree(old)
    return {"shards": count, "documents": summary["documents"], "shards_present_when_cut": len(present),
            "encode_s": times[-1] - began, "vectors": int(sum(ivf_counts(new, count))),
            "date": now(), "load": load_average()}


def ivf_counts(folder: Path, count: int) -> list[int]:
    """The vectors in each of the first ``count`` shards of ``folder``."""
    from indexes.codes import ivf

    return ivf.shard_counts([folder / f"shard-{number:05d}.npz" for number in range(count)])


def grow(work: Path, shards: int, nlist: int, queries_per: int, seed: int) -> dict:
    """The union grown to ``shards`` shards of documents, the shards already encoded (hard-linked aside by
    ``simulate``) linked where its build looks for them, so that ``simulate`` encodes only the new ones."""
    from indexes.codes import CodeOptions, index_path, resolve_training
    from pipeline.core.filecheck import file_sha256

    root = code_root()
    built = json.loads((work / "simulate.json").read_text())
    summary = write_union(work / UNION, queries_per, seed, shards * SHARD_SIZE)
    write_json(work / "union.json", {**summary, "command": command_line() + "  # grown", "date": now()})
    dataset = load_union(work)
    options = CodeOptions(**ENCODER_OPTIONS, index_type="ivf", ivf_nlist=nlist)
    path = index_path(dataset, options, resolve_training(dataset, options.train_dataset), root)
    new = root / f".{path.name}.shards"
    new.mkdir()
    kept = sorted((work / "shards").glob("shard-*.npz"))
    for shard in kept:
        os.link(shard, new / shard.name)
    manifest = {"index": path.name, "encoder_sha256": file_sha256(Path(built["index"]) / "encoder.pt"),
                "shard_size": SHARD_SIZE}
    (new / "manifest.json").write_text(json.dumps(manifest))
    return {"shards": shards, "already_encoded": len(kept), "documents": summary["documents"], "date": now()}
