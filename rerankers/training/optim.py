"""Learning-rate schedules and parameter groups (a pre-trained encoder apart from the layers around it)."""
from __future__ import annotations

from typing import Sequence

from pipeline.core.errors import PipelineError


def learning_rate_factor(step: int, total_steps: int, schedule: str, warmup: float) -> float:
    """Multiplier of the base learning rate before optimiser step ``step`` (0-based) of ``total_steps``.

    ``warmup`` < 1 is a fraction of ``total_steps``, otherwise a number of steps; the factor rises linearly
    from ``1 / warmup_steps`` to 1 over them (BERT's fine-tuning recipe), then stays at 1 (``constant``) or
    falls linearly to ``1 / (steps after warm-up)`` at the last step (``linear``), never to 0, so no step is
    wasted.

    Args:
        step: the optimizer step about to be taken (0-based).
        total_steps: the steps of the whole fit.
        schedule: ``constant`` or ``linear``.
        warmup: a fraction of ``total_steps`` (< 1) or a number of steps.

    Returns:
        The factor.

    Example:
        >>> [round(learning_rate_factor(s, 4, "linear", 0.5), 2) for s in range(4)]
        [0.5, 1.0, 1.0, 0.5]
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
    The pre-trained group comes first, so ``param_groups[0]`` is the encoder's.

    Args:
        module: the re-ranker's module.
        pretrained_prefixes: name prefixes of the pre-trained encoder's parameters.
        learning_rate: the base step.
        head_learning_rate: the step of the other layers (0: one group at ``learning_rate``).

    Returns:
        The optimiser's parameter groups.

    Raises:
        PipelineError: ``head_learning_rate`` for a model without (or with only) pre-trained parameters.
    """
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
