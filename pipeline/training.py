"""Training neural re-rankers: data, losses, the training loop, evaluation protocols and model caching.

* :class:`RankingData`: queries, their first-stage candidates, judgments and document texts.
* :class:`TrainConfig` / :class:`Trainer`: pointwise (binary cross-entropy; HCAN's two-class NLL is the
  same thing on the logit difference), pairwise hinge, or softmax cross-entropy over one positive and
  sampled negatives; negatives sampled from the first-stage candidates; length-bucketed batches;
  gradient clipping; early stopping on a dev metric computed with ir-measures; seeds; AMP and device
  selection for GPUs; tqdm bars and one log line per epoch.
* :func:`make_protocol`: which queries train, validate and test (a dataset's own splits, a named
  protocol such as the Microblog one, or k folds by query).
* :func:`obtain_reranker`: load a cached checkpoint for (dataset, re-ranker, options, training queries,
  seed) or train one and save it; used by ``pipeline.run`` when no checkpoint exists.

A trainable re-ranker offers, besides the :class:`rerankers.Reranker` protocol: ``module`` (a torch
module), ``prepare(train, dataset)`` (vocabulary, embeddings, module), ``encode(pairs)`` (a batch of
tensors), ``forward(batch)`` (scores ``[B]``) and ``pair_length(query, doc)`` (for bucketing).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .datasets import Dataset
from .errors import CheckpointError, PipelineError
from .records import Doc, Query, Run, ScoredDoc

log = logging.getLogger("pipeline.training")

LOSSES = ("pointwise", "hinge", "softmax")
DEFAULT_MODEL_DIR = Path("models")


# ------------------------------------------------------------------------------------------- data


@dataclass
class RankingData:
    """Queries with candidates (a first-stage run), judgments and the texts of the documents."""

    queries: dict[str, Query]
    candidates: Run
    qrels: dict[str, dict[str, int]]
    docs: Mapping[str, Doc]

    @classmethod
    def from_dataset(cls, dataset: Dataset, query_ids: Iterable[str], candidates: Run) -> "RankingData":
        """The given queries of ``dataset`` with their candidates from ``candidates``."""
        query_ids = [q for q in query_ids if q in candidates]
        qrels = dataset.qrels_dict()
        return cls({q: dataset.queries[q] for q in query_ids}, {q: candidates[q] for q in query_ids},
                   {q: qrels.get(q, {}) for q in query_ids}, dataset.doc_store())

    def positives(self, query_id: str, pool: str = "all", min_relevance: int = 1) -> list[str]:
        """Judged-relevant documents (relevance >= ``min_relevance``) whose text is available, in a stable
        order; with ``pool="candidates"`` only those among the query's candidates."""
        relevant = sorted(d for d, r in self.qrels.get(query_id, {}).items() if r >= max(1, min_relevance)
                          and d in self.docs)
        if pool == "candidates":
            retrieved = {h.doc_id for h in self.candidates.get(query_id, [])}
            relevant = [d for d in relevant if d in retrieved]
        return relevant

    def negatives(self, query_id: str) -> list[str]:
        """Candidates not judged relevant (unjudged ones count as non-relevant)."""
        judged = self.qrels.get(query_id, {})
        return [h.doc_id for h in self.candidates.get(query_id, []) if judged.get(h.doc_id, 0) <= 0]

    def qrels_list(self):
        """Judgments as :class:`~pipeline.records.Qrel` records (for ir-measures)."""
        from .records import Qrel

        return [Qrel(q, d, r) for q, docs in self.qrels.items() for d, r in docs.items()]


# ----------------------------------------------------------------------------------------- config


