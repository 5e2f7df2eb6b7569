"""Contrastive training of the token encoder: training queries and their source dataset, BM25 hard
negatives, batches, the loss (with ADDAX's quantisation term for binary codes) and the training loop."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from pipeline.core.progress import progress_switch
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError

from ..base import BM25Settings
from ..registry import make_first_stage

from .model import _autocast, new_encoder, tokenize
from .options import CodeOptions, TRAINING_COMPANIONS

log = logging.getLogger(__name__)


@dataclass
class TrainingSource:
    """Where an encoder's training queries come from: a dataset, its training query ids and a readable
    description (for logs, metadata and benchmark reports)."""

    dataset: Dataset
    query_ids: list[str]
    description: str

    def key(self) -> str:
        return hashlib.sha1(f"{self.dataset.fingerprint}:{','.join(sorted(self.query_ids))}".encode()).hexdigest()


def _judged_queries(dataset: Dataset, query_ids: Iterable[str]) -> list[str]:
    positive = {q.query_id for q in dataset.qrels if q.relevance > 0}
    return [q for q in query_ids if q in positive and q in dataset.queries]


def resolve_training(dataset: Dataset, train_dataset: "Dataset | str | None" = None,
                     mirror: str | os.PathLike | None = None) -> TrainingSource:
    """The training queries for an index of ``dataset``.

    ``train_dataset`` (a Dataset or a name for :func:`pipeline.core.datasets.load_dataset`; default the dataset
    itself) gives its ``train`` split; without one, its companion in :data:`TRAINING_COMPANIONS`; without
    that, all its judged queries, unless it is ``dataset`` itself (whose queries are the test queries): then
    the error says to pick another dataset.
    """
    from pipeline.core.datasets import load_dataset

    if train_dataset is None or (isinstance(train_dataset, str) and train_dataset == dataset.name):
        source = dataset
    elif isinstance(train_dataset, str):
        source = load_dataset(train_dataset, mirror)
    else:
        source = train_dataset
    if source.splits.get("train"):
        qids = _judged_queries(source, source.splits["train"])
        description = f"{source.name} (train split)"
    elif source.name in TRAINING_COMPANIONS:
        companion = load_dataset(TRAINING_COMPANIONS[source.name], mirror)
        return TrainingSource(companion, _judged_queries(companion, companion.queries),
                              f"{source.name}: its training queries are {companion.name}")
    elif source is dataset or (source.name == dataset.name and source.fingerprint == dataset.fingerprint):
        raise PipelineError(
            f"dataset {dataset.name!r} has no training queries (no 'train' split) for the learned-code first "
            f"stage, and training on its own queries would test on training data; train the encoder on another "
            f"dataset: --train-dataset NAME (python -m pipeline.index) or CodeOptions(train_dataset=NAME), "
            f"e.g. nfcorpus"
        )
    else:
        qids = _judged_queries(source, source.queries)
        description = f"{source.name} (all judged queries)"
    if not qids:
        raise PipelineError(f"training dataset {source.name!r} has no queries with a relevant document")
    return TrainingSource(source, qids, description)


def bm25_negatives(dataset: Dataset, query_ids: Sequence[str], depth: int, root: Path | None = None) -> dict[str, list[str]]:
    """Non-relevant documents in BM25's top ``depth`` (Lucene first stage) for each query, in rank order."""
    retriever = make_first_stage("bm25", dataset, BM25Settings(index_root=root))
    run = retriever.search([dataset.queries[q] for q in query_ids], depth)
    qrels = dataset.qrels_dict()
    store = dataset.doc_store()
    return {q: [h.doc_id for h in run.get(q, []) if qrels.get(q, {}).get(h.doc_id, 0) <= 0 and h.doc_id in store]
            for q in query_ids}


@dataclass
class TrainingBatch:
    """One contrastive step: query texts, document texts, each query's target document and the documents
    left out of its softmax (other judged-relevant ones)."""

    queries: list[str]
    docs: list[str]
    targets: list[int]
    excluded: list[list[bool]]


class BatchSampler:
    """Seeded batches of (query, one judged-relevant doc, ``hard`` negatives) with in-batch negatives."""

    def __init__(self, source: TrainingSource, negatives: dict[str, list[str]] | None, batch_size: int,
                 hard: int, seed: int):
        store = source.dataset.doc_store()
        qrels = source.dataset.qrels_dict()
        self.store, self.batch_size, self.hard = store, batch_size, hard
        self.rng = random.Random(seed)
        self.negatives = negatives or {}
        self.examples = []
        for qid in source.query_ids:
            relevant = sorted(d for d, r in qrels.get(qid, {}).items() if r > 0 and d in store)
            if relevant:
                self.examples.append((source.dataset.queries[qid], relevant, set(relevant)))
        if not self.examples:
            raise PipelineError(f"{source.description}: no training query has a relevant document in the collection")

    def sample(self) -> TrainingBatch:
        chosen = self.rng.sample(self.examples, min(self.batch_size, len(self.examples)))
        doc_ids, targets = [], []
        for _, relevant, _ in chosen:
            targets.append(len(doc_ids))
            doc_ids.append(self.rng.choice(relevant))
        for query, _, _ in chosen:
            pool = self.negatives.get(query.query_id, [])
            doc_ids.extend(self.rng.sample(pool, min(self.hard, len(pool))))
        excluded = [[d in relevant and j != targets[row] for j, d in enumerate(doc_ids)]
                    for row, (_, _, relevant) in enumerate(chosen)]
        return TrainingBatch([q.text for q, _, _ in chosen], [self.store[d].text for d in doc_ids], targets, excluded)


