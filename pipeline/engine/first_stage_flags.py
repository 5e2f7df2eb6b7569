"""The first stage's options on the command line: ``--fs-set NAME=VALUE`` (repeatable; a field of the chosen
first stage's options dataclass, :mod:`indexes.options`), and the older per-option flags, kept as deprecated
aliases of it.

:class:`~pipeline.engine.config.RunConfig` has no field for any one first stage: its first stage's options
are ``first_stage_overrides`` (``--fs-set``) alone. Each deprecated flag is turned into an ``--fs-set`` entry
when the command line is parsed, once the chosen first stage is known (``--k1 0.9`` ->
``first_stage_overrides += ("k1=0.9",)``; with ``--first-stage hybrid``, whose BM25 options are a group,
``bm25.k1=0.9``). A flag for an option the chosen first stage does not have is refused, naming the flag, the
first stage and its options (a :class:`~pipeline.core.errors.ConfigError`: exit status 2), where these flags
used to be ignored silently. The entries keep the command line's order, so a later flag wins.

Example:
    >>> from pipeline.run import parse_config
    >>> parse_config(["--first-stage", "hybrid", "--k1", "1.2", "--fs-set", "fusion=rrf"]).first_stage_overrides
    ('bm25.k1=1.2', 'fusion=rrf')
"""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from indexes import FirstStageSettings, check_first_stage, first_stage_options
from indexes.options import FLAG, option_names, options_class

from ..core.errors import ConfigError
from ..core.options import parse_overrides

log = logging.getLogger("pipeline.engine.first_stage_flags")

#: the group of a first stage's options that holds BM25's (``hybrid``'s BM25 half)
BM25_GROUP = "bm25."


@dataclass(frozen=True)
class FirstStageAlias:
    """A deprecated flag that stands for ``--fs-set``.

    Args:
        flag: the flag (``--k1``).
        option: the option it sets (``k1``); ``None`` when the flag takes ``NAME=VALUE`` itself (``--code-set``).
        help: what the option is, for ``--help``.
        stages: ``first stage -> prefix`` of the first stages a ``NAME=VALUE`` flag applies to (``--dense-set``
            is ``dense.NAME`` for ``hybrid``); empty for an ``option`` flag, which applies to every first stage
            that has that option or a ``bm25`` group holding it.
        metavar: the value's name in ``--help``.
        switch: the flag takes no value and sets the option to true.
    """

    flag: str
    option: str | None
    help: str
    stages: Mapping[str, str] = field(default_factory=dict)
    metavar: str | None = None
    switch: bool = False

    @property
    def stands_for(self) -> str:
        """What the flag is now, e.g. ``--fs-set k1=K1``."""
        if self.option is None:
            return " / ".join(f"{FLAG} {prefix}NAME=VALUE for {name}" for name, prefix in self.stages.items())
        return f"{FLAG} {self.option}={'true' if self.switch else self.metavar}"


#: every deprecated first-stage flag, in ``--help``'s order
ALIASES = (
    FirstStageAlias("--k1", "k1", "BM25 k1", metavar="K1"),
    FirstStageAlias("--b", "b", "BM25 b, in [0, 1]", metavar="B"),
    FirstStageAlias("--fb-terms", "fb_terms", "RM3 feedback terms", metavar="N"),
    FirstStageAlias("--fb-docs", "fb_docs", "RM3 feedback documents", metavar="N"),
    FirstStageAlias("--rm3-weight", "original_query_weight", "RM3 original query weight, in [0, 1]", metavar="W"),
    FirstStageAlias("--stemmer", "stemmer", "index and query stemmer: porter, krovetz or none", metavar="NAME"),
    FirstStageAlias("--keep-stopwords", "keep_stopwords", "index and match stopwords", switch=True),
    FirstStageAlias("--code-set", None, "an option of the learned-code first stages",
                    {"codes": "", "colbert": ""}, metavar="NAME=VALUE"),
    FirstStageAlias("--dense-set", None, "an option of the dense first stage or of hybrid's dense half",
                    {"dense": "", "hybrid": "dense."}, metavar="NAME=VALUE"),
    FirstStageAlias("--hybrid-set", None, "an option of the hybrid first stage's fusion", {"hybrid": ""},
                    metavar="NAME=VALUE"),
)

