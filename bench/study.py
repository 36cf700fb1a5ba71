"""The corpus study: local engine against the Ray engine with 1 and 2 workers on this machine, the
per-sentence cost breakdown, and the scaling on paper for a cluster of K machines.

    python bench/study.py [--model builtin:agreement] [--n 60] [--workers 1,2] [--batch-size 4] [--json FILE]

Runs itself inside a network namespace with only loopback (unshare -n, as root; a pid namespace too,
so the local Ray instance and its workers end with the bench) unless --no-netns: Ray registers on the
machine's network interface otherwise. Every run uses one torch thread per worker (and in the local
engine), so the records are compared byte for byte with the local engine's.

Measured per engine: wall time from the call to the last record (start-up included) and the steady
rate (first record to last). From the Ray runs: the start-up (ray.init, actors, model loads) and the
overhead per task (driver and Ray time not spent scoring: (steady wall × workers - Σ scoring time in
the actors) / tasks). The scaling table uses those measured numbers:
    T(K machines × w workers) = startup + ceil(N / (K w)) · c + ceil(N / (K w b)) · o
with c the per-sentence scoring cost, o the overhead per task and b sentences per task; the driver,
which writes every record, caps the rate at 1 / (driver cost per record).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def in_loopback_only_netns() -> bool:
    import socket

    return [name for _, name in socket.if_nameindex()] == ["lo"]


def reexec_in_netns(argv) -> int:
    if not shutil.which("unshare"):
        sys.exit("bench/study.py: unshare not found; run with --no-netns only where Ray may use the network")
    import shlex

    cmd = (f"ip link set lo up && {shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} "
           f"{' '.join(map(shlex.quote, argv))} --no-netns")
    return subprocess.call(["unshare", "-n", "-p", "-f", "--mount-proc", "bash", "-c", cmd])


def breakdown(lm, items, settings) -> dict:
    """Per-sentence seconds by part (mean over the items, so the parts add up): trace, each map, forward,
    each baseline, the rest (correlations, encoding)."""
    from attnviz.faithfulness.sentence import score_sentence

    parts = {}
    totals = []
    for it in items:
        contrast = (it["answer"], it["wrong"]) if it.get("answer") and it.get("wrong") else None
        t = time.perf_counter()
        r = score_sentence(lm, it["text"], methods=settings["methods"], baselines=settings["baselines"],
                           contrast=contrast, ig_steps=settings["ig_steps"], max_tokens=settings["max_tokens"],
                           options={"workers": 1}, ig_tol=settings["ig_tol"])
        total = time.perf_counter() - t
        totals.append(total)
        got = {f"maps: {k}": v for k, v in r.analysis.timings.items()}
        got.update({f"importance: {k}": v for k, v in r.importance.timings.items()})
        got["correlations and the rest"] = total - sum(got.values())
        for k, v in got.items():
            parts.setdefault(k, []).append(v)
    mean = {k: statistics.fmean(v) for k, v in parts.items()}
    return dict(total=statistics.fmean(totals), parts=mean)


def run_local(lm, items, out) -> dict:
    from attnviz.faithfulness import study

    stamps = []
    t = time.perf_counter()
    study(lm, items, out_dir=out, resume=False, ig_tol=0.01, ig_steps=32,
          progress=lambda d, n: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - t
    return dict(wall_s=wall, steady_rate=(len(items) - 1) / (stamps[-1] - stamps[1]) if len(stamps) > 2 else None,
                first_record_s=stamps[1] - t if len(stamps) > 1 else None)


def run_ray(lm, items, workers, batch, out) -> dict:
    """The Ray engine through run_on_ray directly, to read its stats; records written as study() does."""
    from attnviz.faithfulness import study as _s  # noqa: F401 - the package, for study.py's helpers
    from attnviz.faithfulness.ray_engine import run_on_ray
    from attnviz.faithfulness.study import StudyFolder, _check_item, _key, item_fingerprint

    settings = dict(model=lm.spec, methods=list(SETTINGS["methods"]), baselines=list(SETTINGS["baselines"]),
                    ig_steps=32, ig_tol=0.01, include_target=False, use_contrast=True, max_tokens=128)
    checked = [_check_item(s)[0] for s in items]
    keys = [_key(i, it["text"]) for i, it in enumerate(checked)]
    folder = StudyFolder(out, settings, [item_fingerprint(s) for s in items], keys, False, lm.n_layers)
    stamps, driver_s = [], []

    def finished(recs):
        t = time.perf_counter()
        folder.append(recs)
        driver_s.append(time.perf_counter() - t)
        stamps.append((time.perf_counter(), len(recs)))

    import ray

    from attnviz.faithfulness.ray_engine import StudyWorker

    stats = {}
    t = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    init_s = time.perf_counter() - t
    try:
        run_on_ray(lm, [(i, keys[i], it) for i, it in enumerate(checked)], settings, finished, workers=workers,
                   threads=1, batch_size=batch, stats=stats)
        wall = time.perf_counter() - t
        # the overhead of one task, alone: round trips of empty batches to a fresh actor, and of a batch of
        # already-scored records' size (the payload a real task sends back)
        a = ray.remote(StudyWorker).options(num_cpus=1).remote(lm.spec, 1, "cpu")
        ray.get(a.info.remote())
        trips = []
        for _ in range(30):
            t1 = time.perf_counter()
            ray.get(a.score.remote([], settings))
            trips.append(time.perf_counter() - t1)
        payload = [json.loads(x) for x in (Path(out) / "records.jsonl").read_text().splitlines()[:batch]]
        echo = ray.remote(lambda x: x).options(num_cpus=0)
        back = []
        for _ in range(30):
            t1 = time.perf_counter()
            ray.get(echo.remote(payload))
            back.append(time.perf_counter() - t1)
        ray.kill(a)
    finally:
        folder.close()
        ray.shutdown()
    first = stamps[0][0]
    after_first = sum(k for _, k in stamps[1:])
    steady_wall = stamps[-1][0] - first
    return dict(wall_s=wall, ray_init_s=init_s, first_record_s=first - t,
                steady_rate=after_first / steady_wall if steady_wall else None,
                workers=stats["workers"], batch=stats["batch_size"], load_s=stats["load_s"],
                actor_secs_median=statistics.median(stats["secs"]), actor_secs_sum=sum(stats["secs"]),
                empty_task_s=statistics.median(trips), payload_roundtrip_s=statistics.median(back),
                driver_s_per_batch=statistics.median(driver_s), tasks=len(stamps))


SETTINGS = {}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin:agreement")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--breakdown-n", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-netns", action="store_true", help="run here, without a namespace of its own")
    raw = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(raw)
    if not args.no_netns and not in_loopback_only_netns():
        sys.exit(reexec_in_netns(raw))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local instance inside loopback: no token file written
    import torch

    torch.set_num_threads(1)
    import attnviz
    from attnviz.datasets import load_eval_set
    from attnviz.faithfulness import available_methods
    from attnviz.faithfulness.importance import BASELINES

    lm = attnviz.load_model(args.model)
    items = load_eval_set("agreement", args.n)
    methods, _ = available_methods(lm, None)
    SETTINGS.update(methods=methods, baselines=list(BASELINES))
    print(f"model {lm.spec}, {len(items)} sentences of builtin:agreement, {os.cpu_count()} CPUs here, "
          f"torch threads 1 per worker; methods {', '.join(methods)}; baselines {', '.join(BASELINES)}")
    res = {"model": lm.spec, "n": len(items), "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()}
    settings = dict(methods=methods, baselines=list(BASELINES), ig_steps=32, ig_tol=0.01, max_tokens=128)
    bd = breakdown(lm, items[:args.breakdown_n], settings)
    res["breakdown"] = bd
    print(f"\nper-sentence cost (mean of {args.breakdown_n}, one thread): {bd['total'] * 1000:.0f} ms")
    for k, v in sorted(bd["parts"].items(), key=lambda kv: -kv[1]):
        print(f"  {k:32s} {v * 1000:7.1f} ms  {100 * v / bd['total']:5.1f} %")
    tmp = Path(tempfile.mkdtemp(prefix="bench-study-"))
    res["local"] = run_local(lm, items, tmp / "local")
    ref = sorted((tmp / "local" / "records.jsonl").read_text().splitlines(), key=lambda s: json.loads(s)["i"])
    rows = [("local engine", res["local"])]
    for w in [int(x) for x in args.workers.split(",")]:
        r = run_ray(lm, items, w, args.batch_size, tmp / f"ray{w}")
        got = sorted((tmp / f"ray{w}" / "records.jsonl").read_text().splitlines(), key=lambda s: json.loads(s)["i"])
        r["records_equal_local"] = got == ref
        res[f"ray{w}"] = r
        rows.append((f"ray, {w} worker{'s' if w > 1 else ''}", r))
    res["local_again"] = run_local(lm, items, tmp / "local2")
    rows.append(("local engine again", res["local_again"]))
    res["load_avg_end"] = os.getloadavg()
    print(f"\n{'engine':18s} {'wall s':>8s} {'sent/s':>8s} {'steady sent/s':>14s} {'first rec s':>12s} "
          f"{'ms/sentence in actor':>21s}  records")
    for name, r in rows:
        eq = "" if "records_equal_local" not in r else ("= local, byte for byte" if r["records_equal_local"]
                                                        else "DIFFER from local")
        inside = f"{r['actor_secs_median'] * 1000:21.0f}" if "actor_secs_median" in r else f"{'':21s}"
        print(f"{name:18s} {r['wall_s']:8.1f} {len(items) / r['wall_s']:8.2f} {r['steady_rate'] or float('nan'):14.2f} "
              f"{r['first_record_s'] or float('nan'):12.1f} {inside}  {eq}")
    rays = [res[k] for k in res if k.startswith("ray")]
    print(f"load average at the start {res['load_avg_start'][0]:.1f}, at the end {res['load_avg_end'][0]:.1f} "
          f"(2 cores shared with other jobs: compare rows run close in time)")
    c = bd["total"]
    o = statistics.median([r["empty_task_s"] + r["payload_roundtrip_s"] for r in rays])
    startup = statistics.median([r["first_record_s"] - r["batch"] * r["actor_secs_median"] for r in rays])
    driver = statistics.median([r["driver_s_per_batch"] / r["batch"] for r in rays])
    print(f"\nRay: start-up to the first batch ≈ {startup:.1f} s (ray.init {statistics.median([r['ray_init_s'] for r in rays]):.1f} s, "
          f"actors each loading the model {statistics.median([x for r in rays for x in r['load_s']]):.1f} s); "
          f"overhead per task ≈ {o * 1000:.1f} ms (an empty task's round trip "
          f"{statistics.median([r['empty_task_s'] for r in rays]) * 1000:.1f} ms + a batch of {args.batch_size} "
          f"records back {statistics.median([r['payload_roundtrip_s'] for r in rays]) * 1000:.1f} ms); driver cost per record ≈ {driver * 1000:.2f} ms (fsynced append) "
          f"-> at most {1 / driver:.0f} records/s through one driver")
    res["model_inputs"] = dict(per_sentence_s=c, overhead_per_task_s=o, startup_s=startup, driver_s_per_record=driver)
    N, w = 10_000, 16
    print(f"\nscaling on paper: {N} sentences, machines of {w} workers (one core each), c = {c * 1000:.0f} ms, "
          f"o = {o * 1000:.1f} ms per task of {args.batch_size}, start-up {startup:.0f} s")
    print(f"{'K machines':>10s} {'workers':>8s} {'hours':>8s} {'sent/s':>8s} {'speed-up':>9s}")
    base = None
    res["scaling"] = []
    for K in (1, 2, 4, 8, 16, 32, 64):
        W = K * w
        T = startup + math.ceil(N / W) * c + math.ceil(N / (W * args.batch_size)) * max(o, 0)
        rate = min(N / T, 1 / driver)
        T = N / rate
        base = base or T
        res["scaling"].append(dict(machines=K, workers=W, seconds=T, rate=rate))
        print(f"{K:10d} {W:8d} {T / 3600:8.2f} {rate:8.1f} {base / T:9.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
