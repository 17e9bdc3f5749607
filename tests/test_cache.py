"""The local history cache: round trips, misses, corrupt files, concurrent writers."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tracker_plugin.trackers.cache import HistoryCache, default_cache_dir


def entry(n: int, fill: float) -> dict[str, np.ndarray]:
    return {
        "0.step": np.arange(n, dtype=np.int64),
        "0.value": np.full(n, fill),
        "0.timestamp": np.arange(n) * 10,
    }


def test_round_trip_and_misses(tmp_path):
    cache = HistoryCache(tmp_path)
    key = ("mlflow", "http://h", "run1", "train_loss@99:123")
    assert cache.load(key) is None
    cache.store(key, entry(100, 2.5))
    loaded = cache.load(key)
    assert set(loaded) == {"0.step", "0.value", "0.timestamp"}
    np.testing.assert_array_equal(loaded["0.step"], np.arange(100))
    assert loaded["0.step"].dtype == np.int64 and loaded["0.value"][7] == 2.5
    assert cache.load((*key[:3], "train_loss@100:124")) is None  # the run went on: a miss
    assert HistoryCache(tmp_path).load(key) is not None  # another process sees it
    assert cache.path(key).parent == tmp_path / "histories"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "other_key"])
def test_an_unreadable_entry_is_a_miss_and_is_replaced(tmp_path, damage):
    cache = HistoryCache(tmp_path)
    key = ("k", "1")
    cache.store(key, entry(1000, 1.0))
    path = cache.path(key)
    if damage == "garbage":
        path.write_bytes(b"not a cache entry")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:500])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a file under this name holding another key's entry
        cache.store(("k", "2"), entry(10, 3.0))
        path.write_bytes(cache.path(("k", "2")).read_bytes())
    assert cache.load(key) is None
    cache.store(key, entry(1000, 1.0))
    assert cache.load(key)["0.value"].sum() == 1000.0


def test_concurrent_writers_never_leave_a_partial_entry(tmp_path):
    cache = HistoryCache(tmp_path)
    key = ("shared", "run")
    seen: list[float] = []
    errors: list[BaseException] = []

    def write(fill: float) -> None:
        for _ in range(15):
            cache.store(key, entry(20_000, fill))

    writers_done = threading.Event()

    def read() -> None:
        # Read until the writers are done and once more: on a slow disk every read could
        # otherwise come before the first write lands.
        try:
            while True:
                finished = writers_done.is_set()
                loaded = cache.load(key)
                if loaded is not None:
                    values = loaded["0.value"]
                    assert len(values) == 20_000 and values.min() == values.max()  # one writer's whole entry
                    seen.append(float(values[0]))
                if finished:
                    break
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(float(k),)) for k in range(4)]
    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in writers + readers:
        thread.start()
    for thread in writers:
        thread.join()
    writers_done.set()
    for thread in readers:
        thread.join()
    assert not errors
    assert seen and set(seen) <= {0.0, 1.0, 2.0, 3.0}
    assert not [p for p in (tmp_path / "histories").iterdir() if p.name.startswith(".")]  # no temporary files left


def test_an_unwritable_directory_means_no_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = HistoryCache(blocker)  # histories/ cannot be created under a file
    cache.store(("k",), entry(3, 1.0))
    assert cache.load(("k",)) is None


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "tracker_plugin"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tracker_plugin"
    assert HistoryCache().directory == tmp_path / "home" / ".cache" / "tracker_plugin" / "histories"
