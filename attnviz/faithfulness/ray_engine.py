"""Corpus studies on a Ray cluster: actors that load the model once and score batches of sentences.

    study(lm, items, out_dir="runs/x", engine="ray")                          # a local Ray instance
    study(lm, items, out_dir="runs/x", engine="ray", address="head:6379", workers=8)

The driver (the process that calls study()) holds the output folder's lock and is the only writer:
it sends batches of (i, key, item) to the actors and appends each batch's records to records.jsonl
(one write, fsynced) as the batch comes back, skipping any key already there. So:
- a killed driver loses at most the batches in flight (Ray ends its actors with it); the rerun skips
  what is on file;
- a dead worker (its process killed, its node lost) fails its batches; the driver sends them again
  and starts a replacement actor (up to 2 * workers + 2 deaths, then it stops with the reason);
- a second driver on the same folder is refused by the lock before it starts anything.
Each actor computes a record with the study's scoring function, the one its local engine calls
(default record.score_record, the faithfulness study's; the mediation study passes
mediation.study.score_item), with `threads` torch threads: with the same threads (and the same CPU
kind and library versions) a record is the local engine's. The scoring function is sent to the actors
by reference (a module-level function of attnviz, imported there): score(lm, i, key, item, settings)
-> a JSON-ready record with that key.
"""
from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections import deque
from typing import Callable, Optional

import torch

from ..errors import AttnvizError
from ..models.load import load_model
from .record import score_record

CONNECT_TIMEOUT_S = 3.0
# no worker ready this long (none placed, or the model still loading; at the start or after deaths): stop, say why
START_TIMEOUT_S = float(os.environ.get("ATTNVIZ_RAY_START_TIMEOUT", 600))
IN_FLIGHT = 2  # batches queued per actor, so an actor never waits for the driver

# asks the head's GCS for the cluster id with short timeouts (a port that accepts connections but is
# not Ray's would otherwise make ray.init wait forever); exit 3: this Ray has no such API, skip the probe
_PROBE = """import sys
try:
    from ray._raylet import InnerGcsClient
except Exception:
    sys.exit(3)
try:
    InnerGcsClient.standalone(sys.argv[1], None, 1500)
except AttributeError:
    sys.exit(3)
except Exception as e:
    print(str(e).splitlines()[0] if str(e) else type(e).__name__)
    sys.exit(1)
"""


def split_address(address: str) -> tuple:
    """'HOST:PORT' (optionally ray://... is refused: that is Ray Client, not a cluster's GCS port) -> (host, port)."""
    a = address.strip()
    if a.startswith("ray://"):
        raise AttnvizError(f"--address {address}: give the head node's HOST:PORT (the port of `ray start --head "
                           "--port`), not a ray:// client address")
    host, sep, port = a.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AttnvizError(f"--address must be HOST:PORT (the head node of a Ray cluster), got '{address}'")
    return host, int(port)


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail within seconds, with one line, when no Ray cluster answers at address."""
    host, port = split_address(address)
    hint = (f"is a Ray head node running there (`ray start --head --port {port}`), and can this machine reach "
            "that port?")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.timeout:
        raise AttnvizError(f"cannot reach the Ray cluster at {address}: no answer within {timeout:g} s; {hint}") from None
    except OSError as e:
        raise AttnvizError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}; {hint}") from None
    env = dict(os.environ, RAY_gcs_rpc_server_connect_timeout_s="1", RAY_BACKEND_LOG_LEVEL="fatal")
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE, f"{host}:{port}"], env=env, capture_output=True,
                           text=True, timeout=30)
    except subprocess.TimeoutExpired:
        r = None
    if r is None or r.returncode == 1:
        why = (r.stdout.strip() if r is not None else "") or "no answer"
        raise AttnvizError(f"{address} accepts connections but Ray cannot connect there ({why}); {hint}")


def _reason(e: BaseException) -> str:
    """One line from a Ray error: the last 'SomeError: message' line of the remote traceback."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if ":" in ln and head.replace(".", "").isidentifier() and (head.endswith("Error") or head.endswith("Exception")):
            return ln.split(":", 1)[1].strip() if head.endswith("ModelLoadError") else ln
    return lines[-1] if lines else type(e).__name__


