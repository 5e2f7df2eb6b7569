"""The training loop of every trainable re-ranker: :class:`Trainer`.

Losses: pointwise (binary cross-entropy; HCAN's two-class NLL is the same thing on the logit difference),
pairwise hinge, or softmax cross-entropy over one positive and sampled negatives; negatives sampled from the
first-stage candidates; length-bucketed batches; gradient clipping; early stopping on a dev metric computed
with ir-measures; seeds; AMP and device selection for GPUs; tqdm bars and one log line per epoch; a
per-epoch training state so that an interrupted training resumes; gradient accumulation
(``accumulation_steps``). Under ``torchrun`` the module trains wrapped in ``DistributedDataParallel``, each
rank a share of every batch (:mod:`infra.distributed`, docs/distributed.md); one batch's forward and backward
are :mod:`rerankers.training.steps`.

A trainable re-ranker offers, besides the :class:`rerankers.Reranker` protocol: ``module`` (a torch
module), ``prepare(train, dataset)`` (vocabulary, embeddings, module), ``encode(pairs)`` (a batch of
tensors), ``forward(batch)`` (scores ``[B]``) and ``pair_length(query, doc)`` (for bucketing).
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import PipelineError
from pipeline.core.evaluation import evaluate
from pipeline.core.records import Doc, Query
from pipeline.core.runtime import native_bf16, resolve_device, seed_everything, set_threads

from infra import distributed
from .config import TrainConfig
from .data import RankingData, rerank_candidates
from .distillation import Teacher, distillation_loss
from .losses import in_batch_loss
from .optim import learning_rate_factor, parameter_groups
from .state import TRAINING_STATE_KIND, generator_states, load_state, restore_generators, save_state  # noqa: F401
from .steps import TrainingSteps
from .weight_ensemble import mix_weights

#: batches timed before the training time is estimated (a warm-up measured on the real training)
ESTIMATE_AFTER = 5
log = logging.getLogger("rerankers.training")


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
        """The report as plain values.

        Returns:
            Its fields, the epochs' logs as dicts.
        """
        return dataclasses.asdict(self)


class Trainer(TrainingSteps):
    """Trains a prepared re-ranker's module (see the module docstring for what the re-ranker offers)."""

    def __init__(self, reranker, config: TrainConfig, seed: int = 42):
        """
        Args:
            reranker: a prepared re-ranker (``module``, ``encode``, ``forward``, ``pair_length``).
            config: the training settings.
            seed: the seed of sampling, shuffling and dropout.
        """
        self.reranker = reranker
        self.config = config
        self.seed = seed
        # loaded at its first batch (rerankers.training.distillation), so a Trainer is cheap to make
        self.teacher = Teacher(config.teacher) if config.distill_weight > 0 else None

    # -- examples ------------------------------------------------------------------------------
    def epoch_units(self, data: RankingData, rng: random.Random) -> list[tuple[Query, list[Doc], list[float]]]:
        """One epoch of training units: ``(query, docs, labels)``.

        pointwise: one unit per document (a positive, or one of ``negatives`` sampled per positive);
        hinge: ``(positive, negative)`` pairs; softmax: one positive and ``negatives`` negatives.
        Queries without a positive or without a negative teach nothing and are skipped.

        Args:
            data: the training data.
            rng: the training's generator (sampling and shuffling).

        Returns:
            The units, shuffled (at most ``max_examples_per_epoch``).
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
        so a batch pads little, then the batches are shuffled.

        Args:
            units: one epoch's units (:meth:`epoch_units`).
            rng: the training's generator.

        Returns:
            The batches, each a list of units.
        """
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
        """The configured loss for a batch's flat ``scores``: :meth:`task_loss`, mixed with the distillation
        loss from ``teacher``'s scores when ``distill_weight`` > 0 (:mod:`rerankers.training.distillation`).

        Args:
            scores: the scores of every (query, document) pair of ``units``, flat, in unit order.
            units: the batch's ``(query, docs, labels)`` units.

        Returns:
            The mean loss, a scalar tensor.
        """
        task = self.task_loss(scores, units)
        weight = self.config.distill_weight
        if weight <= 0:
            return task
        import torch

        teacher = torch.tensor(self.teacher.group_scores(units), dtype=torch.float32, device=scores.device)
        distilled = distillation_loss(scores.view(len(units), -1), teacher, self.config.distill_temperature)
        return (1 - weight) * task + weight * distilled

    def task_loss(self, scores, units):
        """The configured loss of the judgments alone (``loss``), before any distillation.

        Args:
            scores: the scores of every (query, document) pair of ``units``, flat, in unit order.
            units: the batch's ``(query, docs, labels)`` units.

        Returns:
            The mean loss, a scalar tensor.
        """
        import torch
        import torch.nn.functional as F

        if self.config.loss == "pointwise":
            labels = torch.tensor([u[2][0] for u in units], dtype=scores.dtype, device=scores.device)
            return F.binary_cross_entropy_with_logits(scores, labels)
        if self.config.loss == "in_batch":
            return in_batch_loss(scores, units)
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

        Args:
            train: the training data.
            dev: the dev data for early stopping (``None``: every epoch's weights are kept in turn).
            state_path: where the per-epoch training state is kept (``None``: nowhere, no resuming).

        Returns:
            What was done: per-epoch logs and the epoch whose weights were kept.

        Raises:
            CheckpointError: ``state_path`` holds a damaged state or one of another training.
        """
        import torch
        from pipeline.core.progress import tqdm

        config = self.config
        set_threads()
        seed_everything(self.seed)
        if distributed.rank():  # dropout masks differ per rank; batches (rng) and initial weights do not
            torch.manual_seed(self.seed + distributed.rank())
        rng = random.Random(self.seed)
        device = resolve_device(config.device)
        module = self.reranker.module
        module.to(device)
        self.reranker.device = device
        groups = parameter_groups(module, getattr(self.reranker, "pretrained_prefixes", ()),
                                  config.learning_rate, config.head_learning_rate)
        parameters = [p for group in groups for p in group["params"]]
        data_parallel = None  # under torchrun: the DDP wrapper, built at the first batch
        if config.optimizer == "sgd":
            optimizer = torch.optim.SGD(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
        elif config.optimizer == "adamw":
            optimizer = torch.optim.AdamW(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
        else:
            optimizer = torch.optim.Adam(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
        # a CPU without bfloat16 instructions would emulate it, slower than float32: there ``amp`` stays off
        use_amp = config.amp and (device.type == "cuda" or (device.type == "cpu" and native_bf16()))
        scheduler, last_learning_rate, total_steps = None, config.learning_rate, 0
        report = TrainReport()
        best_state, best_score, stale, done = None, -math.inf, 0, 0
        state_path = Path(state_path) if state_path is not None else None
        saved = self.load_state(state_path) if state_path is not None and state_path.is_file() else None
        # the weights training starts from (a resumed fit's module was rebuilt fresh, so they are these too)
        start_state = copy.deepcopy(module.state_dict()) if config.weight_ensemble > 0 else None
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
            log.info("%s: resuming after epoch %d/%d from %s", self.reranker.name, done, config.epochs, state_path)
        elif config.dev_at_start and dev is not None and dev.queries:
            # epoch 0: the weights training starts from compete with every epoch for the dev metric
            best_score = distributed.broadcast(self.evaluate(dev) if distributed.is_main() else None)
            # the starting weights, copied once whether weight_ensemble keeps them too or not
            best_state = start_state if start_state is not None else copy.deepcopy(module.state_dict())
            report.best_epoch, report.best_dev_score = 0, best_score
            log.info("%s before training: dev %s %.4f", self.reranker.name, config.dev_metric, best_score)
        for epoch in range(done + 1, config.epochs + 1):
            started = time.perf_counter()
            module.train()
            units = self.epoch_units(train, rng)
            if not units:
                raise PipelineError("no training examples: the training queries need judged-relevant and "
                                    "non-relevant candidates")
            total, count = torch.zeros((), dtype=torch.float64, device=device), 0
            batches = self.batches(units, rng)
            if scheduler is None and (config.schedule != "constant" or config.warmup > 0):
                # every epoch has as many units (hence batches) as the first: the run's length is known here
                total_steps = len(batches) * config.epochs
                scheduler = self.make_scheduler(optimizer, total_steps)
            if epoch == done + 1:
                log.info("%s: %d training units per epoch (each a relevant document with %d negatives) in %d "
                         "batches, up to %d epochs", self.reranker.name, len(units), config.negatives,
                         len(batches), config.epochs - done)
            bar = tqdm(batches, desc=f"epoch {epoch}/{config.epochs}", unit="batch", leave=False)
            for number, batch_units in enumerate(bar, 1):
                if epoch == done + 1 and number == ESTIMATE_AFTER + 1:
                    per_batch = (time.perf_counter() - started) / ESTIMATE_AFTER
                    log.info("%s: %.2f s per batch over the first %d: about %.1f min per epoch, %.1f min for up "
                             "to %d epochs (dev evaluation not included)", self.reranker.name, per_batch,
                             ESTIMATE_AFTER, per_batch * len(batches) / 60,
                             per_batch * len(batches) * (config.epochs - done) / 60, config.epochs - done)
                if data_parallel is None and distributed.is_distributed():
                    data_parallel = self.data_parallel(batch_units, device, use_amp)
                optimizer.zero_grad(set_to_none=True)
                # this rank's share of the batch, its loss scaled so that DDP's average is the batch's gradient
                share_loss = self.accumulate(batch_units, device, use_amp, data_parallel)
                if config.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip)
                optimizer.step()
                last_learning_rate = optimizer.param_groups[0]["lr"]
                if scheduler is not None:
                    scheduler.step()
                # the ranks' share losses average to the batch's mean loss: summed over the ranks at the epoch's end
                total += share_loss * (len(batch_units) / distributed.world_size())
                count += len(batch_units)
                if number % 10 == 0 or number == len(batches):  # reading the loss waits for the GPU
                    bar.set_postfix(loss=f"{float(total) * distributed.world_size() / count:.4f}")
            total = distributed.sum_over_ranks(float(total))
            dev_score = None
            if dev is not None and dev.queries:  # rank 0 evaluates and decides for every rank
                dev_score = distributed.broadcast(self.evaluate(dev) if distributed.is_main() else None)
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
            log.info("%s epoch %d/%d loss %.4f%s %d examples %.1f s", self.reranker.name, epoch, config.epochs,
                        entry.loss, dev_text, count, entry.seconds)
            if dev_score is not None and stale >= config.patience:
                report.stopped_early = True
                break
            if state_path is not None and epoch < config.epochs:
                generators = self.generator_states(rng)  # every rank's dropout generator: a collective
                if distributed.is_main():
                    self.save_state(state_path, {
                        "epoch": epoch, "module": module.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict() if scheduler is not None else None,
                        "total_steps": total_steps, "report": dataclasses.asdict(report), "best_state": best_state,
                        "best_score": best_score, "stale": stale, "generators": generators})
        del data_parallel  # its reducer's hooks leave the parameters with it
        if best_state is not None:
            module.load_state_dict(best_state)
        if start_state is not None and report.best_epoch > 0:  # epoch 0 (dev_at_start): already the start
            module.load_state_dict(mix_weights(module.state_dict(), start_state, config.weight_ensemble))
            log.info("%s: kept %.2f x the trained weights + %.2f x the starting ones (weight_ensemble)",
                     self.reranker.name, 1 - config.weight_ensemble, config.weight_ensemble)
        module.eval()
        if state_path is not None and distributed.is_main():
            state_path.unlink(missing_ok=True)
        distributed.barrier()
        return report

    # -- resuming --------------------------------------------------------------------------------
    def make_scheduler(self, optimizer, total_steps: int):
        """The learning-rate schedule over ``total_steps`` optimizer steps.

        Args:
            optimizer: the torch optimizer.
            total_steps: the optimizer steps of the whole fit.

        Returns:
            A ``LambdaLR`` of :func:`~rerankers.training.optim.learning_rate_factor`.
        """
        import torch

        config = self.config
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(
            step, total_steps, config.schedule, config.warmup))

    def state_identity(self) -> dict:
        """What a saved training state must have been written for.

        Returns:
            Re-ranker, seed and training options (not the device, which may change between runs).
        """
        options = {k: v for k, v in dataclasses.asdict(self.config).items() if k != "device"}
        return {"reranker": self.reranker.name, "seed": self.seed, "config": options}

    #: the random generators' states (:mod:`rerankers.training.state`)
    generator_states = staticmethod(generator_states)
    restore_generators = staticmethod(restore_generators)

    def save_state(self, path: Path, state: dict) -> None:
        """Write one epoch's training state to ``path`` atomically, with its digest.

        Args:
            path: the state file.
            state: plain values and tensors.
        """
        save_state(path, self.state_identity(), state)

    def load_state(self, path: Path) -> dict:
        """A training state written by :meth:`save_state` for this very training.

        Args:
            path: the state file.

        Returns:
            The state.

        Raises:
            CheckpointError: a damaged file, or the state of another training.
        """
        return load_state(path, self.state_identity())

    def evaluate(self, data: RankingData) -> float:
        """The dev metric (ir-measures) of re-ranking ``data``'s candidates with the current weights.

        Args:
            data: the dev data.

        Returns:
            The aggregate of ``dev_metric``.
        """
        run = rerank_candidates(self.reranker, data, self.config.dev_depth)
        return evaluate(run, data.qrels_list(), self.config.dev_metric).aggregate[self.config.dev_metric]
