"""First stages' options on the same footing as the re-rankers': each registered first stage declares its
own options dataclass, set from the command line with ``--fs-set NAME=VALUE`` (repeatable) and checked by
name before any work.

A first stage's factory (``(dataset, settings) -> Retriever``, see :mod:`indexes.registry`) declares its
options with an ``Options`` attribute: a dataclass whose fields are the option names (``bm25``:
:class:`BM25Options`, ``bm25+rm3``: :class:`RM3Options`, ``bm25s``: :class:`indexes.bm25s.Bm25sOptions`,
``dense``: :class:`indexes.dense.DenseOptions`, ``hybrid``: :class:`indexes.hybrid.HybridStageOptions`,
``codes`` / ``colbert``: :class:`indexes.codes.CodeOptions`, ``shipped``: :class:`NoOptions`). A field that
is itself a dataclass is a group of options set with a dotted name (``hybrid``'s ``dense.encoder``,
``bm25.k1``). The class may define ``from_options(mapping)`` (a class method returning an instance, raising
a :class:`~pipeline.core.errors.ConfigError` for a bad option); without it :func:`build_options` builds it
from the fields, converting text values to each field's type. A factory without ``Options`` takes no
options (any given is an error).

The factory then receives a :class:`FirstStageSettings` whose ``options`` is the built instance, or ``None``
when no option was given (the first stage's defaults; ``codes`` / ``colbert``: the dataset's most recent
index of that kind).

Example:
    >>> RM3Options.from_options({"k1": "1.2", "fb_terms": "20"}).fb_terms
    20
    >>> options_label(BM25Options(k1=1.2))  # a run name's part: a hash of the options that are not defaults
    'opts.d65f23'
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pipeline.core.errors import ConfigError
from pipeline.core.options import build_config

#: the command line's flag for a first stage's options
FLAG = "--fs-set"
#: Lucene's stemmers (``none``: no stemming)
STEMMERS = ("porter", "krovetz", "none")


def _check_range(name: str, value: float, low: float, high: float | None = None) -> None:
    if value < low or (high is not None and value > high):
        allowed = f"in [{low:g}, {high:g}]" if high is not None else f"at least {low:g}"
        raise ConfigError(f"{name} must be {allowed}, got {value}")


class FirstStageOptions:
    """What the built-in options classes share: :meth:`from_options` (checked by name, with the closest known
    name for a typo) and :meth:`to_options` (its inverse). A plugin's options class need not inherit it."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any]):
        """An instance from ``name -> value`` (values as text or typed; dotted names for grouped options).

        Args:
            options: the options given; the others keep their defaults.

        Returns:
            The options, checked.

        Raises:
            ConfigError: an unknown name (with the closest known one) or a value the options refuse.

        Example:
            >>> BM25Options.from_options({"k1": "1.2"}).k1
            1.2
        """
        return build_options(cls, options)

    def to_options(self) -> dict[str, Any]:
        """Every option as ``name -> value`` (dotted names for groups): ``from_options`` of it is equal.

        Returns:
            The options, the defaults included.

        Example:
            >>> BM25Options.from_options(BM25Options(b=0.7).to_options()) == BM25Options(b=0.7)
            True
        """
        return options_dict(self)


@dataclass(frozen=True)
class NoOptions(FirstStageOptions):
    """The options of a first stage that takes none (``shipped``, a given run)."""


@dataclass(frozen=True)
class BM25Options(FirstStageOptions):
    """Options of ``bm25`` (Lucene): analysis (the index is built per analysis) and the BM25 parameters."""

    k1: float = field(default=0.9, metadata={"help": "BM25 k1 (at least 0)"})
    b: float = field(default=0.4, metadata={"help": "BM25 b, in [0, 1]"})
    stemmer: str = field(default="porter", metadata={"help": "index and query stemmer: porter, krovetz or none"})
    keep_stopwords: bool = field(default=False, metadata={"help": "index and match stopwords"})

    def __post_init__(self):
        _check_range("k1", self.k1, 0)
        _check_range("b", self.b, 0, 1)
        if self.stemmer not in STEMMERS:
            raise ConfigError(f"stemmer: unknown stemmer {self.stemmer!r}; choose one of {', '.join(STEMMERS)}")


