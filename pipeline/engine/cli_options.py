"""Command-line flags derived from a config dataclass (such as :class:`pipeline.engine.config.RunConfig`): one flag
per field, typed by the field's annotation, with the field's default and help, so that the command line
and the API cannot drift apart. Bad command lines are :class:`~pipeline.core.errors.ConfigError` s like
every other bad option."""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError


#: the console scripts' prefix (pyproject.toml): a program started under such a name is called by it
CONSOLE_PREFIX = "rerank-"

#: reStructuredText markup that docstrings carry into descriptions and help (``x``, :class:`y`, `z`)
_RST = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``|`([^`]+)`")


def plain_text(text: str | None) -> str | None:
    """``text`` without reStructuredText markup: ``x`` -> x, :class:`~a.B` -> a.B (a terminal shows no RST)."""
    if text is None:
        return None
    return _RST.sub(lambda match: next(group for group in match.groups() if group is not None), text)


def command_name(module_prog: str) -> str:
    """The name a command calls itself: the console script's (``rerank-run``) when started as one, else
    ``module_prog`` (``python -m pipeline.run``), so that ``usage:`` shows what the user typed."""
    started = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return started if started.startswith(CONSOLE_PREFIX) else module_prog


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, as ``(default: X)``, unless its text already says what the
    default is or there is none to show (``None``: not given; a switch that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text.lower() or default is None or default is False or default == ()
                or default is argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class OptionParser(argparse.ArgumentParser):
    """An argument parser whose errors (an unknown flag, a value of the wrong type) are
    :class:`ConfigError` s, printed by the command line as ``error: ...`` (exit status 2) like any bad option;
    an unknown flag gets the closest known one (:mod:`pipeline.core.suggest`). ``prog`` is the console
    script's name when the command was started as one (:func:`command_name`), every default is shown in
    ``--help`` (:class:`DefaultsHelpFormatter`) and RST markup is removed from the description and help."""

    def __init__(self, *args: Any, **kwargs: Any):
        if kwargs.get("prog"):
            kwargs["prog"] = command_name(kwargs["prog"])
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        if kwargs.get("description"):
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, **kwargs)
        #: called with the parsed namespace, in order, before :meth:`parse_args` returns it (e.g. to turn the
        #: deprecated first-stage flags into ``--fs-set`` entries once ``--first-stage`` is known)
        self.after_parsing: list[typing.Callable[[argparse.Namespace], None]] = []

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """As argparse's, with RST markup removed from ``help``."""
        if isinstance(kwargs.get("help"), str):
            kwargs["help"] = plain_text(kwargs["help"])
        return super().add_argument(*args, **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any):
        """As argparse's; the group's ``add_argument`` removes RST markup from ``help`` too."""
        group = super().add_argument_group(*args, **kwargs)
        plain = group.add_argument

        def add_argument(*names: Any, **options: Any) -> argparse.Action:
            if isinstance(options.get("help"), str):
                options["help"] = plain_text(options["help"])
            return plain(*names, **options)

        group.add_argument = add_argument
        return group

    def parse_args(self, args: typing.Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        """As argparse's, with unknown flags reported first (argparse would report a missing required
        option first and lose the typo that caused it: ``--qrles q`` -> did you mean --qrels?), then each of
        :attr:`after_parsing` applied to the result (their errors are :class:`ConfigError` s too)."""
        argv = list(sys.argv[1:] if args is None else args)
        known = self._option_string_actions
        for token in argv:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if (name.startswith("--") and name not in known
                    and not (self.allow_abbrev and any(option.startswith(name) for option in known))):
                self.error(f"unrecognized arguments: {name}")
        parsed = super().parse_args(argv, namespace)
        for finish in self.after_parsing:
            finish(parsed)
        return parsed

    def error(self, message: str) -> typing.NoReturn:
        """Raise instead of printing the usage and exiting (``--help`` still prints and exits); an unknown
        flag is followed by the closest known one (``--datset`` -> did you mean --dataset?)."""
        from ..core.suggest import flag_hint

        raise ConfigError(f"{flag_hint(message, self._option_string_actions)} (see {self.prog} --help)")


def value_type(annotation: Any) -> Any:
    """The type a flag converts its text to: ``int | None`` -> ``int``, ``tuple[str, ...]`` -> ``tuple``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        present = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(present) != 1:
            raise TypeError(f"a flag needs one type, not {annotation}")
        annotation = present[0]
    return typing.get_origin(annotation) or annotation


def flag(config_field: dataclasses.Field) -> str:
    """The flag of a field: its ``flag`` metadata, else ``--`` and its name with ``-`` for ``_``."""
    return config_field.metadata.get("flag") or "--" + config_field.name.replace("_", "-")


def add_config_arguments(parser: argparse.ArgumentParser, config_class: type,
                         exclude: typing.Collection[str] = ()) -> None:
    """One flag per field of ``config_class`` (a dataclass whose fields carry ``help`` and ``group``
    metadata, see :func:`pipeline.engine.config.option`): ``bool`` fields are switches, ``tuple`` fields repeatable,
    ``Path`` fields paths; the parsed attribute is the field's name and its default the field's. Fields
    named in ``exclude`` (and those whose ``cli`` metadata is false) get no flag."""
    hints = typing.get_type_hints(config_class)
    groups: dict[str, Any] = {}
    for config_field in dataclasses.fields(config_class):
        metadata = config_field.metadata
        if metadata.get("cli", True) is False or config_field.name in exclude:  # not this command's flag
            continue
        group_name = metadata.get("group", "general")
        if group_name == "general":
            target = parser
        else:
            target = groups.setdefault(group_name, parser.add_argument_group(group_name))
        help_text = metadata.get("help", "")
        keywords: dict[str, Any] = {"dest": config_field.name,
                                    "help": help_text() if callable(help_text) else help_text}
        if "metavar" in metadata:
            keywords["metavar"] = metadata["metavar"]
        kind = value_type(hints[config_field.name])
        if kind is bool:
            keywords.update(action="store_true", default=config_field.default)
        elif kind is tuple:
            # argparse appends to a copy of a list default: ``None`` here, the field's () once in the config
            keywords.update(action="append", default=None)
        else:
            keywords.update(type=str if kind is Path else kind, default=config_field.default)
        target.add_argument(flag(config_field), **keywords)
