"""A training's resumable state: the random generators it draws from, and the per-epoch state file that lets
an interrupted :class:`rerankers.training.loop.Trainer` resume with the same weights and draws."""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Mapping

from pipeline.core.errors import CheckpointError

from infra import distributed
from infra.checkpoints import load_checkpoint, save_checkpoint

TRAINING_STATE_KIND = "training-state"
log = logging.getLogger("rerankers.training")

__all__ = ["TRAINING_STATE_KIND", "generator_states", "restore_generators", "save_state", "load_state"]


def generator_states(rng: random.Random) -> dict:
    """The states of every random generator training draws from.

    Args:
        rng: the training loop's own generator.

    Returns:
        The loop's, Python's, numpy's and torch's (CPU and CUDA) states, as plain values and tensors.
    """
    import numpy as np
    import torch

    # numpy's key array as a tensor: the state file is read with weights_only=True, which refuses ndarrays
    name, keys, position, has_gauss, cached = np.random.get_state()
    states = {"loop": rng.getstate(), "python": random.getstate(),
              "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached),
              "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if distributed.is_distributed():  # each rank's dropout generator (seeded seed + rank), in rank order
        ranks = distributed.gather_to_all((states["torch"], states.get("cuda")))
        states["ranks"] = [{"torch": cpu, **({"cuda": cuda} if cuda is not None else {})} for cpu, cuda in ranks]
    return states

def restore_generators(states: Mapping[str, Any], rng: random.Random) -> None:
    """Put back the generator states :func:`generator_states` took.

    Args:
        states: what :func:`generator_states` returned.
        rng: the training loop's own generator.
    """
    import numpy as np
    import torch

    rng.setstate(states["loop"])
    random.setstate(states["python"])
    name, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.int64).astype(np.uint32), position, has_gauss, cached))
    mine = states
    if distributed.is_distributed():  # this rank's own dropout generator, when the state has one per rank
        ranks = states.get("ranks") or []
        if len(ranks) == distributed.world_size():
            mine = ranks[distributed.rank()]
        elif distributed.rank():  # keeps its own generator (seed + rank): never rank 0's masks again
            log.warning("training state written by %d rank(s), resumed by %d: rank %d draws new dropout masks",
                        max(1, len(ranks)), distributed.world_size(), distributed.rank())
            return
    torch.set_rng_state(mine["torch"])
    if "cuda" in mine and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(mine["cuda"])


def save_state(path: Path, identity: dict, state: dict) -> None:
    """Write one epoch's training ``state`` to ``path`` atomically, with its digest and the ``identity`` of
    the training it belongs to (:meth:`rerankers.training.loop.Trainer.state_identity`).

    Args:
        path: the state file.
        identity: the training's identity.
        state: plain values and tensors.
    """
    save_checkpoint(path, {"kind": TRAINING_STATE_KIND, "identity": identity, **state})


def load_state(path: Path, identity: dict) -> dict:
    """A training state written by :func:`save_state` for the training ``identity``.

    Args:
        path: the state file.
        identity: the training's identity.

    Returns:
        The state.

    Raises:
        CheckpointError: a damaged file, or a state of another kind or training.
    """
    state = load_checkpoint(path, "training state")
    if state.get("kind") != TRAINING_STATE_KIND:
        raise CheckpointError(f"{path}: not a training state (kind {state.get('kind')!r}); delete it to start over")
    if state.get("identity") != identity:
        raise CheckpointError(f"{path}: training state of another training ({state.get('identity')}), expected "
                              f"{identity}; delete it to start over")
    return state
