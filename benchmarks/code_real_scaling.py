"""The code index at scale on real token codes: every shipped passage collection in one index.

The synthetic table of ``code_index_scaling.py`` measures flat against IVF on random clustered codes; this
benchmark measures the same on the real 512-bit codes of one trained encoder over the union of the shipped
collections (Microblog's tweets, the TREC DL 2019-2021 pools, NFCorpus, Vaswani, Cranfield). Steps, each a
subcommand (each writes JSON into ``--work``):

``union``
    Write the union as a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``): document
    ids prefixed by their collection (``mb-``, ``dl-``, ``nf-``, ``va-``, ``cr-``), the documents in a seeded
    random order (so that every prefix, and a ``--max-docs`` cut, is a uniform sample of all collections),
    ``--queries-per`` judged queries of each collection (ids prefixed too). Any command that takes a
    ``--dataset`` reads it (``pipeline.core.datasets.load_local``).
``estimate``
    Count every document's token vectors (word pieces after truncation, special tokens excluded) and time
    the encoder on ``--sample`` documents of the union, one thread: the vectors and encoding time to expect.
``simulate``
    Run the documented multi-process build, ``torchrun --nproc-per-node N -m pipeline.index --kind codes
    --index-type ivf ...``, end to end, and record when each stage ends by watching the cache (the last
    shard written, the trained quantizer, every rank's block of inverted lists, the finished index). The
    shards are hard-linked aside as they appear (the build deletes them when done) for ``measure``.
``cut`` / ``grow``
    When the time runs out: ``cut`` keeps the union to the shards already encoded (the build then resumes
    after them); ``grow --shards N`` extends the union to ``N`` shards of the same random order and links the
    shards already encoded where the next ``simulate`` finds them, so that it encodes only the new ones
    (``grow-N.json``; the report lists every growth and every later build in the order they ran).
``measure``
    At one size (a prefix of whole shards with at least ``--vectors`` vectors, 0: all): a flat index and an
    IVF index of those codes (quantizer trained, shards added, lists merged on disk: ``indexes.codes.ivf``'s
    functions, each stage timed; the largest size's IVF index is the one ``simulate`` built), then the
    union's queries searched query by query with :class:`indexes.codes.CodeRetriever` (default ``k'`` and
    ``rescore_depth``), flat and IVF at every ``--nprobe`` alternating, one thread. Per configuration:
    ms/query end to end (``search([query], 100)``: query encoding, kNN, pruning, exact MaxSim) and its
    stages, IVF's recall of the flat search's top 100 documents and of its ``k'`` neighbours per query
    token, bytes on disk per vector, resident memory while searching.
``report``
    The tables (Markdown and JSON).

    python benchmarks/code_real_scaling.py union --work /work/scratch/real-scaling
    python benchmarks/code_real_scaling.py estimate --work /work/scratch/real-scaling
    python benchmarks/code_real_scaling.py simulate --work /work/scratch/real-scaling --nproc 2 --ivf-nlist 4096
    python benchmarks/code_real_scaling.py measure --work /work/scratch/real-scaling --vectors 1000000
    python benchmarks/code_real_scaling.py report --work /work/scratch/real-scaling \\
        --output benchmarks/results/codes/real-scaling.md
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import load_average, machine_line, publish  # noqa: E402

#: (prefix, dataset name) of every shipped passage collection
COLLECTIONS = (("mb", "microblog"), ("dl", "dl"), ("nf", "nfcorpus"), ("va", "vaswani-npl"), ("cr", "cranfield"))
#: the encoder of the other code benchmarks (code_latency.py, code_first_stage.py): 512-bit lsh codes over the
#: float encoder trained 10 steps on NFCorpus's dev queries (train_dataset nfcorpus -> nfcorpus-dev)
ENCODER_OPTIONS = dict(kind="codes", dim=512, hash_head="lsh", steps=10, train_dataset="nfcorpus")
INDEX_FLAGS = ["--kind", "codes", "--dim", "512", "--hash-head", "lsh", "--steps", "10", "--train-dataset", "nfcorpus"]
K = 100
UNION = "union"
SHARD_SIZE = 1024  # CodeOptions.shard_size's default: documents per shard


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_json(path: Path, value) -> None:
    from pipeline.core.atomic import write_text

    write_text(Path(path), json.dumps(value, indent=1) + "\n")


def _command() -> str:
    return "python " + shlex.join(["benchmarks/code_real_scaling.py", *sys.argv[1:]])


def code_root() -> Path:
    from indexes.codes import code_index_root

    return code_index_root()


# ------------------------------------------------------------------------------------------------ union


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


def load_union(work: Path):
    from pipeline.core.datasets import load_local

    return load_local(work / UNION)


# --------------------------------------------------------------------------------------------- estimate


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
            "cumulative_vectors": np.cumsum(lengths)[::1024].tolist(), "load": load_average(), "date": _now()}


# --------------------------------------------------------------------------------------------- simulate


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
            "date": _now(), "load_before": load_before, "load_after": load_average(), "stages": stages,
            "shards_seen": len(shards), "blocks_seen": len(blocks), "index": seen["index_path"],
            "documents": meta["documents"], "vectors": meta["vectors"], "ivf_lists": meta.get("ivf_lists"),
            "index_bytes": meta["index_bytes"], "build_seconds_in_metadata": meta.get("seconds")}


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
    _write_json(work / "union.json", {**summary, "command": _command() + "  # the cut", "date": _now()})
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
            "date": _now(), "load": load_average()}


def ivf_counts(folder: Path, count: int) -> list[int]:
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
    _write_json(work / "union.json", {**summary, "command": _command() + "  # grown", "date": _now()})
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
    return {"shards": shards, "already_encoded": len(kept), "documents": summary["documents"], "date": _now()}


# ---------------------------------------------------------------------------------------------- measure


def _status_kib(*names: str) -> dict:
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
    meta.update(format=INDEX_FORMAT,  # this code's layout, whatever the layout of the index at ``full``
                options={**meta["options"], "index_type": index_type, "ivf_nlist": lists if index_type == "ivf" else 0},
                documents=len(ids), vectors=int(lengths.sum()), index_bytes=index_size_bytes(folder),
                files=describe(folder, VERIFIED_FILES + (ivf.FILES if index_type == "ivf" else ())),
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
    memory_start = _status_kib("VmRSS", "RssAnon", "RssFile")  # torch imported, no model, no index
    ivf_retriever = CodeRetriever(ivf_path, threads=1, nprobe=max(nprobes))
    ivf_probe = Probe(ivf_retriever)
    ivf_retriever.search(queries[:5], K)  # warm-up: the model, the lists' pages
    memory_ivf = _status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM")
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
        "date": _now(), "load_before": load_before, "load_after": load_average(), "shards": len(part),
        "documents": flat_meta["documents"], "vectors": flat_meta["vectors"], "ivf_lists": ivf_meta.get("ivf_lists"),
        "queries": len(queries), "k": K, "k_prime": ivf_retriever.k_prime, "rescore_depth": ivf_retriever.rescore_depth,
        "query_runtime": ivf_retriever.query_runtime,
        "builds": builds,
        "bytes_per_vector": {"flat": storage_bytes(folder / "flat") / flat_meta["vectors"],
                             "ivf": storage_bytes(ivf_path) / ivf_meta["vectors"]},
        "memory_kib_start": memory_start, "memory_kib_ivf_only": memory_ivf, "memory_kib_end": _status_kib("VmRSS", "RssAnon", "RssFile", "VmHWM"),
        "rows": table}
    if not whole:
        shutil.rmtree(folder, ignore_errors=True)  # keep the scratch disk small; the numbers are in the JSON
    return result


# ----------------------------------------------------------------------------------------------- report


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
    data = {"command": command, "date": _now(), "union": union, "estimate": estimate_, "simulate": built,
            "cut": cutting, "later_builds": rebuilds, "sizes": sizes,
            "growths": [json.loads(path.read_text()) for path in later_steps(work) if path.name.startswith("grow-")]}
    return "\n".join(lines), data


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["union", "estimate", "simulate", "cut", "grow", "measure", "report"])
    parser.add_argument("--work", type=Path, required=True, help="folder of the union, the shards and the JSON")
    parser.add_argument("--queries-per", type=int, default=40, help="union: judged queries per collection")
    parser.add_argument("--max-docs", type=int, default=0, help="union: keep the first N documents of the order")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=2000, help="estimate: documents encoded")
    parser.add_argument("--nproc", type=int, default=2, help="simulate: processes")
    parser.add_argument("--ivf-nlist", type=int, default=0, help="simulate / measure: IVF lists (0: the default)")
    parser.add_argument("--shards", type=int, default=0, help="grow: shards of documents in the grown union")
    parser.add_argument("--simulate", default="simulate.json", help="simulate: its JSON; measure: the build's JSON")
    parser.add_argument("--vectors", type=int, default=0, help="measure: size (0: every shard)")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[4, 16, 64], help="measure: nprobe values")
    parser.add_argument("--max-queries", type=int, default=0, help="measure: first N queries (0: all)")
    parser.add_argument("--output", help="report: Markdown file (JSON beside it)")
    args = parser.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.step == "union":
        summary = write_union(work / UNION, args.queries_per, args.seed, args.max_docs)
        _write_json(work / "union.json", {**summary, "command": _command(), "date": _now()})
    elif args.step == "estimate":
        _write_json(work / "estimate.json", {**estimate(work, args.sample), "command": _command()})
    elif args.step == "simulate":
        extra = ["--ivf-nlist", str(args.ivf_nlist)] if args.ivf_nlist else []
        _write_json(work / args.simulate, {**simulate(work, args.nproc, extra), "runner": _command()})
    elif args.step == "cut":
        _write_json(work / "cut.json", {**cut(work, args.ivf_nlist, args.queries_per, args.seed), "command": _command()})
    elif args.step == "grow":
        _write_json(work / f"grow-{args.shards}.json", {**grow(work, args.shards, args.ivf_nlist, args.queries_per, args.seed),
                                         "command": _command()})
    elif args.step == "measure":
        result = measure(work, args.vectors, args.ivf_nlist, args.nprobe, args.max_queries, args.seed, args.simulate)
        _write_json(work / f"measure-{args.vectors or 'all'}.json", {**result, "command": _command()})
        print(json.dumps(result["rows"], indent=1))
    else:
        text, data = render(work, _command())
        publish(text, args.output)
        if args.output:
            _write_json(Path(args.output).with_suffix(".json"), data)


if __name__ == "__main__":
    main()
