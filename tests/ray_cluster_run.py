"""Run by tests/test_ray.py inside a network namespace that has only loopback (and a pid namespace of
its own, so every process started here ends with it): a two-node Ray cluster as separate processes,
study drivers killed and restarted, a worker killed, the second node lost, then the cluster stopped;
a few pairs of the mediation study through the same cluster on the way. Writes a JSON report.

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up && python tests/ray_cluster_run.py OUT REPORT N'
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def BIN(name: str) -> str:
    """The console script `name` of the Python running this script (its venv's bin/, activated or not)."""
    return str(Path(sys.executable).with_name(name))

PORT = 6390
MEDIATION_PAIRS, MEDIATION_LOCAL = 6, 2  # pairs of the mediation study; of them scored locally first
ADDRESS = f"127.0.0.1:{PORT}"


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_lines(path: Path, k: int, proc, timeout: float) -> int:
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        n = lines(path)
        if n >= k or proc.poll() is not None:
            return n
        time.sleep(0.05)
    raise RuntimeError(f"{path} did not reach {k} lines in {timeout} s")


def cmdline(pid) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def descendants(pid: int) -> list:
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                parent[int(p)] = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        kids = [c for c, pp in parent.items() if pp == q]
        out += kids
        todo += kids
    return out


def zombie(pid) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (OSError, IndexError):
        return True


def workers() -> list:
    """Pids of the study actors (process title ray::StudyWorker...) in this pid namespace."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            if cmdline(p).startswith(b"ray::StudyWorker") and not zombie(p):
                out.append(int(p))
    return sorted(out)


def main(out: str, report_path: str, n: int) -> None:
    rep = {"events": [], "t": {}}
    t0 = time.monotonic()
    mark = lambda name: rep["t"].__setitem__(name, round(time.monotonic() - t0, 1))  # noqa: E731
    out = Path(out)
    rec = out / "records.jsonl"
    ev = lambda *a: rep["events"].append(" ".join(map(str, a)))  # noqa: E731
    tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")
    # token authentication with a token of this test's own (nothing read from or written to ~/.ray)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    try:
        # the cluster: two nodes, separate processes, one CPU each
        t = time.monotonic()
        base = ["--num-cpus", "1", "--disable-usage-stats"]
        for args in (["--head", "--port", str(PORT), "--include-dashboard=false", "--temp-dir", tmp],
                     [f"--address={ADDRESS}"]):
            r = subprocess.run([BIN("ray"), "start"] + args + base, capture_output=True, text=True, timeout=600)
            if r.returncode:
                raise RuntimeError(f"ray start {' '.join(args)} failed: {r.stderr[-1500:]}")
        rep["cluster_start_s"] = time.monotonic() - t
        mark("cluster")
        import ray

        import attnviz
        from attnviz.faithfulness import study

        ray.init(address=ADDRESS, log_to_driver=False, logging_level="ERROR")
        rep["nodes"] = sorted(nd["NodeManagerAddress"] for nd in ray.nodes() if nd["Alive"])
        # a worker that cannot load the model: the driver has it, the workers get a spec that does not exist
        import dataclasses

        lm = attnviz.load_model("builtin:agreement")
        t = time.monotonic()
        try:
            study(dataclasses.replace(lm, spec="builtin:no-such-model"), ["the cat [MASK] here ."], engine="ray")
            rep["cannot_load"] = dict(error=None)
        except attnviz.AttnvizError as e:
            rep["cannot_load"] = dict(error=str(e))
        rep["cannot_load"]["seconds"] = time.monotonic() - t
        # the mediation study on the same cluster: its first pairs on the local engine (this process, one
        # thread), then all of them through the Ray engine, which resumes the folder and scores the rest
        import torch

        from attnviz.mediation.pairs import shipped_pairs
        from attnviz.mediation.study import mediation_study

        t = time.monotonic()
        torch.set_num_threads(1)
        pairs = shipped_pairs("agreement", MEDIATION_PAIRS)
        med_out = out.parent / "mediation"
        mediation_study(lm, pairs[:MEDIATION_LOCAL], out_dir=med_out)
        notes = []
        res = mediation_study(lm, pairs, out_dir=med_out, engine="ray", workers=1, threads=1, notes=notes)
        rep["mediation"] = dict(out=str(med_out), n_pairs=res.n_pairs, resumed=res.resumed, skipped=res.skipped,
                                notes=notes, keys=[r["key"] for r in res.records],
                                seconds=time.monotonic() - t)
        mark("mediation")
        # workers that do not start in time (here: a limit far below an actor's start) -> said, not a hang
        from attnviz.faithfulness import ray_engine

        ray_engine.START_TIMEOUT_S = 0.5
        try:
            study(lm, ["the cat [MASK] here ."], engine="ray")
            rep["start_timeout"] = None
        except attnviz.AttnvizError as e:
            rep["start_timeout"] = str(e)
        ray.shutdown()
        mark("cannot_load")
        common = [BIN("attnviz"), "study", "--model", "builtin:agreement", "--data", "builtin:agreement", "--n", str(n),
                  "--out", str(out), "--engine", "ray", "--threads", "1", "--quiet"]
        cmd = common + ["--address", ADDRESS, "--workers", "2", "--batch-size", "2"]
        # driver 1, killed midway; while it holds the folder (paused with SIGSTOP, so it cannot finish
        # meanwhile) a second driver on the same folder must be refused
        d1 = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_lines(rec, 2, d1, 900)
        d1.send_signal(signal.SIGSTOP)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        rep["second_driver"] = dict(rc=r.returncode, stderr=r.stderr, first_running=d1.poll() is None,
                                    lines=lines(rec))
        d1.send_signal(signal.SIGCONT)
        wait_lines(rec, max(6, n // 3), d1, 900)
        d1.kill()
        d1.wait()
        rep["killed_driver_at"] = lines(rec)
        ev("driver 1 killed at", rep["killed_driver_at"], "lines; workers alive:", workers())
        time.sleep(2)
        rep["after_kill_2s"] = lines(rec)
        t = time.monotonic()
        while workers() and time.monotonic() - t < 300:  # Ray ends a dead driver's actors (seconds; more under load)
            time.sleep(0.2)
        rep["workers_after_driver_kill"] = workers()
        mark("driver1_killed")
        ev("driver 1's workers gone after", round(time.monotonic() - t + 2, 1), "s")
        # driver 2 resumes; the second node is lost (its raylet killed, its worker with it), then the
        # remaining worker is killed once
        d2 = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_lines(rec, rep["killed_driver_at"] + 4, d2, 900)
        ev("workers before the node loss", workers())
        raylets = [int(p) for p in os.listdir("/proc") if p.isdigit() and b"/raylet/raylet" in cmdline(p)
                   and b"--head" not in cmdline(p)]
        rep["killed_node"] = None
        if len(raylets) == 1 and d2.poll() is None:
            node = [raylets[0]] + descendants(raylets[0])  # the machine is gone: its raylet and workers at once
            for p in node:
                os.kill(p, signal.SIGKILL)
            rep["killed_node"] = node
            rep["killed_node_at"] = lines(rec)
        pids = [p for p in workers() if p not in (rep["killed_node"] or [])]
        ev("workers before the worker kill", pids)
        rep["killed_worker"] = None
        if len(pids) == 1 and d2.poll() is None:
            os.kill(pids[0], signal.SIGKILL)
            rep["killed_worker"] = pids[0]
            rep["killed_worker_at"] = lines(rec)
        o, e = d2.communicate(timeout=1200)
        rep["driver2"] = dict(rc=d2.returncode, stdout=o, stderr=e[-3000:])
        mark("driver2")
    finally:
        r = subprocess.run([BIN("ray"), "stop", "--force"], capture_output=True, text=True, timeout=600)
        rep["ray_stop_rc"] = r.returncode
        rep["left_after_stop"] = [c.decode("utf-8", "replace") for c in (cmdline(p) for p in os.listdir("/proc")
                                                                          if p.isdigit() and p != "1")
                                  if b"ray" in c[:300] and b"ray_cluster_run" not in c]
        Path(report_path).write_text(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
