"""The app's one least-recently-used map: a leaf module (it imports nothing of the app), so
every room of the app may use it — the store, the decoders, the workers, the panels' caches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LRU:
    """A small thread-safe least-recently-used map, bounded by ``maxsize`` entries (so uploads,
    sessions or results cannot pile up); reading or writing a key makes it the most recent."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` (now the most recent), or ``default`` when it is absent."""
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: Any) -> list[tuple[Hashable, Any]]:
        """Keep ``value`` under ``key`` as the most recent entry.

        Returns:
            The ``(key, value)`` pairs pushed out to stay within ``maxsize``, oldest first (a
            holder that must free what it drops, as the decoders do, frees these).
        """
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            gone = []
            while len(self._items) > self.maxsize:
                gone.append(self._items.popitem(last=False))
            return gone

    def pop(self, key: Hashable, default: Any = None) -> Any:
        """Remove ``key``; its value, or ``default`` when it was absent."""
        with self._lock:
            return self._items.pop(key, default)

    def clear(self) -> list[Any]:
        """Remove every entry; their values, oldest first."""
        with self._lock:
            gone, self._items = list(self._items.values()), OrderedDict()
            return gone

    def keys(self) -> list[Hashable]:
        """A snapshot of the keys, oldest first (the next to be pushed out first)."""
        with self._lock:
            return list(self._items)

    def items(self) -> list[tuple[Hashable, Any]]:
        """A snapshot of the ``(key, value)`` pairs, oldest first."""
        with self._lock:
            return list(self._items.items())

    def values(self) -> list[Any]:
        """A snapshot of the values, oldest first."""
        with self._lock:
            return list(self._items.values())

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)
