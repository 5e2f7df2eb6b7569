"""Data-parallel training with ``torch.distributed`` (run under ``torchrun``): what each rank does.

Training (:class:`rerankers.training.loop.Trainer`) wraps the re-ranker's module in
:class:`torch.nn.parallel.DistributedDataParallel` (:func:`data_parallel`): DDP broadcasts rank 0's
weights when it is built, so every rank starts from the same model, and sums the gradients during
``backward`` in buckets that overlap with the backward pass. Every rank builds the same batches (same seed,
same data) and takes its own share of each batch (units ``rank::world``, :func:`share`). DDP *averages*
the gradients over the ranks, so each rank multiplies its share's mean loss by ``world * share / batch``:
the average is then ``sum(share / batch * share mean)``, the gradient of the whole batch's mean loss, the
gradient one process computes on the whole batch. The optimizer takes the same step on every rank, so the
weights stay equal (bit for bit) without being sent. With ``accumulation_steps`` > 1 each share is cut into
micro-batches whose gradients add up under ``no_sync()`` before the last one's ``backward`` sends them.

Dropout draws from torch's generator, seeded ``seed + rank`` on each rank: the ranks drop different units
of their different examples, like one process would; model initialisation is unaffected (DDP broadcasts
rank 0's weights). With dropout, 2 processes therefore do not reproduce 1 process bit for bit; with dropout 0
they do, within float rounding (docs/distributed.md, tests/infra/test_distributed.py).

Dev evaluation, early stopping, checkpoints and training states are rank 0's; its decisions are broadcast.
Scoring (``pipeline.engine.stages.rerank``) deals the chunks of queries to the ranks and gathers their scores, each
chunk scored as one process would score it, so the run file is byte-identical.

Waiting: some phases run on rank 0 alone while the others wait in a collective (training the code encoder,
assembling a code index, dev evaluation). Their length grows with the collection (hours at MS MARCO scale),
so the process group's timeout is :data:`DEFAULT_TIMEOUT_S` (12 h) instead of torch's 30 min, settable with
the environment variable ``PIPELINE_DIST_TIMEOUT_S`` (seconds). A long timeout costs nothing when a rank
dies: ``torchrun`` then stops every rank at once; it only bounds how long a rank that hangs alive is waited
for. Backend: NCCL with GPUs, gloo on CPU.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence

#: the process group's timeout (seconds) when ``PIPELINE_DIST_TIMEOUT_S`` is not set: long enough for a
#: phase one rank runs alone at MS MARCO scale (SCALING.md: hours), where torch's default (30 min) kills the job
DEFAULT_TIMEOUT_S = 12 * 3600
TIMEOUT_VARIABLE = "PIPELINE_DIST_TIMEOUT_S"


def is_distributed() -> bool:
    """Whether this process is in an initialised process group of more than one rank.

    Returns:
        True inside such a group, False outside one (or with a group of one rank).
    """
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank.

    Returns:
        The rank, 0 outside a process group.
    """
    import torch.distributed as dist

    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of ranks.

    Returns:
        The world size, 1 outside a process group.
    """
    import torch.distributed as dist

    return dist.get_world_size() if is_distributed() else 1


def rank_from_environment() -> int:
    """The rank ``torchrun`` gave this process, readable after the process group is gone.

    Returns:
        ``RANK`` from the environment, 0 when it is not set.
    """
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Whether this is rank 0, the rank that evaluates, decides and writes.

    Returns:
        True on rank 0 (and outside a process group).
    """
    return rank() == 0


