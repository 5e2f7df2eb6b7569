"""The zero-shot dense first stage (indexes.dense) and the BM25 + dense hybrid (indexes.hybrid)."""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

from indexes import BM25Settings, RunRetriever, first_stage_options, make_first_stage
from indexes.dense import (
    FAISS_FILE, DOC_IDS_FILE, DenseOptions, DenseRetriever, TextEncoder, build_dense_index, dense_index_path,
)
from indexes.hybrid import HybridOptions, HybridRetriever, interpolate_lists, rrf_lists, tuning_queries
from pipeline.engine.config import RunConfig
from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError, CorruptCacheError, PipelineError
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc

from conftest import run_python, write
from tests.helpers import one_torch_thread, tiny_dataset, tiny_encoder  # noqa: F401 (fixtures)

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

WORDS = ("wind tunnel pressure wing boundary layer flow shock heat plate cone jet nozzle blade engine fuel "
         "crystal lattice protein gene cell virus enzyme liver diet sugar").split()


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return tiny_dataset(WORDS)  # 16 queries, 64 docs


def options_for(encoder: str, **changes) -> DenseOptions:
    return DenseOptions(encoder=encoder, shard_size=16, batch_size=8, device="cpu", progress=False, **changes)


@pytest.fixture(scope="module")
def brute_force(tiny_encoder, dataset):
    """``f(query, k)``: the cosine of the query with every document, each text encoded alone (no batching, no
    index, normalised here)."""
    text_encoder = TextEncoder(dataclasses.replace(options_for(tiny_encoder), normalize=False))
    docs = list(dataset.docs_iter())
    vectors = np.concatenate([text_encoder.encode([d.text], 256, batch_size=1) for d in docs])
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def ranking(query: Query, k: int) -> list[tuple[str, float]]:
        q = text_encoder.encode([query.text], 64, batch_size=1)[0]
        scores = vectors @ (q / np.linalg.norm(q))
        return sorted(((d.doc_id, float(s)) for d, s in zip(docs, scores)), key=lambda h: (-h[1], h[0]))[:k]

    return ranking


@pytest.mark.parametrize("index_type, extra", [("flat", {}), ("hnsw", {}), ("ivf", {"ivf_nlist": 2, "ivf_nprobe": 2})])
def test_dense_search_equals_brute_force_cosine(tiny_encoder, dataset, brute_force, tmp_path, index_type, extra):
    options = options_for(tiny_encoder, index_type=index_type, **extra)
    retriever = DenseRetriever(build_dense_index(dataset, options, tmp_path), options)
    queries = list(dataset.queries.values())[:5]
    run = retriever.search(queries, k=10)
    for query in queries:
        expected = brute_force(query, 10)
        got = [(h.doc_id, h.score) for h in run[query.query_id]]
        assert [d for d, _ in got] == [d for d, _ in expected]
        assert np.allclose([s for _, s in got], [s for _, s in expected], atol=1e-5)


def test_queries_encode_in_onnx_runtime_by_default_with_pytorchs_vectors(tiny_encoder, dataset, tmp_path):
    options = options_for(tiny_encoder)
    assert options.query_runtime == "auto"
    path = build_dense_index(dataset, options, tmp_path)
    onnx = DenseRetriever(path, options)
    plain = DenseRetriever(path, dataclasses.replace(options, query_runtime="torch"))
    assert (onnx.query_runtime, plain.query_runtime) == ("onnx", "torch")
    texts = [q.text for q in dataset.queries.values()] + ["one", "a query with many more words than the others"]
    assert np.abs(onnx.encode_queries(texts) - plain.encode_queries(texts)).max() < 1e-5  # padded batches of 8
    queries = list(dataset.queries.values())
    ranked, reference = onnx.search(queries, 10), plain.search(queries, 10)
    assert all([h.doc_id for h in ranked[q.query_id]] == [h.doc_id for h in reference[q.query_id]] for q in queries)
    with pytest.raises(PipelineError, match="query runtime"):
        dataclasses.replace(options, query_runtime="tensorrt")


def test_cache_reuse_and_key(tiny_encoder, dataset, tmp_path, monkeypatch):
    options = options_for(tiny_encoder)
    path = build_dense_index(dataset, options, tmp_path)
    written = (path / "dense-index.json").stat().st_mtime_ns
    monkeypatch.setattr(TextEncoder, "encode", lambda *a, **k: pytest.fail("re-encoded a cached index"))
    assert build_dense_index(dataset, dataclasses.replace(options, batch_size=3, ivf_nprobe=4), tmp_path) == path
    assert (path / "dense-index.json").stat().st_mtime_ns == written
    assert dense_index_path(dataset, dataclasses.replace(options, max_doc_length=32), tmp_path) != path
    assert dense_index_path(dataset, dataclasses.replace(options, pooling="cls"), tmp_path) != path


