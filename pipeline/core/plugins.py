"""Registries by name that other installed packages can extend through entry points.

A :class:`Registry` maps names to targets: a ``"module:attribute"`` string imported on first use (so that
listing the names never imports torch or the JVM), or the object itself. Besides what is registered in
process, it lists the entry points of its group, e.g. in a plugin package's ``pyproject.toml``::

    [project.entry-points."neural_rerank.rerankers"]
    my-ranker = "my_package.ranker:MyRanker"

Entry points are read when a name is first looked up or listed; one registered in process wins over an entry
point of the same name.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Iterable

from .errors import ConfigError, PipelineError


class Registry:
    """Names -> objects of one role (``kind``, e.g. "re-ranker"), extended by entry points of ``group``.

    Args:
        kind: what the objects are, for messages.
        group: the entry-point group plugins declare their objects in.
        builtin: the built-in names and their targets.

    Example:
        >>> registry = Registry("widget", "no_such_group", {"plain": "pathlib:Path"})
        >>> registry.names(), registry.load("plain").__name__
        (['plain'], 'Path')
    """

    def __init__(self, kind: str, group: str, builtin: dict[str, Any] | None = None):
        self.kind = kind
        self.group = group
        self._entries: dict[str, Any] = dict(builtin or {})

    def register(self, name: str, target: Any) -> None:
        """Add ``name``.

        Args:
            name: the name.
            target: ``"module:attribute"`` (imported on first use) or the object.

        Raises:
            PipelineError: the name is registered with another target (a plugin must not silently replace a
                built-in).
        """
        if name in self._entries and self._entries[name] != target:
            raise PipelineError(f"{self.kind} {name!r} is already registered as {self._entries[name]!r}")
        self._entries[name] = target

    def _plugins(self) -> dict[str, Any]:
        return {point.name: point for point in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Every name: registered in process and from installed packages' entry points.

        Returns:
            The names, sorted.
        """
        return sorted(set(self._entries) | set(self._plugins()))

    def __contains__(self, name: str) -> bool:
        return name in self._entries or name in self._plugins()

    def load(self, name: str, known: Iterable[str] | None = None) -> Any:
        """The object registered under ``name``.

        Args:
            name: the name.
            known: the names an error lists (default: :meth:`names`).

        Returns:
            The object, imported when it was registered as ``"module:attribute"``.

        Raises:
            ConfigError: an unknown name; the message lists the known ones.
            PipelineError: a plugin's entry point that cannot be loaded.
        """
        if name in self._entries:
            target = self._entries[name]
            if not isinstance(target, str):
                return target
            module, _, attribute = target.partition(":")
            return getattr(importlib.import_module(module), attribute)
        point = self._plugins().get(name)
        if point is None:
            from .suggest import unknown_name

            raise ConfigError(unknown_name(self.kind, name, list(known if known is not None else self.names())))
        try:
            return point.load()
        except Exception as error:  # a broken plugin must name itself, not crash somewhere inside it
            package = point.dist.name if point.dist is not None else "an installed package"
            raise PipelineError(f"{self.kind} {name!r} from {package} ({point.value}) cannot be loaded: "
                                f"{type(error).__name__}: {error}") from error
