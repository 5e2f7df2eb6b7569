"""A bounded least-recently-used cache, the one every re-ranker keeps prepared texts in (tokens, encoder
states): bounded, so that a long-lived process (``pipeline.serve``) does not grow without end."""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable


class LRUCache:
    """A bounded mapping that forgets the least recently used entry first (``maxsize`` 0 keeps nothing).

    Args:
        maxsize: the most entries kept.

    Example:
        >>> cache = LRUCache(1)
        >>> cache.put("a", 1); cache.put("b", 2)
        >>> cache.get("a"), cache.get("b"), (cache.hits, cache.misses)
        (None, 2, (1, 1))
    """

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, default=None):
        """The value of ``key``, now the most recently used.

        Args:
            key: the key.
            default: what a missing key gives.

        Returns:
            The value, or ``default``.
        """
        try:
            value = self._data[key]
        except KeyError:
            self.misses += 1
            return default
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value) -> None:
        """Keep ``value`` under ``key``, forgetting the least recently used entries beyond ``maxsize``.

        Args:
            key: the key.
            value: the value.
        """
        if self.maxsize <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def clear(self) -> None:
        """Forget everything."""
        self._data.clear()

    def __contains__(self, key) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)