@dataclass(frozen=True)
class RM3Options(BM25Options):
    """Options of ``bm25+rm3``: :class:`BM25Options` and RM3's pseudo-relevance feedback."""

    fb_terms: int = field(default=10, metadata={"help": "RM3 feedback terms (at least 1)"})
    fb_docs: int = field(default=10, metadata={"help": "RM3 feedback documents (at least 1)"})
    original_query_weight: float = field(default=0.5, metadata={"help": "RM3 original query weight, in [0, 1]"})

    def __post_init__(self):
        super().__post_init__()
        _check_range("fb_terms", self.fb_terms, 1)
        _check_range("fb_docs", self.fb_docs, 1)
        _check_range("original_query_weight", self.original_query_weight, 0, 1)


@dataclass(frozen=True)
class FirstStageSettings:
    """What a first stage is built with: its options and where and how (not what) it computes.

    Args:
        options: the first stage's options: an instance of its ``Options`` class, or ``name -> value``
            (``--fs-set``; every name must be one of its options), or ``None``/empty (its defaults).
        aliases: ``name -> value`` from the older per-option flags (``--k1``, ``--stemmer``, ...): each applies
            to the first stages that have that option (``hybrid``: to its ``bm25`` group) and is ignored by
            the others; ``options`` wins over them.
        threads: CPU threads of the Lucene searcher and indexer, and of the bm25s search.
        index_root: where indexes are cached (default: ``PIPELINE_INDEX_DIR``, else
            ``<home>/indexes/cache/<kind>``).

    Example:
        >>> make_first_stage("bm25", dataset, FirstStageSettings({"k1": "1.2"}))  # doctest: +SKIP
    """

    options: Any = None
    aliases: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 2
    index_root: Path | None = None


def options_class(factory: Any) -> type | None:
    """The options dataclass a first stage's factory declares.

    Args:
        factory: a first stage's factory.

    Returns:
        Its ``Options`` attribute, or ``None`` when it takes no options.
    """
    return getattr(factory, "Options", None)


def _groups(cls: type) -> dict[str, type]:
    """Fields of ``cls`` that are themselves options dataclasses: ``name -> class``."""
    groups = {}
    for option in dataclasses.fields(cls):
        default = option.default_factory() if option.default_factory is not dataclasses.MISSING else option.default
        if dataclasses.is_dataclass(default):
            groups[option.name] = type(default)
    return groups


def option_names(cls: type) -> list[str]:
    """Every option name of ``cls``, groups' as ``group.name``.

    Args:
        cls: an options dataclass.

    Returns:
        The names, in field order.

    Example:
        >>> option_names(BM25Options)
        ['k1', 'b', 'stemmer', 'keep_stopwords']
    """
    groups = _groups(cls)
    names = []
    for option in dataclasses.fields(cls):
        if option.name in groups:
            names += [f"{option.name}.{inner}" for inner in option_names(groups[option.name])]
        else:
            names.append(option.name)
    return names


def build_options(cls: type, options: Mapping[str, Any], label: str = "option"):
    """``cls`` (an options dataclass) from ``name -> value``; dotted names set a group's options.

    Args:
        cls: the options dataclass.
        options: the given options (text values are converted to each field's type).
        label: how an option is called in errors.

    Returns:
        An instance of ``cls``.

    Raises:
        ConfigError: naming an unknown option (with the closest known one) or the option a check refuses.
    """
    from pipeline.core.suggest import hint

    groups = _groups(cls)
    known = option_names(cls)
    if options and not known:
        raise ConfigError(f"takes no options (given: {', '.join(options)})")
    plain, grouped = {}, {name: {} for name in groups}
    for name, value in options.items():
        key = name.replace("-", "_")
        group, dot, inner = key.partition(".")
        if key not in known and not (dot and group in groups and inner in option_names(groups[group])):
            raise ConfigError(f"unknown {label} {name!r}; {hint(key, known)}known: {', '.join(known)}")
        if dot:
            grouped[group][inner] = value
        else:
            plain[key] = value
    for group, given in grouped.items():
        if given:
            plain[group] = build_options(groups[group], given, f"{label} {group}.")
    if not plain:
        return cls()
    return build_config(cls, plain, label=label)


