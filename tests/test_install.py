"""attnviz as a user gets it: the wheel, installed into a virtualenv outside the checkout, run from a
folder outside the checkout. `attnviz analyze` on the built-in model, an evaluation set, and `attnviz app`
serving Explore (in headless Chromium when playwright and /usr/bin/chromium are here).

The new virtualenv sees the dependencies of the Python running the tests through a .pth file (a plain
path line: the .pth files of that site-packages, the editable attnviz's finder among them, are not run),
so nothing is downloaded; attnviz itself comes only from the wheel."""
from __future__ import annotations

import hashlib
import json
import os
import site
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from attnviz import cli

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TEXT = "the keys to the cabinet [MASK] on the table ."
WHEEL_LIMIT = 40 * 2**20  # bytes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------ `attnviz app`, no server


def test_app_command_runs_streamlit_on_the_packaged_main_script(monkeypatch):
    """attnviz app execs `python -m streamlit run attnviz/app/main.py`, headless, on 127.0.0.1:8501 by
    default; --port / --address choose them; options attnviz does not know go to streamlit run."""
    calls = []

    def fake_execv(path, argv):
        calls.append((path, list(argv)))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", fake_execv)
    with pytest.raises(SystemExit):
        cli.main(["app"])
    path, argv = calls[-1]
    main = str(ROOT / "attnviz" / "app" / "main.py")
    assert path == sys.executable
    # no file watching: Streamlit's watcher walks every imported module for each new session
    assert argv == [sys.executable, "-m", "streamlit", "run", main, "--server.address", "127.0.0.1",
                    "--server.port", "8501", "--server.headless", "true", "--server.fileWatcherType", "none"]
    with pytest.raises(SystemExit):
        cli.main(["app", "--port", "9123", "--address", "0.0.0.0", "--theme.base", "dark"])
    assert calls[-1][1][5:] == ["--server.address", "0.0.0.0", "--server.port", "9123", "--server.headless", "true",
                                "--server.fileWatcherType", "none", "--theme.base", "dark"]
    # a developer who wants the watcher back says so, and only their value is passed
    with pytest.raises(SystemExit):
        cli.main(["app", "--server.fileWatcherType", "auto"])
    assert calls[-1][1][5:] == ["--server.address", "127.0.0.1", "--server.port", "8501", "--server.headless", "true",
                                "--server.fileWatcherType", "auto"]


