"""Data-parallel training with ``torch.distributed`` (run under ``torchrun``): what each rank does.

Every rank builds the same batches (same seed, same data), takes its own share of each batch (units
``rank::world``), and after ``backward`` the ranks sum their gradients with one ``all_reduce``: each
rank's loss is its share's mean scaled by ``share / batch``, so the sum is the gradient of the whole
batch's mean loss, the gradient one process would compute. The optimizer then takes the same step on every
rank, so the weights stay equal without being sent. This is what ``DistributedDataParallel`` does; its
wrapper is not used because the re-rankers' ``forward`` reads attributes of their module that the wrapper
would hide. Dev evaluation, early stopping, checkpoints and training states are rank 0's; its decisions
are broadcast. Scoring (``pipeline.stages.rerank``) deals the chunks of queries to the ranks and gathers
their scores, each chunk scored as one process would score it, so the run file is byte-identical.
Backend: NCCL with GPUs, gloo on CPU.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence


def is_distributed() -> bool:
    """True inside an initialised process group of more than one rank."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    import torch.distributed as dist

    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of ranks (1 outside a process group)."""
    import torch.distributed as dist

    return dist.get_world_size() if is_distributed() else 1


def rank_from_environment() -> int:
    """The rank ``torchrun`` gave this process (``RANK``), readable after the process group is gone."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """True on rank 0, the rank that evaluates, decides and writes."""
    return rank() == 0


def init_from_environment() -> bool:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1 in the environment); returns whether
    this process is part of one. Backend NCCL when CUDA is available, else gloo."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return True


def shutdown() -> None:
    """Leave the process group (at the end of a command)."""
    if "torch" not in sys.modules:  # nothing ran (e.g. --help): no group to leave, and torch stays unloaded
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def share(units: Sequence[Any]) -> tuple[list, float]:
    """This rank's share of a batch and the weight of its mean loss (``len(share) / len(batch)``). A rank
    left without a unit (a batch smaller than the world) computes the first unit with weight 0, so that
    every rank takes part in the gradient sum."""
    if not is_distributed():
        return list(units), 1.0
    mine = list(units[rank()::world_size()])
    if not mine:
        return [units[0]], 0.0
    return mine, len(mine) / len(units)


def sum_gradients(parameters: Sequence[Any], loss) -> float:
    """Sum ``parameters``' gradients over the ranks (one flat ``all_reduce``) and return the whole batch's
    loss (``loss`` is this rank's weighted share). A parameter without a gradient counts as zeros."""
    import torch
    import torch.distributed as dist

    if not is_distributed():
        return float(loss.detach())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = torch.cat([g.reshape(-1) for g in grads] + [loss.detach().reshape(1).to(grads[0].dtype)])
    dist.all_reduce(flat)
    offset = 0
    for parameter, grad in zip(parameters, grads):
        count = grad.numel()
        parameter.grad = flat[offset:offset + count].view_as(grad).clone()
        offset += count
    return float(flat[-1])


def broadcast(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (any picklable value)."""
    import torch.distributed as dist

    if not is_distributed():
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_to_all(value: Any) -> list:
    """Every rank's ``value``, in rank order, on every rank (``[value]`` outside a process group)."""
    import torch.distributed as dist

    if not is_distributed():
        return [value]
    gathered = [None] * world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def barrier() -> None:
    """Wait for every rank."""
    import torch.distributed as dist

    if is_distributed():
        dist.barrier()