def make_options(cls: type | None, name: str, options: Mapping[str, Any] | None):
    """The options of first stage ``name`` from ``name -> value``.

    Built by ``cls.from_options`` where it has one, else by :func:`build_options`; a first stage without an
    options class refuses any option.

    Args:
        cls: the first stage's options class, or ``None`` when it takes no options.
        name: the first stage's name, for messages.
        options: the given options (``None``: none).

    Returns:
        An instance of ``cls``, or ``None`` when ``cls`` is ``None``.

    Raises:
        ConfigError: as :func:`build_options`, or an option given to a first stage that takes none.
    """
    options = dict(options or {})
    if cls is None:
        if options:
            raise ConfigError(f"first stage {name!r} takes no options (given: {', '.join(options)})")
        return None
    maker = getattr(cls, "from_options", None)
    try:
        return maker(options) if maker is not None else build_options(cls, options)
    except ConfigError as error:
        raise ConfigError(f"first stage {name!r}: {error}") from None


def options_dict(options: Any) -> dict[str, Any]:
    """Every option of ``options`` as ``name -> value``, groups' with dotted names.

    Args:
        options: an options dataclass instance, or ``None``.

    Returns:
        The options (empty for ``None``).
    """
    if options is None:
        return {}
    values = {}
    for option in dataclasses.fields(options):
        value = getattr(options, option.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            values.update({f"{option.name}.{k}": v for k, v in options_dict(value).items()})
        else:
            values[option.name] = value
    return values


def changed_options(options: Any) -> dict[str, Any]:
    """The options of ``options`` that differ from its class's defaults.

    Args:
        options: an options dataclass instance, or ``None``.

    Returns:
        ``name -> value`` of the changed options (empty for ``None``).
    """
    if options is None:
        return {}
    defaults = options_dict(type(options)())
    return {name: value for name, value in options_dict(options).items() if defaults.get(name) != value}


def options_label(options: Any) -> str:
    """A run name's part for ``options``.

    Args:
        options: an options dataclass instance, or ``None``.

    Returns:
        ``opts.<6 hex digits>`` hashing the options that are not the defaults, ``""`` when all are.
    """
    changed = changed_options(options)
    if not changed:
        return ""
    text = json.dumps(changed, sort_keys=True, default=str)
    return f"opts.{hashlib.sha1(text.encode()).hexdigest()[:6]}"


def stage_options(name: str, factory: Any, settings: FirstStageSettings):
    """The options first stage ``name`` gets from ``settings``.

    Args:
        name: the first stage's name, for messages.
        factory: its factory (``None`` for a given run, which takes no options).
        settings: the options given, and the older per-option flags as aliases.

    Returns:
        Its ``Options`` built from ``settings.aliases`` (those it has) and ``settings.options``, or ``None``
        when neither gives one.

    Raises:
        ConfigError: an option the first stage does not have or a value it refuses.
    """
    cls = options_class(factory)
    given = settings.options
    if cls is not None and (isinstance(given, cls) or (dataclasses.is_dataclass(given) and not isinstance(given, type)
                                                        and issubclass(cls, type(given)))):
        return given  # built already (a subclass's factory, such as colbert's, takes its base class too)
    if given is not None and not isinstance(given, Mapping):
        raise ConfigError(f"first stage {name!r}: options must be a {cls.__name__ if cls else 'mapping'} "
                          f"or a mapping, got {type(given).__name__}")
    merged = {}
    if cls is not None and settings.aliases:
        known = set(option_names(cls))
        for alias, value in settings.aliases.items():
            if alias in known:
                merged[alias] = value
            elif f"bm25.{alias}" in known:  # a first stage with a BM25 half (hybrid)
                merged[f"bm25.{alias}"] = value
    merged.update(given or {})
    if not merged:
        make_options(cls, name, {})  # a first stage without options accepts none; nothing else to check
        return None
    return make_options(cls, name, merged)
