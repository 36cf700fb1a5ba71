"""One computation, shared: the app's finished results for every session and tab of a server, and
for the next server too.

SharedStore keeps results by key (model, text and settings) in two tiers: the ones used last in
memory (attnviz.jobs.ResultCache, least recently used out first) and, unless switched off, on disk
(diskcache.Cache, bounded in bytes, least recently used out first), so that a restarted server
answers a link it answered before at once. A second request for a key whose computation is running
waits for that one (a lock per key) instead of starting it again; if the first stops (Cancel, an
error, its session gone), nothing is stored and the next waiting request computes it.

The disk folder: $ATTNVIZ_CACHE_DIR, else ~/.cache/attnviz/results ($XDG_CACHE_HOME respected);
ATTNVIZ_CACHE_DIR=off switches the disk tier off, and so does running under pytest without
ATTNVIZ_CACHE_DIR (tests must not read results a previous run left). $ATTNVIZ_CACHE_MB bounds it
(default 1024). $ATTNVIZ_COMPUTE_LOG names a file that gets one line per computation (seconds, what,
a hash of the key), for bench/classroom.py.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import threading
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

from attnviz.jobs import ResultCache

DISK_MB = float(os.environ.get("ATTNVIZ_CACHE_MB", "1024") or 1024)


def cache_dir() -> Optional[Path]:
    """The disk tier's folder, or None when it is off (see the module's docstring)."""
    got = os.environ.get("ATTNVIZ_CACHE_DIR", "").strip()
    if got.lower() in ("off", "0", "none", "false"):
        return None
    if got:
        return Path(got)
    if "PYTEST_CURRENT_TEST" in os.environ:
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "attnviz" / "results"


def disk_key(key: Hashable) -> str:
    """A key's name on disk: the attnviz version and the key's repr, hashed (results of another version
    are never read)."""
    import attnviz

    return hashlib.sha256(f"{attnviz.__version__}|{key!r}".encode()).hexdigest()


class SharedStore:
    """Results by key for every session: memory (maxsize entries) over disk (folder, size_mb), one
    computation per key at a time. Stored results are shared, never copied: treat them as read-only."""

    def __init__(self, maxsize: int, folder: Optional[Path] = None, size_mb: float = DISK_MB):
        self.memory = ResultCache(maxsize=maxsize)
        self._folder, self._size_mb, self._disk = folder, size_mb, None
        self._locks = weakref.WeakValueDictionary()  # key -> _KeyLock while some request holds it
        self._guard = threading.Lock()
        self.computed: Counter = Counter()  # key -> times computed by this process

    # ---------------------------------------------------------------- tiers
    @property
    def disk(self):
        """The diskcache.Cache, opened on first use; None when the disk tier is off or unusable."""
        if self._disk is None and self._folder is not None:
            try:
                import diskcache

                self._folder.mkdir(parents=True, exist_ok=True)
                self._disk = diskcache.Cache(str(self._folder), size_limit=int(self._size_mb * 2 ** 20),
                                             eviction_policy="least-recently-used")
            except Exception:  # noqa: BLE001 - no disk tier (read-only home, diskcache missing): memory only
                self._folder = None
        return self._disk

    def get(self, key: Hashable, default=None):
        got = self.memory.get(key)
        if got is not None:
            return got
        disk = self.disk
        if disk is not None:
            try:
                blob = disk.get(disk_key(key))
                if blob is not None:
                    got = pickle.loads(blob)
                    for k in ("trace", "trace_cpu"):  # timed by another process, maybe on a busy machine:
                        getattr(got, "timings", {}).pop(k, None)  # estimates use this one's (jobs.trace_seconds)
                    self.memory.put(key, got)
                    return got
            except Exception:  # noqa: BLE001 - a damaged or foreign entry is a miss
                pass
        return default

    def put(self, key: Hashable, value) -> None:
        self.memory.put(key, value)
        disk = self.disk
        if disk is not None:
            try:
                disk.set(disk_key(key), pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception:  # noqa: BLE001 - a result that does not pickle stays in memory only
                pass

    def pop(self, key: Hashable, default=None):
        got = self.memory.pop(key, default)
        if self.disk is not None:
            self.disk.delete(disk_key(key))
        return got

    def clear(self) -> None:
        self.memory.clear()
        if self.disk is not None:
            self.disk.clear()

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self.memory)

    def keys(self) -> list:
        return self.memory.keys()

    @property
    def maxsize(self) -> int:
        return self.memory.maxsize

    # ---------------------------------------------------------------- one computation per key
    def _lock(self, key: Hashable) -> "_KeyLock":
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = _KeyLock()
            return lock

    def running(self, key: Hashable) -> bool:
        """Whether a computation of key is under way (in any session)."""
        with self._guard:
            lock = self._locks.get(key)
        return lock is not None and lock.lock.locked()

    def run(self, key: Hashable, compute: Callable[[Callable], Any], waiting: Optional[Callable[[float], None]] = None,
            **kw):
        """The result stored for key, else compute it through jobs.run(compute, **kw) and store it. While
        another request computes the same key this one waits for it, calling waiting(seconds waited)
        about twice a second (a page shows that it waits; a Streamlit stop raised there ends the wait);
        it then returns that result, or computes it itself when the other stopped without one."""
        got = self.get(key)
        if got is not None:
            return got
        lock, t0 = self._lock(key), time.time()
        while not lock.lock.acquire(timeout=0.5):
            if waiting is not None:
                waiting(time.time() - t0)
        try:
            got = self.get(key)
            if got is not None:
                return got
            t1 = time.time()
            out = self.memory.run(key, compute, **kw)
            self.computed[key] += 1
            self.put(key, out)
            log = os.environ.get("ATTNVIZ_COMPUTE_LOG")
            if log:
                with open(log, "a", encoding="utf-8") as f:
                    f.write(f"{time.time() - t1:.3f}\t{_what(key)}\t{disk_key(key)[:12]}\n")
            return out
        finally:
            lock.lock.release()


class _KeyLock:
    """A lock that a weak dictionary can hold (the entry goes when no request refers to it)."""

    __slots__ = ("lock", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()


def _what(key) -> str:
    """A short name for a key: its first string items."""
    if isinstance(key, tuple):
        return "/".join(str(k)[:40] for k in key[:3])
    return str(key)[:80]
