"""Measure names: ir-measures' syntax (``AP nDCG@10 P@30 RR@10 R@1000``, ``AP(rel=2)``) and trec_eval's
(``map P_10 P.10 ndcg_cut_10 recip_rank recall_100 Rprec bpref``), read into ir-measures' Measure objects, and
the closest known name for a misspelt one. :mod:`pipeline.core.evaluation` scores runs with them."""
from __future__ import annotations

import difflib
import functools
import re
from typing import Sequence

from .errors import ConfigError

#: The metrics of ``pipeline.run`` (when the dataset's recipe names none) and of ``pipeline.evaluate`` (when
#: neither ``--metrics`` nor a dataset recipe names any): one constant, so the two commands print the same
#: columns. ``{k}`` is the depth: ``pipeline.run``'s ``--k``, ``pipeline.evaluate``'s deepest run.
DEFAULT_MEASURES = "AP nDCG@10 P@30 R@{k}"

#: what an unknown-measure error lists as examples of the two accepted spellings
MEASURE_EXAMPLES = "ir-measures names such as AP nDCG@10 P@30 RR R@1000, or trec_eval names such as map ndcg_cut_10 P_10 recip_rank"


def parse_measures(spec: str | Sequence) -> list:
    """ir-measures Measure objects from ``"AP nDCG@10"`` (or a list of names / Measure objects).

    Each name is ir-measures' (``AP``, ``nDCG@10``, ``AP(rel=2)``) or trec_eval's (``map``, ``P_10``,
    ``P.10``, ``ndcg_cut_10``, ``recip_rank``, ``recall_100``, ``bpref``; ``P_5,10`` gives two measures),
    read by ir-measures' own parsers (:func:`parse_measure_name`). A measure named twice (``map AP``) is kept
    once, in its first place.

    Args:
        spec: names separated by spaces, or a list of names or Measure objects.

    Returns:
        The Measure objects, in the order given.

    Raises:
        ConfigError: an unknown name (with the closest known name), or no measure at all.

    Example:
        >>> [str(m) for m in parse_measures("map P_10 nDCG@10")]
        ['AP', 'P@10', 'nDCG@10']
    """
    items = spec.split() if isinstance(spec, str) else list(spec)
    measures: list = []
    seen: set[str] = set()
    for item in items:
        # aliases make repeats likely (``map AP``): one column per measure, not two columns with one key
        for measure in parse_measure_name(item) if isinstance(item, str) else [item]:
            if str(measure) not in seen:
                seen.add(str(measure))
                measures.append(measure)
    if not measures:
        raise ConfigError("no measures given")
    return measures


def canonical_measures(spec: str | Sequence) -> str:
    """The measures of ``spec`` as ir-measures' canonical names: what code that hands one name to ir-measures
    directly should be given.

    Args:
        spec: names separated by spaces, or a list (see :func:`parse_measures`).

    Returns:
        The canonical names, space-separated.

    Example:
        >>> canonical_measures("map P_10")
        'AP P@10'
    """
    return " ".join(str(m) for m in parse_measures(spec))


def parse_measure_name(name: str) -> list:
    """The measures one name stands for: ir-measures' syntax first (``AP``, ``nDCG@10``, ``AP(rel=2)``),
    then trec_eval's (``ir_measures.parse_trec_measure``: ``map`` -> AP, ``P_10``/``P.10`` -> P@10, ``recall``
    -> R at trec_eval's nine cutoffs, as ``trec_eval -m recall`` prints them).

    Args:
        name: one measure name.

    Returns:
        The measures it stands for.

    Raises:
        ConfigError: an unknown name (with the closest known one) or bad parameters.
    """
    measures = read_measure_name(name)
    if measures is None:
        raise ConfigError(f"unknown measure {name!r}; closest known name: {closest_measure(name)} ({MEASURE_EXAMPLES})")
    return measures


def read_measure_name(name: str) -> list | None:
    """:func:`parse_measure_name` without the suggestion: the measures, or ``None`` for a name neither
    ir-measures nor trec_eval knows.

    Args:
        name: one measure name.

    Returns:
        The measures it stands for, or ``None`` for an unknown name.

    Raises:
        ConfigError: a known name with bad parameters, or a trec_eval measure set.
    """
    import ir_measures
    import pytrec_eval

    try:
        measure = ir_measures.parse_measure(name)
    except (ValueError, NameError, SyntaxError, TypeError) as error:
        native_error = error
    else:
        # ir-measures builds AP(foo=1) and fails later, with a bare KeyError, when the measure is printed
        unknown = sorted(set(measure.params) - set(measure.SUPPORTED_PARAMS))
        if unknown:
            raise ConfigError(f"bad measure {name!r}: no parameter {unknown[0]!r} "
                              f"(it takes {', '.join(sorted(measure.SUPPORTED_PARAMS))})")
        return [measure]
    if name in pytrec_eval.supported_nicknames:
        raise ConfigError(f"{name!r} is a trec_eval measure set, not a measure; name its measures ({MEASURE_EXAMPLES})")
    if is_trec_name(name):
        try:
            return list(ir_measures.parse_trec_measure(name))
        except ValueError as error:
            if "not yet supported" in str(error):
                raise ConfigError(f"measure {name!r} is a trec_eval measure that ir-measures does not compute; "
                                  f"choose another ({MEASURE_EXAMPLES})") from None
            raise ConfigError(f"bad measure {name!r}: {error}") from None  # map_10: map takes no cutoff
    if "{k}" in name:
        raise ConfigError(f"bad measure {name!r}: {{k}} stands for the ranking depth and is replaced before parsing")
    if split_measure_name(name)[0] in ir_measures.measures.registry:
        # the name is known, its parameters or cutoff are not: say so in the user's terms, not the parser's
        raise ConfigError(malformed_measure(name, native_error))
    return None


