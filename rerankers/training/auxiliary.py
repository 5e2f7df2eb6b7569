"""Training with a model's own extra objective: the :class:`~rerankers.training.loop.Trainer` whose loss
adds the re-ranker's auxiliary loss (ADDAX's hashing losses, eq. 15), so that the Trainer itself stays
generic."""
from __future__ import annotations

from .loop import Trainer


class AuxiliaryLossTrainer(Trainer):
    """The project's :class:`~rerankers.training.loop.Trainer` whose loss also adds the re-ranker's auxiliary
    loss for the batch just scored (``reranker.auxiliary_loss(number_of_units)``; ``None`` adds nothing)."""

    def loss(self, scores, units):
        """The Trainer's loss of the batch plus the re-ranker's auxiliary loss.

        Args:
            scores: the batch's scores, as the Trainer's loss takes them.
            units: the batch's training units.

        Returns:
            The loss tensor to back-propagate.
        """
        loss = super().loss(scores, units)
        hook = getattr(self.reranker, "auxiliary_loss", None)
        extra = hook(len(units)) if hook is not None else None
        return loss if extra is None else loss + extra.to(loss.dtype)