@dataclass
class TrainConfig:
    """Options of the training loop (each can be set with ``--set name=value``)."""

    loss: str = "pointwise"
    epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    negatives: int = 4              # sampled negatives per positive (pointwise, hinge) or per group (softmax)
    max_examples_per_epoch: int = 0  # 0: every positive of every query once per epoch
    margin: float = 1.0             # hinge margin
    grad_clip: float = 5.0          # max gradient norm; 0 disables
    patience: int = 3               # epochs without dev improvement before stopping
    dev_metric: str = "AP"
    dev_depth: int = 0              # re-rank only the top dev_depth candidates for the dev metric (0: all)
    bucket_batches: int = 20        # batches drawn from one length-sorted bucket
    amp: bool = False               # mixed precision (bfloat16 autocast) on CUDA
    device: str = "auto"            # auto | cpu | cuda | cuda:N
    score_batch_size: int = 256
    schedule: str = "constant"      # learning rate over the run: constant | linear (falls to ~0 at the last step)
    warmup: float = 0.0             # linear warm-up from 0: a fraction of all steps (< 1) or a number of steps
    head_learning_rate: float = 0.0  # learning rate of the layers around a pre-trained encoder (0: learning_rate)
    positive_pool: str = "all"      # positives: every judged-relevant document (all) | those among the candidates
    positive_relevance: int = 1     # the lowest judged grade that counts as a training positive (TREC DL: 2)
    dev_at_start: bool = False      # score the dev queries before training: keep the starting weights if no
                                    # epoch beats them (for encoders that rank well before any fine-tuning)

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise PipelineError(f"unknown loss {self.loss!r}; expected one of {', '.join(LOSSES)}")
        if self.optimizer not in ("adam", "sgd", "adamw"):
            raise PipelineError(f"unknown optimizer {self.optimizer!r}; expected adam, adamw or sgd")
        if self.schedule not in SCHEDULES:
            raise PipelineError(f"unknown schedule {self.schedule!r}; expected one of {', '.join(SCHEDULES)}")
        if self.positive_pool not in POSITIVE_POOLS:
            raise PipelineError(f"unknown positive_pool {self.positive_pool!r}; expected one of "
                                f"{', '.join(POSITIVE_POOLS)}")
        if self.head_learning_rate < 0:
            raise PipelineError(f"head_learning_rate must be >= 0 (0: the same as learning_rate), "
                                f"got {self.head_learning_rate}")
        if self.positive_relevance < 1:
            raise PipelineError(f"positive_relevance must be >= 1, got {self.positive_relevance}")
        if self.warmup < 0:
            raise PipelineError(f"warmup must be >= 0 (a fraction of the steps, or a number of steps), "
                                f"got {self.warmup}")


SCHEDULES = ("constant", "linear")
#: where training positives come from. ``candidates`` matters where most judged-relevant documents are not
#: among the first stage's candidates (NFCorpus: ~35 per query, mostly indirect links): drawn from the
#: whole collection while the negatives are the candidates' non-relevant ones, the positives differ from the
#: negatives by *not* matching the query lexically, which is the opposite of what re-ranking needs.
POSITIVE_POOLS = ("all", "candidates")


def learning_rate_factor(step: int, total_steps: int, schedule: str, warmup: float) -> float:
    """Multiplier of the base learning rate before optimiser step ``step`` (0-based) of ``total_steps``.

    ``warmup`` < 1 is a fraction of ``total_steps``, otherwise a number of steps; the factor rises linearly
    from ``1 / warmup_steps`` to 1 over them (BERT's fine-tuning recipe), then stays at 1 (``constant``) or
    falls linearly to ``1 / (steps after warm-up)`` at the last step (``linear``), never to 0, so no step is
    wasted.
    """
    warmup_steps = int(round(warmup * total_steps)) if warmup < 1 else int(warmup)
    warmup_steps = min(warmup_steps, max(0, total_steps - 1))
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    remaining = max(1, total_steps - warmup_steps)
    return max(0.0, (total_steps - step) / remaining)


def parameter_groups(module, pretrained_prefixes: Sequence[str], learning_rate: float,
                     head_learning_rate: float = 0.0) -> list[dict]:
    """The optimiser's parameter groups: one group at ``learning_rate`` unless ``head_learning_rate`` > 0,
    then the trainable parameters whose names start with one of ``pretrained_prefixes`` (a pre-trained
    encoder's) keep ``learning_rate`` and the rest (the freshly initialised layers around it) get
    ``head_learning_rate``. A small fine-tuning step suits the pre-trained weights; new layers would move
    as slowly at it (the usual remedy, e.g. in ColBERT's and DPR's heads, is a larger step for them).
    The pre-trained group comes first, so ``param_groups[0]`` is the encoder's."""
    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    if head_learning_rate <= 0:
        return [{"params": [p for _, p in named], "lr": learning_rate}]
    if not pretrained_prefixes:
        raise PipelineError("head_learning_rate applies to re-rankers around a pre-trained encoder "
                            "(cross-encoder, addax and its ablations); this one has none: set learning_rate")
    prefixes = tuple(pretrained_prefixes)
    pretrained = [p for name, p in named if name.startswith(prefixes)]
    head = [p for name, p in named if not name.startswith(prefixes)]
    if not pretrained or not head:
        raise PipelineError(f"head_learning_rate needs parameters both under {', '.join(prefixes)} and outside "
                            f"them; found {len(pretrained)} and {len(head)}")
    return [{"params": pretrained, "lr": learning_rate}, {"params": head, "lr": head_learning_rate}]


