"""Checkpoint files, written once for every model: re-rankers, code encoders and training states.

A checkpoint is a ``torch.save`` archive of one dict holding only plain types and tensors, read back with
``weights_only=True`` (no pickled code runs on load). Every file carries a SHA-256 digest of its own
contents under ``"sha256"``, computed over the tensors' bytes and the plain values in a canonical order.
Why a digest of our own: ``torch.load`` does not check the CRCs of the zip archive it reads, so a flipped
bit inside a weight tensor (a bad disk, a truncated copy repaired by a sync tool) loads without a word and
gives a model that scores differently. With the digest such a file is a :class:`CheckpointError` that
names it, and the caches that hold checkpoints never hand out a damaged one.

Files written before digests existed have no ``"sha256"`` and load unchecked (they cannot be verified).
"""
from __future__ import annotations

import hashlib
import pickle
import struct
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from pipeline.core.atomic import atomic_write
from pipeline.core.interrupts import deferred_interrupts
from pipeline.core.errors import CheckpointError

DIGEST_KEY = "sha256"
DISTRIBUTION = "neural-rerank-pipeline"


@lru_cache(maxsize=1)
def project_version() -> str:
    """The installed project's version (package metadata), recorded in every checkpoint.

    Returns:
        The version string, ``"unknown"`` when running from a source tree that was never installed.
    """
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _feed(hasher, value: Any) -> None:
    """Add ``value`` to ``hasher`` unambiguously: every item is tagged with its type and length."""
    import torch

    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.is_quantized:
            tensor = tensor.int_repr()
        tensor = tensor.contiguous()
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        hasher.update(b"T" + str(tensor.dtype).encode() + repr(tuple(tensor.shape)).encode()
                      + struct.pack("<Q", len(raw)))
        hasher.update(raw)
    elif isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda item: (type(item[0]).__name__, repr(item[0])))
        hasher.update(b"D" + struct.pack("<Q", len(items)))
        for key, item in items:
            _feed(hasher, key)
            _feed(hasher, item)
    elif isinstance(value, (list, tuple)):
        hasher.update((b"L" if isinstance(value, list) else b"U") + struct.pack("<Q", len(value)))
        for item in value:
            _feed(hasher, item)
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        text = repr(value).encode()
        hasher.update(b"P" + type(value).__name__.encode() + struct.pack("<Q", len(text)) + text)
    else:
        raise TypeError(f"checkpoints hold plain values and tensors, not {type(value).__name__}")


def digest(payload: Mapping[str, Any]) -> str:
    """SHA-256 over ``payload`` without its own digest entry.

    Args:
        payload: plain values and tensors, as :func:`save_checkpoint` takes them.

    Returns:
        The hex digest, the same for equal contents whatever the order of the keys.

    Raises:
        TypeError: a value is neither a plain value nor a tensor.
    """
    hasher = hashlib.sha256()
    _feed(hasher, {key: value for key, value in payload.items() if key != DIGEST_KEY})
    return hasher.hexdigest()


def save_checkpoint(path: str | Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` with its digest to ``path`` atomically.

    SIGINT and SIGTERM wait until the file is in place (:func:`~pipeline.core.interrupts.deferred_interrupts`).

    Args:
        path: the checkpoint file to write (replaced if it exists).
        payload: plain values and tensors; a ``"sha256"`` entry in it is replaced by the fresh digest.

    Example:
        >>> import tempfile, torch
        >>> path = Path(tempfile.mkdtemp()) / "model.pt"
        >>> save_checkpoint(path, {"weights": torch.zeros(2), "name": "knrm"})
        >>> load_checkpoint(path)["name"]
        'knrm'
    """
    import torch

    body = {key: value for key, value in payload.items() if key != DIGEST_KEY}
    payload = {**body, DIGEST_KEY: digest(body)}
    with deferred_interrupts(), atomic_write(Path(path), "wb") as handle:
        torch.save(payload, handle)   # a Ctrl-C or kill meanwhile takes effect once the file is in place


def load_checkpoint(path: str | Path, what: str = "checkpoint") -> dict:
    """The dict :func:`save_checkpoint` wrote to ``path``, its digest checked.

    Args:
        path: the checkpoint file.
        what: what the file was expected to be, for messages (``"training state"``,
            ``"code encoder checkpoint"``).

    Returns:
        The payload, its ``"sha256"`` entry included (files written before digests load unchecked).

    Raises:
        CheckpointError: the file is missing, unreadable, foreign or damaged; the message names ``path``.
    """
    import torch

    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: {what} not found") from None
    except pickle.UnpicklingError:
        # torch's own message advises weights_only=False, which would run code from the file: not ours to give
        raise CheckpointError(f"{path}: not a readable {what} (not a torch archive of plain values and "
                              "tensors)") from None
    except Exception as error:  # noqa: BLE001 - torch raises many types for truncated or foreign files
        reason = str(error).splitlines()[0][:200] if str(error) else ""
        raise CheckpointError(f"{path}: not a readable {what} ({type(error).__name__}: {reason})") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: not a {what} (holds a {type(payload).__name__}, expected a dict)")
    expected = payload.get(DIGEST_KEY)
    if expected is not None:
        try:
            found = digest(payload)
        except TypeError as error:
            raise CheckpointError(f"{path}: not a {what} ({error})") from None
        if found != expected:
            raise CheckpointError(f"{path}: {what} is damaged: its contents do not match the SHA-256 written "
                                  f"with it (expected {expected[:12]}..., found {found[:12]}...); delete it "
                                  "so that it is rebuilt")
    return payload
