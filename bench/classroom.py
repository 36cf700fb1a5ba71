"""A class opening the teacher's link at once: N headless Chromium sessions on one app server.

    python bench/classroom.py                        # builtin:agreement and pkg:smollm2, 20 sessions each
    python bench/classroom.py --models builtin:agreement --sessions 5
    python bench/classroom.py --root /tmp/old        # the app of another checkout (e.g. a git worktree)
    python bench/classroom.py --server-only 5        # the server's own CPU a session, no browser
    python bench/classroom.py --no-render            # the browsers draw no chart: time to the figure received

Per model: a fresh server (`streamlit run app.py` of --root, its results cache on disk switched off so
that nothing of an earlier run is reused), one warm-up page on another sentence (the model loads), then
N browser contexts open the same link at the same moment. It prints, per model: the p50 / p95 / max
time from the link's request to the first heatmap drawn, the server's memory (RSS, largest seen), the
CPU seconds the server used during the run (the rest of the
machine's two cores went to the browsers), and how many times each result was
computed (every computation a jobs.ResultCache ran, counted by key in the server process, so the
old and the new app are counted alike; the goal is 1 per key). Then one more tab on the same link
once everything is cached: what a late student waits.

The server runs with ATTNVIZ_TORCH_THREADS=1 beside the browsers on the same machine (the numbers of
bench/RESULTS.md come from a 2-core machine shared with other work: compare runs made one after the
other, not across days).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import psutil

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
TEXT = "the keys to the cabinet [MASK] on the table ."
WARM_TEXT = "the dog [MASK] here ."
FIRST_MAP = ".st-key-maps .heatmaplayer"

# runs the app of --root in this process's Python, counting every ResultCache computation by key
LAUNCHER = r'''
import json, os, sys, threading, time
sys.path.insert(0, os.environ["CLASSROOM_ROOT"])
import attnviz.jobs as J
_log, _lock, _orig = os.environ["CLASSROOM_COUNT"], threading.Lock(), J.ResultCache.run
def _run(self, key, compute, **kw):
    def counted(progress):
        t0 = time.time()
        out = compute(progress)
        with _lock, open(_log, "a") as f:
            f.write(json.dumps([repr(key)[:160], round(time.time() - t0, 3)]) + "\n")
        return out
    return _orig(self, key, counted, **kw)
J.ResultCache.run = _run
from streamlit.web import cli
sys.argv = ["streamlit", "run", os.path.join(os.environ["CLASSROOM_ROOT"], "app.py")] + sys.argv[1:]
sys.exit(cli.main())
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, count_log: Path, log: Path):
    port = free_port()
    launcher = Path(tempfile.mkdtemp()) / "launch.py"
    launcher.write_text(LAUNCHER)
    env = dict(os.environ, ATTNVIZ_TORCH_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", ATTNVIZ_CACHE_DIR="off", CLASSROOM_ROOT=str(root), CLASSROOM_COUNT=str(count_log),
               PYTHONPATH=str(root))
    proc = subprocess.Popen([sys.executable, str(launcher), "--server.address", "127.0.0.1", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                            cwd=root, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited ({proc.returncode}); see {log}")
            time.sleep(0.3)
    raise RuntimeError("the server did not start in 600 s")


class Sampler:
    """The largest RSS of a process and its children, sampled every 0.2 s in a thread; and the CPU
    seconds of every other process this bench started (the browsers: the playwright driver and its
    Chromium processes), the last reading of each process summed at the end."""

    def __init__(self, pid: int):
        self.proc, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self.me = psutil.Process(os.getpid())
        self.browser_cpu: dict = {}
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _browsers(self):
        server = {self.proc.pid} | {p.pid for p in self.proc.children(recursive=True)}
        for p in self.me.children(recursive=True):
            if p.pid not in server:
                try:
                    t = p.cpu_times()
                    self.browser_cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass

    def rss(self) -> int:
        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _loop(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            try:
                self._browsers()
            except psutil.Error:
                pass
            time.sleep(0.2)

    def stop(self):
        self._stop.set()
        self._t.join()


def cpu_seconds(procs) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + getattr(t, "children_user", 0) + getattr(t, "children_system", 0)
        except psutil.Error:
            pass
    return total


async def open_all(url: str, n: int, timeout_s: float, render: bool = True) -> list:
    """N browser contexts open url at once -> per session the seconds to the first heatmap (or 'failed: ...').
    render=False: the charts' code (Streamlit's PlotlyChart chunk) is not served, so no chart is drawn,
    and a session's time is when the first heatmap's figure arrives over its websocket (what the server
    delivers; each student's own machine then draws it)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                           args=["--headless", "--no-sandbox", "--disable-gpu"])
        contexts = [await browser.new_context(viewport={"width": 1280, "height": 900}) for _ in range(n)]
        pages = [await c.new_page() for c in contexts]

        async def one(page):
            t0 = time.time()
            got = asyncio.get_running_loop().create_future()
            if not render:
                await page.route("**/PlotlyChart.*.js", lambda route: route.abort())

                def frame(payload):
                    data = payload if isinstance(payload, bytes) else payload.encode("utf-8", "replace")
                    if b'"heatmap"' in data and not got.done():
                        got.set_result(time.time() - t0)

                page.on("websocket", lambda ws: ws.on("framereceived", frame))
            try:
                await page.goto(url, timeout=timeout_s * 1000)
                if render:
                    await page.wait_for_selector(FIRST_MAP, timeout=timeout_s * 1000)
                    return time.time() - t0
                return await asyncio.wait_for(got, timeout_s)
            except Exception as e:  # noqa: BLE001 - a session that never drew its map is reported, not fatal
                return f"failed: {type(e).__name__}"

        got = await asyncio.gather(*(one(p) for p in pages))
        for c in contexts:
            await c.close()
        await browser.close()
        return got


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench_model(root: Path, spec: str, n: int, timeout_s: float, render: bool = True) -> dict:
    work = Path(tempfile.mkdtemp(prefix="classroom_"))
    count_log = work / "computed.jsonl"
    proc, base = start_server(root, count_log, work / "server.log")
    try:
        warm = asyncio.run(open_all(f"{base}/?model={quote(spec)}&text={quote(WARM_TEXT)}", 1, timeout_s))[0]
        count_log.write_text("")
        sampler = Sampler(proc.pid)
        server = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        s_cpu0 = cpu_seconds(server)
        t0 = time.time()
        url = f"{base}/?model={quote(spec)}&text={quote(TEXT)}"
        times = asyncio.run(open_all(url, n, timeout_s, render))
        wall = time.time() - t0
        s_cpu = cpu_seconds(server) - s_cpu0
        b_cpu = sum(sampler.browser_cpu.values())
        late = asyncio.run(open_all(url, 1, timeout_s, render))[0]
        sampler.stop()
        counts = Counter()
        secs = Counter()
        for line in count_log.read_text().splitlines():
            key, s = json.loads(line)
            counts[key] += 1
            secs[key] += s
        ok = [t for t in times if isinstance(t, float)]
        return dict(spec=spec, root=str(root), sessions=n, render=render, warmup_s=warm, ok=len(ok),
                    failed=[t for t in times if not isinstance(t, float)],
                    p50_s=statistics.median(ok) if ok else None, p95_s=pct(ok, 0.95) if ok else None,
                    max_s=max(ok) if ok else None, late_tab_s=late, wall_s=wall,
                    server_peak_mb=sampler.peak / 2 ** 20, server_cpu_s=s_cpu, browser_cpu_s=b_cpu,
                    load_avg=os.getloadavg(),
                    computed={k: [c, round(secs[k], 2)] for k, c in counts.items()})
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def server_only(root: Path, spec: str, n: int) -> dict:
    """The page script's CPU per session without any browser: streamlit's AppTest runs the app of root for
    the teacher's link once (the model loads, the results are computed), then n more times, each a new
    session on the cached results; the script's thread CPU is what the server spends on a session
    before serialising (thread CPU time measured inside the script thread)."""
    import threading

    sys.path.insert(0, str(root))
    from streamlit.testing.v1 import AppTest

    cpu = []
    orig = threading.Thread.run

    def timed(self):
        t = time.thread_time()
        try:
            orig(self)
        finally:
            if getattr(threading, "_classroom_on", False):
                cpu.append(time.thread_time() - t)

    threading.Thread.run = timed

    def one():
        at = AppTest.from_file(str(root / "app.py"), default_timeout=600)
        at.query_params["model"] = spec
        at.query_params["text"] = TEXT
        at.run()
        if at.exception:
            raise RuntimeError(f"the page failed: {at.exception[0].message}")

    try:
        one()
        threading._classroom_on = True
        t0, w0 = time.process_time(), time.time()
        for _ in range(n):
            one()
        threading._classroom_on = False
    finally:
        threading.Thread.run = orig
    return dict(spec=spec, sessions=n, script_cpu_s=sum(cpu) / n, process_cpu_s=(time.process_time() - t0) / n,
                wall_s=(time.time() - w0) / n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="builtin:agreement,pkg:smollm2")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose app.py to serve")
    ap.add_argument("--timeout", type=float, default=900.0, help="hang guard per session (s)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-render", action="store_true",
                    help="the browsers draw no chart: time to the first heatmap's figure arriving over each session's websocket")
    ap.add_argument("--server-only", type=int, default=0, metavar="N",
                    help="no browsers: N sessions of the page script (AppTest) on cached results, CPU per session")
    args = ap.parse_args(argv)
    out = []
    if args.server_only:
        os.environ.update(ATTNVIZ_TORCH_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                          OMP_NUM_THREADS="1", ATTNVIZ_CACHE_DIR="off")
        for spec in args.models.split(","):
            r = server_only(Path(args.root).resolve(), spec.strip(), args.server_only)
            out.append(r)
            print(f"{r['spec']}: the page script {r['script_cpu_s']:.2f} s CPU a session (its threads), the whole "
                  f"process {r['process_cpu_s']:.2f} s, wall {r['wall_s']:.2f} s; {r['sessions']} sessions, load "
                  f"average {os.getloadavg()[0]:.1f}")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return 0
    for spec in args.models.split(","):
        r = bench_model(Path(args.root).resolve(), spec.strip(), args.sessions, args.timeout, not args.no_render)
        out.append(r)
        print(f"\n{r['spec']} ({r['root']}), {r['sessions']} sessions at once"
              + ("" if r["render"] else " (no chart drawn: time to the first heatmap's figure received)") + ":")
        print(f"  first heatmap: p50 {r['p50_s']:.1f} s, p95 {r['p95_s']:.1f} s, max {r['max_s']:.1f} s"
              f" ({r['ok']} drew it; failed: {r['failed'] or 'none'}); all done after {r['wall_s']:.1f} s")
        print(f"  a late tab once cached: {r['late_tab_s'] if isinstance(r['late_tab_s'], str) else round(r['late_tab_s'], 1)} s;"
              f" warm-up page (model load): {r['warmup_s'] if isinstance(r['warmup_s'], str) else round(r['warmup_s'], 1)} s")
        print(f"  server: peak RSS {r['server_peak_mb']:.0f} MB, CPU {r['server_cpu_s']:.1f} s during the run; "
              f"browsers: CPU {r['browser_cpu_s']:.1f} s; load average after: {', '.join(f'{x:.1f}' for x in r['load_avg'])}")
        print("  computed (times, seconds in all):")
        for k, (c, s) in sorted(r["computed"].items(), key=lambda kv: -kv[1][0]):
            print(f"    {c:3d}x  {s:7.2f} s  {k}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
