"""Command-line flags derived from a config dataclass (such as :class:`pipeline.config.RunConfig`): one flag
per field, typed by the field's annotation, with the field's default and help, so that the command line
and the API cannot drift apart. Bad command lines are :class:`~pipeline.core.errors.ConfigError` s like
every other bad option."""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from .core.errors import ConfigError


class OptionParser(argparse.ArgumentParser):
    """An argument parser whose errors (an unknown flag, a value of the wrong type) are
    :class:`ConfigError` s, printed by the command line as ``error: ...`` (exit status 2) like any bad option."""

    def error(self, message: str) -> typing.NoReturn:
        """Raise instead of printing the usage and exiting (``--help`` still prints and exits)."""
        raise ConfigError(f"{message} (see {self.prog} --help)")


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
    metadata, see :func:`pipeline.config.option`): ``bool`` fields are switches, ``tuple`` fields repeatable,
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
