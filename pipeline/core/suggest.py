"""Did-you-mean hints, one helper for every command: unknown flags, re-rankers, first stages, datasets,
ir_datasets ids and measures are answered with the closest known name (``difflib``) before the list of
choices, so that ``--reranker knrn`` says ``did you mean 'knrm'?`` instead of only listing every name.

Example::

    >>> closest("knrn", ["knrm", "conv-knrm", "drmm"])
    'knrm'
    >>> unknown_name("re-ranker", "knrn", ["knrm", "drmm"])
    "unknown re-ranker 'knrn'; did you mean 'knrm'? choose one of knrm, drmm"
"""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

#: how close a name must be to be offered (difflib's ratio); 0.6 is difflib's default and catches one
#: swapped or mistyped letter in short names (``knrn``, ``bm52``, ``datset``) without offering unrelated ones
CUTOFF = 0.6


def unique(names: Iterable[str]) -> list[str]:
    """``names`` without repeats, in their first order (a choice listed twice reads as a mistake)."""
    return list(dict.fromkeys(names))


def closest(name: str, choices: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The choice closest to ``name`` (case-insensitive), or ``None`` when none is close enough.

    Args:
        name: what the user typed.
        choices: the known names.
        cutoff: the least ``difflib`` similarity ratio a suggestion needs.

    Returns:
        One of ``choices`` as spelled there, or ``None``.

    Example:
        >>> closest("cranfeld", ["cranfield", "vaswani"])
        'cranfield'
    """
    known = unique(choices)
    if not name or not known:
        return None
    lowered = {choice.lower(): choice for choice in known}
    if name.lower() in lowered and lowered[name.lower()] != name:  # only the case differs
        return lowered[name.lower()]
    found = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[found[0]] if found else None


def hint(name: str, choices: Iterable[str], cutoff: float = CUTOFF) -> str:
    """``"did you mean 'x'? "`` for the closest choice, else ``""`` (put it before the rest of a message).

    Example:
        >>> hint("--datset", ["--dataset", "--split"])
        "did you mean '--dataset'? "
    """
    found = closest(name, choices, cutoff)
    return f"did you mean {found!r}? " if found is not None and found != name else ""


def unknown_name(kind: str, name: str, choices: Sequence[str], listed: Sequence[str] | None = None,
                 cutoff: float = CUTOFF) -> str:
    """The one-line message for an unknown ``kind`` (``"re-ranker"``, ``"first stage"``, ...) ``name``: the
    closest of ``choices`` first, then every choice once (``listed``, default ``choices``, e.g. with forms
    such as ``run:PATH`` that cannot be close to a typo).

    Example:
        >>> unknown_name("first stage", "bm52", ["bm25", "bm25+rm3"], ["bm25", "bm25+rm3", "run:PATH"])
        "unknown first stage 'bm52'; did you mean 'bm25'? choose one of bm25, bm25+rm3, run:PATH"
    """
    shown = unique(listed if listed is not None else choices)
    return f"unknown {kind} {name!r}; {hint(name, choices, cutoff)}choose one of {', '.join(shown)}"


_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (?P<rest>.*)$")


def flag_hint(message: str, flags: Iterable[str]) -> str:
    """argparse's error ``message`` with a did-you-mean for each unknown flag it names (``unrecognized
    arguments: --datset x`` -> ``... (did you mean --dataset?)``); other messages come back as they are.

    Args:
        message: the text argparse passes to ``ArgumentParser.error``.
        flags: the parser's option strings (``--dataset``, ``-h``, ...).

    Returns:
        The message, with the hints appended when any unknown flag has a close known one.
    """
    match = _UNRECOGNIZED.match(message)
    if not match:
        return message
    known = [f for f in flags if f.startswith("--")]
    hints = []
    for token in match.group("rest").split():
        if not token.startswith("--"):
            continue
        typed = token.split("=", 1)[0]
        found = closest(typed, known)
        if found is not None and found != typed:
            hints.append(f"{typed} -> did you mean {found}?")
    return f"{message} ({'; '.join(hints)})" if hints else message
