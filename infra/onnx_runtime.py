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


#: largest absolute difference from PyTorch's output on the probe batch that an exported graph may have
TOLERANCE = 1e-4


class OnnxExportError(RuntimeError):
    """The module could not be exported, or its graph does not reproduce PyTorch's output (a model whose
    Python code branches on its input's shape traces into a graph that holds for the sample's shape only)."""


class OnnxEncoder:
    """``module``'s ``forward(input_ids, attention_mask) -> [batch, tokens, dim]`` run by ONNX Runtime on the CPU.

    The graph is checked before use: on ``probe`` (a batch of another shape than ``sample``) it must give
    PyTorch's output within :data:`TOLERANCE`, else :class:`OnnxExportError` (and nothing is cached).

    Args:
        module: a ``torch.nn.Module`` whose forward takes ``(input_ids, attention_mask)`` (int64) and returns
            one float tensor with the batch and token axes first.
        sample: example ``(input_ids, attention_mask)`` tensors the export traces (padded rows).
        probe: ``(input_ids, attention_mask)`` of another batch size and length, to check the graph on.
        threads: ONNX Runtime's intra-op threads (``None``: torch's current thread count).
        cache_root: where graphs are cached (default :func:`onnx_cache_root`).

    Raises:
        RuntimeError: ONNX Runtime or ``onnx`` is not installed (:func:`onnx_runtime_missing`).
        OnnxExportError: the export failed or its graph differs from PyTorch on ``probe``.
    """

    def __init__(self, module, sample, probe, threads: int | None = None, cache_root: Path | None = None):
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
        with torch.inference_mode():
            expected = module.eval()(*probe).float().cpu().numpy()
        self.session = self._session(module, sample, options, onnxruntime, probe, expected)

    def _session(self, module, sample, options, onnxruntime, probe, expected):
        if self.path.is_file():
            try:
                session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
                self._check(session, probe, expected)
                return session
            except Exception as error:  # noqa: BLE001 - a damaged cache entry is rebuilt, never used
                log.warning("%s: unreadable, or not PyTorch's output (%s); exporting it again", self.path, error)
                self.path.unlink(missing_ok=True)
        try:
            graph = export_graph(module, sample)
            session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001 - whatever the exporter or the runtime refuses
            raise OnnxExportError(f"cannot export {type(module).__name__} to ONNX: {error}") from error
        self._check(session, probe, expected)
        try:
            with atomic_write(self.path, "wb") as handle:
                handle.write(graph)
        except OSError as error:
            log.warning("cannot cache the ONNX graph at %s (%s); keeping it in memory", self.path, error)
        return session

    @staticmethod
    def _check(session, probe, expected) -> None:
        got = session.run(None, {name: tensor.cpu().numpy() for name, tensor in zip(INPUT_NAMES, probe)})[0]
        difference = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
        if not difference <= TOLERANCE:
            raise OnnxExportError(f"the ONNX graph differs from PyTorch on a probe batch by {difference:.3g} "
                                  f"(shapes {got.shape} / {expected.shape}; tolerance {TOLERANCE})")

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """The module's output for one batch (numpy int64 inputs; float32 output)."""
        feed = {"input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
                "attention_mask": np.ascontiguousarray(attention_mask, dtype=np.int64)}
        return self.session.run(None, feed)[0]



def sample_batches(tokenizer, max_length: int):
    """``(sample, probe)`` for :class:`OnnxEncoder`: two padded batches of different sizes and lengths (at
    most ``max_length`` word pieces), each ``(input_ids, attention_mask)``."""
    def batch(texts):
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return encoded["input_ids"], encoded["attention_mask"]

    return (batch(["a sample query", "a longer sample query, padded to its batch"]),
            batch(["one", "two words", "a third text, longer than the other two, to check the graph on a batch "
                   "of another size and length than the one it was traced on"]))


def onnx_or_fallback(make, requested: str):
    """``make()`` (an :class:`OnnxEncoder`), or ``None`` when it raises :class:`OnnxExportError` and the user
    asked for ``auto`` (PyTorch then encodes the queries, with a warning); with ``onnx`` asked for, the failure
    is a :class:`~pipeline.core.errors.PipelineError`."""
    try:
        return make()
    except OnnxExportError as error:
        if requested == "onnx":
            raise PipelineError(f"query_runtime onnx: {error}") from None
        log.warning("query encoder: PyTorch (%s)", error)
        return None
