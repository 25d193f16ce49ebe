"""The app's one LRU map (attnviz.app.lru): bounded, most recent kept, what it drops handed back."""

from __future__ import annotations

import threading
from pathlib import Path

from attnviz.app.decoders import DecoderCache
from attnviz.app.lru import LRU


def test_lru_keeps_the_most_recent_and_hands_back_what_it_drops():
    cache = LRU(2)
    assert cache.put("a", 1) == [] and cache.put("b", 2) == []
    assert cache.get("a") == 1  # "a" is now the most recent: "b" goes first
    assert cache.put("c", 3) == [("b", 2)]
    assert "b" not in cache and "a" in cache and len(cache) == 2
    assert cache.get("b", "none") == "none"
    assert cache.pop("a") == 1 and cache.pop("a", "gone") == "gone"
    assert cache.values() == [3] and cache.clear() == [3] and len(cache) == 0


def test_lru_stays_bounded_under_threads():
    cache = LRU(8)

    def fill(base):
        for i in range(500):
            cache.put((base, i), i)
            cache.get((base, i - 1))

    threads = [threading.Thread(target=fill, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 8


def test_lru_lists_oldest_first_and_the_apps_caches_use_it():
    cache = LRU(3)
    for k in "abc":
        cache.put(k, k.upper())
    cache.get("a")
    assert cache.keys() == ["b", "c", "a"]
    assert cache.items() == [("b", "B"), ("c", "C"), ("a", "A")]


def test_the_app_writes_no_other_lru():
    """The app's caches (decoders, weight copies, word timelines, workers) use this one map."""
    app = Path(LRU.__module__.replace(".", "/")).parent
    root = Path(__file__).resolve().parents[2]
    found = [p.name for p in (root / app).rglob("*.py") if "move_to_end" in p.read_text()]
    assert found == ["lru.py"]
    assert DecoderCache(maxsize=5).maxsize == 5