class StudyWorker:
    """A Ray actor: loads the model once, then scores batches of (i, key, item) with score (default
    record.score_record)."""

    def __init__(self, spec: str, threads: int, device: str, score: Optional[Callable] = None):
        torch.set_num_threads(threads)
        self.score_fn = score or score_record
        self.t0 = time.perf_counter()
        # a GPU torch cannot see is load_model's one-line ModelLoadError; the self-check runs on the device
        self.lm = load_model(spec, device=device)
        self.load_s = time.perf_counter() - self.t0

    def info(self) -> dict:
        import ray  # the optional ray package is imported only where Ray runs

        return dict(pid=os.getpid(), host=socket.gethostname(), node=ray.get_runtime_context().get_node_id(),
                    n_layers=self.lm.n_layers, decompositions_ok=bool(self.lm.decompositions_ok), load_s=self.load_s)

    def score(self, batch: list, settings: dict) -> tuple:
        """-> (records, seconds per item)."""
        recs, secs = [], []
        for i, key, item in batch:
            t = time.perf_counter()
            recs.append(self.score_fn(self.lm, i, key, item, settings))
            secs.append(time.perf_counter() - t)
        return recs, secs


def _connect(ray, address: Optional[str]) -> bool:
    """ray.init unless this process is already connected -> whether it was started here."""
    if ray.is_initialized():
        return False
    kw = dict(log_to_driver=False, logging_level=logging.ERROR)
    try:
        if address:
            check_address(address)
            ray.init(address=address.strip(), **kw)
        else:  # "local": always a new local instance, never one found through RAY_ADDRESS or /tmp/ray
            ray.init(address="local", include_dashboard=False, **kw)
    except AttnvizError:
        raise
    except Exception as e:  # noqa: BLE001 - version mismatch, refused join ...: one line
        raise AttnvizError(f"cannot start Ray{' at ' + address if address else ''}: {_reason(e)}") from None
    return True


