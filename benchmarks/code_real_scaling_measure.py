"""One size of the scaling table (``code_real_scaling.py measure``): flat and IVF indexes of a prefix of the
union's shards, the union's queries searched on both, each stage of a query timed."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from code_real_scaling_common import ENCODER_OPTIONS, K, SHARD_SIZE, load_union, now
from common import load_average


def status_kib(*names: str) -> dict:
    """``/proc/self/status`` fields ``names`` in KiB, with ``ru_maxrss`` (the process's peak resident set)."""
    import resource

    values = {"ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in names:
            values[key] = int(line.split()[1])
    return values


def shard_prefix(shards: list[Path], vectors: int) -> list[Path]:
    """The first shards holding at least ``vectors`` vectors (0: all)."""
    from indexes.codes import ivf

    if not vectors:
        return shards
    counts = np.cumsum(ivf.shard_counts(shards))
    return shards[: int(np.searchsorted(counts, vectors)) + 1]


def write_index_dir(folder: Path, full: Path, shards: list[Path], index_type: str, lists: int, seed: int) -> dict:
    """A format-2 code index of ``shards``' codes in ``folder`` (``index_type`` flat or ivf), its encoder the
    one of the index at ``full``; the stages timed. Returns ``{stage: seconds, "lists": ...}``."""
    import faiss

    from indexes.codes import (DOC_OFFSETS_FILE, ENCODER_FILE, FAISS_FILE, INDEX_FORMAT, META_FILE, VERIFIED_FILES,
                               CodeOptions, DocIds, index_metadata, index_size_bytes, ivf)
    from pipeline.core.filecheck import describe

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    times = {}
    ids, lengths = [], []
    for shard in shards:
        with np.load(shard, allow_pickle=False) as stored:
            ids += stored["doc_ids"].tolist()
            lengths.append(stored["lengths"])
    lengths = np.concatenate(lengths)
    counts = ivf.shard_counts(shards)
    options = CodeOptions(**{k: v for k, v in ENCODER_OPTIONS.items() if k != "train_dataset"}, index_type=index_type,
                          ivf_nlist=lists if index_type == "ivf" else 0)
    if index_type == "ivf":  # what ivf.assemble does, each stage timed
        started = time.perf_counter()
        index, made = ivf.train(shards, counts, options, seed)
        work = folder / ".blocks"
        work.mkdir()
        trained = work / ivf.TRAINED_FILE
        ivf._write(index, True, trained)
        times["kmeans_s"] = time.perf_counter() - started
        started = time.perf_counter()
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        blocks = ivf.add_blocks(trained, shards, firsts.tolist(), True, work)
        times["add_s"] = time.perf_counter() - started
        started = time.perf_counter()
        ivf.merge(trained, blocks, True, folder, FAISS_FILE)
        shutil.rmtree(work)
        times["merge_s"] = time.perf_counter() - started
        times["lists"] = made
    else:
        started = time.perf_counter()
        index = faiss.IndexBinaryFlat(options.dim)
        for shard in shards:
            with np.load(shard, allow_pickle=False) as stored:
                index.add(np.ascontiguousarray(stored["vectors"]))
        faiss.write_index_binary(index, str(folder / FAISS_FILE))
        del index
        times["add_s"] = time.perf_counter() - started
    np.save(folder / DOC_OFFSETS_FILE, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]))
    DocIds.write(folder, ids)
    try:
        os.link(full / ENCODER_FILE, folder / ENCODER_FILE)
    except OSError:
        shutil.copyfile(full / ENCODER_FILE, folder / ENCODER_FILE)
    meta = index_metadata(full)
    # this code's layout, whatever the layout of the index at ``full``
    version, ivf_files = ivf.layout(folder) if index_type == "ivf" else (INDEX_FORMAT, ())
    meta.update(format=version,
                options={**meta["options"], "index_type": index_type, "ivf_nlist": lists if index_type == "ivf" else 0},
                documents=len(ids), vectors=int(lengths.sum()), index_bytes=index_size_bytes(folder),
                files=describe(folder, VERIFIED_FILES + ivf_files),
                note=f"{index_type} index of the first {len(shards)} shards of {full.name}, "
                     "made by benchmarks/code_real_scaling.py")
    meta.pop("ivf_lists", None)
    if index_type == "ivf":
        meta["ivf_lists"] = times["lists"]
    (folder / META_FILE).write_text(json.dumps(meta, indent=1))
    return times


class Probe:
    """Wraps a retriever's stages (instance attributes shadowing its methods) to time them and keep the last
    query's kNN labels."""

    STAGES = ("encode_queries", "neighbours", "maxsim_scores")

    def __init__(self, retriever):
        self.retriever = retriever
        self.reset()
        for stage in self.STAGES:
            method = getattr(retriever, stage)
            setattr(retriever, stage, self._timed(stage, method))

    def _timed(self, stage, method):
        def call(*args, **kwargs):
            started = time.perf_counter()
            result = method(*args, **kwargs)
            self.times[stage] += time.perf_counter() - started
            if stage == "neighbours":
                self.labels = result[0]
            if stage == "maxsim_scores":  # the stored vectors the exact MaxSim read
                offsets, docs = self.retriever.offsets, np.asarray(args[1])
                self.scored_vectors += int((offsets[docs + 1] - offsets[docs]).sum())
                self.scored_docs += len(docs)
            return result
        return call

    def reset(self) -> None:
        self.times = {s: 0.0 for s in self.STAGES}
        self.labels, self.scored_vectors, self.scored_docs = None, 0, 0