def test_interrupted_build_resumes_from_its_shards(tiny_encoder, dataset, tmp_path, monkeypatch):
    import indexes.dense as dense

    options = options_for(tiny_encoder)
    real_new_index = dense._new_index
    monkeypatch.setattr(dense, "_new_index", lambda *a: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError, match="killed"):
        build_dense_index(dataset, options, tmp_path)
    path = dense_index_path(dataset, options, tmp_path)
    assert not path.exists() and len(list(tmp_path.glob(".*.shards/shard-*.npz"))) == 4  # 64 docs / 16
    monkeypatch.setattr(dense, "_new_index", real_new_index)
    calls = []
    encode = TextEncoder.encode
    monkeypatch.setattr(TextEncoder, "encode", lambda self, texts, *a, **k: calls.append(len(texts)) or
                        encode(self, texts, *a, **k))
    assert build_dense_index(dataset, options, tmp_path) == path
    assert calls == [] and not list(tmp_path.glob(".*.shards"))
    fresh = DenseRetriever(build_dense_index(dataset, options, tmp_path / "fresh"), options)
    query = next(iter(dataset.queries.values()))
    assert DenseRetriever(path, options).search([query], 5) == fresh.search([query], 5)


def test_damaged_index_is_a_clear_error(tiny_encoder, dataset, tmp_path):
    options = options_for(tiny_encoder)
    path = build_dense_index(dataset, options, tmp_path)
    DenseRetriever(path, options)  # verified once: a stamp is written
    data = bytearray((path / FAISS_FILE).read_bytes())
    data[-7] ^= 0xFF  # same size, one vector changed
    (path / FAISS_FILE).write_bytes(bytes(data))
    with pytest.raises(CorruptCacheError, match=f"{FAISS_FILE} does not match the SHA-256.*rm -rf"):
        DenseRetriever(path, options)
    (path / DOC_IDS_FILE).write_text("[]")
    with pytest.raises(CorruptCacheError, match=f"the dense index {path} is damaged .*{DOC_IDS_FILE} has 2 bytes"):
        DenseRetriever(path, options)


