"""Scoring precision, the re-ranker side in one place: float32, bfloat16 or int8 arithmetic for scoring.

Which precision a run scores in is decided by the experiment layer (``--precision``, ``--bf16``, ``--int8``:
:func:`pipeline.core.runtime.resolve_precision`, applied by :func:`pipeline.engine.stages.set_scoring_arithmetic`);
how a re-ranker then computes is written here:

* what stays float32 under bfloat16 autocast: similarity matrices (:func:`float32_bmm`; exact matches need
  more than bfloat16's 8 significant bits) and score heads (:func:`score_heads_in_float32`; a score rounded
  to 8 bits ties documents);
* :class:`ScoringPrecision`, mixed into every torch re-ranker: :meth:`~ScoringPrecision.score_in_bf16` and
  the context scoring runs in (autocast around the float32 module, the word-level models' way);
* :class:`TransformerPrecision`, mixed into the transformer re-rankers: a bfloat16 copy of the module
  instead of autocast around float32 weights, and :meth:`~TransformerPrecision.quantize_int8`.

Training is not affected: ``fit`` always computes in float32. torch is imported only once a model
scores, so that importing a re-ranker class (to list choices or answer ``--help``) stays cheap.
"""
from __future__ import annotations

import contextlib
import warnings

from pipeline.core.errors import PipelineError

__all__ = ["float32_bmm", "score_heads", "score_heads_in_float32", "ScoringPrecision", "TransformerPrecision"]


def float32_bmm(a, b):
    """``bmm(a, b)`` in float32, also under bfloat16 autocast (scoring with ``--bf16``): similarity matrices
    decide exact matches (K-NRM's exact-match kernel is 1e-3 wide, DRMM gives similarity 1 a histogram bin
    of its own), which 8 significant bits would blur; they are a small part of any model's cost.

    Args:
        a: ``[B, n, k]`` tensor.
        b: ``[B, k, m]`` tensor.

    Returns:
        ``[B, n, m]`` float32.
    """
    import torch

    with torch.autocast(a.device.type, enabled=False):
        return torch.bmm(a.float(), b.float())


def score_heads(module) -> list:
    """The score heads of ``module``: its linear layers with one output (the layer that outputs a score).

    Args:
        module: a torch module.

    Returns:
        Its ``nn.Linear`` layers with ``out_features == 1``, in module order.
    """
    import torch.nn as nn

    return [layer for layer in module.modules() if isinstance(layer, nn.Linear) and layer.out_features == 1]


def score_heads_in_float32(module, enabled: bool = True) -> None:
    """Make every score head of ``module`` (an ``nn.Linear`` with one output) compute in float32 also under
    bfloat16 autocast (``enabled=False`` undoes it). A head's output is the score: rounded to bfloat16's 8
    significant bits, documents a ranking should separate would tie. The heads are tiny, so this costs
    nothing; their weights, state dict and checkpoints are unchanged (only the instance's ``forward``).

    Args:
        module: a torch module.
        enabled: ``False`` undoes it.
    """
    for layer in score_heads(module):
        if enabled and "forward" not in layer.__dict__:
            layer.forward = _float32_linear(layer)
        elif not enabled:
            layer.__dict__.pop("forward", None)


def _float32_linear(layer):
    def forward(x):
        import torch  # here, not around: the closure holds the layer alone (torch is imported by then)
        import torch.nn.functional as F

        with torch.autocast(x.device.type, enabled=False):
            return F.linear(x.float(), layer.weight.float(), None if layer.bias is None else layer.bias.float())
    return forward


class ScoringPrecision:
    """The scoring arithmetic of a torch re-ranker (a mixin of :class:`rerankers.neural.TorchReranker`, which
    provides ``name``, ``module`` and ``clear_cache``): float32 by default, bfloat16 after
    :meth:`score_in_bf16`."""

    #: True after :meth:`score_in_bf16`: scoring runs its matrix products in bfloat16
    bf16: bool = False
    #: True once the module was replaced by its int8 form (:meth:`TransformerPrecision.quantize_int8`)
    quantized: bool = False

    def score_in_bf16(self, enabled: bool = True):
        """Score with bfloat16 matrix products (``enabled=False``: float32 again); returns the re-ranker.

        Scoring then runs under ``torch.autocast(dtype=torch.bfloat16)``: matrix products, convolutions and
        attention read bfloat16 inputs (8 significant bits) and accumulate in float32, while reductions,
        softmaxes and normalisations stay float32; LSTMs keep a float32 recurrence and take only their input
        projection in bfloat16 (:class:`~rerankers.blocks.MaskedBiLSTM`). Transformer re-rankers score with a
        bfloat16 copy of their module instead (:meth:`TransformerPrecision._bf16_context`). Score heads
        always compute in float32, so that rounding never ties documents. On CPUs with AMX or AVX512-BF16
        (Intel Sapphire Rapids and later, AMD Zen 4) these products run several times faster than float32;
        on other CPUs bfloat16 is emulated and slower (:func:`pipeline.core.runtime.native_bf16` says
        which). Scores move by about 1e-2 of their spread (BENCHMARKS.md, "Scoring throughput", measures the
        ranking cost). Training is not affected: ``fit`` always computes in float32. Cached encoder
        outputs are dropped, since they came from the other arithmetic.

        Args:
            enabled: ``False`` scores in float32 again.

        Returns:
            The re-ranker itself.

        Raises:
            PipelineError: the model is int8-quantized.

        Example:
            >>> reranker.score_in_bf16().score(query, docs)  # doctest: +SKIP
        """
        if enabled and self.quantized:
            raise PipelineError(f"{self.name}: an int8-quantized model cannot also score in bfloat16")
        self.bf16 = bool(enabled)
        if not self.bf16 and self.module is not None:
            score_heads_in_float32(self.module, False)
        self.clear_cache()
        return self

    def _arithmetic(self):
        """The context scoring runs in: :meth:`_bf16_context` after :meth:`score_in_bf16`, else nothing."""
        return self._bf16_context() if self.bf16 else contextlib.nullcontext()

    def _require_float(self, action: str) -> None:
        """Refuse ``action`` (train, save, export) on an int8-quantized model, which can only score."""
        if self.quantized:
            raise PipelineError(f"{self.name}: cannot {action} an int8-quantized model (it is for scoring "
                                f"only); use the float model")

    def _bf16_context(self):
        """How this model scores in bfloat16: autocast around the float32 module, its score heads kept
        float32 (word-level models, whose LSTMs take only their projections in bfloat16; transformers
        override it). The heads are set here, at each call, since the module may have been rebuilt."""
        import torch

        score_heads_in_float32(self.module)
        return torch.autocast(device_type=next(self.module.parameters()).device.type, dtype=torch.bfloat16)


