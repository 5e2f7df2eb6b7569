"""Options of the training loop (:class:`TrainConfig`) and the names each option accepts."""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import PipelineError

#: ``in_batch``: softmax over the unit's positive and hard negatives plus every other document of the batch
#: (:mod:`rerankers.training.losses`; for re-rankers that embed queries and documents apart)
LOSSES = ("pointwise", "hinge", "softmax", "in_batch")


@dataclass
class TrainConfig:
    """Options of the training loop (each can be set with ``--set name=value``)."""

    loss: str = "pointwise"
    epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    negatives: int = 4              # sampled negatives per positive (pointwise, hinge) or per group (softmax, in_batch)
    max_examples_per_epoch: int = 0  # 0: every positive of every query once per epoch
    margin: float = 1.0             # hinge margin
    grad_clip: float = 5.0          # max gradient norm; 0 disables
    patience: int = 3               # epochs without dev improvement before stopping
    dev_metric: str = "AP"
    dev_depth: int = 0              # re-rank only the top dev_depth candidates for the dev metric (0: all)
    bucket_batches: int = 20        # batches drawn from one length-sorted bucket
    amp: bool = False               # mixed precision (bfloat16 autocast) on CUDA and on a CPU with native bf16
    device: str = "auto"            # auto | cpu | cuda | cuda:N
    score_batch_size: int = 256
    schedule: str = "constant"      # learning rate over the run: constant | linear (falls to ~0 at the last step)
    warmup: float = 0.0             # linear warm-up from 0: a fraction of all steps (< 1) or a number of steps
    head_learning_rate: float = 0.0  # learning rate of the layers around a pre-trained encoder (0: learning_rate)
    positive_pool: str = "all"      # positives: every judged-relevant document (all) | those among the candidates
    positive_relevance: int = 1     # the lowest judged grade that counts as a training positive (TREC DL: 2)
    dev_at_start: bool = False      # score the dev queries before training: keep the starting weights if no
                                    # epoch beats them (for encoders that rank well before any fine-tuning)
    weight_ensemble: float = 0.0    # after training, this share of the starting weights mixed back in (WiSE-FT):
                                    # keeps what a pre-trained encoder knew (rerankers.training.weight_ensemble)
    accumulation_steps: int = 1     # micro-batches per step (each rank's share cut in that many forward/backward
                                    # passes, gradients added): the same step with 1/N of the activations' memory
    teacher: str = ""               # distil from this re-ranker's scores: MODEL (the bi-encoder's) or RERANKER:MODEL
    distill_weight: float = 0.0     # the distillation loss's share of the loss (0: none; needs a teacher)
    distill_temperature: float = 1.0  # softmax temperature of the distillation (rerankers.training.distillation)

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
        if not 0 <= self.weight_ensemble < 1:
            raise PipelineError(f"weight_ensemble must be in [0, 1) (the starting weights' share of the kept "
                                f"weights; 0: none), got {self.weight_ensemble}")
        if self.accumulation_steps < 1:
            raise PipelineError(f"accumulation_steps must be >= 1, got {self.accumulation_steps}")
        if not 0 <= self.distill_weight <= 1:
            raise PipelineError(f"distill_weight must be in [0, 1] (the distillation loss's share), "
                                f"got {self.distill_weight}")
        if self.distill_temperature <= 0:
            raise PipelineError(f"distill_temperature must be > 0, got {self.distill_temperature}")
        if self.distill_weight > 0 and not self.teacher:
            raise PipelineError("distill_weight > 0 needs a teacher (e.g. --set teacher=all-MiniLM-L6-v2)")
        if self.distill_weight > 0 and self.loss not in ("softmax", "hinge"):
            raise PipelineError(f"distillation compares the teacher's and the student's scores within a group of "
                                f"documents: it needs loss softmax or hinge, not {self.loss!r} "
                                f"(--set loss=softmax)")
        if self.warmup < 0:
            raise PipelineError(f"warmup must be >= 0 (a fraction of the steps, or a number of steps), "
                                f"got {self.warmup}")


SCHEDULES = ("constant", "linear")
#: where training positives come from. ``candidates`` matters where most judged-relevant documents are not
#: among the first stage's candidates (NFCorpus: ~35 per query, mostly indirect links): drawn from the
#: whole collection while the negatives are the candidates' non-relevant ones, the positives differ from the
#: negatives by *not* matching the query lexically, which is the opposite of what re-ranking needs.
POSITIVE_POOLS = ("all", "candidates")