def run_on_ray(lm, todo: list, settings: dict, finished: Callable[[list], None], *, address: Optional[str] = None,
               workers: Optional[int] = None, gpus_per_worker: float = 0, threads: Optional[int] = None,
               batch_size: Optional[int] = None, notes: Optional[list] = None, stats: Optional[dict] = None,
               score: Optional[Callable] = None, unit: str = "sentence") -> None:
    """Score todo [(i, key, item)] on Ray; finished(records) is called on the driver for each batch done.

    score(lm, i, key, item, settings) -> record: the study's scoring function, run in the actors
    (default record.score_record); unit: what an item is, for the notes ("sentence", "pair").
    stats (optional dict) receives: workers, nodes, batch_size, deaths, load_s (per worker), secs (per
    item, as measured inside the actors), wall_s."""
    try:  # ray is optional (attnviz[ray]): imported only when the engine runs
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
    except ImportError:
        raise AttnvizError("the Ray engine needs the ray package: pip install 'attnviz[ray]' (or pip install ray)") from None
    t_start = time.perf_counter()
    threads = int(threads or 1)
    notes = notes if notes is not None else []
    stats = stats if stats is not None else {}
    started_here = _connect(ray, address)
    actors = {}
    try:
        res = ray.cluster_resources()
        cpus, gpus = float(res.get("CPU", 0)), float(res.get("GPU", 0))
        if workers is None:
            workers = max(1, int(cpus // threads))
            if gpus_per_worker:
                workers = max(1, min(workers, int(gpus // gpus_per_worker)))
        where = (f"the Ray cluster at {address}" if address else "the local Ray instance" if started_here
                 else "the Ray cluster this process is connected to")
        short = []
        if workers * threads > cpus:
            short.append(f"{cpus:g} CPUs: {workers} workers × {threads} threads need {workers * threads}")
        if gpus_per_worker and workers * gpus_per_worker > gpus:
            short.append(f"{gpus:g} GPUs: {workers} workers × {gpus_per_worker:g} GPUs need "
                         f"{workers * gpus_per_worker:g}")
        if short:
            msg = f"{where} has {' and '.join(short)}"
            if started_here:  # a local instance never grows: say so now
                raise AttnvizError(f"{msg}; ask for fewer --workers, --threads or --gpus-per-worker")
            # a cluster may grow (an autoscaler): the workers that fit start now, the rest when there is room
            # (an actor that never starts is left out; none at all within START_TIMEOUT_S is an error)
            notes.append(f"{msg} now: the workers that do not fit wait for room")
        workers = min(workers, len(todo))
        if batch_size is None:
            batch_size = max(1, min(16, len(todo) // (workers * 4)))
        batches = deque(todo[k:k + batch_size] for k in range(0, len(todo), batch_size))
        stats.update(workers=workers, batch_size=batch_size, deaths=0, load_s=[], secs=[], nodes=set())
        Worker = ray.remote(StudyWorker).options(num_cpus=threads, num_gpus=gpus_per_worker or 0, max_restarts=0,
                                             max_task_retries=0)
        device = "cuda" if gpus_per_worker else "cpu"
        pending = {}  # ObjectRef -> (actor, "start" | "score", batch)
        ready = {}    # actor -> number of batches in flight
        dead = set()
        max_deaths = 2 * workers + 2
        last_death = ""

        def spawn():
            a = Worker.remote(lm.spec, threads, device, score)
            actors[a] = True
            pending[a.info.remote()] = (a, "start", None)

        def bury(a, why):
            nonlocal last_death
            if a in dead:
                return
            dead.add(a)
            ready.pop(a, None)
            actors.pop(a, None)
            stats["deaths"] += 1
            last_death = why
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            if stats["deaths"] > max_deaths:
                raise AttnvizError(f"Ray workers died {stats['deaths']} times; the last: {why}")
            spawn()

        for _ in range(workers):
            spawn()
        waiting_since = time.monotonic()
        while batches or any(kind == "score" for _, kind, _ in pending.values()):
            for a in list(ready):
                while batches and ready[a] < IN_FLIGHT:
                    b = batches.popleft()
                    pending[a.score.remote(b, settings)] = (a, "score", b)
                    ready[a] += 1
            if ready:
                waiting_since = time.monotonic()
            elif time.monotonic() - waiting_since > START_TIMEOUT_S:
                raise AttnvizError(f"no Ray worker started within {START_TIMEOUT_S:g} s on {where}: each needs "
                                   f"{threads} CPU{'s' if threads > 1 else ''}"
                                   + (f" and {gpus_per_worker:g} GPU" if gpus_per_worker else "")
                                   + " free and the model loaded (see `ray status`)")
            done_refs, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done_refs:
                a, kind, b = pending.pop(ref)
                try:
                    val = ray.get(ref, timeout=60)
                except RayActorError as e:
                    if kind == "start" and not _lost(e):
                        raise AttnvizError(f"a Ray worker cannot load the model '{lm.spec}': {_reason(e)}") from None
                    if b is not None:
                        batches.appendleft(b)
                    bury(a, _death(e))
                    continue
                except GetTimeoutError:
                    if b is not None:
                        batches.appendleft(b)
                    bury(a, "no answer from the worker")
                    continue
                except RayTaskError as e:
                    where_ = f"items {b[0][0]}..{b[-1][0]}" if b else "its start"
                    raise AttnvizError(f"a Ray worker failed on {where_}: {_reason(e)}") from None
                if a in dead:
                    continue
                if kind == "start":
                    if val["n_layers"] != lm.n_layers or val["decompositions_ok"] != bool(lm.decompositions_ok):
                        raise AttnvizError(f"the model '{lm.spec}' on a Ray worker ({val['host']}) is not the one "
                                           f"loaded here ({val['n_layers']} layers, self-check "
                                           f"{'passed' if val['decompositions_ok'] else 'failed'}): install the "
                                           "same model and versions on every node")
                    ready[a] = 0
                    stats["load_s"].append(val["load_s"])
                    stats["nodes"].add(val["node"])
                else:
                    ready[a] -= 1
                    recs, secs = val
                    stats["secs"].extend(secs)
                    finished(recs)
        stats["nodes"] = len(stats["nodes"])
        stats["wall_s"] = time.perf_counter() - t_start
        cluster = address or ("local instance" if started_here else "connected cluster")
        notes.append(f"ray: {workers} worker{'s' if workers > 1 else ''} on {stats['nodes']} "
                     f"node{'s' if stats['nodes'] != 1 else ''} ({cluster}), batches of "
                     f"{batch_size} {unit}{'s' if batch_size > 1 else ''}"
                     + (f"; {stats['deaths']} worker death{'s' if stats['deaths'] > 1 else ''} ({last_death}): their "
                        "batches were sent again" if stats["deaths"] else ""))
    finally:
        for a in list(actors):
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if started_here:
            ray.shutdown()


def _death(e: BaseException) -> str:
    """One short line for a dead actor: Ray's first sentence and the exit type."""
    text = " ".join(str(e).split())
    first = text.split(". ")[0].strip().rstrip(".")
    m = re.search(r"Worker exit type: (\w+)", text)
    return first + (f" ({m.group(1)})" if m else "")


def _lost(e: BaseException) -> bool:
    """Whether an actor error says the process or node went away (rather than its constructor raising)."""
    text = str(e)
    return not any(s in text for s in ("ModelLoadError", "AttnvizError", "creation task", "__init__"))
