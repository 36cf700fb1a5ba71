"""Run by tests/test_ray.py inside a network namespace that has only loopback (and a pid namespace of
its own, so every process started here ends with it): a two-node Ray cluster as separate processes,
study drivers killed and restarted, a worker killed, then the cluster stopped. Writes a JSON report.

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

PORT = 6390
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


def workers() -> list:
    """Pids of the study actors (process title ray::StudyWorker...) in this pid namespace."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            if cmdline(p).startswith(b"ray::StudyWorker"):
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
            r = subprocess.run(["ray", "start"] + args + base, capture_output=True, text=True, timeout=120)
            if r.returncode:
                raise RuntimeError(f"ray start {' '.join(args)} failed: {r.stderr[-1500:]}")
        rep["cluster_start_s"] = time.monotonic() - t
        mark("cluster")
        import ray

        ray.init(address=ADDRESS, log_to_driver=False, logging_level="ERROR")
        rep["nodes"] = sorted(nd["NodeManagerAddress"] for nd in ray.nodes() if nd["Alive"])
        ray.shutdown()
        common = ["attnviz", "study", "--model", "builtin:agreement", "--data", "builtin:agreement", "--n", str(n),
                  "--out", str(out), "--engine", "ray", "--threads", "1", "--quiet"]
        cmd = common + ["--address", ADDRESS, "--workers", "2", "--batch-size", "2"]
        # a worker that cannot load the model: the driver has it, the workers get a spec that does not exist
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-c", (
            "import dataclasses, attnviz, sys\n"
            "from attnviz.faithfulness import study\n"
            "lm = attnviz.load_model('builtin:agreement')\n"
            "try:\n"
            f"    study(dataclasses.replace(lm, spec='builtin:no-such-model'), ['the cat [MASK] here .'], engine='ray', address='{ADDRESS}')\n"
            "except attnviz.AttnvizError as e:\n"
            "    print(e); sys.exit(2)\n")], capture_output=True, text=True, timeout=120)
        mark("cannot_load")
        rep["cannot_load"] = dict(rc=r.returncode, stdout=r.stdout, stderr=r.stderr[-2000:],
                                  seconds=time.monotonic() - t)
        # driver 1, killed midway; meanwhile a second driver on the same folder is refused
        d1 = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_lines(rec, 2, d1, 180)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        rep["second_driver"] = dict(rc=r.returncode, stderr=r.stderr, driver1_running=d1.poll() is None)
        wait_lines(rec, max(6, n // 3), d1, 180)
        d1.kill()
        d1.wait()
        rep["killed_driver_at"] = lines(rec)
        ev("driver 1 killed at", rep["killed_driver_at"], "lines; workers alive:", workers())
        time.sleep(2)
        rep["after_kill_2s"] = lines(rec)
        t = time.monotonic()
        while workers() and time.monotonic() - t < 20:  # Ray ends a dead driver's actors
            time.sleep(0.2)
        rep["workers_after_driver_kill"] = workers()
        mark("driver1_killed")
        ev("driver 1's workers gone after", round(time.monotonic() - t + 2, 1), "s")
        # driver 2 resumes; one worker is killed once while it runs
        d2 = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_lines(rec, rep["killed_driver_at"] + 4, d2, 180)
        pids = workers()
        ev("workers before the kill", pids)
        rep["killed_worker"] = None
        if pids and d2.poll() is None:
            os.kill(pids[0], signal.SIGKILL)
            rep["killed_worker"] = pids[0]
            rep["killed_worker_at"] = lines(rec)
        o, e = d2.communicate(timeout=240)
        rep["driver2"] = dict(rc=d2.returncode, stdout=o, stderr=e[-3000:])
        mark("driver2")
        # a third run finds everything done
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        rep["driver3"] = dict(rc=r.returncode, stdout=r.stdout, stderr=r.stderr[-3000:])
        mark("driver3")
    finally:
        r = subprocess.run(["ray", "stop", "--force"], capture_output=True, text=True, timeout=120)
        rep["ray_stop_rc"] = r.returncode
        rep["left_after_stop"] = [c for c in (cmdline(p) for p in os.listdir("/proc") if p.isdigit() and p != "1")
                                  if b"ray" in c[:300] and b"ray_cluster_run" not in c]
        Path(report_path).write_text(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
