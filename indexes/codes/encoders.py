"""The cache of trained token encoders: checkpoints (:mod:`infra.checkpoints`) and
:func:`obtain_encoder`, which loads one or trains it (``mlp`` head, or ``lsh`` from the float encoder)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.errors import CorruptCacheError
from pipeline.core.locks import exclusive
from pipeline.core.filenames import safe_name
from infra.checkpoints import load_checkpoint, save_checkpoint

from .hashing import (
    agreement_sample, center_sample, centring_summary, draw_seeds, hashed_from_float, hyperplane_agreement,
)
from .model import TokenCodeEncoder
from .options import CHECKPOINT_FORMAT, CodeOptions, ENCODER_FILE, ENCODER_META, _digest, code_index_root
from .training import TrainingSource, bm25_negatives, train_encoder

log = logging.getLogger(__name__)


def save_encoder(model, options: CodeOptions, path: Path, extra: dict | None = None) -> None:
    """Write ``model`` (transformer and projection weights, and what rebuilds it) to ``path`` atomically."""
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    payload = {"format": CHECKPOINT_FORMAT, "options": options.training_fields(), "state_dict": state,
               "skip_ids": model.skip_ids.tolist(), **(extra or {})}
    save_checkpoint(path, payload)


def load_encoder_checkpoint(path: Path, device=None):
    """``(tokenizer, model, options dict)`` from a checkpoint written by :func:`save_encoder` (eval mode)."""
    from pipeline.core.errors import CheckpointError
    from infra.encoders import load_encoder

    payload = load_checkpoint(path, "code encoder checkpoint")
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {payload.get('format')!r}, expected {CHECKPOINT_FORMAT}")
    opts = payload["options"]
    tokenizer, transformer = load_encoder(opts["encoder"])
    head = "mlp" if opts.get("hash_head", "mlp") != "lsh" else "centred" if opts.get("hash_center") else "linear"
    model = TokenCodeEncoder(transformer, opts["dim"], opts["kind"] == "codes", opts["alpha"], payload["skip_ids"], head,
                             opts.get("float_dim"))
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as error:
        raise CheckpointError(f"{path}: does not match encoder {opts['encoder']!r} ({error})") from None
    model.eval()
    if device is not None:
        model.to(device)
    return tokenizer, model, opts


def encoder_path(options: CodeOptions, source: TrainingSource, root: Path | None = None) -> Path:
    """The cache directory of the encoder trained with ``options`` on ``source``."""
    digest = _digest({"options": options.training_fields(), "training": source.key()})
    return (root or code_index_root()) / "code-encoders" / f"{options.kind}-{safe_name(source.dataset.name, fallback='dataset')}-{digest}"


def obtain_encoder(options: CodeOptions, source: TrainingSource, root: Path | None = None, force: bool = False,
                   device=None) -> tuple[Path, dict]:
    """The checkpoint of the encoder for ``options`` and ``source``: from the cache, or trained now (with
    BM25 negatives when ``options.hard_negatives``) and saved atomically. Returns ``(checkpoint, metadata)``.

    What training needs from other cache entries (the training set's Lucene index for hard negatives, the
    float encoder an ``lsh`` head hashes) is obtained before this entry's lock is taken, so no lock is held
    while another entry is built; a second process waits on the lock and then finds the encoder cached.
    """
    path = encoder_path(options, source, root)
    if _cached(path) and not force:
        return path / ENCODER_FILE, _read_meta(path)
    negatives = None
    trains_with_negatives = options.hard_negatives and (options.hash_head == "mlp" or options.hash_steps)
    if trains_with_negatives or (options.hash_head == "lsh" and options.hash_draws > 1):  # draws: for agreement
        negatives = bm25_negatives(source.dataset, source.query_ids, options.negative_depth, root)
    float_encoder = obtain_encoder(options.float_options(), source, root, force, device) \
        if options.hash_head == "lsh" else None
    with exclusive(path):
        if _cached(path) and not force:  # trained by the process we waited for
            return path / ENCODER_FILE, _read_meta(path)
        if options.hash_head == "lsh":
            model, summary = _lsh_encoder(options, source, negatives, float_encoder, root, device)
        else:
            _, model, report = train_encoder(options, source, negatives, device)
            summary = report.summary()
        meta = {"options": options.training_fields(), "training": summary, "train_dataset": source.dataset.name,
                "train_fingerprint": source.dataset.fingerprint, "train_queries": len(source.query_ids)}
        with atomic_directory(path) as temp:
            save_encoder(model, options, temp / ENCODER_FILE)
            with atomic_write(temp / ENCODER_META) as handle:
                json.dump(meta, handle, indent=1)
    return path / ENCODER_FILE, meta


def _cached(path: Path) -> bool:
    return (path / ENCODER_META).is_file() and (path / ENCODER_FILE).is_file()


def _read_meta(path: Path) -> dict:
    try:
        return json.loads((path / ENCODER_META).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptCacheError(f"{path / ENCODER_META}: unreadable ({error}); delete {path} to retrain") from None


def _lsh_encoder(options: CodeOptions, source: TrainingSource, negatives, float_encoder: tuple[Path, dict],
                 root: Path | None, device):
    """The ``lsh`` binary encoder: the float encoder of ``options.float_options()`` (``float_encoder``, its
    checkpoint and metadata), hashed by :func:`hashed_from_float`, then fine-tuned ``hash_steps`` steps with
    the binary loss. Returns ``(model, training summary)``; the summary is the float encoder's with
    ``hash_steps`` added."""
    float_checkpoint, float_meta = float_encoder
    tokenizer, float_model, _ = load_encoder_checkpoint(float_checkpoint, device)
    summary = {**(float_meta.get("training") or {}), "hash_steps": options.hash_steps}
    seed = options.hyperplane_seed
    centre, centre_docs = center_sample(float_model, tokenizer, source.dataset, options, device) \
        if options.hash_center else (None, 0)
    if options.hash_draws > 1:
        seeds = draw_seeds(seed, options.hash_draws)
        sample = agreement_sample(source, negatives, options.seed)
        agreement = hyperplane_agreement(float_model, tokenizer, sample, options.dim, seeds, options, device, centre)
        seed = seeds[int(np.argmax(agreement))]
        summary.update(hash_draws={"seeds": seeds, "kendall_tau": [round(t, 5) for t in agreement],
                                   "queries": len(sample), "chosen": seed})
        log.info("lsh hyperplane draws %s: mean Kendall tau with the float scores %s; keeping %d",
                 seeds, [f"{t:.4f}" for t in agreement], seed)
    model = hashed_from_float(float_model, options.dim, options.alpha, seed, centre)
    if centre is not None:
        summary.update(hash_center=centring_summary(model, centre_docs, len(centre)))
    if options.hash_steps:
        _, model, report = train_encoder(options, source, negatives, device, start=(tokenizer, model),
                                         steps=options.hash_steps)
        fine = report.summary()
        summary.update(hash_first_loss=fine["first_loss"], hash_last_loss=fine["last_loss"],
                       seconds=round(summary.get("seconds", 0) + fine["seconds"], 2))
    return model, summary
