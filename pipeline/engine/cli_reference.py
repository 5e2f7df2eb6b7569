"""The command-line reference of ``python -m pipeline.run`` (``docs/cli.md``), generated from
:class:`pipeline.engine.config.RunConfig`'s fields: one table per group of flags, each row the flag, its value type,
its default and its help, exactly what :mod:`pipeline.engine.cli_options` builds the parser from. A test fails when
the page is stale; ``python -m pipeline.engine.cli_reference --update docs/cli.md`` rewrites it.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path

from .cli_options import flag, plain_text, value_type

HEADER = """# Command-line reference: `python -m pipeline.run` (`rerank-run`)

Generated from `pipeline.engine.config.RunConfig` by `python -m pipeline.engine.cli_reference --update docs/cli.md`
(`tests/test_docs.py` fails when this page is stale). Every flag is a field of `RunConfig` with the same
name (`--first-stage` is `first_stage`; `--fs-set` is `first_stage_overrides`), so a notebook sets the same
options: `RunConfig(dataset="cranfield", reranker="knrm", seed=1)`; the deprecated aliases at the end are
`--fs-set` entries. `pipeline.train`, `pipeline.serve` and
`pipeline.classify` take the flags of the groups they need; each command's `--help` lists its own.
"""


def _type_name(annotation) -> str:
    kind = value_type(annotation)
    if kind is bool:
        return "switch"
    if kind is tuple:
        return "repeatable"
    if kind is Path:
        return "path"
    return getattr(kind, "__name__", str(kind))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(config_field: dataclasses.Field) -> str:
    if config_field.default is not dataclasses.MISSING:
        value = config_field.default
    elif config_field.default_factory is not dataclasses.MISSING:
        value = config_field.default_factory()
    else:
        return "(required)"
    if value is None or value is False or value == ():
        return ""
    return f"`{value}`"


def render() -> str:
    """The page: :data:`HEADER`, then one table per flag group, in the order the fields are declared.

    Returns:
        The Markdown text of ``docs/cli.md``.

    Example:
        >>> "| `--reranker` |" in render()
        True
    """
    from .config import RunConfig

    hints = typing.get_type_hints(RunConfig)
    groups: dict[str, list[str]] = {}
    for config_field in dataclasses.fields(RunConfig):
        metadata = config_field.metadata
        if metadata.get("cli", True) is False:
            continue
        help_text = metadata.get("help", "")
        help_text = help_text() if callable(help_text) else help_text
        row = (f"| `{flag(config_field)}` | {_type_name(hints[config_field.name])} | {_default(config_field)} "
               f"| {_cell(plain_text(help_text) or '')} |")
        groups.setdefault(metadata.get("group", "general"), []).append(row)
    parts = [HEADER]
    for group, rows in groups.items():
        parts.append(f"## {group}\n\n| flag | value | default | what it does |\n|---|---|---|---|\n" + "\n".join(rows))
    parts.append(deprecated_aliases())
    return "\n\n".join(parts) + "\n"


def deprecated_aliases() -> str:
    """The page's last section: the deprecated first-stage flags, each with the ``--fs-set`` entry it stands
    for (:data:`pipeline.engine.first_stage_flags.ALIASES`; no field of ``RunConfig``)."""
    from .first_stage_flags import ALIASES, FLAG

    lines = [f"## deprecated aliases\n\nOlder flags, kept working: each becomes an `{FLAG}` entry of the chosen "
             "first stage when the command line is parsed (`hybrid`: of its `bm25` group for the BM25 flags), in "
             "command-line order; a flag for an option the first stage does not have is an error (exit status 2)."
             "\n"]
    for alias in ALIASES:
        typed = alias.flag if alias.switch else f"{alias.flag} {alias.metavar}"
        lines.append(f"- `{typed}`: `{alias.stands_for}` ({alias.help})" if alias.option is not None else
                     f"- `{typed}`: " + ", ".join(f"`{FLAG} {prefix}NAME=VALUE` for `{name}`"
                                                  for name, prefix in alias.stages.items()) + f" ({alias.help})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``--update PATH`` writes the page; without it the page is printed."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.engine.cli_reference", description=__doc__)
    parser.add_argument("--update", type=Path, help="write the reference to this file (e.g. docs/cli.md)")
    args = parser.parse_args(argv)
    text = render()
    if args.update:
        from ..core.atomic import write_text

        write_text(args.update, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