def malformed_measure(name: str, error: BaseException) -> str:
    """The message for a known measure written wrongly (``P@1O``, ``AP(rel=x)``): what the cutoff or the
    parameters must look like, with the corrected name when a letter only stands for a digit (O/o -> 0,
    l/I -> 1), instead of ir-measures' parser text (kept for other shapes, after the expected form).

    Args:
        name: the name as written.
        error: ir-measures' parser error.

    Returns:
        The message.
    """
    import ir_measures

    head, rest = split_measure_name(name)
    params = sorted(set(ir_measures.measures.registry[head].SUPPORTED_PARAMS) - {"cutoff"})
    form = f"{head}, {head}@<cutoff> or {head}(<param>=<value>)@<cutoff>" + (
        f" (params: {', '.join(params)})" if params else "")
    cutoff = rest.rpartition("@")[2] if "@" in rest else None
    if cutoff is not None and not re.fullmatch(r"\d+", cutoff):
        fixed = cutoff.translate(str.maketrans("OoIl", "0011"))
        hint = f"; did you mean {name[: len(name) - len(cutoff)] + fixed!r}?" if re.fullmatch(r"\d+", fixed) else ""
        return f"bad measure {name!r}: the cutoff after '@' must be a whole number, got {cutoff!r}{hint} (expected {form})"
    return f"bad measure {name!r}: expected {form} ({error})"


def is_trec_name(name: str) -> bool:
    """Whether ``name`` is spelt as a trec_eval measure: a trec_eval name, alone or with parameters
    (``P_10``, ``P.5,10``, ``iprec_at_recall_0.10``). Checked here because ir-measures' trec_eval parser
    matches a prefix only and would read ``P_10x`` as P@10.

    Args:
        name: one measure name.

    Returns:
        Whether it has trec_eval's spelling.
    """
    import pytrec_eval

    bases = "|".join(re.escape(m) for m in sorted(pytrec_eval.supported_measures, key=len, reverse=True))
    return re.fullmatch(rf"(?:{bases})(?:[._]\d+(?:\.\d+)?(?:,\d+(?:\.\d+)?)*)?", name) is not None


def split_measure_name(name: str) -> tuple[str, str]:
    """A measure name's head and the rest: ``nDCG@10`` -> (``nDCG``, ``@10``), ``AP(rel=2)`` -> (``AP``,
    ``(rel=2)``), ``ndcg_cut_10`` -> (``ndcg_cut``, ``_10``), ``P.5,10`` -> (``P``, ``.5,10``).

    Args:
        name: one measure name.

    Returns:
        ``(head, rest)``.

    Example:
        >>> split_measure_name("ndcg_cut_10")
        ('ndcg_cut', '_10')
    """
    head = re.split(r"[@(]", name, maxsplit=1)[0]
    rest = name[len(head):]
    cutoff = re.search(r"[._]\d[\d.,]*$", head)  # trec_eval's parameters: meas_p1 / meas.p1,p2
    if cutoff and cutoff.start() > 0:
        head, rest = head[: cutoff.start()], head[cutoff.start():] + rest
    return head, rest


@functools.lru_cache(maxsize=1)
def known_measure_names() -> tuple[str, ...]:
    """Every measure name accepted alone: ir-measures' registry and the trec_eval names ir-measures computes.

    Returns:
        The names, sorted.
    """
    import ir_measures
    import pytrec_eval

    names = set(ir_measures.measures.registry)
    for trec_name in pytrec_eval.supported_measures:
        try:
            ir_measures.parse_trec_measure(trec_name)
        except ValueError:  # a trec_eval measure ir-measures does not compute: not worth suggesting
            continue
        names.add(trec_name)
    return tuple(sorted(names))


def closest_measure(name: str) -> str:
    """The known measure name closest to ``name`` (its head compared case-insensitively, its cutoff kept when
    the result parses).

    Args:
        name: an unknown measure name.

    Returns:
        The suggestion, quoted, with the canonical measure it stands for when that is spelt differently.
    """
    head, rest = split_measure_name(name)

    def similarity(candidate: str) -> tuple[float, float]:
        # case-insensitive first (MAPP is closest to map / MAP), the exact case breaks ties
        return (difflib.SequenceMatcher(None, head.lower(), candidate.lower()).ratio(),
                difflib.SequenceMatcher(None, head, candidate).ratio())

    best = max(known_measure_names(), key=similarity)
    for suggestion in (best + rest, best):
        try:
            measures = read_measure_name(suggestion)
        except ConfigError:  # the cutoff does not fit the suggested name (``map_10``): suggest the name alone
            continue
        if measures is None:
            continue
        canonical = " ".join(str(m) for m in measures)
        return repr(suggestion) + (f" ({canonical})" if canonical != suggestion else "")
    return repr(best)
