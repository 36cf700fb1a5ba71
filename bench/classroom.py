"""A class opening the teacher's link at once: N headless Chromium sessions on one app server.

    python bench/classroom.py                        # builtin:agreement and pkg:smollm2, 20 sessions each
    python bench/classroom.py --models builtin:agreement --sessions 5
    python bench/classroom.py --floor                # then the same class on a plain page with the same chart
    python bench/classroom.py --one-tab 3 --floor    # no class: one tab alone, where its CPU goes
    python bench/classroom.py --no-browser --floor   # the server's share: 20 clients replay a browser's session
    python bench/classroom.py --root /tmp/old        # the app of another checkout (e.g. a git worktree)
    python bench/classroom.py --server-only 5        # the server's own CPU a session, no browser
    python bench/classroom.py --no-render            # the browsers draw no chart: time to the figure received
    python bench/classroom.py --watch                # the server as a development server (file watching on)

Per model: a fresh server (`streamlit run app.py` of --root with the options `attnviz app --serve` gives it:
no file watcher, no rerun on save; its results cache on disk switched off so that nothing of an earlier run
is reused), one warm-up page on another sentence (the model loads), then N browser contexts open the same
link at the same moment. It prints, per model: the p50 / p95 / max time from the link's request to the
first heatmap drawn, the server's memory (RSS, largest seen), the CPU seconds the server used during the
run and those of the browsers (the playwright driver and Chromium), how many script runs each session
caused (every run of the page script, counted in the server process), and how many times each result was
computed (every computation a jobs.ResultCache ran, counted by key in the server process, so the
old and the new app are counted alike; the goal is 1 per key). Then one more tab on the same link
once everything is cached: what a late student waits.

--floor: after each model, the same class on FLOOR_APP (a title and one st.plotly_chart of the same number
of heatmaps of the same size, keyed like the app's first map; plain streamlit and plotly, nothing of
attnviz): the least this machine can do with these browsers, and the app's ratio to it.

--one-tab K: one browser and one tab alone, first on the uncached link, then K times on the cached results:
the time to the first heatmap, the CPU seconds of each Chromium process type and of the server, Chromium's
own counters (CDP Performance.getMetrics), the messages the server sent by kind (Streamlit's ForwardMsg,
new elements by type) with their bytes, the page's DOM nodes, iframes and plotly charts.

--no-browser: the server's share alone, as if each student's browser ran on its own machine. One browser
session on the teacher's link is recorded (its HTTP requests, its websocket handshake and first message),
then N Python clients replay it at once: every static file and the websocket (new visitors), then the page
and the websocket only (the files in the browsers' cache). The clients run on this machine too (their CPU
is printed).

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
from typing import Optional
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
_lock = threading.Lock()
if os.environ.get("CLASSROOM_FLOOR") != "1":  # the floor's server imports nothing of attnviz (nor torch)
    import attnviz.jobs as J
    _log, _orig = os.environ["CLASSROOM_COUNT"], J.ResultCache.run
    def _run(self, key, compute, **kw):
        def counted(progress):
            t0 = time.time()
            out = compute(progress)
            with _lock, open(_log, "a") as f:
                f.write(json.dumps([repr(key)[:160], round(time.time() - t0, 3)]) + "\n")
            return out
        return _orig(self, key, counted, **kw)
    J.ResultCache.run = _run
# every script run (st.rerun's included: ScriptRunner loops over them inside one _run_script): its session,
# how it ended (ScriptRunnerEvent: a full run, a run cut short by st.rerun, a fragment's) and the script
# thread's CPU seconds since the run began
from streamlit.runtime.scriptrunner import script_runner as _SR
_runs, _orig_run, _orig_end = os.environ["CLASSROOM_RUNS"], _SR.ScriptRunner._run_script, _SR.ScriptRunner._on_script_finished
def _run_script(self, rerun_data):
    self._classroom_t = time.thread_time()
    return _orig_run(self, rerun_data)
def _on_script_finished(self, ctx, event, *a, **k):
    t = time.thread_time()
    with _lock, open(_runs, "a") as f:
        f.write(json.dumps([self._session_id, getattr(event, "name", str(event)),
                            round(t - getattr(self, "_classroom_t", t), 4)]) + "\n")
    self._classroom_t = t
    return _orig_end(self, ctx, event, *a, **k)
_SR.ScriptRunner._run_script = _run_script
_SR.ScriptRunner._on_script_finished = _on_script_finished
from streamlit.web import cli
sys.argv = ["streamlit", "run", os.environ["CLASSROOM_APP"]] + sys.argv[1:]
sys.exit(cli.main())
'''


# --floor: the least a Streamlit page with the same first chart costs. A title and one st.plotly_chart of
# FLOOR_MAPS heatmaps of n x n (the teacher's sentence's tokens on the built-in model), keyed "maps" so that
# FIRST_MAP finds it: plain plotly and streamlit, nothing of attnviz
FLOOR_APP = r'''
import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

st.set_page_config(page_title="floor", layout="wide")
st.title("Floor")
n, k = {n}, {k}
labels = [f"{{i}}·t{{i}}" for i in range(n)]
rng = np.random.default_rng(0)
fig = make_subplots(rows=1, cols=k, horizontal_spacing=0.05)
for c in range(k):
    z = rng.random((n, n))
    fig.add_trace(go.Heatmap(z=z / z.sum(1, keepdims=True), x=labels, y=labels, colorscale="Blues", showscale=False), 1, c + 1)
fig.update_layout(height=420, margin=dict(l=10, r=10, t=30, b=10))
st.plotly_chart(fig, theme=None, key="maps")
'''
FLOOR_MAPS = 3  # attention, rollout, ATTNRESLN: MethodInfo.default_view
FLOOR_TOKENS = {"builtin:agreement": 12, "pkg:smollm2": 5}  # TEXT's tokens (SmolLM2 reads up to the blank)


def floor_app(n_tokens: int, k: int = FLOOR_MAPS) -> Path:
    """A temp folder's app.py: FLOOR_APP for k maps of n_tokens x n_tokens -> its path."""
    app = Path(tempfile.mkdtemp(prefix="classroom_floor_")) / "app.py"
    app.write_text(FLOOR_APP.format(n=int(n_tokens), k=int(k)))
    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# what `attnviz app --serve` gives streamlit (attnviz.cli.SERVE_OPTIONS): no file watcher, no rerun on save,
