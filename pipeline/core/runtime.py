"""Runtime settings shared by every layer: the torch device, CPU threads and seeding."""
from __future__ import annotations

import os
import random
import sys


def resolve_device(name: str = "auto"):
    """A torch device: ``auto`` picks CUDA when available.

    Args:
        name: ``auto``, or a torch device name (``cpu``, ``cuda:1``).

    Returns:
        The ``torch.device``.

    Example:
        >>> resolve_device("cpu").type
        'cpu'
    """
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AMX tiles or AVX512-BF16).

    There bfloat16 scoring is faster than float32; elsewhere torch emulates bfloat16 and it is slower.

    Returns:
        True with AMX or AVX512-BF16.
    """
    import torch

    checks = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check() for check in checks if check is not None)


#: the values of ``--precision``: ``auto`` resolves to ``bf16`` where bfloat16 is native, else ``float32``
PRECISIONS = ("auto", "float32", "bf16", "int8")


def native_bf16_on(device=None) -> bool:
    """True when ``device`` (default: :func:`resolve_device` ``auto``) computes bfloat16 natively: a CUDA GPU
    that supports it (Ampere and later), or a CPU with AMX or AVX512-BF16 (:func:`native_bf16`).

    Args:
        device: a torch device or its name (``None``: what ``auto`` picks).

    Returns:
        Whether bfloat16 is native there.

    Example:
        >>> isinstance(native_bf16_on("cpu"), bool)
        True
    """
    import torch

    device = resolve_device("auto") if device is None else torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return device.type == "cpu" and native_bf16()


def requested_precision(precision: str = "auto", bf16: bool = False, int8: bool = False) -> str:
    """The precision asked for by ``--precision`` and its shortcuts ``--bf16`` / ``--int8`` together: one of
    :data:`PRECISIONS` (``auto`` unless something was named).

    Args:
        precision: ``--precision``'s value.
        bf16: ``--bf16`` was given.
        int8: ``--int8`` was given.

    Returns:
        The one precision named, or ``auto``.

    Raises:
        ValueError: an unknown precision, or two that contradict each other (``--bf16 --int8``,
            ``--precision float32 --bf16``); :class:`pipeline.engine.config.RunConfig` reports it as a
            ``ConfigError`` (this module imports nothing of the project).

    Example:
        >>> requested_precision("auto", bf16=True)
        'bf16'
    """
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    named = {p for p, flag in (("bf16", bf16), ("int8", int8)) if flag}
    if precision != "auto":
        named.add(precision)
    if len(named) > 1:
        raise ValueError(f"{' and '.join(sorted(named))} exclude each other (asked by --precision / --bf16 / "
                         "--int8): choose one scoring arithmetic")
    return named.pop() if named else "auto"


def environment_precision() -> str:
    """``PIPELINE_PRECISION`` (one of :data:`PRECISIONS`; unset: ``auto``): a host-wide choice for
    ``--precision auto``, e.g. float32 for a test suite whose expected scores are float32's.

    Returns:
        The variable's value, ``auto`` when unset.

    Raises:
        ValueError: a value that is not one of :data:`PRECISIONS`.
    """
    value = os.environ.get("PIPELINE_PRECISION", "") or "auto"
    if value not in PRECISIONS:
        raise ValueError(f"PIPELINE_PRECISION must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return value


def resolve_precision(precision: str = "auto", bf16: bool = False, int8: bool = False,
                      supports_bf16: bool = True, device=None) -> str:
    """The precision scoring runs in: ``float32``, ``bf16`` or ``int8``. What was named
    (:func:`requested_precision`) is kept; ``auto`` becomes ``bf16`` when the re-ranker can score in
    bfloat16 (``supports_bf16``) and ``device`` computes it natively (:func:`native_bf16_on`), else
    ``float32``: emulated bfloat16 is slower than float32, and the 3-seed checks in
    ``benchmarks/results/speed/bf16-cost.md`` found no metric moved by bfloat16 scoring. The environment
    variable ``PIPELINE_PRECISION`` (one of :data:`PRECISIONS`) replaces ``auto`` when set.

    Args:
        precision: ``--precision``'s value.
        bf16: ``--bf16`` was given.
        int8: ``--int8`` was given.
        supports_bf16: the re-ranker can score in bfloat16 (a torch model).
        device: where it scores (``None``: what ``auto`` picks).

    Returns:
        ``float32``, ``bf16`` or ``int8``.

    Raises:
        ValueError: contradicting requests, or a bad ``PIPELINE_PRECISION``.

    Example:
        >>> resolve_precision("auto", supports_bf16=False)
        'float32'
    """
    asked = requested_precision(precision, bf16, int8)
    if asked == "auto":
        asked = environment_precision()
    if asked != "auto":
        return asked
    return "bf16" if supports_bf16 and native_bf16_on(device) else "float32"


#: what :func:`keep_freed_memory` asks glibc for: blocks up to 1 GiB from the heap, freed memory kept up to 2 GiB
MMAP_THRESHOLD, TRIM_THRESHOLD = 1 << 30, (1 << 31) - 1


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep large freed blocks for reuse instead of returning them to the system;
    ``True`` when it applied (Linux with glibc), ``False`` elsewhere or when ``PIPELINE_KEEP_FREED_MEMORY=0``.

    By default glibc gives every block over 32 MB its own mapping and unmaps it when freed, so each new one
    page-faults in afresh: scoring and training allocate such temporaries in every batch (HCAN's LSTM inputs
    for a few hundred pairs), and re-mapping them cost HCAN a fifth of its scoring time (BENCHMARKS.md,
    "Scoring throughput"). The price is memory: the process keeps its peak until it exits. The command lines
    call this at start; importing the package never does, since the allocator belongs to the process that
    embeds it (a notebook can call this itself).

    Returns:
        Whether the setting applied.
    """
    if os.environ.get("PIPELINE_KEEP_FREED_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3      # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(mallopt(m_trim_threshold, TRIM_THRESHOLD))


def set_threads(threads: int | None = None) -> None:
    """Limit torch's CPU threads.

    On a small shared machine, torch's default of one thread per core makes small batched operations
    spin-wait on each other when another process is busy: one thread per process is then far faster.

    Args:
        threads: the number of threads (``None`` or 0: ``PIPELINE_THREADS``; unset keeps torch's default).
    """
    threads = threads or int(os.environ.get("PIPELINE_THREADS", "0") or 0)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Seed Python's and NumPy's generators and, when torch is loaded, torch's (CPU and CUDA), asking it for
    deterministic kernels. Called at the start of a run and again by the training loop once torch is in.

    Args:
        seed: the seed.
    """
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    import numpy

    numpy.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
