"""A token encoder's forward pass in ONNX Runtime: the same weights, exported once and cached, for encoding
queries on the CPU.

Why: a query is a handful of word pieces, so PyTorch's eager forward pass of a MiniLM-sized transformer is
dominated by per-operator overhead and by reading the weights; ONNX Runtime fuses the attention and
layer-norm blocks and runs the graph without the Python dispatcher. Measured on one AVX2 thread
(``benchmarks/query_encoder_runtime.py``): 15.2 -> 5.6 ms per NFCorpus query, 19.1 -> 7.9 ms per Vaswani
query, outputs within 3e-6 of PyTorch's (float32 in both; only the order of sums differs).

The export (``torch.onnx.export``, TorchScript exporter, dynamic batch and length) takes a few seconds, so
the graph is cached under ``<home>/cache/onnx/`` by a digest of the module's weights, its class, torch's
version and the opset: a changed encoder never reuses a stale graph, and every index or process with the
same encoder shares one file. It is written through a temporary file and renamed; a file ONNX Runtime
cannot load is deleted and exported again. Where the cache cannot be written the graph lives in memory.

Example:
    >>> runner = OnnxEncoder(module, sample=(ids, mask), threads=1)  # doctest: +SKIP
    >>> vectors = runner(ids.numpy(), mask.numpy())                  # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import io
import logging
import warnings
from pathlib import Path

import numpy as np

from pipeline.core.atomic import atomic_write
from pipeline.core.errors import PipelineError
from pipeline.core.home import home

log = logging.getLogger(__name__)

#: what may run a query encoder (``query_runtime`` of the code and dense first stages)
QUERY_RUNTIMES = ("auto", "torch", "onnx")
#: ONNX operator set of the export (ONNX Runtime 1.16+ runs it; fused attention needs >= 14)
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask")


def onnx_runtime_missing() -> str | None:
    """Why :class:`OnnxEncoder` cannot run here (a package to install), or ``None`` when it can."""
    for package in ("onnxruntime", "onnx"):  # onnx: torch.onnx.export's serialiser
        try:
            __import__(package)
        except ImportError:
            return f"the {package} package is not installed (pip install {package})"
    return None


def choose_runtime(requested: str, device, precision: str = "float32") -> str:
    """What runs a query encoder: ``onnx`` (ONNX Runtime) or ``torch``.

    Args:
        requested: ``auto`` (ONNX Runtime for float32 on the CPU when installed, else PyTorch), ``torch`` or
            ``onnx``.
        device: where the PyTorch model lives (ONNX Runtime runs here on the CPU only).
        precision: the query encoder's arithmetic (only ``float32`` is exported).

    Raises:
        PipelineError: ``onnx`` was asked for where it cannot run (the message says why).
    """
    import torch

    if requested == "torch":
        return "torch"
    reason = (f"queries are encoded on {device}" if torch.device(device).type != "cpu"
              else f"query_precision {precision} runs in PyTorch" if precision != "float32"
              else onnx_runtime_missing())
    if reason is None:
        return "onnx"
    if requested == "onnx":
        raise PipelineError(f"query_runtime onnx cannot run here: {reason}")
    log.info("query encoder: PyTorch (%s)", reason)
    return "torch"


def last_hidden_state(transformer):
    """``transformer`` (a Hugging Face model) as a module whose ``forward(input_ids, attention_mask)`` returns its
    last hidden state: the graph :class:`OnnxEncoder` exports for a pooled encoder (the pooling stays outside,
    where the padding is known)."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return LastHiddenState()


def onnx_cache_root() -> Path:
    """Where exported graphs are cached: ``<home>/cache/onnx`` (:func:`pipeline.core.home.home`)."""
    return home() / "cache" / "onnx"


def export_key(module) -> str:
    """A digest of what the exported graph depends on: every parameter and buffer (names, shapes, dtypes,
    bytes), the module's class, torch's version and :data:`OPSET`."""
    import torch

    hasher = hashlib.sha256(f"{type(module).__module__}.{type(module).__qualname__}|{torch.__version__}|{OPSET}".encode())
    for name, tensor in module.state_dict().items():
        tensor = tensor.detach().cpu().contiguous()
        hasher.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}".encode())
        hasher.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return hasher.hexdigest()[:20]


def export_graph(module, sample) -> bytes:
    """``module``'s ``forward(input_ids, attention_mask)`` as a serialised ONNX graph with dynamic batch and
    length axes (``sample``: example inputs, padded, so that the masking is traced as it runs on padding)."""
    import torch

    axes = {name: {0: "batch", 1: "tokens"} for name in INPUT_NAMES}
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # the tracer's notes on Python conditions that do not change the graph
        torch.onnx.export(module.eval(), tuple(sample), buffer, input_names=list(INPUT_NAMES), output_names=["output"],
                          opset_version=OPSET, dynamo=False, dynamic_axes={**axes, "output": {0: "batch", 1: "tokens"}})
    return buffer.getvalue()


class OnnxEncoder:
    """``module``'s ``forward(input_ids, attention_mask) -> [batch, tokens, dim]`` run by ONNX Runtime on the CPU.

    Args:
        module: a ``torch.nn.Module`` whose forward takes ``(input_ids, attention_mask)`` (int64) and returns
            one float tensor with the batch and token axes first.
        sample: example ``(input_ids, attention_mask)`` tensors (at least two rows of different lengths).
        threads: ONNX Runtime's intra-op threads (``None``: torch's current thread count).
        cache_root: where graphs are cached (default :func:`onnx_cache_root`).

    Raises:
        RuntimeError: ONNX Runtime or ``onnx`` is not installed (:func:`onnx_runtime_missing`).
    """

    def __init__(self, module, sample, threads: int | None = None, cache_root: Path | None = None):
        import onnxruntime
        import torch

        missing = onnx_runtime_missing()
        if missing:
            raise RuntimeError(f"ONNX Runtime query encoding needs packages: {missing}")
        self.key = export_key(module)
        self.path = Path(cache_root or onnx_cache_root()) / f"{self.key}.onnx"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: the optimiser's notes are not the user's business
        self.session = self._session(module, sample, options, onnxruntime)

    def _session(self, module, sample, options, onnxruntime):
        if self.path.is_file():
            try:
                return onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
            except Exception as error:  # noqa: BLE001 - a damaged cache entry is rebuilt, never used
                log.warning("%s: unreadable ONNX graph (%s); exporting it again", self.path, error)
                self.path.unlink(missing_ok=True)
        graph = export_graph(module, sample)
        try:
            with atomic_write(self.path, "wb") as handle:
                handle.write(graph)
        except OSError as error:
            log.warning("cannot cache the ONNX graph at %s (%s); keeping it in memory", self.path, error)
        return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """The module's output for one batch (numpy int64 inputs; float32 output)."""
        feed = {"input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
                "attention_mask": np.ascontiguousarray(attention_mask, dtype=np.int64)}
        return self.session.run(None, feed)[0]

