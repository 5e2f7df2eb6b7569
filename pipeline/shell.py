"""The command shell every console command runs in: :func:`run_command`.

Each ``rerank-*`` command (``pipeline.run``, ``train``, ``index``, ``evaluate``, ``serve``, ``export``,
``classify``, ``fuse``, ``verify``) is a function doing its work inside this one shell, so they behave alike:

* logging as :func:`pipeline.core.logs.configure_logging` sets it, and the allocator told to keep freed
  memory (:func:`pipeline.core.runtime.keep_freed_memory`);
* an expected fault (:class:`~pipeline.core.errors.PipelineError`: a bad option, a missing file, a damaged
  cache entry) prints one line ``error: ...`` to stderr and gives exit status 2, never a traceback;
* a fault of the machine (an ``OSError``: the disk filled up, a folder went away) prints one line
  ``error: cannot write ...`` and gives 1 (outputs are written to a temporary path and renamed, so nothing
  half-written is left);
* Ctrl-C and ``kill`` print what was kept and exit with 130 / 143 (:func:`pipeline.core.interrupts.exit_cleanly`);
* under ``torchrun`` (``distributed=True``) the process group is joined before the work and left after it.
"""
from __future__ import annotations

import sys
from typing import Callable

from .core.errors import PipelineError
from .core.interrupts import exit_cleanly
from .core.logs import configure_logging
from .core.runtime import keep_freed_memory

#: printed on Ctrl-C / kill when a command says nothing more specific
NOTHING_KEPT = "nothing half-written was kept; run the same command again"


def one_line(error: BaseException) -> str:
    """The error's message on one line (a message spread over lines, e.g. a library's advice, is joined).

    Args:
        error: the exception.

    Returns:
        its text with every run of whitespace, newlines included, replaced by one space.

    Example:
        >>> one_line(ValueError("bad\\n  value"))
        'bad value'
    """
    return " ".join(str(error).split()) or type(error).__name__


def run_command(work: Callable[[], int | None], kept: str = NOTHING_KEPT, on_write_error: str = "",
                distributed: bool = False) -> int:
    """Run a command's ``work`` in the shell described in the module docstring and return its exit status.

    Args:
        work: the command itself (parsing its options included, so a bad flag is an expected fault); returns
            its exit status, ``None`` for 0.
        kept: what an interrupted command keeps and how to resume, printed on Ctrl-C / kill.
        on_write_error: what was (not) kept when the disk failed, appended to the ``cannot write`` line
            (e.g. ``"no partial run was kept"``).
        distributed: join the ``torchrun`` process group (when there is one) before ``work`` and leave it
            after, whatever happens.

    Returns:
        ``work``'s status, 2 after an expected fault, 1 after a write error. Ctrl-C / kill raise
        ``SystemExit`` (130 / 143), as the process's exit.

    Example:
        >>> def main(argv=None):
        ...     return run_command(lambda: work(parse(argv)), kept="finished epochs are kept")
    """
    configure_logging()
    keep_freed_memory()
    group = None
    finished = False
    try:
        with exit_cleanly(kept):
            if distributed:
                from infra import distributed as group

                group.init_from_environment()
            code = work()
            finished = True
    except PipelineError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled up or went away mid-write
        where = f" {error.filename}" if error.filename else ""
        print(f"error: cannot write{where}: {error.strerror or one_line(error)}"
              + (f"; {on_write_error}" if on_write_error else ""), file=sys.stderr)
        return 1
    finally:
        if group is not None:
            group.shutdown(finished)
    return 0 if code is None else int(code)
