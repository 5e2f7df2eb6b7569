"""One optimizer step's forward and backward: a batch in ``accumulation_steps`` micro-batches whose
gradients add up, and under ``torchrun`` this rank's share of it inside ``DistributedDataParallel``
(:mod:`infra.distributed`, docs/distributed.md). :class:`rerankers.training.loop.Trainer` inherits them."""
from __future__ import annotations

import logging

from infra import distributed
from .losses import in_batch_pairs

log = logging.getLogger("rerankers.training")


class TrainingSteps:
    """The forward and backward of one batch (a mixin of :class:`~rerankers.training.loop.Trainer`, which sets
    ``reranker`` and ``config`` and defines ``loss``)."""

    def accumulate(self, units: list, device, use_amp: bool, data_parallel=None):
        """Forward and backward of this rank's share of ``units`` (one batch), in ``accumulation_steps``
        micro-batches whose gradients add up (under DDP's ``no_sync()`` but for the last, whose ``backward``
        sends the sum). Each micro-batch's mean loss is scaled by its share of the batch (times the world
        size, which DDP's average divides out), so the gradient is the whole batch's mean-loss gradient.

        Args:
            units: the whole batch.
            device: the torch device.
            use_amp: compute the forward under bfloat16 autocast.
            data_parallel: the DDP wrapper (:meth:`data_parallel`), or ``None`` in one process.

        Returns:
            This rank's scaled loss (a detached tensor; the ranks' values average to the batch's loss).
        """
        import contextlib

        mine, scale = distributed.share(units)
        parts = min(max(1, self.config.accumulation_steps), len(mine))
        bounds = [round(i * len(mine) / parts) for i in range(parts + 1)]
        total = None
        for part in range(parts):
            micro = mine[bounds[part]:bounds[part + 1]]
            last = part == parts - 1
            quiet = data_parallel.no_sync() if data_parallel is not None and not last else contextlib.nullcontext()
            with quiet:
                loss = self.share_loss(micro, device, use_amp, data_parallel) * (scale * len(micro) / len(mine))
                loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        return total

    def share_loss(self, units: list, device, use_amp: bool, data_parallel=None):
        """The configured loss of ``units``' scores, computed inside the DDP wrapper when there is one.

        Args:
            units: the units to score.
            device: the torch device.
            use_amp: compute the forward under bfloat16 autocast.
            data_parallel: the DDP wrapper, or ``None``.

        Returns:
            The mean loss, a scalar tensor with its graph.
        """
        import torch

        if self.config.loss == "in_batch":  # every query against every document of the share
            pairs = in_batch_pairs(units)
        else:
            pairs = [(query, doc) for query, docs, _ in units for doc in docs]
        batch = self.reranker.encode(pairs)

        def compute():  # under DDP, inside its forward: the loss is the output it finds parameters from
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
                scores = self.reranker.forward(batch)
            return self.loss(scores.float(), units)

        return data_parallel(compute) if data_parallel is not None else compute()

    def data_parallel(self, units: list, device, use_amp: bool):
        """The DDP wrapper of the re-ranker (:func:`distributed.data_parallel`), ``find_unused_parameters``
        set only if, on some rank, a trainable parameter gets no gradient from its share of ``units``
        (the first batch, computed once without a step and with torch's generator put back).

        Args:
            units: the first batch.
            device: the torch device.
            use_amp: compute the forward under bfloat16 autocast.

        Returns:
            The DDP module, or ``None`` outside a process group.
        """
        import torch

        module = self.reranker.module
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            mine, _ = distributed.share(units)
            self.share_loss(mine, device, use_amp).backward()
        unused = [name for name, p in module.named_parameters() if p.requires_grad and p.grad is None]
        module.zero_grad(set_to_none=True)
        find_unused = any(distributed.gather_to_all(bool(unused)))
        if find_unused:
            log.info("%s: parameters without a gradient (%s): DDP looks for unused parameters at every step",
                     self.reranker.name, ", ".join(unused[:5]) or "on another rank")
        return distributed.data_parallel(module, device, find_unused)