def contrastive_loss(model, tokenizer, batch: TrainingBatch, options: CodeOptions, device=None):
    """Softmax cross-entropy of each query's target document among all the batch's documents (MaxSim /
    temperature), plus the quantisation loss for binary codes. Returns ``(total, cross_entropy)``."""
    q_ids, q_att = tokenize(tokenizer, batch.queries, options.max_query_length, device)
    d_ids, d_att = tokenize(tokenizer, batch.docs, options.max_doc_length, device)
    with _autocast(device):
        q, q_mask = model.encode_queries(q_ids, q_att)
        d, d_mask, x = model.encode_docs(d_ids, d_att)
    if model.binary and options.straight_through:
        # straight-through: the forward pass scores the sign codes the index will store, the backward pass
        # takes tanh(alpha x)'s gradient; training then ranks with exactly the vectors that are searched
        hard = model.binary_codes(x.float(), hard=True) * d_mask[..., None]
        d = d.float() + (hard - d.float()).detach()
    logits = model.score(q.float(), q_mask, d.float(), d_mask) / options.temperature
    excluded = torch.tensor(batch.excluded, dtype=torch.bool, device=logits.device)
    logits = logits.masked_fill(excluded, float("-inf"))
    targets = torch.tensor(batch.targets, device=logits.device)
    ce = torch.nn.functional.cross_entropy(logits, targets)
    total = ce
    if model.binary and options.quantization_weight > 0:
        x = x.float()
        gap = (torch.tanh(options.alpha * x) - torch.where(x >= 0, 1.0, -1.0)) ** 2
        tokens = d_mask.sum().clamp(min=1)
        total = total + options.quantization_weight * (gap.mean(-1) * d_mask).sum() / tokens
    return total, ce


@dataclass
class TrainingReport:
    steps: int
    losses: list[float]
    seconds: float
    queries: int
    source: str

    def summary(self) -> dict:
        head = self.losses[: max(1, len(self.losses) // 10)]
        tail = self.losses[-max(1, len(self.losses) // 10):]
        return {"steps": self.steps, "queries": self.queries, "source": self.source, "seconds": round(self.seconds, 2),
                "first_loss": round(float(np.mean(head)), 4) if self.losses else None,
                "last_loss": round(float(np.mean(tail)), 4) if self.losses else None}


def train_encoder(options: CodeOptions, source: TrainingSource, negatives: dict[str, list[str]] | None = None,
                  device=None, start: tuple | None = None, steps: int | None = None):
    """Train a :class:`~indexes.codes.model.TokenCodeEncoder` on ``source``: a new one
    (``new_encoder(options)``), or ``start``'s
    ``(tokenizer, model)`` for ``steps`` steps (default ``options.steps``). Returns ``(tokenizer, model,
    report)``; the model is left in eval mode on ``device``."""
    from pipeline.core.progress import tqdm

    from pipeline.core.runtime import resolve_device, seed_everything

    device = device or resolve_device(options.device)
    steps = options.steps if steps is None else steps
    seed_everything(options.seed)
    tokenizer, model = start if start is not None else new_encoder(options)
    model.to(device)
    sampler = BatchSampler(source, negatives, options.batch_size, options.hard_negatives, options.seed)
    optimizer = torch.optim.AdamW([
        {"params": model.transformer.parameters(), "lr": options.learning_rate},
        {"params": model.project.parameters(), "lr": options.head_learning_rate},
    ])
    base = [group["lr"] for group in optimizer.param_groups]
    warmup = max(1, steps // 10)
    losses: list[float] = []
    started = time.perf_counter()
    model.train()
    bar = tqdm(range(steps), desc=f"training {options.kind} encoder", unit="step",
               **progress_switch(options.progress))
    for step in bar:
        for group, lr in zip(optimizer.param_groups, base):
            group["lr"] = lr * min(1.0, (step + 1) / warmup)
        total, ce = contrastive_loss(model, tokenizer, sampler.sample(), options, device)
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(total.detach()))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-10:]):.3f}")
    bar.close()
    model.eval()
    report = TrainingReport(steps, losses, time.perf_counter() - started, len(sampler.examples), source.description)
    log.info("trained %s encoder on %s: %s", options.kind, source.description, report.summary())
    return tokenizer, model, report


