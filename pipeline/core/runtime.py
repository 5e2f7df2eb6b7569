"""Runtime settings shared by every layer: the torch device, CPU threads and seeding."""
from __future__ import annotations

import os
import random
import sys


def resolve_device(name: str = "auto"):
    """A torch device: ``auto`` picks CUDA when available."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def native_bf16() -> bool:
    """True when this CPU multiplies bfloat16 matrices in hardware (AMX tiles or AVX512-BF16), where
    bfloat16 scoring is faster than float32; elsewhere torch emulates bfloat16 and it is slower."""
    import torch

    checks = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check() for check in checks if check is not None)


def set_threads(threads: int | None = None) -> None:
    """Limit torch's CPU threads (``threads``, else ``PIPELINE_THREADS``; unset keeps torch's default).

    On a small shared machine, torch's default of one thread per core makes small batched operations
    spin-wait on each other when another process is busy: one thread per process is then far faster.
    """
    threads = threads or int(os.environ.get("PIPELINE_THREADS", "0") or 0)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Seed Python's and NumPy's generators and, when torch is loaded, torch's (CPU and CUDA), asking it for
    deterministic kernels. Called at the start of a run and again by the training loop once torch is in."""
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    import numpy

    numpy.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
