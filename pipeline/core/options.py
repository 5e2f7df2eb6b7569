"""``name=value`` options: parsed from ``--set``/``--config`` and applied to configuration dataclasses."""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from .errors import ConfigError, PipelineError
from .suggest import hint


#: how a value of each type is asked for in an error
EXPECTED = {bool: "true or false", int: "an integer", float: "a number"}


def apply_overrides(configs: Sequence[Any], overrides: Mapping[str, Any]) -> None:
    """Set ``name=value`` options on whichever config dataclass has the field (values are parsed from
    strings to the field's type). An option no config knows, a value of the wrong type or one the config's
    own checks refuse is a :class:`ConfigError` naming the option (and, when unknown, the known ones)."""
    known = {f.name: config for config in configs for f in dataclasses.fields(config)}
    refused = []
    for name, value in overrides.items():
        key = _known_key(name, known, "model option")
        config = known[key]
        current = getattr(config, key)
        setattr(config, key, _coerce(value, current, name))
        if _refusal(config) is not None:
            refused.append((name, value, config))
    # checked again once every option is set: a check across fields (distill_weight needs a teacher) must not
    # depend on the order the options were given in
    for name, value, config in refused:
        error = _refusal(config)
        if error is not None:  # the configs check their own values (a traceback-free message either way)
            raise ConfigError(f"option {name}={value!r}: {error}")


def _refusal(config: Any) -> Exception | None:
    """The error ``config``'s own checks (``__post_init__``) raise for its current values, else ``None``."""
    if not hasattr(config, "__post_init__"):
        return None
    try:
        config.__post_init__()
    except (ValueError, PipelineError) as error:  # ConfigError included
        return error
    return None


def _known_key(name: str, known: Collection[str], label: str) -> str:
    """The field ``name`` stands for (dashes read as underscores), or a :class:`ConfigError` for an unknown
    ``label`` naming the closest known field and every one."""
    key = name.replace("-", "_")
    if key not in known:
        raise ConfigError(f"unknown {label} {name!r}; {hint(key, known)}known: {', '.join(sorted(known))}")
    return key


def _coerce(value: Any, current: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if isinstance(current, bool):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if isinstance(current, int):
            return int(value)
        if isinstance(current, float):
            return float(value)
    except ValueError:
        raise ConfigError(f"option {name}={value!r}: expected {EXPECTED.get(type(current), type(current).__name__)}") from None
    return value


def parse_overrides(items: Sequence[str] | None, config_file: str | Path | None = None,
                    flag: str = "--set") -> dict[str, Any]:
    """``--config FILE`` (JSON or YAML mapping) then ``--set name=value`` items (later ones win); a missing
    or malformed file or item is a :class:`ConfigError`."""
    options: dict[str, Any] = {}
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"--config {path}: config file not found")
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise ConfigError(f"--config {path}: not valid JSON/YAML ({error})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"--config {path}: expected a mapping of option names to values")
        options.update(loaded)
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{flag} {item!r}: expected name=value")
        options[name.strip()] = value.strip()
    return options


def _field_type(annotation: Any) -> Any:
    """``int | None`` -> ``int``; a plain type stays itself."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        present = [a for a in typing.get_args(annotation) if a is not type(None)]
        return present[0] if len(present) == 1 else str
    return annotation


def build_config(config_class: type, overrides: Mapping[str, Any], label: str = "option") -> Any:
    """``config_class(**overrides)`` for a (possibly frozen) dataclass, with values given as text converted
    to each field's type (``none`` for an optional field). An unknown name (with the closest known one), a
    value of the wrong type or one the class's own checks refuse is a :class:`ConfigError` naming it."""
    hints = typing.get_type_hints(config_class)
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    values = {}
    for name, value in overrides.items():
        key = _known_key(name, fields, label)
        kind = _field_type(hints[key])
        optional = kind is not hints[key]
        if isinstance(value, str) and optional and value.lower() in ("none", "null", ""):
            values[key] = None
        elif isinstance(value, str) and kind in (bool, int, float):
            try:
                values[key] = _coerce(value, kind(), name)
            except ConfigError as error:
                raise ConfigError(f"{label} {str(error).removeprefix('option ')}") from None
        else:
            values[key] = value
    try:
        return config_class(**values)
    except (TypeError, ValueError, PipelineError) as error:  # ConfigError included
        raise ConfigError(f"{label}s: {error}") from None
