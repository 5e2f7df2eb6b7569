"""Progress for the long-running steps: a bar on a terminal, a periodic log line elsewhere.

:class:`tqdm` is ``tqdm.auto.tqdm`` that draws its bar only when its stream is a terminal. When stderr goes
to a file or a pipe (a batch job, ``nohup``, CI), a bar's carriage returns would fill the file with
thousands of redrawn bars; there it writes instead one INFO line of the ``"pipeline.progress"`` logger every
:data:`LOG_PERIOD` seconds (env ``PIPELINE_PROGRESS_SECONDS``), and one when the bar closes::

    INFO pipeline.progress: re-ranking with knrm: 40% 48/120 query [00:30<00:45, 1.60query/s]

:func:`redirect_logging` (called by the command lines' :func:`~pipeline.core.logs.configure_logging`) routes
log records through ``tqdm.write`` (``tqdm.contrib.logging.logging_redirect_tqdm``), so that an INFO line
printed while a bar is drawn appears on its own line above the bar instead of glued into it.

``TQDM_DISABLE=1`` still turns every bar (and its log lines) off.

Example::

    from pipeline.core.progress import tqdm
    for item in tqdm(items, desc="scoring", unit="query"):
        ...
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from weakref import WeakSet

from tqdm.auto import tqdm as _auto_tqdm
from tqdm.std import tqdm as _std_tqdm

log = logging.getLogger("pipeline.progress")

# tqdm keeps its live bars in a class attribute made by the first class instantiated; made here on the base
# class, every bar (this module's and plain tqdm's) is in one set, which tqdm.write clears before a log line
if not hasattr(_std_tqdm, "_instances"):
    _std_tqdm._instances = WeakSet()

#: seconds between two progress lines when stderr is not a terminal
LOG_PERIOD = 30.0


def progress_switch(show: bool) -> dict:
    """tqdm keyword arguments for a bar that is shown when ``show``: none then, so that the user's
    ``TQDM_DISABLE=1`` still turns it off (an explicit ``disable=False`` would override it), and
    ``disable=True`` otherwise.

    Args:
        show: whether the bar is wanted.

    Returns:
        Keyword arguments for tqdm.

    Example:
        >>> progress_switch(False)
        {'disable': True}
    """
    return {} if show else {"disable": True}


def log_period() -> float:
    """Seconds between progress lines off a terminal.

    Returns:
        ``PIPELINE_PROGRESS_SECONDS`` (a positive number), else :data:`LOG_PERIOD`.
    """
    text = os.environ.get("PIPELINE_PROGRESS_SECONDS", "")
    try:
        value = float(text)
    except ValueError:
        return LOG_PERIOD
    return value if value > 0 else LOG_PERIOD


def on_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` is a terminal.

    Args:
        stream: a stream (default: stderr, where tqdm draws).

    Returns:
        False also for a stream without ``isatty`` or a closed one.
    """
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _Discard:
    """A stream that drops what tqdm would draw (the log lines carry the progress instead)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class tqdm(_auto_tqdm):  # noqa: N801 - a drop-in for tqdm's own class name
    """``tqdm.auto.tqdm``, except that off a terminal (see the module docstring) nothing is drawn and the
    progress is logged every :func:`log_period` seconds and when the bar closes (bars with ``leave=False``,
    such as one epoch's batches, log no closing line). Every tqdm argument works as usual.

    Args:
        *args: as ``tqdm`` takes them.
        **kwargs: as ``tqdm`` takes them (``mininterval`` is at least :func:`log_period` off a terminal).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        stream = kwargs.get("file")
        self._logged = not on_terminal(stream)
        if self._logged:
            kwargs["file"] = _Discard()
            # tqdm calls display() at most once per mininterval: that is the period of the lines
            kwargs["mininterval"] = max(float(kwargs.get("mininterval") or 0), log_period())
            kwargs["maxinterval"] = max(float(kwargs.get("maxinterval") or 0), kwargs["mininterval"])
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        """Draw the bar (on a terminal) or log its progress (elsewhere).

        Args:
            msg: as tqdm's ``display`` takes it (``""``: the bar is being cleared).
            pos: as tqdm's ``display`` takes it.

        Returns:
            True, as tqdm's ``display``.
        """
        if not getattr(self, "_logged", False):
            return super().display(msg, pos)
        if msg == "":  # the bar is being cleared (leave=False): nothing to say
            return True
        if self.n == 0 or self.n == getattr(self, "_logged_n", None):
            return True  # no progress yet (the first draw), or none since the last line (a close after 100%)
        self._logged_n = self.n
        log.info("%s", self.log_line())
        return True

    def log_line(self) -> str:
        """The bar's state as one line of text.

        Returns:
            Description, percentage and count, elapsed (and remaining) time and rate.
        """
        values = self.format_dict
        desc = values.get("prefix") or ""
        total = values.get("total")
        n = values.get("n", 0)
        unit = values.get("unit") or "it"
        elapsed = self.format_interval(values.get("elapsed", 0))
        rate = values.get("rate")
        if rate is None and values.get("elapsed"):
            rate = n / values["elapsed"]
        speed = f", {self.format_sizeof(rate)}{unit}/s" if rate else ""
        if total:
            remaining = ((total - n) / rate) if rate else None
            left = f"<{self.format_interval(remaining)}" if remaining is not None else ""
            body = f"{100 * n / total:3.0f}% {n}/{total} {unit} [{elapsed}{left}{speed}]"
        else:
            body = f"{n} {unit} [{elapsed}{speed}]"
        return f"{desc}: {body}" if desc else body


def redirect_logging(logger: logging.Logger | None = None) -> None:
    """Route ``logger``'s (default: the root logger's) console handlers through ``tqdm.write`` for the rest
    of the process (``tqdm.contrib.logging.logging_redirect_tqdm``), so that log lines never break a bar.

    Args:
        logger: the logger whose handlers are routed (default: the root logger).
    """
    from tqdm.contrib.logging import logging_redirect_tqdm

    target = logger if logger is not None else logging.getLogger()
    if getattr(target, "_pipeline_redirected", False):
        return
    # entered for good: a command line logs until it exits (kept referenced: a collected context manager
    # would run its exit and put the plain handlers back)
    redirection = logging_redirect_tqdm(loggers=[target], tqdm_class=_auto_tqdm)
    redirection.__enter__()
    _REDIRECTIONS.append(redirection)
    target._pipeline_redirected = True


_REDIRECTIONS: list = []
