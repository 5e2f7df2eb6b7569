"""Errors that name where bad input is, so a user can open the file at the right line."""
from __future__ import annotations

import os


class PipelineError(Exception):
    """Base class of the project's user-facing errors (the CLIs print these without a traceback)."""


class DataFormatError(PipelineError, ValueError):
    """Malformed input: names the file, the 1-based line (when there is one) and what was expected.

    Args:
        path: the file.
        line: the 1-based line, or ``None`` when the problem is the whole file.
        message: what was expected and what was found.

    Example:
        >>> str(DataFormatError("topics.txt", 3, "expected 'qid<TAB>text'"))
        "topics.txt:3: expected 'qid<TAB>text'"
    """

    def __init__(self, path: str | os.PathLike, line: int | None, message: str):
        self.path = str(path)
        self.line = line
        self.detail = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class DatasetNotFoundError(PipelineError, LookupError):
    """A dataset name or path that no loader knows, or whose files are missing."""


class CheckpointError(PipelineError):
    """A model checkpoint that is unreadable or does not match the code or the requested model."""


class ConfigError(PipelineError, ValueError):
    """A bad option (command line, ``--set``, a config file or an API argument): names the option, the value
    and what is allowed. Raised before any retrieval or training starts."""


class CorruptCacheError(PipelineError):
    """A cached index, checkpoint or training state that fails its integrity check: names the entry and says
    how to rebuild it."""