class TransformerPrecision(ScoringPrecision):
    """The scoring arithmetic of a transformer re-ranker (a mixin of
    :class:`rerankers.transformer_base.TransformerReranker`): a bfloat16 copy of the module, or int8."""

    #: ``(weights key, module)``: the bfloat16 copy :meth:`_bf16_context` scores with
    _bf16_copy = None

    def _bf16_context(self):
        """Score with a bfloat16 copy of the module (encoder, heads around it; score heads float32), under
        autocast for any float32 tensor met on the way. Unlike autocast around float32 weights, activations
        stay bfloat16 from layer to layer, which saves the casts around every product (BENCHMARKS.md,
        "Scoring throughput": 1.4-1.6x faster again than autocast alone, with about twice its score drift).
        The float32 module stays what ``fit`` trains and ``save`` writes; the copy is remade when
        the module or any of its weights changed (parameter versions)."""
        import copy

        import torch

        key = (id(self.module), tuple(p._version for p in self.module.parameters()))
        if self._bf16_copy is None or self._bf16_copy[0] != key:
            module = copy.deepcopy(self.module)
            heads = {layer: {k: v.clone() for k, v in layer.state_dict().items()} for layer in score_heads(module)}
            module.to(torch.bfloat16)
            for layer, weights in heads.items():                # score heads keep their float32 weights
                layer.float().load_state_dict(weights)
            score_heads_in_float32(module)
            self._bf16_copy = (key, module.eval())

        @contextlib.contextmanager
        def swapped():
            float32, self.module = self.module, self._bf16_copy[1]
            try:
                with torch.autocast(device_type=next(float32.parameters()).device.type, dtype=torch.bfloat16):
                    yield
            finally:
                self.module = float32
        return swapped()

    def quantize_int8(self):
        """Quantize the module for CPU scoring: every ``nn.Linear`` (the encoder's attention and
        feed-forward layers, the heads) becomes a dynamically quantized int8 layer
        (``torch.ao.quantization.quantize_dynamic``: int8 weights, each layer's input quantized at run time
        with one scale per batch). Embeddings, layer norms and attention products stay float.

        Scores change a little (BENCHMARKS.md, "Scoring speed", measures what it costs), and since the
        input scale is the batch's, a pair's int8 score also depends a little on the batch it is scored in
        (float scores do not). The model can then only score: ``fit`` and ``save`` refuse.
        Quantized kernels exist for the CPU only: a module trained on a GPU moves to the CPU first (int8
        is a CPU scoring path; score on the GPU in float instead). Idempotent.

        Returns:
            The re-ranker itself.

        Raises:
            PipelineError: the model is not prepared, or scores in bfloat16.

        Example:
            >>> reranker.quantize_int8().score(query, docs)  # doctest: +SKIP
        """
        import torch
        from torch.ao.quantization import quantize_dynamic

        self._require_prepared()
        if self.quantized:
            return self
        if self.bf16:
            raise PipelineError(f"{self.name}: a model scoring in bfloat16 cannot also be quantized to int8")
        self.module.to("cpu")
        self.device = torch.device("cpu")
        self.module.eval()
        with warnings.catch_warnings():
            # torch 2.13 (the pinned version) warns that eager quantization is to move to torchao, a package
            # this project does not install; the API works in the pinned version, so the warnings are noise
            warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=UserWarning)
            warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=DeprecationWarning)
            self.module = quantize_dynamic(self.module, {torch.nn.Linear}, dtype=torch.qint8)
        self.quantized = True
        self.clear_cache()  # cached encoder outputs came from the float weights
        return self