def timeout_seconds() -> float:
    """The process group's timeout.

    Returns:
        ``PIPELINE_DIST_TIMEOUT_S`` (seconds, > 0) when it is set, else :data:`DEFAULT_TIMEOUT_S`.

    Raises:
        PipelineError: the variable is set to something other than a positive number.
    """
    from pipeline.core.errors import PipelineError

    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return float(DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise PipelineError(f"{TIMEOUT_VARIABLE}={text!r}: expected a positive number of seconds "
                            f"(the default is {DEFAULT_TIMEOUT_S})")
    return seconds


def init_from_environment() -> bool:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1 in the environment).

    Backend NCCL when CUDA is available, else gloo; timeout :func:`timeout_seconds` (every collective,
    barriers included, waits that long before failing).

    Returns:
        Whether this process is part of a process group.

    Raises:
        PipelineError: ``PIPELINE_DIST_TIMEOUT_S`` is not a positive number.

    Example:
        >>> init_from_environment()   # outside torchrun: nothing to join
        False
    """
    import datetime

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    seconds = timeout_seconds()  # checked before torch starts, so a bad value is one error line
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=seconds))
    return True


def shutdown(finished: bool = True) -> None:
    """Leave the process group (at the end of a command).

    Args:
        finished: the command's work ended normally on this rank, so every rank reaches this point and they
            leave together (a barrier first). ``False`` after a fault: this rank leaves at once, since the
            others may be inside a collective that no barrier would match.
    """
    if "torch" not in sys.modules:  # nothing ran (e.g. --help): no group to leave, and torch stays unloaded
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            # The ranks leave together. A rank that tore its gloo pairs down while another still worked (rank 0
            # merging the IVF lists alone) was seen to abort at exit ("terminate called without an active
            # exception"); the group's long timeout (``init``) bounds this wait like any other.
            if finished:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def share(units: Sequence[Any]) -> tuple[list, float]:
    """This rank's share of a batch and the factor of its mean loss.

    DDP averages the ranks' gradients, so the factors ``world * len(share) / len(batch)`` make the average
    the whole batch's mean-loss gradient. A rank left without a unit (a batch smaller than the world)
    computes the first unit with factor 0, so that every rank takes part in the gradient sum.

    Args:
        units: the whole batch, the same on every rank.

    Returns:
        ``(share, factor)``: this rank's units and the factor of their mean loss (1 outside a process group).

    Example:
        >>> share(["a", "b", "c"])    # one process: the whole batch
        (['a', 'b', 'c'], 1.0)
    """
    if not is_distributed():
        return list(units), 1.0
    mine = list(units[rank()::world_size()])
    if not mine:
        return [units[0]], 0.0
    return mine, world_size() * len(mine) / len(units)


def data_parallel(module, device, find_unused_parameters: bool = False):
    """A :class:`~torch.nn.parallel.DistributedDataParallel` around ``module`` whose forward computes a
    training loss, or ``None`` outside a process group.

    Call it with a function of no arguments that returns the loss of this rank's share (the re-ranker's
    forward and the loss, auxiliary losses included): ``wrapped(compute)``. The wrapped module is a thin
    adapter whose only child is ``module`` and whose ``forward(compute)`` returns ``compute()``, because
    the re-rankers' ``forward`` reads attributes of their own module (a DDP wrapper in its place would hide
    them), and because DDP looks for unused parameters from the forward's output: from the loss it reaches
    every parameter the backward pass will reach, auxiliary losses' included (from the scores alone it
    would not, and a parameter reached later is "marked ready twice"). The checkpoint's parameter names stay
    unchanged. Building it broadcasts rank 0's parameters and buffers to every rank.

    Args:
        module: the re-ranker's torch module, on ``device``.
        device: the torch device training runs on (a CUDA device becomes DDP's ``device_ids``).
        find_unused_parameters: True when some trainable parameter gets no gradient from a batch (the
            Trainer finds out on its first batch); it costs a graph traversal per step.

    Returns:
        The DDP module (``no_sync()`` for accumulation), or ``None``.

    Example:
        >>> wrapped = data_parallel(reranker.module, device)            # doctest: +SKIP
        >>> wrapped(lambda: loss_of(reranker.forward(batch))).backward()  # doctest: +SKIP
    """
    if not is_distributed():
        return None
    import torch
    from torch.nn.parallel import DistributedDataParallel

    class LossOf(torch.nn.Module):
        """``module`` as the only child; ``forward(compute)`` is ``compute()``."""

        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, compute):
            return compute()

    device_ids = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else None
    return DistributedDataParallel(LossOf(), device_ids=device_ids, find_unused_parameters=find_unused_parameters)


def sum_over_ranks(value: float) -> float:
    """The sum of ``value`` over the ranks.

    Args:
        value: this rank's number.

    Returns:
        The sum over every rank (``value`` itself outside a process group).
    """
    return float(sum(gather_to_all(float(value)))) if is_distributed() else float(value)


def broadcast(value: Any) -> Any:
    """Rank 0's ``value`` on every rank.

    Args:
        value: any picklable value; only rank 0's is used.

    Returns:
        Rank 0's ``value`` (``value`` itself outside a process group).
    """
    import torch.distributed as dist

    if not is_distributed():
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_to_all(value: Any) -> list:
    """Every rank's ``value`` on every rank.

    Args:
        value: this rank's picklable value.

    Returns:
        The values in rank order (``[value]`` outside a process group).
    """
    import torch.distributed as dist

    if not is_distributed():
        return [value]
    gathered = [None] * world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def barrier() -> None:
    """Wait for every rank (at most the process group's timeout, :func:`timeout_seconds`)."""
    import torch.distributed as dist

    if is_distributed():
        dist.barrier()
