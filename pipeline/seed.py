"""One seed for everything random (Python, NumPy, torch when it is loaded)."""
from __future__ import annotations

import os
import random
import sys


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and (if imported) torch's generators and ask torch for deterministic kernels."""
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