# the viewer's toolbar. A development server (`streamlit run app.py`, --watch here) watches every module's
# file and walks the checkout on every new session
SERVE_OPTIONS = ("--client.toolbarMode", "viewer", "--server.fileWatcherType", "none", "--server.runOnSave", "false",
                 "--browser.gatherUsageStats", "false", "--server.enableXsrfProtection", "true")


STREAMLIT_ARGS: list = []  # --streamlit-arg: more options for every server this bench starts


def start_server(root: Path, count_log: Path, log: Path, app: Optional[Path] = None, watch: bool = False):
    """`streamlit run` of root's app.py (or app) through LAUNCHER, as `attnviz app --serve` runs it (watch:
    as a development server, file watching on) -> (process, base URL) once it accepts connections."""
    port = free_port()
    launcher = Path(tempfile.mkdtemp()) / "launch.py"
    launcher.write_text(LAUNCHER)
    env = dict(os.environ, ATTNVIZ_TORCH_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", ATTNVIZ_CACHE_DIR="off", CLASSROOM_ROOT=str(root), CLASSROOM_COUNT=str(count_log),
               CLASSROOM_APP=str(app or root / "app.py"), CLASSROOM_RUNS=str(count_log.with_suffix(".runs")),
               CLASSROOM_FLOOR="1" if app else "0",
               PYTHONPATH=str(root))
    if not watch:
        env["ATTNVIZ_SERVE_MODELS"] = "[]"  # --serve: the built-in and packaged models only
    opts = ["--browser.gatherUsageStats", "false"] if watch else list(SERVE_OPTIONS)
    opts += STREAMLIT_ARGS
    proc = subprocess.Popen([sys.executable, str(launcher), "--server.address", "127.0.0.1", "--server.headless", "true",
                             "--server.port", str(port), *opts],
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


def stop(proc) -> None:
    """Terminate a server started by start_server, killing it if it has not exited within 20 s."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


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


def _chrome_cpu(skip: set) -> Counter:
    """CPU seconds of this process's children outside skip (the server), by Chromium process type."""
    out = Counter()
    for p in psutil.Process(os.getpid()).children(recursive=True):
        if p.pid in skip:
            continue
        try:
            cmd, t = p.cmdline(), p.cpu_times()
        except psutil.Error:
            continue
        kind = next((a.split("=", 1)[1] for a in cmd if a.startswith("--type=")), None)
        if kind == "utility":
            kind = next((a.split("=", 1)[1].split(".")[-1] for a in cmd if a.startswith("--utility-sub-type=")), kind)
        out[kind or ("browser" if cmd and "chrom" in cmd[0] else "driver")] += t.user + t.system
    return out


async def _one_page(pw, domain: str):
    """(browser, context, page, CDP session with `domain` enabled): one headless Chromium tab at 1280 × 900."""
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await ctx.new_page()
    cdp = await ctx.new_cdp_session(page)
    await cdp.send(domain)
    return browser, ctx, page, cdp


async def one_tab(url: str, server_pid: int, quiet_s: float = 3.0, timeout_s: float = 600.0) -> dict:
    """One browser, one tab on url, alone: seconds to the first heatmap and to the last websocket message
    (then quiet_s without one); CPU seconds of each Chromium process type and of the server over that
    time; Chromium's own counters (CDP Performance.getMetrics: task, script, layout, style seconds); the
    server's messages by kind (Streamlit's ForwardMsg, new elements by type) with their bytes, and the
    browser's (BackMsg); the page's DOM nodes, iframes and plotly charts; the HTTP requests."""
    from playwright.async_api import async_playwright
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    sp = psutil.Process(server_pid)
    skip = {sp.pid} | {c.pid for c in sp.children(recursive=True)}
    got, sent, http, last = [], [], [], [time.time()]

    def received(p):
        last[0] = time.time()
        if isinstance(p, bytes):
            got.append(p)

    def posted(p):
        if isinstance(p, bytes):
            sent.append(p)

    async with async_playwright() as pw:
        browser, ctx, page, cdp = await _one_page(pw, "Performance.enable")
        page.on("websocket", lambda ws: (ws.on("framereceived", received), ws.on("framesent", posted)))
        page.on("requestfinished", lambda r: http.append(r.url))
        c0, s0, t0 = _chrome_cpu(skip), sp.cpu_times(), time.time()
        await page.goto(url, timeout=timeout_s * 1000)
        await page.wait_for_selector(FIRST_MAP, timeout=timeout_s * 1000)
        t_map = time.time() - t0
        while time.time() - last[0] < quiet_s and time.time() - t0 < timeout_s:
            await asyncio.sleep(0.2)
        c1, s1 = _chrome_cpu(skip), sp.cpu_times()
        met = {m["name"]: m["value"] for m in (await cdp.send("Performance.getMetrics"))["metrics"]}
        dom = await page.evaluate("""() => ({nodes: document.getElementsByTagName('*').length,
            iframes: document.querySelectorAll('iframe').length,
            plotly_charts: document.querySelectorAll('.js-plotly-plot').length})""")
        await browser.close()
    kinds, nbytes = Counter(), Counter()
    for p in got:
        m = ForwardMsg.FromString(p)
        k = m.WhichOneof("type")
        if k == "delta":
            k = m.delta.WhichOneof("type")
            if k == "new_element":
                k = m.delta.new_element.WhichOneof("type")
        kinds[k] += 1
        nbytes[k] += len(p)
    back = Counter(BackMsg.FromString(p).WhichOneof("type") for p in sent)
    cpu = {k: round(c1[k] - c0.get(k, 0), 2) for k in c1 if k != "driver"}
    return dict(t_map_s=round(t_map, 2), t_last_msg_s=round(last[0] - t0, 2), browser_cpu_s=round(sum(cpu.values()), 2),
                browser_cpu_by_process=cpu, server_cpu_s=round(sum(s1[:2]) - sum(s0[:2]), 2),
                chromium={k: round(met[k], 3) for k in ("TaskDuration", "ScriptDuration", "LayoutDuration",
                                                        "RecalcStyleDuration") if k in met},
                dom=dom, messages=dict(kinds.most_common()), message_bytes=dict(nbytes.most_common()),
                ws_bytes=sum(nbytes.values()), browser_messages=dict(back), http_requests=len(http),
                script_runs=kinds.get("script_finished", 0))


def one_tab_bench(root: Path, spec: str, k: int, app: Optional[Path] = None, watch: bool = False) -> dict:
    """A fresh server, one tab that computes the teacher's link, then k tabs one after another on the cached
    results (a fresh browser each) -> the first tab's and the k tabs' one_tab numbers (medians)."""
    work = Path(tempfile.mkdtemp(prefix="classroom_tab_"))
    proc, base = start_server(root, work / "computed.jsonl", work / "server.log", app=app, watch=watch)
    try:
        url = f"{base}/?model={quote(spec)}&text={quote(TEXT)}"
        first = asyncio.run(one_tab(url, proc.pid))
        tabs = [asyncio.run(one_tab(url, proc.pid)) for _ in range(k)]
    finally:
        stop(proc)
    med = {key: round(statistics.median(t[key] for t in tabs), 2)
           for key in ("t_map_s", "t_last_msg_s", "browser_cpu_s", "server_cpu_s", "ws_bytes")}
    med["chromium"] = {key: round(statistics.median(t["chromium"][key] for t in tabs), 3) for key in tabs[0]["chromium"]}
    return dict(spec=spec, app="floor" if app else "attnviz", watch=watch, first=first, cached=tabs[-1], median=med,
                tabs=k, load_avg=os.getloadavg())


def print_tab(r: dict) -> None:
    what = "floor" if r["app"] == "floor" else "attnviz"
    m, c = r["median"], r["cached"]
    print(f"\n{r['spec']}, one tab alone, {what}" + (" (development server)" if r["watch"] else "") + ":")
    print(f"  the first tab (computes): first heatmap {r['first']['t_map_s']} s, browser CPU {r['first']['browser_cpu_s']} s, "
          f"server CPU {r['first']['server_cpu_s']} s, {r['first']['script_runs']} script runs")
    print(f"  {r['tabs']} tabs on cached results (medians): first heatmap {m['t_map_s']} s, last message {m['t_last_msg_s']} s; "
          f"browser CPU {m['browser_cpu_s']} s, server CPU {m['server_cpu_s']} s; Chromium's counters {m['chromium']}")
    print(f"  the last tab: browser CPU by process {c['browser_cpu_by_process']}; {c['script_runs']} script runs; "
          f"DOM {c['dom']}; {c['http_requests']} HTTP requests; {c['ws_bytes']:,} bytes over the websocket")
    print(f"    messages: {c['messages']}")
    print(f"    bytes:    {c['message_bytes']}")
    print(f"    sent by the browser: {c['browser_messages']}; load average {', '.join(f'{x:.1f}' for x in r['load_avg'])}")


async def capture_session(url: str, timeout_s: float = 600.0) -> dict:
    """One browser session on url, recorded for replay_class: the HTTP requests it made (in order), the
    websocket's URL and handshake headers (Streamlit's subprotocol carries the XSRF token), the cookies,
    and the messages the browser sent over the websocket."""
    from playwright.async_api import async_playwright

    reqs, sent, hs = [], [], {}
    async with async_playwright() as pw:
        browser, ctx, page, cdp = await _one_page(pw, "Network.enable")
        cdp.on("Network.webSocketWillSendHandshakeRequest", lambda e: hs.update(e["request"]["headers"]))
        page.on("requestfinished", lambda r: reqs.append(r.url))
        page.on("websocket", lambda ws: (hs.update(ws_url=ws.url), ws.on("framesent", lambda p: sent.append(p))))
        await page.goto(url, timeout=timeout_s * 1000)
        await page.wait_for_selector(FIRST_MAP, timeout=timeout_s * 1000)
        await asyncio.sleep(2)
        cookies = await ctx.cookies()
        await browser.close()
    return dict(requests=reqs, sent=[p for p in sent if isinstance(p, bytes)], handshake=hs,
                cookie="; ".join(f"{c['name']}={c['value']}" for c in cookies))


async def replay_class(session: dict, n: int, files: bool, timeout_s: float = 600.0) -> list:
    """n clients at once, each replaying a captured browser session with no browser: the page (and, with
    files, every static file it loaded, 6 at a time as a browser fetches them), then the websocket with the
    browser's first message (the script run it asks for) -> per client (seconds to the files, seconds to
    the first heatmap's figure)."""
    import urllib.request

    import websockets

    hdr = {"Cookie": session["cookie"]} if session["cookie"] else {}
    hs = session["handshake"]
    proto = [p.strip() for p in hs.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    page = [u for u in session["requests"] if "/static/" not in u and "/_stcore/" not in u][:1]
    static = [u for u in session["requests"] if "/static/" in u] if files else []

    def get(u):
        with urllib.request.urlopen(urllib.request.Request(u, headers=hdr), timeout=timeout_s) as r:
            return len(r.read())

    async def client(t0):
        sem = asyncio.Semaphore(6)

        async def one(u):
            async with sem:
                return await asyncio.to_thread(get, u)

        await asyncio.gather(*(one(u) for u in page))
        await asyncio.gather(*(one(u) for u in static))
        t_files = time.time() - t0
        async with websockets.connect(hs["ws_url"], subprotocols=proto, additional_headers=hdr, max_size=None,
                                      open_timeout=timeout_s) as ws:
            await ws.send(session["sent"][0])
            while True:
                m = await asyncio.wait_for(ws.recv(), timeout_s)
                if isinstance(m, bytes) and b'"heatmap"' in m:
                    return t_files, time.time() - t0

    t0 = time.time()
    return await asyncio.gather(*(client(t0) for _ in range(n)))


def no_browser_bench(root: Path, spec: str, n: int, app: Optional[Path] = None) -> dict:
    """The server's share of a class: a fresh server, one browser session recorded on the teacher's link
    (it computes and caches the results), then n clients at once replaying it with no browser, first with
    every static file fetched (new visitors), then with only the page (files in the browsers' cache, or
    served by a proxy) -> times to the first heatmap's figure and the server's CPU seconds for each."""
    work = Path(tempfile.mkdtemp(prefix="classroom_replay_"))
    proc, base = start_server(root, work / "computed.jsonl", work / "server.log", app=app)
    out = dict(spec=spec, app="floor" if app else "attnviz", sessions=n)
    try:
        session = asyncio.run(capture_session(f"{base}/?model={quote(spec)}&text={quote(TEXT)}"))
        out["requests"] = len(session["requests"])
        sp, me = psutil.Process(proc.pid), psutil.Process(os.getpid())
        for files in (True, False):
            c0, m0 = sum(sp.cpu_times()[:2]), sum(me.cpu_times()[:2])
            got = asyncio.run(replay_class(session, n, files))
            ts = sorted(t for _, t in got)
            out["with_files" if files else "page_only"] = dict(
                files_p50_s=statistics.median(f for f, _ in got), p50_s=statistics.median(ts), p95_s=pct(ts, 0.95),
                max_s=ts[-1], server_cpu_s=sum(sp.cpu_times()[:2]) - c0, clients_cpu_s=sum(me.cpu_times()[:2]) - m0,
                load_avg=os.getloadavg())
    finally:
        stop(proc)
    return out


def print_no_browser(r: dict) -> None:
    print(f"\n{r['spec']}, {r['app']}: {r['sessions']} clients at once replaying one browser session ({r['requests']} "
          "HTTP requests and the websocket), no browser:")
    for k, what in (("with_files", "new visitors (every static file fetched)"),
                    ("page_only", "the page and the websocket only (static files cached)")):
        x = r[k]
        print(f"  {what}: first heatmap's figure p50 {x['p50_s']:.1f} s, p95 {x['p95_s']:.1f} s, max {x['max_s']:.1f} s"
              + (f" (files done at p50 {x['files_p50_s']:.1f} s)" if k == "with_files" else "")
              + f"; server CPU {x['server_cpu_s']:.1f} s, the clients' {x['clients_cpu_s']:.1f} s; load average "
              f"{', '.join(f'{v:.1f}' for v in x['load_avg'])}")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run_stats(runs: list) -> dict:
    """The launcher's script-run log [session, how it ended, thread CPU s] -> script runs a session (min,
    median, max; a run cut short by st.rerun counts as one), fragment runs a session, and the script
    threads' CPU seconds in all."""
    full, frag = Counter(), Counter()
    for sid, event, _cpu in runs:
        (frag if event.startswith("FRAGMENT") else full)[sid] += 1
        full.setdefault(sid, 0)
    per = sorted(full.values())
    fr = sorted(frag.get(k, 0) for k in full)
    return dict(sessions=len(full), runs=[per[0], statistics.median(per), per[-1]] if per else [],
                fragment_runs=[fr[0], statistics.median(fr), fr[-1]] if fr else [],
                reruns=sum(1 for r in runs if r[1] == "SCRIPT_STOPPED_FOR_RERUN"),
                script_cpu_s=round(sum(r[2] for r in runs), 2))


def bench_model(root: Path, spec: str, n: int, timeout_s: float, render: bool = True, app: Optional[Path] = None,
                watch: bool = False) -> dict:
    """One fresh server (root's app.py, or app: the floor), a warm-up page, then n sessions at once on the
    teacher's link and one late tab -> the numbers main() prints."""
    work = Path(tempfile.mkdtemp(prefix="classroom_"))
    count_log = work / "computed.jsonl"
    proc, base = start_server(root, count_log, work / "server.log", app=app, watch=watch)
    try:
        warm = asyncio.run(open_all(f"{base}/?model={quote(spec)}&text={quote(WARM_TEXT)}", 1, timeout_s))[0]
        count_log.write_text("")
        runs_log = count_log.with_suffix(".runs")
        runs_log.write_text("")
        load0 = os.getloadavg()
        sampler = Sampler(proc.pid)
        server = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        s_cpu0 = cpu_seconds(server)
        t0 = time.time()
        url = f"{base}/?model={quote(spec)}&text={quote(TEXT)}"
        times = asyncio.run(open_all(url, n, timeout_s, render))
        wall = time.time() - t0
        s_cpu = cpu_seconds(server) - s_cpu0
        b_cpu = sum(sampler.browser_cpu.values())
        runs = [json.loads(line) for line in runs_log.read_text().splitlines()]
        late = asyncio.run(open_all(url, 1, timeout_s, render))[0]
        sampler.stop()
        counts = Counter()
        secs = Counter()
        for line in count_log.read_text().splitlines():
            key, s = json.loads(line)
            counts[key] += 1
            secs[key] += s
        ok = [t for t in times if isinstance(t, float)]
        return dict(spec=spec, root=str(root), app="floor" if app else "attnviz", watch=watch, sessions=n, render=render, warmup_s=warm, ok=len(ok),
                    failed=[t for t in times if not isinstance(t, float)],
                    p50_s=statistics.median(ok) if ok else None, p95_s=pct(ok, 0.95) if ok else None,
                    max_s=max(ok) if ok else None, late_tab_s=late, wall_s=wall,
                    server_peak_mb=sampler.peak / 2 ** 20, server_cpu_s=s_cpu, browser_cpu_s=b_cpu,
                    load_before=load0, load_avg=os.getloadavg(), runs=run_stats(runs),
                    computed={k: [c, round(secs[k], 2)] for k, c in counts.items()})
    finally:
        stop(proc)


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


def report(r: dict) -> None:
    what = "floor (a title and one chart of the same maps, plain streamlit and plotly)" if r["app"] == "floor" else r["root"]
    print(f"\n{r['spec']} ({what}), {r['sessions']} sessions at once"
          + ("" if r["render"] else " (no chart drawn: time to the first heatmap's figure received)")
          + (" (development server: file watching on)" if r["watch"] else "") + ":")
    print(f"  first heatmap: p50 {r['p50_s']:.1f} s, p95 {r['p95_s']:.1f} s, max {r['max_s']:.1f} s"
          f" ({r['ok']} drew it; failed: {r['failed'] or 'none'}); all done after {r['wall_s']:.1f} s")
    print(f"  a late tab once cached: {r['late_tab_s'] if isinstance(r['late_tab_s'], str) else round(r['late_tab_s'], 1)} s;"
          f" warm-up page (model load): {r['warmup_s'] if isinstance(r['warmup_s'], str) else round(r['warmup_s'], 1)} s")
    print(f"  server: peak RSS {r['server_peak_mb']:.0f} MB, CPU {r['server_cpu_s']:.1f} s during the run; "
          f"browsers: CPU {r['browser_cpu_s']:.1f} s; load average before: "
          f"{', '.join(f'{x:.1f}' for x in r['load_before'])}, after: {', '.join(f'{x:.1f}' for x in r['load_avg'])}")
    ru = r["runs"]
    if ru["runs"]:
        print(f"  script runs a session (min/median/max): {'/'.join(f'{x:g}' for x in ru['runs'])}, fragment runs "
              f"{'/'.join(f'{x:g}' for x in ru['fragment_runs'])}, {ru['reruns']} cut short by st.rerun in all; the "
              f"script threads' CPU {ru['script_cpu_s']:.1f} s "
              f"of the server's ({ru['sessions']} sessions)")
    if r["app"] != "floor":
        print("  computed (times, seconds in all):")
        for k, (c, s) in sorted(r["computed"].items(), key=lambda kv: -kv[1][0]):
            print(f"    {c:3d}x  {s:7.2f} s  {k}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="builtin:agreement,pkg:smollm2")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose app.py to serve")
    ap.add_argument("--timeout", type=float, default=900.0, help="hang guard per session (s)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-render", action="store_true",
                    help="the browsers draw no chart: time to the first heatmap's figure arriving over each session's websocket")
    ap.add_argument("--floor", action="store_true",
                    help="after each model, the same bench on a trivial page with the same first chart (FLOOR_APP)")
    ap.add_argument("--watch", action="store_true",
                    help="run the server as a development server (file watching on) instead of as `attnviz app --serve`")
    ap.add_argument("--streamlit-arg", action="append", default=[], metavar="OPTION=VALUE",
                    help="one more option for the servers, e.g. --streamlit-arg=--runner.postScriptGC=false")
    ap.add_argument("--no-browser", action="store_true",
                    help="the server's share: --sessions clients replay one recorded browser session at once, no browser")
    ap.add_argument("--one-tab", type=int, default=0, metavar="K",
                    help="no class: one tab alone, k times on cached results (browser and server CPU, messages, DOM)")
    ap.add_argument("--server-only", type=int, default=0, metavar="N",
                    help="no browsers: N sessions of the page script (AppTest) on cached results, CPU per session")
    args = ap.parse_args(argv)
    STREAMLIT_ARGS[:] = [a for opt in args.streamlit_arg for a in opt.split("=", 1)]
    out = []
    if args.no_browser:
        for spec in args.models.split(","):
            spec = spec.strip()
            for app in [None] + ([floor_app(FLOOR_TOKENS.get(spec, 12))] if args.floor else []):
                r = no_browser_bench(Path(args.root).resolve(), spec, args.sessions, app=app)
                out.append(r)
                print_no_browser(r)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return 0
    if args.one_tab:
        for spec in args.models.split(","):
            spec = spec.strip()
            for app in [None] + ([floor_app(FLOOR_TOKENS.get(spec, 12))] if args.floor else []):
                r = one_tab_bench(Path(args.root).resolve(), spec, args.one_tab, app=app, watch=args.watch)
                out.append(r)
                print_tab(r)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return 0
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
        spec = spec.strip()
        r = bench_model(Path(args.root).resolve(), spec, args.sessions, args.timeout, not args.no_render,
                        watch=args.watch)
        out.append(r)
        report(r)
        if args.floor:  # the same harness on a page with nothing but the same first chart
            f = bench_model(Path(args.root).resolve(), spec, args.sessions, args.timeout, not args.no_render,
                            app=floor_app(FLOOR_TOKENS.get(spec, 12)), watch=args.watch)
            out.append(f)
            report(f)
            if r["p95_s"] and f["p95_s"]:
                print(f"  app / floor: p50 {r['p50_s'] / f['p50_s']:.2f}x, p95 {r['p95_s'] / f['p95_s']:.2f}x, browser CPU "
                      f"{r['browser_cpu_s'] / max(f['browser_cpu_s'], 1e-9):.2f}x, server CPU "
                      f"{r['server_cpu_s'] / max(f['server_cpu_s'], 1e-9):.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
