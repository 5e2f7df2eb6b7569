"""infra.onnx_runtime on small modules: the graph reproduces PyTorch on batches of other shapes, is cached by
the weights, and a module whose Python code branches on its input's shape (a graph valid for the traced shape
only) is refused before anything is cached."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from infra import onnx_runtime
from infra.onnx_runtime import OnnxEncoder, OnnxExportError, onnx_or_fallback
from pipeline.core.errors import PipelineError


class Embedder(torch.nn.Module):
    """Token embeddings, a linear layer and the mask: the shape of a query encoder's output."""

    def __init__(self, shape_dependent: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.linear, self.shape_dependent = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 4), shape_dependent

    def forward(self, input_ids, attention_mask):
        out = self.linear(self.embed(input_ids)) * attention_mask.unsqueeze(-1)
        if self.shape_dependent and input_ids.shape[1] > 4:  # traced as a constant: wrong for other lengths
            out = out * 2.0
        return out


def batch(rows: int, length: int):
    ids = torch.arange(rows * length).reshape(rows, length) % 50
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, length // 2:] = 0
    return ids, mask


def test_the_graph_gives_pytorchs_output_on_other_shapes_and_is_cached(tmp_path, monkeypatch):
    module = Embedder()
    runner = OnnxEncoder(module, batch(2, 3), batch(3, 7), threads=1, cache_root=tmp_path)
    for rows, length in ((1, 1), (4, 9)):
        ids, mask = batch(rows, length)
        with torch.no_grad():
            expected = module(ids, mask).numpy()
        assert np.abs(runner(ids.numpy(), mask.numpy()) - expected).max() < 1e-5
    assert [p.name for p in tmp_path.iterdir()] == [f"{runner.key}.onnx"]
    monkeypatch.setattr(onnx_runtime, "export_graph", lambda *a: pytest.fail("exported again"))
    OnnxEncoder(module, batch(2, 3), batch(3, 7), threads=1, cache_root=tmp_path)  # found in the cache


def test_a_shape_dependent_module_is_refused_and_nothing_is_cached(tmp_path, caplog):
    module = Embedder(shape_dependent=True)
    with pytest.raises(OnnxExportError, match="differs from PyTorch on a probe batch"):
        OnnxEncoder(module, batch(2, 3), batch(3, 7), threads=1, cache_root=tmp_path)
    assert not list(tmp_path.iterdir())
    make = lambda: OnnxEncoder(module, batch(2, 3), batch(3, 7), threads=1, cache_root=tmp_path)  # noqa: E731
    with caplog.at_level("WARNING"):
        assert onnx_or_fallback(make, "auto") is None
    assert "query encoder: PyTorch" in caplog.text
    with pytest.raises(PipelineError, match="query_runtime onnx: the ONNX graph differs"):
        onnx_or_fallback(make, "onnx")


def test_it_refuses_to_start_without_its_packages(monkeypatch):
    monkeypatch.setattr(onnx_runtime, "onnx_runtime_missing", lambda: "the onnxruntime package is not installed")
    with pytest.raises(RuntimeError, match="onnxruntime package is not installed"):
        OnnxEncoder(Embedder(), batch(2, 3), batch(3, 7))
