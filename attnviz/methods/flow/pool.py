"""Workers for flow: the process pool of the igraph path (opt-in, forkserver) and the thread count of
the compiled path."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ProcessPoolExecutor

_POOL = None
_POOL_LOCK = threading.Lock()
POOL_MIN_SECONDS = 0.02  # a layer whose remaining max-flow work is smaller runs in this process


def _pool(workers: int):
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers != workers:  # noqa: SLF001
            import multiprocessing as mp

            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["numpy", "igraph", "attnviz.methods.flow.igraph_backend"])
            _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
        return _POOL


def _drop() -> None:
    """Shut a broken or unavailable pool down; the next _pool() starts a new one."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.shutdown(wait=False, cancel_futures=True)
        _POOL = None


def default_workers() -> int:
    """Worker processes for flow: 1 unless ATTNVIZ_FLOW_WORKERS says more.

    The bounds leave few max-flow calls, so one process is fast; a pool (forkserver) re-imports
    the caller's __main__ in its workers, which surprises scripts without a main guard, so it is
    opt-in (ATTNVIZ_FLOW_WORKERS=2, or workers=2)."""
    env = os.environ.get("ATTNVIZ_FLOW_WORKERS")
    return max(1, int(env)) if env and env.strip().isdigit() else 1


def default_threads() -> int:
    """Threads for the compiled max-flow calls: ATTNVIZ_FLOW_WORKERS if set, else min(2, CPUs)."""
    env = os.environ.get("ATTNVIZ_FLOW_WORKERS")
    if env and env.strip().isdigit():
        return max(1, int(env))
    return max(1, min(2, os.cpu_count() or 1))