#: the ``--help`` group of the deprecated flags
GROUP = f"deprecated first-stage flags (each is turned into an {FLAG} entry)"


@dataclass(frozen=True)
class PendingAlias:
    """A deprecated flag's value, held in ``first_stage_overrides`` until the command line is parsed and the
    first stage known (:func:`resolve_aliases` replaces it by its ``--fs-set`` entry)."""

    alias: FirstStageAlias
    value: str


class AliasAction(argparse.Action):
    """Appends a :class:`PendingAlias` to ``first_stage_overrides``, in the command line's order beside
    ``--fs-set``'s entries. Its default is ``--fs-set``'s (``None``: nothing given), so that code comparing
    each flag's value with its default (``pipeline.export``) sees an alias as given only when it is."""

    def __init__(self, option_strings: list[str], dest: str, alias: FirstStageAlias, **kwargs: Any):
        self.alias = alias
        super().__init__(option_strings, dest, nargs=0 if alias.switch else None, default=None, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append(PendingAlias(self.alias, "true" if self.alias.switch else values))
        setattr(namespace, self.dest, items)


def add_first_stage_aliases(parser: argparse.ArgumentParser, dest: str = "first_stage_overrides") -> None:
    """The deprecated first-stage flags (:data:`ALIASES`) on ``parser`` (an
    :class:`~pipeline.engine.cli_options.OptionParser`), each marked deprecated in ``--help`` and turned into
    an ``--fs-set`` entry of ``dest`` once the command line is parsed.

    Args:
        parser: a parser with ``--fs-set`` (``dest``) and ``--first-stage``.
        dest: the attribute of ``--fs-set``'s entries.

    Example:
        >>> from pipeline.run import build_parser
        >>> build_parser().parse_args(["--b", "0.7"]).first_stage_overrides
        ['b=0.7']
    """
    group = parser.add_argument_group(GROUP)
    for alias in ALIASES:
        group.add_argument(alias.flag, action=AliasAction, alias=alias, dest=dest, metavar=alias.metavar,
                           help=f"deprecated: {alias.stands_for} ({alias.help})"
                                + ("; repeatable" if alias.option is None else ""))
    parser.after_parsing.append(lambda namespace: resolve_aliases(namespace, dest))


def _kind(spec: str) -> str:
    """The registered name a first-stage spec stands for as far as its options go (``bm25:INDEX``: ``bm25``)."""
    return spec if spec.startswith("run:") else spec.partition(":")[0]


def known_options(spec: str) -> list[str]:
    """Every option name of first stage ``spec`` (``auto``: ``bm25``'s; ``run:PATH``: none).

    Raises:
        ConfigError: ``spec`` names no first stage (as ``--first-stage`` would say).
    """
    try:
        check_first_stage(spec)
    except ConfigError as error:
        raise ConfigError(f"--first-stage: {error}") from None
    if spec.startswith("run:"):
        return []
    from indexes.registry import factory_of

    cls = options_class(factory_of(spec))
    return option_names(cls) if cls is not None else []


def option_entry(alias: FirstStageAlias, spec: str, value: str) -> str:
    """The ``--fs-set`` entry ``alias`` given ``value`` stands for with first stage ``spec``, its value checked.

    Args:
        alias: the deprecated flag.
        spec: the chosen first stage (``--first-stage``).
        value: the flag's value (``NAME=VALUE`` for ``--code-set`` and the like).

    Returns:
        ``NAME=VALUE`` as ``--fs-set`` takes it.

    Raises:
        ConfigError: the first stage has no such option (naming the flag, the first stage and its options),
            or refuses the value.

    Example:
        >>> option_entry(ALIASES[0], "hybrid", "1.2")
        'bm25.k1=1.2'
    """
    if alias.option is None:
        kind = _kind(spec)
        if kind not in alias.stages:
            raise ConfigError(f"{alias.flag} applies to --first-stage {' or '.join(alias.stages)}, not {spec!r} "
                              f"(it is deprecated: use {FLAG} NAME=VALUE, the chosen first stage's options)")
        name, sep, text = value.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{alias.flag} {value!r}: expected name=value")
        entry = f"{alias.stages[kind]}{name.strip()}={text.strip()}"
    else:
        known = known_options(spec)
        name = next((n for n in (alias.option, BM25_GROUP + alias.option) if n in known), None)
        if name is None:
            shown = f"{spec!r}" if spec != "auto" else "'auto' (checked as 'bm25')"
            raise ConfigError(f"{alias.flag}: first stage {shown} has no option {alias.option!r} ({alias.flag} is a "
                              f"deprecated alias of {FLAG} {alias.option}=VALUE); its options: "
                              f"{', '.join(known) or 'none'}")
        entry = f"{name}={value}"
    try:  # now, so that the error names the flag that was typed
        first_stage_options(spec, FirstStageSettings(parse_overrides([entry], flag=FLAG)))
    except ConfigError as error:
        raise ConfigError(f"{alias.flag} {value}: {error}") from None
    return entry


def resolve_aliases(namespace: argparse.Namespace, dest: str = "first_stage_overrides") -> None:
    """Replace the deprecated flags' values in ``namespace.<dest>`` by their ``--fs-set`` entries for the
    chosen first stage (``namespace.first_stage``, default ``auto``), logging that each is deprecated.

    Raises:
        ConfigError: as :func:`option_entry`.
    """
    items = getattr(namespace, dest, None) or []
    if not any(isinstance(item, PendingAlias) for item in items):
        return
    spec = getattr(namespace, "first_stage", None) or "auto"
    resolved = []
    for item in items:
        if isinstance(item, PendingAlias):
            entry = option_entry(item.alias, spec, item.value)
            typed = item.alias.flag if item.alias.switch else f"{item.alias.flag} {item.value}"
            log.warning("%s is deprecated: it is %s %s", typed, FLAG, entry)
            item = entry
        resolved.append(item)
    setattr(namespace, dest, resolved)


#: the names :func:`pipeline.pyterrier.first_stage` took before first stages declared options: name -> flag
LEGACY_NAMES = {alias.option if alias.option != "original_query_weight" else "rm3_weight": alias
                for alias in ALIASES if alias.option is not None}


def settings_of(spec: str, options: Mapping[str, Any]) -> FirstStageSettings:
    """The :class:`FirstStageSettings` of first stage ``spec`` from ``name -> value`` (values typed or as
    text): the names of its options dataclass (dotted for a group: ``dense.encoder``), and the older names
    :data:`LEGACY_NAMES` (``rm3_weight``; ``k1`` for ``hybrid``'s ``bm25.k1``), checked as ``--fs-set`` checks
    them.

    Raises:
        ConfigError: an unknown name (with the closest known one and every known one) or a refused value.

    Example:
        >>> settings_of("bm25+rm3", {"k1": 1.2, "rm3_weight": 0.3}).options
        {'k1': 1.2, 'original_query_weight': 0.3}
    """
    known = known_options(spec) if options else []
    given: dict[str, Any] = {}
    for name, value in options.items():
        key = name.replace("-", "_")
        if key not in known and key in LEGACY_NAMES:
            alias = LEGACY_NAMES[key]
            key = next((n for n in (alias.option, BM25_GROUP + alias.option) if n in known), key)
        given[key] = value
    settings = FirstStageSettings(options=given)
    first_stage_options(spec, settings)
    return settings
