"""Progress-bar switches shared by the long-running steps."""
from __future__ import annotations


def progress_switch(show: bool) -> dict:
    """tqdm keyword arguments for a bar that is shown when ``show``: none then, so that the user's
    ``TQDM_DISABLE=1`` still turns it off (an explicit ``disable=False`` would override it), and
    ``disable=True`` otherwise."""
    return {} if show else {"disable": True}