def test_options_from_the_command_line(tiny_encoder):
    from pipeline.run import parse_config

    config = parse_config(["--first-stage", "hybrid", "--dense-set", "encoder=" + tiny_encoder,
                           "--dense-set", "index_type=hnsw", "--hybrid-set", "fusion=rrf",
                           "--hybrid-set", "weight=none", "--hybrid-set", "rrf_k=10"])
    options = first_stage_options("hybrid", config.first_stage_settings())
    assert options.dense == DenseOptions(encoder=tiny_encoder, index_type="hnsw")
    assert options.fusion_options() == HybridOptions(fusion="rrf", weight=None, rrf_k=10)
    # the deprecated flags are --fs-set entries, the dense half's options under dense.
    scoped = RunConfig(first_stage="hybrid", first_stage_overrides=(
        "dense.encoder=" + tiny_encoder, "dense.index_type=hnsw", "fusion=rrf", "weight=none", "rrf_k=10"))
    assert config == scoped
    assert first_stage_options("hybrid", scoped.first_stage_settings()) == options
    assert first_stage_options("dense", RunConfig(first_stage="dense").first_stage_settings()) is None  # defaults
    for argv, message in [
        (["--first-stage", "bm25", "--dense-set", "index_type=hnsw"], "--dense-set applies to --first-stage"),
        (["--first-stage", "dense", "--hybrid-set", "fusion=rrf"], "--hybrid-set applies to --first-stage hybrid"),
        (["--first-stage", "dense", "--dense-set", "index_typ=hnsw"], "did you mean 'index_type'"),
        (["--first-stage", "dense", "--dense-set", "index_type=lsh"], "unknown index type 'lsh'"),
        (["--first-stage", "hybrid", "--hybrid-set", "weight=2"], "weight must be in \\[0, 1\\]"),
        (["--first-stage", "hybrid", "--hybrid-set", "fusion=max"], "unknown fusion 'max'"),
        (["--first-stage", "dense", "--fs-set", "index_type=lsh"], "unknown index type 'lsh'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config(argv)


# ------------------------------------------------------------------------------ from an empty home (CLI)


def write_folder(folder, dataset: Dataset) -> str:
    write(folder / "topics.tsv", "".join(f"{q.query_id}\t{q.text}\n" for q in dataset.queries.values()))
    write(folder / "qrels.txt", "".join(f"{q.query_id} 0 {q.doc_id} {q.relevance}\n" for q in dataset.qrels))
    write(folder / "docs.jsonl", "".join(json.dumps({"id": d.doc_id, "contents": d.text}) + "\n"
                                         for d in dataset.docs_iter()))
    return str(folder)


def run_cli(folder, home, *extra):
    started = time.perf_counter()
    result = run_python(["-m", "pipeline.run", "--dataset", folder, "--first-stage", "dense", "--reranker", "none",
                         "--metrics", "nDCG@10 R@100", "--threads", "1", *extra], timeout=300,
                        PIPELINE_HOME=str(home), PIPELINE_INDEX_DIR="", OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    return result, time.perf_counter() - started


@pytest.mark.parametrize("encoder", ["default", "tiny"])
def test_cli_builds_from_an_empty_home(tiny_encoder, dataset, tmp_path, encoder):
    """Default options (the packaged MiniLM) and the twin with the tiny model through --dense-set, which
    also runs again on the cached index and on a damaged one (one line, exit status 2)."""
    folder = write_folder(tmp_path / "data", dataset)
    home = tmp_path / "home"
    extra = [] if encoder == "default" else ["--dense-set", f"encoder={tiny_encoder}"]
    result, _ = run_cli(folder, home, *extra)
    assert result.returncode == 0, result.stderr
    built = list((home / "indexes" / "cache" / "dense").glob("data-dense-*"))
    assert len(built) == 1 and (built[0] / "dense-index.json").is_file()
    run_file = next((home / "runs").glob("*dense*.run"))
    assert len({line.split()[0] for line in run_file.read_text().splitlines()}) == len(dataset.queries)
    if encoder == "default":  # MiniLM finds the shared-word document for most of these queries
        assert float(result.stdout.split("|")[-2]) > 0.9, result.stdout  # R@100 of 64 docs: all found
        meta = json.loads((built[0] / "dense-index.json").read_text())
        assert meta["encoder"]["name"] == "all-MiniLM-L6-v2" and meta["dim"] == 384 and meta["pooling"] == "mean"
        return  # the twin below checks the cache and its damage with the same command line
    again, _ = run_cli(folder, home, *extra)  # the cached index serves the second run
    assert again.returncode == 0 and "encoding" not in again.stderr, again.stderr
    victim = built[0] / FAISS_FILE
    victim.write_bytes(victim.read_bytes()[:-4])
    damaged, _ = run_cli(folder, home, *extra)
    assert damaged.returncode == 2 and "Traceback" not in damaged.stderr
    assert f"{FAISS_FILE} has" in damaged.stderr and "rm -rf" in damaged.stderr


# ------------------------------------------------------------------------------------------ hybrid


def test_rrf_by_hand():
    a = [ScoredDoc("q", "x", 9.0), ScoredDoc("q", "y", 5.0), ScoredDoc("q", "z", 1.0)]
    b = [ScoredDoc("q", "z", 0.8), ScoredDoc("q", "w", 0.7), ScoredDoc("q", "x", 0.1)]
    fused = rrf_lists("q", [a, b], k=10, rrf_k=60)
    expected = {"x": 1 / 61 + 1 / 63, "z": 1 / 63 + 1 / 61, "y": 1 / 62, "w": 1 / 62}
    assert [h.doc_id for h in fused] == ["x", "z", "w", "y"]  # equal scores: by doc id
    assert {h.doc_id: h.score for h in fused} == pytest.approx(expected)


def test_interpolation_over_the_union_with_missing_at_zero():
    bm25 = [ScoredDoc("q", "a", 12.0), ScoredDoc("q", "b", 10.0), ScoredDoc("q", "c", 8.0)]
    dense = [ScoredDoc("q", "d", 0.9), ScoredDoc("q", "b", 0.7), ScoredDoc("q", "e", 0.5)]
    fused = {h.doc_id: h.score for h in interpolate_lists("q", bm25, dense, 0.3, k=10)}
    assert set(fused) == {"a", "b", "c", "d", "e"}  # the union
    assert fused == pytest.approx({"a": 0.3 * 1, "b": 0.3 * 0.5 + 0.7 * 0.5, "c": 0.0, "d": 0.7 * 1, "e": 0.0})
    assert [h.doc_id for h in interpolate_lists("q", bm25, dense, 0.3, k=2)] == ["d", "b"]


def fusion_dataset(splits: bool) -> tuple[Dataset, RunRetriever, RunRetriever]:
    """12 queries; BM25 ranks b-<q> first, dense d-<q>; the judged relevant document is b-<q> (BM25 right,
    so the tuned weight favours BM25: 0.55)."""
    queries = {f"q{i:02d}": Query(f"q{i:02d}", f"query {i}") for i in range(12)}
    bm25, dense, qrels, docs = {}, {}, [], {}
    for q in queries:
        bm25[q] = [ScoredDoc(q, f"b-{q}", 3.0), ScoredDoc(q, f"x-{q}", 2.0), ScoredDoc(q, f"y-{q}", 1.0)]
        dense[q] = [ScoredDoc(q, f"d-{q}", 0.9), ScoredDoc(q, f"x-{q}", 0.5), ScoredDoc(q, f"y-{q}", 0.1)]
        qrels.append(Qrel(q, f"b-{q}", 1))
        docs.update({f"{p}-{q}": Doc(f"{p}-{q}", "text") for p in "bdxy"})
    ids = sorted(queries)
    split_map = {"train": ids[:4], "dev": ids[4:8], "test": ids[8:]} if splits else {}
    data = Dataset("fusion", queries, qrels, lambda: docs.values(), "fusion", split_map, _store=docs)
    return data, RunRetriever("bm25", bm25), RunRetriever("dense", dense)


def contradicted(data: Dataset, query_ids) -> Dataset:
    """``data`` with the judgments of ``query_ids`` saying dense's top document is the relevant one."""
    chosen = set(query_ids)
    qrels = [q if q.query_id not in chosen else Qrel(q.query_id, f"d-{q.query_id}", 1) for q in data.qrels]
    return dataclasses.replace(data, qrels=qrels)


def test_hybrid_tunes_on_dev_queries_never_on_test_queries():
    data, bm25, dense = fusion_dataset(splits=True)
    assert tuning_queries(data) == (data.splits["dev"], "split(s) dev")
    test = data.splits["test"]
    weights = {q: HybridRetriever(data, bm25, dense).weight_of(q) for q in test}
    assert set(weights.values()) == {0.55}
    # test queries' judgments that contradict the dev queries' leave the weight where it was
    flipped = HybridRetriever(contradicted(data, test), bm25, dense)
    assert {q: flipped.weight_of(q) for q in test} == weights
    # the dev judgments do choose it (the check above can fail)
    assert HybridRetriever(contradicted(data, data.splits["dev"]), bm25, dense).weight_of(test[0]) == 0.45


def test_hybrid_cross_fits_on_a_dataset_without_splits():
    data, bm25, dense = fusion_dataset(splits=False)
    hybrid = HybridRetriever(data, bm25, dense, HybridOptions(folds=3))
    assert hybrid.weight_of("q00") == 0.55
    fold = [q for q in hybrid.pool if hybrid.folds[q] == hybrid.folds["q00"]]
    # its own fold's judgments never reach the weight of a query; the other folds' do
    assert HybridRetriever(contradicted(data, fold), bm25, dense, HybridOptions(folds=3)).weight_of("q00") == 0.55
    others = [q for q in hybrid.pool if q not in fold]
    assert HybridRetriever(contradicted(data, others), bm25, dense, HybridOptions(folds=3)).weight_of("q00") == 0.45


def test_hybrid_without_judged_queries_uses_the_default_weight(caplog):
    data, bm25, dense = fusion_dataset(splits=False)
    unjudged = dataclasses.replace(data, qrels=[])
    assert HybridRetriever(unjudged, bm25, dense).weight_of("q00") == 0.5
    assert "default_weight" in caplog.text
    assert HybridRetriever(data, bm25, dense, HybridOptions(weight=0.2)).weight_of("q00") == 0.2


def test_hybrid_search_ranks_the_union_of_both_first_stages():
    data, bm25, dense = fusion_dataset(splits=True)
    query = data.queries["q09"]
    for options in (HybridOptions(), HybridOptions(fusion="rrf")):
        run = HybridRetriever(data, bm25, dense, options).search([query], k=10)
        assert {h.doc_id for h in run["q09"]} == {"b-q09", "d-q09", "x-q09", "y-q09"}
    assert HybridRetriever(data, bm25, dense).search([query], k=1)["q09"][0].doc_id == "b-q09"


def test_hybrid_first_stage_builds_bm25_and_dense(tiny_encoder, dataset, tmp_path):
    settings = BM25Settings(threads=1, index_root=tmp_path, dense=options_for(tiny_encoder),
                            hybrid=HybridOptions(fusion="rrf"))
    hybrid = make_first_stage("hybrid", dataset, settings)
    queries = list(dataset.queries.values())[:3]
    run = hybrid.search(queries, k=20)
    first, second = hybrid.bm25.search(queries, 1000), hybrid.dense.search(queries, 1000)
    for query in queries:
        expected = rrf_lists(query.query_id, [first[query.query_id], second[query.query_id]], 20)
        assert run[query.query_id] == expected
    hybrid.close()
    with pytest.raises(PipelineError, match="settings.hybrid must be a HybridOptions"):
        make_first_stage("hybrid", dataset, dataclasses.replace(settings, hybrid={"fusion": "rrf"}))
