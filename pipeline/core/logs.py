"""How the command lines log: routine progress at INFO from the project's own loggers, everything else
(libraries) from WARNING up, one format."""
from __future__ import annotations

import logging

#: the project's top-level packages: their INFO lines (loading, training epochs, tuned weights) are shown
PROJECT_LOGGERS = ("pipeline", "rerankers", "indexes")


def configure_logging(level: int = logging.INFO) -> None:
    """Log the project's messages from ``level`` up and third-party ones from WARNING up, to stderr."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(level)
    from .progress import redirect_logging

    redirect_logging()  # a log line printed while a progress bar is drawn goes above it, not into it