def measure(work: Path, vectors: int, lists: int, nprobes: list[int], max_queries: int, seed: int,
            build_file: str = "simulate.json") -> dict:
    """One size: flat and IVF indexes of a shard prefix, the union's queries searched on both."""
    import faiss
    import torch

    from indexes.codes import CodeRetriever, index_metadata, storage_bytes
    from pipeline.core.evaluation import evaluate
    from pipeline.core.progress import tqdm

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    built = json.loads((work / build_file).read_text())
    full = Path(built["index"])
    documents = index_metadata(full)["documents"]
    shards = sorted((work / "shards").glob("shard-*.npz"))[: -(-documents // SHARD_SIZE)]
    part = shard_prefix(shards, vectors)
    whole = len(part) == len(shards)
    folder = work / "sizes" / (f"{vectors}" if not whole else "all")
    load_before = load_average()
    builds = {"flat": write_index_dir(folder / "flat", full, part, "flat", 0, seed)}
    if whole:
        ivf_path = full
        builds["ivf"] = {"from": "simulate (torchrun)", **built["stages"]}
    else:
        ivf_path = folder / "ivf"
        builds["ivf"] = write_index_dir(ivf_path, full, part, "ivf", lists, seed)
    dataset = load_union(work)
    queries = list(dataset.queries.values())[: max_queries or None]
    memory_start = status_kib("VmRSS", "RssAnon", "RssFile")  # torch imported, no model, no index
    ivf_retriever = CodeRetriever(ivf_path, threads=1, nprobe=max(nprobes))
    ivf_probe = Probe(ivf_retriever)
    ivf_retriever.search(queries[:5], K)  # warm-up: the model, the lists' pages
    memory_ivf = status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM")
    flat_retriever = CodeRetriever(folder / "flat", threads=1, gpu=False)
    flat_probe = Probe(flat_retriever)
    flat_retriever.search(queries[:2], K)
    configs = [("flat", None)] + [(f"ivf nprobe {p}", p) for p in nprobes]
    runs = {label: {} for label, _ in configs}
    rows = {label: {"ms": [], "stages": [], "doc_recall": [], "token_recall": []} for label, _ in configs}
    labels_of: dict[str, dict] = {label: {} for label, _ in configs}
    for number, query in enumerate(tqdm(queries, desc=f"searching {len(part)} shards", unit="query")):
        rotated = configs[number % len(configs):] + configs[: number % len(configs)]
        for label, nprobe in rotated:
            retriever, probe = (flat_retriever, flat_probe) if nprobe is None else (ivf_retriever, ivf_probe)
            if nprobe is not None:
                retriever.index.nprobe = nprobe
            probe.reset()
            started = time.perf_counter()
            hits = retriever.search([query], K)
            rows[label]["ms"].append(1000 * (time.perf_counter() - started))
            rows[label]["stages"].append({**{s: 1000 * t for s, t in probe.times.items()},
                                          "scored_docs": probe.scored_docs, "scored_vectors": probe.scored_vectors})
            runs[label].update(hits)
            labels_of[label] = probe.labels
        flat_docs = {h.doc_id for h in runs["flat"].get(query.query_id, [])}
        flat_labels = labels_of["flat"]
        for label, nprobe in configs[1:]:
            docs = {h.doc_id for h in runs[label].get(query.query_id, [])}
            rows[label]["doc_recall"].append(len(docs & flat_docs) / max(1, len(flat_docs)))
            if flat_labels is not None and labels_of[label] is not None:
                shares = [len(np.intersect1d(a[a >= 0], b[b >= 0])) / max(1, int((b >= 0).sum()))
                          for a, b in zip(labels_of[label], flat_labels)]
                rows[label]["token_recall"].append(float(np.mean(shares)) if shares else 1.0)
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    table = []
    for label, nprobe in configs:
        row = rows[label]
        scores = evaluate(runs[label], qrels, "nDCG@10 R@100").aggregate
        table.append({
            "config": label, "nprobe": nprobe, "ms_per_query": float(np.mean(row["ms"])),
            "ms_median": float(np.median(row["ms"])),
            "stages_ms": {s: float(np.mean([t[s] for t in row["stages"]])) for s in Probe.STAGES},
            "scored_docs": float(np.mean([t["scored_docs"] for t in row["stages"]])),
            "scored_vectors": float(np.mean([t["scored_vectors"] for t in row["stages"]])),
            "doc_recall@100": float(np.mean(row["doc_recall"])) if row["doc_recall"] else 1.0,
            "token_recall": float(np.mean(row["token_recall"])) if row["token_recall"] else 1.0,
            "nDCG@10": scores["nDCG@10"], "R@100": scores["R@100"]})
    ivf_meta, flat_meta = index_metadata(ivf_path), index_metadata(folder / "flat")
    result = {
        "date": now(), "load_before": load_before, "load_after": load_average(), "shards": len(part),
        "documents": flat_meta["documents"], "vectors": flat_meta["vectors"], "ivf_lists": ivf_meta.get("ivf_lists"),
        "queries": len(queries), "k": K, "k_prime": ivf_retriever.k_prime, "rescore_depth": ivf_retriever.rescore_depth,
        "query_runtime": ivf_retriever.query_runtime,
        "builds": builds,
        "bytes_per_vector": {"flat": storage_bytes(folder / "flat") / flat_meta["vectors"],
                             "ivf": storage_bytes(ivf_path) / ivf_meta["vectors"]},
        "memory_kib_start": memory_start, "memory_kib_ivf_only": memory_ivf, "memory_kib_end": status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM"),
        "rows": table}
    if not whole:
        shutil.rmtree(folder, ignore_errors=True)  # keep the scratch disk small; the numbers are in the JSON
    return result
