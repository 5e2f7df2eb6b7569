"""Display names for run files: a run's name from its file name, and labels that tell apart runs whose files
share a name. :mod:`pipeline.evaluate` names the runs of its table with them."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence


def run_name(path: str | os.PathLike) -> str:
    """A run's display name: its file name without ``.run``/``.txt``/``.trec``.

    Args:
        path: the run file.

    Returns:
        The name.

    Example:
        >>> run_name("runs/bm25.run")
        'bm25'
    """
    name = Path(path).name
    for suffix in (".run", ".txt", ".trec"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def run_labels(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Distinct display names for run files, in order: :func:`run_name` where it is unique, else the file name
    prefixed with as few parent folders as tell it apart from the runs sharing its name (``runs/a/x.run`` and
    ``runs/b/x.run`` -> ``a/x`` and ``b/x``). Files no folder tells apart (``x.run`` and ``x.txt`` in one
    folder) keep their path as given, and the same file given twice is numbered (``x``, ``x (2)``).

    Args:
        paths: the run files.

    Returns:
        One label per path, in order.

    Example:
        >>> run_labels(["runs/a/x.run", "runs/b/x.run"])
        ['a/x', 'b/x']
    """
    files = [Path(os.path.abspath(p)) for p in paths]
    parents = [f.parent.parts[1:][::-1] for f in files]  # nearest folder first, the root left out
    depth = [0] * len(paths)

    def label(i: int) -> str:
        return "/".join([*reversed(parents[i][: depth[i]]), run_name(paths[i])])

    exhausted: set[int] = set()
    while True:
        groups: dict[str, list[int]] = {}
        for i in range(len(paths)):
            if i not in exhausted:
                groups.setdefault(label(i), []).append(i)
        clashing = [i for group in groups.values() if len(group) > 1 for i in group]
        if not clashing:
            break
        # labels of different depths hold different numbers of "/", so only equal depths can clash
        for i in clashing:
            if depth[i] < len(parents[i]):
                depth[i] += 1
            else:
                exhausted.add(i)
    # the same file twice: its name, numbered below; two files no folder tells apart: their paths as given
    repeated = {f for f in files if files.count(f) > 1}
    labels = [label(i) if i not in exhausted else run_name(paths[i]) if files[i] in repeated else str(paths[i])
              for i in range(len(paths))]
    seen: dict[str, int] = {}
    for i, text in enumerate(labels):
        seen[text] = seen.get(text, 0) + 1
        if seen[text] > 1:
            labels[i] = f"{text} ({seen[text]})"
    return labels
