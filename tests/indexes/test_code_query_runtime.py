"""The code first stage's query encoder in ONNX Runtime (``query_runtime``; infra.onnx_runtime): the default
(``auto``) takes it on the CPU, it gives PyTorch's vectors and rankings, its exported graph is cached by the
weights (reused, rebuilt when damaged, kept in memory where the cache cannot be written), and where it cannot
run ``auto`` falls back to PyTorch while ``onnx`` is an error.

The index is built from an empty home with the default training options (hard negatives included) on a tiny
random BERT, as a user's first build would run.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from indexes.codes import CodeOptions, CodeRetriever, build_code_index
from indexes.codes import search as code_search
from infra import onnx_runtime
from infra.onnx_runtime import OnnxEncoder, export_key
from pipeline.core.errors import PipelineError
from tests.helpers import one_faiss_thread, one_torch_thread, tiny_dataset, tiny_encoder  # noqa: F401 (fixtures)

WORDS = "apple river mountain music doctor garden winter ocean teacher window city dog cat bread".split()


@pytest.fixture(scope="module")
def dataset():
    return tiny_dataset(WORDS)


@pytest.fixture(scope="module")
def index(tiny_encoder, dataset, tmp_path_factory) -> Path:
    options = CodeOptions(kind="codes", encoder=tiny_encoder, dim=16, steps=10, batch_size=4, max_query_length=12,
                          max_doc_length=24, shard_size=16, progress=False, device="cpu")
    assert options.hard_negatives > 0 and options.query_runtime == "auto"  # the defaults a user gets
    return build_code_index(dataset, options, tmp_path_factory.mktemp("home") / "codes")


def test_the_default_encodes_queries_in_onnx_runtime_with_pytorchs_vectors_and_ranking(index, dataset, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path))
    queries = list(dataset.queries.values())
    onnx, plain = CodeRetriever(index, k_prime=16), CodeRetriever(index, k_prime=16, query_runtime="torch")
    assert (onnx.query_runtime, plain.query_runtime) == ("onnx", "torch")
    texts = [q.text for q in queries]
    for batch_size in (1, 5):  # one query, and padded batches
        onnx.batch_size = plain.batch_size = batch_size
        for a, b in zip(onnx.encode_queries(texts), plain.encode_queries(texts), strict=True):
            assert a.shape == b.shape and np.abs(a - b).max() < 1e-5
    ranked, reference = onnx.search(queries, 10), plain.search(queries, 10)
    for query in queries:
        assert [h.doc_id for h in ranked[query.query_id]] == [h.doc_id for h in reference[query.query_id]]
        assert np.allclose([h.score for h in ranked[query.query_id]], [h.score for h in reference[query.query_id]],
                           atol=1e-4)
    assert len(list((tmp_path / "cache" / "onnx").glob("*.onnx"))) == 1


def test_the_exported_graph_is_cached_by_the_weights_and_rebuilt_when_damaged(index, dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path))
    text = [next(iter(dataset.queries.values())).text]
    first = CodeRetriever(index, k_prime=16).encode_queries(text)
    graph = next((tmp_path / "cache" / "onnx").glob("*.onnx"))
    exports = []
    real_export = onnx_runtime.export_graph
    monkeypatch.setattr(onnx_runtime, "export_graph", lambda *a: exports.append(1) or real_export(*a))
    again = CodeRetriever(index, k_prime=16).encode_queries(text)  # a second process finds the graph cached
    assert exports == [] and np.array_equal(first[0], again[0])
    graph.write_bytes(graph.read_bytes()[:1000])  # a damaged entry is exported again, never used
    repaired = CodeRetriever(index, k_prime=16).encode_queries(text)
    assert exports == [1] and np.array_equal(first[0], repaired[0]) and graph.stat().st_size > 1000
    assert not [p for p in graph.parent.iterdir() if p.name.startswith(".")]  # no temporary file left behind

    retriever = CodeRetriever(index, k_prime=16)
    retriever.onnx_encoder()
    key = export_key(code_search.QueryVectors(retriever.model))
    with torch.no_grad():
        next(retriever.model.project.parameters()).view(-1)[0] += 1.0  # other weights: another graph
    assert export_key(code_search.QueryVectors(retriever.model)) != key


def test_an_unwritable_cache_keeps_the_graph_in_memory(index, dataset, tmp_path, monkeypatch):
    blocked = tmp_path / "home"
    blocked.mkdir()
    (blocked / "cache").write_text("a file where the cache folder would be")
    monkeypatch.setenv("PIPELINE_HOME", str(blocked))
    text = [q.text for q in dataset.queries.values()][:3]
    vectors = CodeRetriever(index, k_prime=16).encode_queries(text)
    reference = CodeRetriever(index, k_prime=16, query_runtime="torch").encode_queries(text)
    assert all(np.abs(a - b).max() < 1e-5 for a, b in zip(vectors, reference, strict=True))


def test_auto_falls_back_to_pytorch_where_onnx_runtime_cannot_run_and_onnx_is_then_an_error(index, monkeypatch):
    monkeypatch.setattr(onnx_runtime, "onnx_runtime_missing", lambda: "the onnx package is not installed")
    assert CodeRetriever(index, k_prime=16).query_runtime == "torch"
    with pytest.raises(PipelineError, match="query_runtime onnx cannot run here: the onnx package"):
        CodeRetriever(index, k_prime=16, query_runtime="onnx")
    monkeypatch.undo()
    assert CodeRetriever(index, k_prime=16, query_precision="int8").query_runtime == "torch"
    with pytest.raises(PipelineError, match="query_precision int8 runs in PyTorch"):
        CodeRetriever(index, k_prime=16, query_precision="int8", query_runtime="onnx")
    with pytest.raises(PipelineError, match="unknown query_runtime"):
        CodeRetriever(index, query_runtime="tensorrt")
    with pytest.raises(PipelineError, match="query runtime"):
        CodeOptions(query_runtime="tensorrt")
    with pytest.raises(PipelineError, match="encodes float32 queries"):
        dataclasses.replace(CodeOptions(), query_precision="int8", query_runtime="onnx")


def test_a_graph_that_differs_from_pytorch_falls_back_under_auto_and_is_an_error_under_onnx(index, dataset, tmp_path,
                                                                                              monkeypatch, caplog):
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path))
    text = [next(iter(dataset.queries.values())).text]
    reference = CodeRetriever(index, k_prime=16, query_runtime="torch").encode_queries(text)

    def failing_check(session, probe, expected):
        raise onnx_runtime.OnnxExportError("the ONNX graph differs from PyTorch on a probe batch by 0.5")

    monkeypatch.setattr(OnnxEncoder, "_check", staticmethod(failing_check))
    retriever = CodeRetriever(index, k_prime=16)
    with caplog.at_level("WARNING"):
        vectors = retriever.encode_queries(text)
    assert retriever.query_runtime == "torch" and np.array_equal(vectors[0], reference[0])
    assert "query encoder: PyTorch (the ONNX graph differs" in caplog.text
    assert not list((tmp_path / "cache" / "onnx").glob("*.onnx"))  # a graph that failed its check is not cached
    with pytest.raises(PipelineError, match="query_runtime onnx: the ONNX graph differs"):
        CodeRetriever(index, k_prime=16, query_runtime="onnx").encode_queries(text)