def test_app_command_without_streamlit_says_what_to_install(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else find_spec(name, *a))
    monkeypatch.setattr(os, "execv", lambda *a: pytest.fail("started without streamlit"))
    assert cli.main(["app"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "streamlit" in err and "pip install streamlit" in err


def test_other_commands_still_refuse_unknown_options(capsys):
    assert cli.main(["methods", "--bogus"]) == 2  # argparse's refusal, as one line
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the wheel in a virtualenv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)]
    try:  # the build tools of this Python, when it has them: no download
        import setuptools  # noqa: F401
        import wheel as _wheel  # noqa: F401

        cmd.append("--no-build-isolation")
    except ImportError:
        pass
    subprocess.run(cmd, check=True, cwd=out, timeout=600)
    (whl,) = out.glob("attnviz-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict:
    """A virtualenv outside the checkout with the wheel installed -> {"bin": its bin folder, "env": the
    environment to run its commands in, "cwd": a folder outside the checkout}."""
    base = tmp_path_factory.mktemp("venv")
    assert ROOT not in base.parents
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # the wheel first, while the new environment sees nothing else (pip finds no attnviz to replace)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, timeout=600)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    (Path(purelib) / "zz_outer_env.pth").write_text("\n".join(sorted(p for p in ours if Path(p).is_dir())) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNVIZ_ASSETS", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", ATTNVIZ_TORCH_THREADS="1", VIRTUAL_ENV=str(venv))
    cwd = base / "work"
    cwd.mkdir()
    return {"bin": venv / "bin", "env": env, "cwd": cwd, "venv": venv}


@pytest.mark.slow
def test_wheel_holds_the_models_the_sets_and_the_app(wheel):
    assert wheel.stat().st_size <= WHEEL_LIMIT, f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB"
    names = set(zipfile.ZipFile(wheel).namelist())
    checkout = {p.relative_to(ROOT).as_posix() for d in ("attnviz/data/models", "attnviz/data/sets")
                for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert "attnviz/data/models/agreement/model.safetensors" in checkout
    assert checkout <= names, sorted(checkout - names)
    app = {p.relative_to(ROOT).as_posix() for p in (ROOT / "attnviz" / "app").rglob("*.py")}
    assert {"attnviz/app/main.py", "attnviz/app/ui.py", "attnviz/app/views/explore.py"} <= app
    assert app <= names, sorted(app - names)
    assert not [n for n in names if n.startswith(("tests/", "training/", "views/", "bench/"))]


@pytest.mark.slow
def test_installed_wheel_analyzes_loads_sets_and_serves_the_app(venv):
    run = dict(env=venv["env"], cwd=venv["cwd"], capture_output=True, text=True, timeout=900)
    py = str(venv["bin"] / "python")

    # attnviz, its models and its sets come from the new environment, not from the checkout
    where = subprocess.run([py, "-c", "import json, attnviz, attnviz.resources as r; print(json.dumps("
                            "[attnviz.__file__, str(r.models_dir()), str(r.sets_dir())]))"], **run)
    assert where.returncode == 0, where.stderr
    for p in json.loads(where.stdout):
        assert Path(p).is_relative_to(venv["venv"]), p
    models = Path(json.loads(where.stdout)[1])
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert digest(models / "agreement" / "model.safetensors") == \
        digest(ROOT / "attnviz" / "data" / "models" / "agreement" / "model.safetensors")

    # attnviz analyze on the built-in model
    r = subprocess.run([str(venv["bin"] / "attnviz"), "analyze", "--model", "builtin:agreement", "--text", TEXT,
                        "--out", "a.json"], **run)
    assert r.returncode == 0, r.stderr
    a = json.loads((venv["cwd"] / "a.json").read_text())
    assert a["tokens"] == ["[CLS]", "the", "keys", "to", "the", "cabinet", "[MASK]", "on", "the", "table", ".", "[SEP]"]
    assert a["target"] == 6
    assert len(a["prediction"]) >= 1 and all(isinstance(w, str) and 0 < p <= 1 for w, p in a["prediction"])
    choices = {tuple(words): probs for words, probs in a["choices"]}
    p_is, p_are = choices[("is", "are")]
    assert p_are > p_is  # "keys ... are": the built-in model gets this agreement right

    # an evaluation set: the first items are the packaged file's first lines
    r = subprocess.run([py, "-c", "import json; from attnviz.cli import read_data; "
                        "print(json.dumps(read_data('builtin:agreement', 3)))"], **run)
    assert r.returncode == 0, r.stderr
    lines = (ROOT / "attnviz" / "data" / "sets" / "agreement_test.jsonl").read_text().splitlines()[:3]
    assert json.loads(r.stdout) == [json.loads(line) for line in lines]

    # attnviz app serves Explore on builtin:agreement
    port = free_port()
    log = open(venv["cwd"] / "app.log", "w")
    proc = subprocess.Popen([str(venv["bin"] / "attnviz"), "app", "--port", str(port), "--browser.gatherUsageStats",
                             "false"], env=venv["env"], cwd=venv["cwd"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600  # a fresh venv's first import of torch and streamlit, on a loaded machine
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as resp:
                    if resp.status == 200 and resp.read().strip() == b"ok":
                        break
            except OSError:
                pass
            assert proc.poll() is None, (venv["cwd"] / "app.log").read_text()
            assert time.time() < deadline, "attnviz app did not answer within 600 s"
            time.sleep(0.5)
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200 and b"<title>Streamlit</title>" in resp.read()
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        if cmdline.exists():  # the server runs the wheel's app script
            argv = cmdline.read_bytes().split(b"\0")
            assert str(venv["venv"]).encode() in b" ".join(argv) and any(a.endswith(b"attnviz/app/main.py") for a in argv)
        if Path(CHROMIUM).exists():
            try:
                from playwright.sync_api import sync_playwright
            except ImportError:
                sync_playwright = None
            if sync_playwright is not None:
                with sync_playwright() as p:
                    b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                    try:
                        page = b.new_page(viewport={"width": 1280, "height": 900})
                        page.goto(url)
                        # the Explore maps: a heatmap whose y axis holds the default sentence's tokens
                        try:
                            page.wait_for_function(
                                """() => { const g = document.querySelector('.st-key-maps .js-plotly-plot');
                                           if (!g || !g.querySelector('.heatmaplayer')) return false;
                                           const t = [...g.querySelectorAll('.yaxislayer-above .ytick text')].map(e => e.textContent);
                                           return t.some(x => x.endsWith('keys')) && t.some(x => x.endsWith('cabinet')); }""", timeout=300_000)
                        except Exception as e:
                            log.flush()
                            raise AssertionError(f"no Explore maps: {e}\n--- page:\n{page.inner_text('body')[-3000:]}"
                                                 f"\n--- server log:\n{(venv['cwd'] / 'app.log').read_text()[-3000:]}") from None
                        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
                        assert "Explore" in nav
                        page.wait_for_function("() => new URLSearchParams(location.search).get('model') === 'builtin:agreement'",
                                               timeout=60_000)
                    finally:
                        b.close()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
