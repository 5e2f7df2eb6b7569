"""The text encoder of the dense first stage (:mod:`indexes.dense`): a pre-trained sentence encoder's last
hidden states pooled (mean over real tokens, or the [CLS] state) and L2-normalised, and what identifies the
encoder in a cache key. torch, transformers and faiss are imported inside the functions that use them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from pipeline.core import filecheck

if TYPE_CHECKING:
    import numpy as np


def encoder_identity(name: str) -> dict:
    """What identifies encoder ``name`` in a cache key: the name for a hub id; for a local directory (the
    packaged MiniLM included) the SHA-256 of its ``config.json`` and the sizes of its weight files, so a
    directory whose model changes gets a new index while the same model at another path does not.

    Args:
        name: an encoder name (see :func:`infra.encoders.resolve_encoder`).

    Returns:
        Plain values identifying the model.
    """
    from infra.encoders import _MINILM_NAMES, DEFAULT_ENCODER, resolve_encoder

    location = Path(resolve_encoder(name))
    label = DEFAULT_ENCODER if name.lower() in _MINILM_NAMES else name
    if not location.is_dir():
        return {"name": label}
    config = location / "config.json"
    weights = sorted(p for p in location.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    return {"name": label if name.lower() in _MINILM_NAMES else "directory",
            "config_sha256": filecheck.file_sha256(config) if config.is_file() else None,
            "weights": {p.name: p.stat().st_size for p in weights}}


def resolve_pooling(options) -> str:
    """The pooling the encoder's vectors use.

    Args:
        options: the dense options (:class:`~indexes.dense.DenseOptions`).

    Returns:
        ``mean`` or ``cls``: ``options.pooling``, or for ``auto`` what a sentence-transformers directory's
        ``1_Pooling/config.json`` says (``pooling_mode_cls_token``), else ``mean``.
    """
    if options.pooling != "auto":
        return options.pooling
    from infra.encoders import resolve_encoder

    config = Path(resolve_encoder(options.encoder)) / "1_Pooling" / "config.json"
    try:
        pooling = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "mean"
    return "cls" if pooling.get("pooling_mode_cls_token") and not pooling.get("pooling_mode_mean_tokens") else "mean"


def set_threads(threads: int | None) -> None:
    """Give torch and faiss ``threads`` threads each.

    Args:
        threads: the number of threads (``None``: leave them as they are).
    """
    if threads is None:
        return
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


class TextEncoder:
    """Pooled, optionally normalised vectors of texts (``encode(texts, max_length) -> [n, d] float32``), with
    the encoder, pooling, device, batch size and normalisation of ``options``
    (:class:`~indexes.dense.DenseOptions`).

    Args:
        options: the dense options.
    """

    def __init__(self, options):
        from pipeline.core.runtime import resolve_device
        from infra.encoders import load_encoder

        self.options = options
        self.pooling = resolve_pooling(options)
        self.device = resolve_device(options.device)
        self.tokenizer, self.model = load_encoder(options.encoder)
        self.model.to(self.device).eval()
        positions = getattr(self.model.config, "max_position_embeddings", None)
        # RoBERTa-style models reserve the first positions (padding_idx + 1 of them)
        reserved = (getattr(self.model.config, "pad_token_id", None) or 0) + 1 if "roberta" in self.model.config.model_type else 0
        self.position_limit = positions - reserved if positions else None
        self.dim = int(self.model.config.hidden_size)
        self._onnx_encoder = None

    def onnx_encoder(self, requested: str = "auto"):
        """The transformer in ONNX Runtime, exported (or found in the cache) at its first use.

        Args:
            requested: the ``query_runtime`` asked for: with ``auto``, a graph that cannot reproduce PyTorch
                gives ``None`` (and a warning); with ``onnx``, an error.

        Returns:
            An :class:`infra.onnx_runtime.OnnxEncoder` giving the last hidden state of ``(input_ids,
            attention_mask)``, or ``None``: encode in PyTorch.
        """
        if self._onnx_encoder is None:
            from infra.onnx_runtime import OnnxEncoder, last_hidden_state, onnx_or_fallback, sample_batches

            sample, probe = sample_batches(self.tokenizer, self.limit(64))
            threads = getattr(self.options, "threads", None)
            # False: tried, PyTorch encodes (not tried again at every batch)
            self._onnx_encoder = onnx_or_fallback(
                lambda: OnnxEncoder(last_hidden_state(self.model), sample, probe, threads=threads), requested) or False
        return self._onnx_encoder or None

    def limit(self, max_length: int) -> int:
        """``max_length`` cut to what the model's positions hold.

        Args:
            max_length: the word pieces wanted, special tokens included.

        Returns:
            The length used.
        """
        return min(max_length, self.position_limit) if self.position_limit else max_length

    def encode(self, texts: Sequence[str], max_length: int, batch_size: int | None = None,
               runtime: str = "torch") -> "np.ndarray":
        """The vectors of ``texts``; batches are formed by token length (less padding).

        Args:
            texts: the texts.
            max_length: word pieces kept per text.
            batch_size: texts per forward pass (default: the options').
            runtime: ``torch``, or ``onnx``: the transformer run by ONNX Runtime on the CPU
                (:class:`infra.onnx_runtime.OnnxEncoder`; same vectors within ~1e-5; for queries, where the
                forward pass of a few tokens is mostly overhead).

        Returns:
            ``[len(texts), dim]`` float32.
        """
        import numpy as np
        import torch

        max_length = self.limit(max_length)
        batch_size = batch_size or self.options.batch_size
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        lengths = [len(ids) for ids in self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
        order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
        result = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                batch = self.tokenizer([texts[i] for i in rows], truncation=True, max_length=max_length,
                                       padding=True, return_tensors="pt")
                ids, attention = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
                runner = self.onnx_encoder(getattr(self.options, "query_runtime", "auto")) if runtime == "onnx" else None
                if runner is not None:
                    states = torch.from_numpy(runner(ids.cpu().numpy(), attention.cpu().numpy()))
                else:
                    states = self.model(input_ids=ids, attention_mask=attention).last_hidden_state.float()
                if self.pooling == "cls":
                    pooled = states[:, 0]
                else:  # mean over real tokens, as the bi-encoder re-ranker (rerankers.bi_encoder) pools
                    weights = attention.unsqueeze(-1).to(states.dtype)
                    pooled = (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
                if self.options.normalize:
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                result[rows] = pooled.cpu().numpy()
        return result
