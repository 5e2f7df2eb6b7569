"""Clean exits on Ctrl-C (SIGINT) and ``kill`` (SIGTERM) for the command lines.

Both signals become a Python exception at the next bytecode, so ``finally`` blocks and context managers
run (temporary files are removed, nothing half-written is renamed into place), then the command prints one
line saying what was kept and how to resume, and exits with the shell's convention: 130 for SIGINT, 143 for
SIGTERM. The JVM that Anserini runs on is started with ``-Xrs`` (:mod:`indexes.jvm`), so it installs no
handler of its own for these signals and cannot turn them into a JVM shutdown under a running torch.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

#: exit status of a process stopped by signal N, as shells report it (128 + N)
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's ``KeyboardInterrupt`` so the same clean-up runs."""


def _raise_terminated(signum, frame):
    raise Terminated()


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs, then act on a held one as its handler would.

    For writes a signal must not cut in half: ``torch.save`` writes through a zip writer whose clean-up,
    when an exception (the signal's) arrives mid-file, raises a ``RuntimeError`` of its own, which hides the
    interrupt and ends the command with a traceback. Held here, the write finishes (and is renamed into
    place by its atomic writer) and the interrupt follows. Only Python-level handlers are held (an ignored
    or default signal stays as it is); outside the main thread, where handlers cannot change, it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if callable(signal.getsignal(signum)):
            previous[signum] = signal.signal(signum, lambda number, frame: held.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        previous[held[0]](held[0], None)


@contextmanager
def exit_cleanly(kept: str) -> Iterator[None]:
    """Run a command's work; on SIGINT or SIGTERM print ``interrupted: <kept>`` to stderr and exit with 130 or
    143. ``kept`` says what survives and how to resume (e.g. "finished epochs are kept; run the same command
    to resume")."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, Terminated)
        print(f"\n{'terminated' if terminated else 'interrupted'}: {kept}", file=sys.stderr)
        raise SystemExit(EXIT_SIGTERM if terminated else EXIT_SIGINT) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