def resolve_device(name: str = "auto"):
    """A torch device: ``auto`` picks CUDA when available."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def set_threads(threads: int | None = None) -> None:
    """Limit torch's CPU threads (``threads``, else ``PIPELINE_THREADS``; unset keeps torch's default).

    On a small shared machine, torch's default of one thread per core makes small batched operations
    spin-wait on each other when another process is busy: one thread per process is then far faster.
    """
    import os

    threads = threads or int(os.environ.get("PIPELINE_THREADS", "0") or 0)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) generators."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ------------------------------------------------------------------------------------------ loop


@dataclass
class EpochLog:
    """One epoch's summary."""

    epoch: int
    loss: float
    dev_score: float | None
    seconds: float
    examples: int
    learning_rate: float | None = None  # the last step's learning rate (changes only with a schedule)


@dataclass
class TrainReport:
    """What :meth:`Trainer.fit` did: per-epoch logs and the epoch whose weights were kept."""

    epochs: list[EpochLog] = field(default_factory=list)
    best_epoch: int = 0
    best_dev_score: float | None = None
    stopped_early: bool = False

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class Trainer:
    """Trains a prepared re-ranker's module (see the module docstring for what the re-ranker offers)."""

    def __init__(self, reranker, config: TrainConfig, seed: int = 42):
        self.reranker = reranker
        self.config = config
        self.seed = seed

    # -- examples ------------------------------------------------------------------------------
    def epoch_units(self, data: RankingData, rng: random.Random) -> list[tuple[Query, list[Doc], list[float]]]:
        """One epoch of training units: ``(query, docs, labels)``.

        pointwise: one unit per document (a positive, or one of ``negatives`` sampled per positive);
        hinge: ``(positive, negative)`` pairs; softmax: one positive and ``negatives`` negatives.
        Queries without a positive or without a negative teach nothing and are skipped.
        """
        config = self.config
        units = []
        for query_id in sorted(data.queries):
            positives = data.positives(query_id, config.positive_pool, config.positive_relevance)
            negatives = data.negatives(query_id)
            if not positives or not negatives:
                continue
            query = data.queries[query_id]
            for positive in positives:
                sampled = [negatives[rng.randrange(len(negatives))] for _ in range(config.negatives)]
                pos_doc, neg_docs = data.docs[positive], [data.docs[n] for n in sampled]
                if config.loss == "pointwise":
                    units.append((query, [pos_doc], [1.0]))
                    units.extend((query, [doc], [0.0]) for doc in neg_docs)
                elif config.loss == "hinge":
                    units.extend((query, [pos_doc, doc], [1.0, 0.0]) for doc in neg_docs)
                else:
                    units.append((query, [pos_doc, *neg_docs], [1.0] + [0.0] * len(neg_docs)))
        rng.shuffle(units)
        if config.max_examples_per_epoch and len(units) > config.max_examples_per_epoch:
            units = units[: config.max_examples_per_epoch]
        return units

    def batches(self, units: list, rng: random.Random) -> list[list]:
        """Length-bucketed batches: units sorted by length within buckets of ``bucket_batches`` batches,
        so a batch pads little, then the batches are shuffled."""
        size = max(1, self.config.batch_size if self.config.loss == "pointwise" else
                   self.config.batch_size // max(1, len(units[0][1]) if units else 1))
        bucket = size * max(1, self.config.bucket_batches)
        batches = []
        for start in range(0, len(units), bucket):
            chunk = sorted(units[start : start + bucket],
                           key=lambda u: max(self.reranker.pair_length(u[0], d) for d in u[1]))
            batches.extend(chunk[i : i + size] for i in range(0, len(chunk), size))
        rng.shuffle(batches)
        return batches

    def loss(self, scores, units):
        """The configured loss for a batch's flat ``scores`` (units in order)."""
        import torch
        import torch.nn.functional as F

        if self.config.loss == "pointwise":
            labels = torch.tensor([u[2][0] for u in units], dtype=scores.dtype, device=scores.device)
            return F.binary_cross_entropy_with_logits(scores, labels)
        grouped = scores.view(len(units), -1)
        if self.config.loss == "hinge":
            return torch.clamp(self.config.margin - grouped[:, 0] + grouped[:, 1], min=0).mean()
        target = torch.zeros(len(units), dtype=torch.long, device=scores.device)
        return F.cross_entropy(grouped, target)

    # -- fitting ---------------------------------------------------------------------------------
    def fit(self, train: RankingData, dev: RankingData | None = None,
            state_path: str | Path | None = None) -> TrainReport:
        """Train for ``epochs`` (early stopping on ``dev``'s metric); the best epoch's weights are kept.

        With ``state_path``, the whole training state (weights, best weights, optimizer, schedule, random
        generators, report) is written there atomically after every epoch, and a fit that finds the file
        goes on from the epoch after the last one saved: an interrupted run resumes and ends with the same
        weights as an uninterrupted one. The file is deleted when the fit ends.
        """
        import torch
        from tqdm.auto import tqdm

        config = self.config
        set_threads()
        seed_everything(self.seed)
        rng = random.Random(self.seed)
        device = resolve_device(config.device)
        module = self.reranker.module
        module.to(device)
        self.reranker.device = device
        groups = parameter_groups(module, getattr(self.reranker, "pretrained_prefixes", ()),
                                  config.learning_rate, config.head_learning_rate)
        parameters = [p for group in groups for p in group["params"]]
        if config.optimizer == "sgd":
            optimizer = torch.optim.SGD(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
        elif config.optimizer == "adamw":
            optimizer = torch.optim.AdamW(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
        else:
            optimizer = torch.optim.Adam(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
        use_amp = config.amp and device.type == "cuda"
        scheduler, last_learning_rate, total_steps = None, config.learning_rate, 0
        report = TrainReport()
        best_state, best_score, stale, done = None, -math.inf, 0, 0
        state_path = Path(state_path) if state_path is not None else None
        saved = self.load_state(state_path) if state_path is not None and state_path.is_file() else None
        if saved is not None:
            module.load_state_dict(saved["module"])
            total_steps = saved["total_steps"]
            if total_steps:
                scheduler = self.make_scheduler(optimizer, total_steps)
                scheduler.load_state_dict(saved["scheduler"])
            # after the scheduler: the optimizer's state holds the learning rates the schedule had reached
            optimizer.load_state_dict(saved["optimizer"])
            report = TrainReport(**{**saved["report"], "epochs": [EpochLog(**e) for e in saved["report"]["epochs"]]})
            best_state, best_score, stale, done = saved["best_state"], saved["best_score"], saved["stale"], saved["epoch"]
            last_learning_rate = optimizer.param_groups[0]["lr"]
            self.restore_generators(saved["generators"], rng)
            log.warning("%s: resuming after epoch %d/%d from %s", self.reranker.name, done, config.epochs, state_path)
        elif config.dev_at_start and dev is not None and dev.queries:
            # epoch 0: the weights training starts from compete with every epoch for the dev metric
            best_score = self.evaluate(dev)
            best_state = copy.deepcopy(module.state_dict())
            report.best_epoch, report.best_dev_score = 0, best_score
            log.warning("%s before training: dev %s %.4f", self.reranker.name, config.dev_metric, best_score)
        for epoch in range(done + 1, config.epochs + 1):
            started = time.perf_counter()
            module.train()
            units = self.epoch_units(train, rng)
            if not units:
                raise PipelineError("no training examples: the training queries need judged-relevant and "
                                    "non-relevant candidates")
            total, count = 0.0, 0
            batches = self.batches(units, rng)
            if scheduler is None and (config.schedule != "constant" or config.warmup > 0):
                # every epoch has as many units (hence batches) as the first: the run's length is known here
                total_steps = len(batches) * config.epochs
                scheduler = self.make_scheduler(optimizer, total_steps)
            bar = tqdm(batches, desc=f"epoch {epoch}/{config.epochs}", unit="batch", leave=False)
            for batch_units in bar:
                pairs = [(query, doc) for query, docs, _ in batch_units for doc in docs]
                batch = self.reranker.encode(pairs)
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
                    scores = self.reranker.forward(batch)
                loss = self.loss(scores.float(), batch_units)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip)
                optimizer.step()
                last_learning_rate = optimizer.param_groups[0]["lr"]
                if scheduler is not None:
                    scheduler.step()
                total += float(loss.detach()) * len(batch_units)
                count += len(batch_units)
                bar.set_postfix(loss=f"{total / count:.4f}")
            dev_score = self.evaluate(dev) if dev is not None and dev.queries else None
            entry = EpochLog(epoch, total / max(1, count), dev_score, time.perf_counter() - started, count,
                             last_learning_rate)
            report.epochs.append(entry)
            improved = dev_score is None or dev_score > best_score
            if improved:
                best_score = dev_score if dev_score is not None else best_score
                best_state = copy.deepcopy(module.state_dict())
                report.best_epoch, report.best_dev_score, stale = epoch, dev_score, 0
            else:
                stale += 1
            dev_text = "" if dev_score is None else (
                f" dev {config.dev_metric} {dev_score:.4f} (best {best_score:.4f} @ {report.best_epoch})")
            log.warning("%s epoch %d/%d loss %.4f%s %d examples %.1f s", self.reranker.name, epoch, config.epochs,
                        entry.loss, dev_text, count, entry.seconds)
            if dev_score is not None and stale >= config.patience:
                report.stopped_early = True
                break
            if state_path is not None and epoch < config.epochs:
                self.save_state(state_path, {
                    "epoch": epoch, "module": module.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler is not None else None,
                    "total_steps": total_steps, "report": dataclasses.asdict(report), "best_state": best_state,
                    "best_score": best_score, "stale": stale, "generators": self.generator_states(rng)})
        if best_state is not None:
            module.load_state_dict(best_state)
        module.eval()
        if state_path is not None:
            state_path.unlink(missing_ok=True)
        return report

    # -- resuming --------------------------------------------------------------------------------
    def make_scheduler(self, optimizer, total_steps: int):
        """The learning-rate schedule over ``total_steps`` optimizer steps."""
        import torch

        config = self.config
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(
            step, total_steps, config.schedule, config.warmup))

    def state_identity(self) -> dict:
        """What a saved training state must have been written for: re-ranker, seed and training options
        (the device may change between runs)."""
        options = {k: v for k, v in dataclasses.asdict(self.config).items() if k != "device"}
        return {"reranker": self.reranker.name, "seed": self.seed, "config": options}

    @staticmethod
    def generator_states(rng: random.Random) -> dict:
        """The states of every random generator training draws from."""
        import numpy as np
        import torch

        states = {"loop": rng.getstate(), "python": random.getstate(), "numpy": np.random.get_state(),
                  "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            states["cuda"] = torch.cuda.get_rng_state_all()
        return states

    @staticmethod
    def restore_generators(states: Mapping[str, Any], rng: random.Random) -> None:
        """Put back the generator states :meth:`generator_states` took."""
        import numpy as np
        import torch

        rng.setstate(states["loop"])
        random.setstate(states["python"])
        np.random.set_state(states["numpy"])
        torch.set_rng_state(states["torch"])
        if "cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["cuda"])

    def save_state(self, path: Path, state: dict) -> None:
        """Write one epoch's training state to ``path`` atomically."""
        import torch

        from .atomic import atomic_write

        with atomic_write(path, "wb") as handle:
            torch.save({"identity": self.state_identity(), **state}, handle)

    def load_state(self, path: Path) -> dict:
        """A training state written by :meth:`save_state` for this very training, or a clear error."""
        import torch

        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:  # noqa: BLE001 - any unreadable file gets the same message
            raise CheckpointError(f"{path}: unreadable training state ({error}); delete it to start over") from error
        if not isinstance(state, dict) or state.get("identity") != self.state_identity():
            found = state.get("identity") if isinstance(state, dict) else None
            raise CheckpointError(f"{path}: training state of another training ({found}), expected "
                                  f"{self.state_identity()}; delete it to start over")
        return state

    def evaluate(self, data: RankingData) -> float:
        """The dev metric (ir-measures) of re-ranking ``data``'s candidates with the current weights."""
        from .evaluate import evaluate

        run = rerank_candidates(self.reranker, data, self.config.dev_depth)
        return evaluate(run, data.qrels_list(), self.config.dev_metric).aggregate[self.config.dev_metric]


def rerank_candidates(reranker, data: RankingData, depth: int = 0) -> Run:
    """Score every query's candidates in ``data`` with ``reranker`` (only the top ``depth`` by first-stage
    score when ``depth`` > 0: a cheaper dev metric on long candidate lists). A re-ranker with ``score_many``
    scores all queries in one call (batches filled across queries); others query by query."""
    heads = {}
    for query_id in data.queries:
        hits = data.candidates.get(query_id, [])
        if depth > 0:
            hits = sorted(hits, key=lambda h: (-h.score, h.doc_id))[:depth]
        heads[query_id] = hits
    items = [(data.queries[q], [data.docs[h.doc_id] for h in hits]) for q, hits in heads.items()]
    score_many = getattr(reranker, "score_many", None)
    if score_many is not None:
        scored = score_many(items)
    else:
        scored = [reranker.score(query, docs) for query, docs in items]
    return {query_id: [ScoredDoc(query_id, h.doc_id, float(s)) for h, s in zip(hits, scores)]
            for (query_id, hits), scores in zip(heads.items(), scored)}


# ------------------------------------------------------------------------------------- protocols


@dataclass
class Fold:
    """Which queries train, validate (early stopping) and get re-ranked by one model."""

    name: str
    train: list[str]
    dev: list[str]
    test: list[str]


def hold_out(query_ids: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Split ``query_ids`` into (kept, held out) with ``fraction`` held out, reproducibly for a seed."""
    ordered = sorted(query_ids)
    random.Random(seed).shuffle(ordered)
    count = max(1, round(len(ordered) * fraction)) if len(ordered) > 1 else 0
    return sorted(ordered[count:]), sorted(ordered[:count])


def kfold(query_ids: Sequence[str], k: int, seed: int, dev_fraction: float = 0.15) -> list[Fold]:
    """``k`` folds by query; each fold's model trains on the other folds minus ``dev_fraction`` held out."""
    if k < 2 or len(query_ids) < k:
        raise PipelineError(f"k-fold needs k >= 2 and at least k queries (k={k}, {len(query_ids)} queries)")
    ordered = sorted(query_ids)
    random.Random(seed).shuffle(ordered)
    folds = []
    for index in range(k):
        test = sorted(ordered[index::k])
        rest = [q for q in ordered if q not in set(test)]
        train, dev = hold_out(rest, dev_fraction, seed + index)
        folds.append(Fold(f"fold{index + 1}of{k}", train, dev, test))
    return folds


def make_protocol(dataset: Dataset, test_split: str | None, seed: int, folds: int = 5,
                  dev_fraction: float = 0.15) -> list[Fold]:
    """The folds for ``dataset`` when re-ranking ``test_split`` (``None``: all queries).

    * a dataset with a ``train`` split: train on it; validate on ``dev`` (or the ``*-dev`` split matching
      ``raw-``/``clean-`` test splits), else on ``dev_fraction`` of train; test on ``test_split``
      (default ``test``);
    * a dataset whose splits are peers (Microblog years): test on ``test_split``, train on the other
      splits with ``dev_fraction`` of their queries held out for validation (HCAN's protocol);
    * no splits (Cranfield, Vaswani, NFCorpus): ``folds``-fold cross-validation by query.
    """
    splits = dataset.splits
    if "train" in splits:
        test_name = test_split or ("test" if "test" in splits else None)
        if test_name is None or test_name not in splits:
            raise PipelineError(f"dataset {dataset.name!r}: choose a test split with --split ({', '.join(splits)})")
        if test_name == "train":
            raise PipelineError("cannot test on the training split")
        prefix = test_name.split("-")[0] + "-" if "-" in test_name else ""
        # never the test split itself: the dev queries choose epochs and interpolation weights
        dev_name = next((n for n in (f"{prefix}dev", "dev") if n in splits and n != test_name), None)
        if dev_name:
            train, dev = splits["train"], splits[dev_name]
        else:
            train, dev = hold_out(splits["train"], dev_fraction, seed)
        return [Fold(test_name, list(train), list(dev), list(splits[test_name]))]
    if splits and test_split:
        if test_split not in splits:
            raise PipelineError(f"dataset {dataset.name!r} has no split {test_split!r} ({', '.join(splits)})")
        rest = [q for name, qids in splits.items() if name != test_split for q in qids]
        if not rest:
            return kfold(splits[test_split], folds, seed, dev_fraction)
        train, dev = hold_out(rest, dev_fraction, seed)
        return [Fold(test_split, train, dev, list(splits[test_split]))]
    query_ids = list(dataset.queries) if not test_split else dataset.splits.get(test_split, [])
    return kfold(query_ids, folds, seed, dev_fraction)


# --------------------------------------------------------------------------------- model options


def apply_overrides(configs: Sequence[Any], overrides: Mapping[str, Any]) -> None:
    """Set ``name=value`` options on whichever config dataclass has the field (values are parsed from
    strings to the field's type). An option no config knows is an error listing the known ones."""
    known = {f.name: config for config in configs for f in dataclasses.fields(config)}
    for name, value in overrides.items():
        key = name.replace("-", "_")
        if key not in known:
            raise PipelineError(f"unknown model option {name!r}; known: {', '.join(sorted(known))}")
        config = known[key]
        current = getattr(config, key)
        setattr(config, key, _coerce(value, current, name))
        if hasattr(config, "__post_init__"):
            config.__post_init__()


def _coerce(value: Any, current: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if isinstance(current, bool):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if isinstance(current, int):
            return int(value)
        if isinstance(current, float):
            return float(value)
    except ValueError:
        raise PipelineError(f"option {name}={value!r}: expected a {type(current).__name__}") from None
    return value


def parse_overrides(items: Sequence[str] | None, config_file: str | None = None) -> dict[str, Any]:
    """``--config FILE`` (JSON or YAML mapping) then ``--set name=value`` items (later ones win)."""
    options: dict[str, Any] = {}
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise PipelineError(f"{path}: config file not found")
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise PipelineError(f"{path}: not valid JSON/YAML ({error})") from None
        if not isinstance(loaded, dict):
            raise PipelineError(f"{path}: expected a mapping of option names to values")
        options.update(loaded)
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise PipelineError(f"--set {item!r}: expected name=value")
        options[name.strip()] = value.strip()
    return options


# -------------------------------------------------------------------------------------- caching


class PerQueryReranker:
    """Dispatches each query to the model trained without it (k-fold): ``score`` looks up the query id."""

    def __init__(self, name: str, models: Mapping[str, Any]):
        self.name = name
        self.models = dict(models)

    def _model(self, query: Query):
        if query.query_id not in self.models:
            raise PipelineError(f"no model was trained for query {query.query_id!r}'s fold")
        return self.models[query.query_id]

    def score(self, query: Query, docs: Sequence[Doc], batch_size: int | None = None):
        """Scores of ``docs`` for ``query`` by the model that did not see ``query``."""
        return self.score_many([(query, docs)], batch_size)[0]

    def score_many(self, items: Sequence[tuple[Query, Sequence[Doc]]],
                   batch_size: int | None = None) -> list[list[float]]:
        """Scores of every ``(query, docs)`` item: the items are grouped by the model that did not see their
        query, and each model scores its group in one ``score_many`` call (batches filled across queries);
        a model without ``score_many`` scores query by query. Lists come back in the items' order."""
        groups: dict[int, list[int]] = {}
        models: dict[int, Any] = {}
        for position, (query, _) in enumerate(items):
            model = self._model(query)
            groups.setdefault(id(model), []).append(position)
            models[id(model)] = model
        scores: list[list[float]] = [[] for _ in items]
        for key, positions in groups.items():
            model, group = models[key], [items[p] for p in positions]
            if hasattr(model, "score_many"):
                scored = model.score_many(group, batch_size)
            else:
                scored = [model.score(query, docs) for query, docs in group]
            for position, values in zip(positions, scored):
                scores[position] = list(values)
        return scores

    def quantize_int8(self) -> "PerQueryReranker":
        """Quantize every fold's model for int8 CPU scoring (see ``TransformerReranker.quantize_int8``); a
        model that cannot be quantized is a :class:`~pipeline.errors.PipelineError`."""
        for model in {id(m): m for m in self.models.values()}.values():
            if not hasattr(model, "quantize_int8"):
                raise PipelineError(f"{self.name}: int8 scoring is for the transformer re-rankers")
            model.quantize_int8()
        return self


def model_dir() -> Path:
    """Where trained models are cached: ``PIPELINE_MODEL_DIR`` or ``models/``."""
    import os

    return Path(os.environ.get("PIPELINE_MODEL_DIR", DEFAULT_MODEL_DIR))


def checkpoint_path(dataset: Dataset, name: str, options: Mapping[str, Any], fold: Fold, seed: int,
                    first_stage: str, k: int) -> Path:
    """Cache key of one trained model: dataset, re-ranker, options, training/dev queries, seed, candidates."""
    key = json.dumps({"dataset": dataset.fingerprint, "reranker": name, "options": dict(sorted(options.items())),
                      "train": sorted(fold.train), "dev": sorted(fold.dev), "seed": seed,
                      "first_stage": first_stage, "k": k}, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in dataset.name)
    return model_dir() / safe / f"{name}-{fold.name}-seed{seed}-{digest}.pt"


def cached_checkpoint(path: str | Path) -> Path | None:
    """The saved model of the training that :func:`checkpoint_path` ``path`` names, or ``None``.

    That is ``path`` itself, else a checkpoint with the same digest saved under another test split's name:
    the digest covers everything the training depends on, and the split named in the file does not enter
    it when two test splits share their training and dev queries (WikiQA's ``test`` and ``test-filtered``),
    so a model trained for one is the model of the other, and is loaded instead of trained again.
    """
    path = Path(path)
    if path.is_file():
        return path
    digest = path.stem.rsplit("-", 1)[-1]
    same = sorted(path.parent.glob(f"*-{digest}.pt")) if path.parent.is_dir() else []
    return same[0] if same else None


def train_fold(name: str, dataset: Dataset, fold: Fold, candidates: Run, options: Mapping[str, Any], seed: int,
               path: Path | None = None):
    """Build, prepare and train re-ranker ``name`` on one fold; save it to ``path`` when given."""
    from rerankers import reranker_class

    cls = reranker_class(name)
    reranker = cls.from_options(options, seed=seed)
    train = RankingData.from_dataset(dataset, fold.train, candidates)
    dev = RankingData.from_dataset(dataset, fold.dev, candidates) if fold.dev else None
    reranker.prepare(train, dataset)
    # the training state sits beside the checkpoint, so a killed training resumes from its last epoch
    report = reranker.fit(train, dev, state_path=training_state_path(path) if path is not None else None)
    if path is not None:
        reranker.save(path)
    return reranker, report


def training_state_path(path: str | Path) -> Path:
    """Where the training of checkpoint ``path`` keeps its per-epoch state (see :meth:`Trainer.fit`)."""
    path = Path(path)
    return path.with_name(path.name + ".training-state")


def obtain_reranker(name: str, dataset: Dataset, args, folds: Sequence[Fold] | None = None, settings=None,
                    split: str | None = None):
    """A trained re-ranker for test split ``split`` (default ``args.split``, else the dataset recipe's) of
    ``dataset``: cached checkpoints are loaded, missing ones trained (on the protocol's training queries,
    with candidates from the same first stage and depth ``args.k``) and saved. Training options are the
    dataset recipe's, then ``--config``, then ``--set``. With several folds, returns a
    :class:`PerQueryReranker`."""
    from indexes import make_first_stage, resolve_first_stage
    from rerankers import reranker_class

    options = {**dataset.recipe.train,
               **parse_overrides(getattr(args, "set", None), getattr(args, "config", None))}
    split = split or getattr(args, "split", None) or dataset.recipe.split
    if folds is None:
        folds = make_protocol(dataset, split, args.seed, getattr(args, "folds", 5))
    first_stage = resolve_first_stage(args.first_stage, dataset)
    candidates: Run | None = None
    cls = reranker_class(name)
    models: dict[str, Any] = {}
    for fold in folds:
        path = checkpoint_path(dataset, name, options, fold, args.seed, first_stage, args.k)
        cached = None if getattr(args, "retrain", False) else cached_checkpoint(path)
        if cached is not None:
            reranker = cls.load(cached)
            log.warning("loaded %s", cached)
        else:
            if candidates is None:
                retriever = make_first_stage(first_stage, dataset, settings)
                wanted = sorted({q for f in folds for q in f.train + f.dev})
                candidates = retriever.search([dataset.queries[q] for q in wanted], args.k)
            log.warning("training %s on %s (%d train, %d dev queries) -> %s", name, fold.name, len(fold.train),
                        len(fold.dev), path)
            reranker, _ = train_fold(name, dataset, fold, candidates, options, args.seed, path)
        if len(folds) == 1:
            return reranker
        models.update({q: reranker for q in fold.test})
    return PerQueryReranker(name, models)
