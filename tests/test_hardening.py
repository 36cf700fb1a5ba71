"""Hardening (issue 13): no remote code, a self-check NaN cannot pass, no hub hangs, one-line errors,
builtin names only, quiet Ctrl-C, a warning before long inputs.

The CLI is run as a real process where the behaviour depends on it (stdin prompts, argv bytes,
signals, environment read at import), else in process through main()."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz import export
from attnviz.cli import main
from attnviz.errors import InputError, ModelLoadError

from conftest import SENTENCE, open_app_page, tiny_configs

ROOT = Path(__file__).resolve().parents[1]
AGREEMENT = ROOT / "attnviz" / "data" / "models" / "agreement"
needs_agreement = pytest.mark.skipif(not (AGREEMENT / "config.json").is_file(), reason="builtin:agreement not built")


def _sigint_as_in_a_terminal():
    """preexec_fn: Ctrl-C's default action in the child. A suite started as a background job of a
    non-interactive shell (`... &`) inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt: the Ctrl-C tests would test nothing (and fail)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    for k, v in kw.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_cli(args, *, env=None, input=None, timeout=600):
    """`attnviz ARGS` as a process (python -m attnviz.cli: the console script's main())."""
    cmd = [sys.executable, "-m", "attnviz.cli", *args]
    return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, env=env or _env(), cwd=ROOT)


def _one_line_error(stderr) -> str:
    err = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


@pytest.fixture(scope="module")
def tiny_folder(tiny_bert_folder):
    return tiny_bert_folder


# ---------------------------------------------------------------- 1. remote code never runs
_CONFIG_PY = """
import pathlib
pathlib.Path({marker!r}).write_text("configuration code ran")
from transformers import PretrainedConfig
class EvilConfig(PretrainedConfig):
    model_type = "evilnet"
"""
_MODELING_PY = """
import pathlib
pathlib.Path({marker!r}).write_text("modeling code ran")
from transformers import PreTrainedModel
from .configuration_evil import EvilConfig
class EvilModel(PreTrainedModel):
    config_class = EvilConfig
"""


def _evil_folder(d: Path, tokenizer, marker: Path, model_type: str = "evilnet") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(d)  # a real tokenizer: the refusal must come from the code, not a missing file
    cfg = {"model_type": model_type, "architectures": ["EvilModel"],
           "auto_map": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel",
                        "AutoModelForMaskedLM": "modeling_evil.EvilModel"},
           "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
           "vocab_size": tokenizer.vocab_size}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "configuration_evil.py").write_text(_CONFIG_PY.format(marker=str(marker)))
    (d / "modeling_evil.py").write_text(_MODELING_PY.format(marker=str(marker)))
    tc = json.loads((d / "tokenizer_config.json").read_text())
    tc["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (d / "tokenizer_config.json").write_text(json.dumps(tc))
    (d / "tokenization_evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('tokenizer code ran')\n")
    return d


@pytest.mark.slow  # a fresh Python that imports torch
def test_model_folder_code_never_runs_even_when_stdin_says_yes(tmp_path, tokenizer):
    marker = tmp_path / "MARKER"
    folder = _evil_folder(tmp_path / "evil", tokenizer, marker)
    r = run_cli(["analyze", "--model", str(folder), "--text", SENTENCE, "--out", str(tmp_path / "a.json")],
                input=b"y\n" * 50)
    assert not marker.exists(), marker.read_text()
    assert r.returncode == 2, r.stderr
    line = _one_line_error(r.stderr)
    assert "code" in line and str(folder) in line
    # no prompt (transformers asks "Do you wish to run the custom code? [y/N]" on stdout and waits 15 s)
    assert b"[y/N]" not in r.stdout + r.stderr and b"custom code" not in r.stdout


def test_known_model_type_with_auto_map_loads_the_native_class_without_the_code(tmp_path, tokenizer):
    """A bert config that also names code: the library's own BERT is used, the folder's .py never runs."""
    import transformers as T

    marker = tmp_path / "MARKER"
    folder = tmp_path / "bertish"
    cls, cfg = tiny_configs(tokenizer.vocab_size)["bert"]
    cls._from_config(cfg).save_pretrained(folder)
    _evil_folder(folder, tokenizer, marker, model_type="bert")
    c = json.loads((folder / "config.json").read_text())
    c.update(cfg.to_dict(), architectures=["BertForMaskedLM"], auto_map=c["auto_map"])
    (folder / "config.json").write_text(json.dumps(c))
    try:
        lm = attnviz.load_model(str(folder))
        assert type(lm.model) is T.BertForMaskedLM
    except ModelLoadError as e:
        assert "\n" not in str(e)
    assert not marker.exists()


def test_every_from_pretrained_call_says_trust_remote_code_false():
    """Source check: every transformers from_pretrained call in the package passes trust_remote_code=False."""
    import re

    calls = []
    for p in (ROOT / "attnviz").rglob("*.py"):
        src = p.read_text()
        for m in re.finditer(r"\.from_pretrained\(", src):
            depth, k = 1, m.end()
            while depth and k < len(src):
                depth += {"(": 1, ")": -1}.get(src[k], 0)
                k += 1
            call = src[m.start():k]
            if "f'" in src[max(0, m.start() - 80):m.start()] or 'f"' in src[max(0, m.start() - 80):m.start()]:
                continue  # text inside an f-string (a printed example), not a call
            calls.append((p.name, call))
    assert calls
    missing = [(f, c) for f, c in calls if "trust_remote_code=False" not in c]
    assert not missing, missing


# ---------------------------------------------------------------- 2. NaN cannot pass the self-check
def _nan_model(tokenizer, family="bert"):
    from attnviz.models.load import wrap

    cls, cfg = tiny_configs(tokenizer.vocab_size)[family]
    torch.manual_seed(0)
    model = cls._from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        if family == "bert":
            model.bert.encoder.layer[0].attention.self.query.weight[3, 5] = float("nan")
        elif family == "gpt2":
            model.transformer.h[0].attn.c_attn.weight[5, 3] = float("nan")
        else:
            model.model.layers[0].self_attn.q_proj.weight[3, 5] = float("nan")
    return model, wrap(model, tokenizer, spec=f"nan:{family}")


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_self_check_fails_on_nan(tokenizer, family):
    _, lm = _nan_model(tokenizer, family)
    assert not lm.check.ok
    assert "not finite" in lm.check.reason and "\n" not in lm.check.reason
    assert not lm.decompositions_ok
    assert "still works" not in lm.disabled_reason  # NaN attention does not "work" either


def test_self_check_function_treats_nan_errors_as_failures(make_tiny, monkeypatch):
    """Even a NaN error value (not only NaN outputs) fails: `nan > tol` is False, so the check must not rely on it."""
    from attnviz.models import check as T

    lm = make_tiny("bert")
    real = T.rel_err
    calls = {"n": 0}

    def rel(a, b):
        calls["n"] += 1
        return float("nan") if calls["n"] == 1 else real(a, b)

    monkeypatch.setattr(T, "rel_err", rel)
    c = T.self_check(lm)
    assert not c.ok and c.reason


def _strict_json(text: str):
    def bad(x):
        raise AssertionError(f"non-standard JSON constant {x}")

    return json.loads(text, parse_constant=bad)


def test_exports_never_write_nan_silently(tokenizer, tmp_path):
    _, lm = _nan_model(tokenizer)
    a = attnviz.analyze(lm, SENTENCE)
    assert not np.isfinite(a.maps["attention"].layer).all()  # the model really outputs NaN
    assert any("not finite" in n for n in a.notes)
    d = _strict_json(export.to_json(a))
    assert d["maps"]["attention"]["layer"][0][0][0] is None
    assert d["nonfinite"] and "attention" in " ".join(d["nonfinite"])
    assert any("null" in n and "not finite" in n for n in d["notes"])
    z = export.read_npz(export.to_npz(a))
    assert z["nonfinite"] and "maps/attention/layer" in z["nonfinite"]
    ok = attnviz.analyze(attnviz.models.load.wrap(*_fresh_bert(tokenizer), spec="ok"), SENTENCE, methods=["attention"])
    assert _strict_json(export.to_json(ok))["nonfinite"] == []
    assert export.read_npz(export.to_npz(ok))["nonfinite"] == []


def _fresh_bert(tokenizer):
    cls, cfg = tiny_configs(tokenizer.vocab_size)["bert"]
    torch.manual_seed(0)
    return cls._from_config(cfg, attn_implementation="eager"), tokenizer


def test_cli_says_why_when_values_are_not_finite(tokenizer, tmp_path, capsys):
    model, _ = _nan_model(tokenizer)
    folder = tmp_path / "nan_bert"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "a.json"
    rc = main(["analyze", "--model", str(folder), "--text", SENTENCE, "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    d = _strict_json(out.read_text())
    assert d["nonfinite"]
    assert "not finite" in cap.err and "null" in cap.err and "Traceback" not in cap.err
    out = tmp_path / "a.npz"
    assert main(["analyze", "--model", str(folder), "--text", SENTENCE, "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "not finite" in cap.err and "nonfinite" in cap.err
    assert export.read_npz(out.read_bytes())["nonfinite"]


# ---------------------------------------------------------------- 3. a hub that never answers
@pytest.fixture
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    conns, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield srv.getsockname()[1], conns
    stop.set()
    th.join(2)
    for c in conns:
        c.close()
    srv.close()


@pytest.mark.slow  # a fresh Python that imports torch
def test_hub_that_never_answers_fails_within_seconds(silent_server, tmp_path):
    port, conns = silent_server
    env = _env(HF_HUB_OFFLINE=None, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"),
               ATTNVIZ_HUB_TIMEOUT="2", HTTPS_PROXY=None, HTTP_PROXY=None, ALL_PROXY=None,
               https_proxy=None, http_proxy=None, all_proxy=None, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    r = run_cli(["analyze", "--model", "someorg/some-model", "--text", "a b c", "--out", str(tmp_path / "a.json")],
                env=env)  # a request without a timeout would wait forever: run_cli's timeout fails the test
    assert conns, "the CLI never contacted the local endpoint"
    assert r.returncode == 2, r.stderr
    line = _one_line_error(r.stderr)
    assert "hf download someorg/some-model --local-dir" in line and "huggingface-cli" not in line
    # the first request that waited gave up (its read timeout, or its deadline's watchdog, at the same moment)
    assert "within 2 s (ATTNVIZ_HUB_TIMEOUT)" in line and ("did not answer" in line or "did not send" in line)
    sent = []  # what the CLI sent on each connection (it has exited: a read returns at once)
    for c in list(conns):
        c.settimeout(10)
        try:
            sent.append(c.recv(65536))
        except OSError:
            sent.append(b"")
    assert sum(q.startswith(b"GET /api/models/someorg/some-model") for q in sent) <= 1, sent  # not sent again


def test_hub_timeout_default_is_bounded():
    from attnviz.models import load

    assert 0 < load.hub_timeout() <= 30


# ---------------------------------------------------------------- 6. one-line errors, exit status 2
@pytest.mark.slow  # a fresh Python that imports torch
@needs_agreement
def test_invalid_utf8_on_the_command_line(tmp_path):
    r = run_cli([b"analyze", b"--model", b"builtin:agreement", b"--text", b"the keys \xff\xfe [MASK] .",
                 b"--out", str(tmp_path / "a.json").encode()])
    assert r.returncode == 2
    assert "UTF-8" in _one_line_error(r.stderr)
    assert not (tmp_path / "a.json").exists()


@pytest.mark.parametrize("text", ["the cat \ud800 [MASK] .", "\udcff", "ok \udfff"])
def test_lone_surrogate_is_an_input_error(make_tiny, text):
    lm = make_tiny("bert")
    with pytest.raises(InputError) as e:
        attnviz.analyze(lm, text)
    assert "UTF-8" in str(e.value) and "\n" not in str(e.value)
    from attnviz.trace import encode

    with pytest.raises(InputError):
        encode(lm, text)


@pytest.fixture
def no_model_load(monkeypatch):
    """Argument errors must come before the (slow) model load."""
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(attnviz, "load_model", refuse)


@pytest.mark.parametrize("flag,value,words", [("--threads", "-1", "--threads"), ("--threads", "0", "--threads"),
                                              ("--ig-steps", "0", "--ig-steps"), ("--ig-steps", "-1", "--ig-steps")])
def test_ranges_are_checked(flag, value, words, tmp_path, capsys, no_model_load):
    rc = main(["analyze", "--model", "builtin:agreement", "--text", SENTENCE, "--out", str(tmp_path / "a.json"),
               flag, value, "--faithfulness"])
    assert rc == 2
    line = _one_line_error(capsys.readouterr().err)
    assert words in line and value in line


def _unwritable_dir(tmp_path):
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o500)
        return d
    for d in (Path("/sys"), Path("/proc")):  # root: a place even root cannot create files in
        try:
            (d / "attnviz-probe.json").open("w").close()
        except OSError:
            return d
    pytest.skip("no unwritable directory available")


@pytest.mark.parametrize("case", ["directory", "empty", "under_a_file", "unwritable"])
def test_out_is_checked_before_the_work(case, tmp_path, capsys, no_model_load):
    (tmp_path / "plain.txt").write_text("x")
    out = {"directory": str(tmp_path), "empty": "", "under_a_file": str(tmp_path / "plain.txt" / "a.json"),
           "unwritable": str(_unwritable_dir(tmp_path) / "a.json") if case == "unwritable" else ""}[case]
    rc = main(["analyze", "--model", "builtin:agreement", "--text", SENTENCE, "--out", out])
    assert rc == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "--out" in line


@pytest.mark.parametrize("suffix", [".json", ".npz"])
@pytest.mark.parametrize("existing", [False, True])
def test_write_failure_after_the_work_is_one_line(tiny_folder, tmp_path, capsys, monkeypatch, suffix, existing):
    """A write that fails late (disk full when the data reaches the disk) is a one-line error and leaves no
    output behind: no empty or partial file, no temporary file, and an earlier output of ours unchanged."""
    out = tmp_path / f"a{suffix}"
    args = ["analyze", "--model", str(tiny_folder), "--text", SENTENCE, "--out", str(out), "--methods", "attention"]
    if existing:
        assert main(args) == 0
        before = out.read_bytes()
    capsys.readouterr()

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(args) == 2
    assert "No space left" in _one_line_error(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([out.name] if existing else [])
    if existing:
        assert out.read_bytes() == before


# ---------------------------------------------------------------- 7. builtin names, tokenizer, Ctrl-C, long inputs
@pytest.mark.parametrize("spec", ["builtin:agreement/../agreement", "builtin:../models/agreement",
                                  f"builtin:{AGREEMENT}", "builtin:/etc", "builtin:.", "builtin:a\\b", "builtin:"])
def test_builtin_specs_are_names_only(spec):
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(spec)
    assert "\n" not in str(e.value)
    assert "name" in str(e.value) or "unknown built-in" in str(e.value)


@needs_agreement
def test_builtin_escape_refused_from_the_app_url():
    from streamlit.testing.v1 import AppTest

    os.environ["ATTNVIZ_TORCH_THREADS"] = "1"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["model"] = f"builtin:{AGREEMENT}"
    at.query_params["text"] = SENTENCE
    at.run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error).replace("\\", "")  # the app escapes markdown
    assert "built-in" in errors and "name" in errors


def test_folder_without_tokenizer_is_refused(make_tiny, tmp_path):
    make_tiny("bert").model.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(str(tmp_path))
    assert "tokenizer" in str(e.value) and "\n" not in str(e.value)


_SIGINT_IN_LOAD = """
import os, signal, sys
import transformers
real = transformers.AutoConfig.from_pretrained.__func__
def interrupted(cls, *a, **k):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the model loads
    return real(cls, *a, **k)
transformers.AutoConfig.from_pretrained = classmethod(interrupted)
from attnviz.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a fresh Python that imports torch
def test_ctrl_c_during_model_load_is_quiet(tiny_folder, tmp_path):
    r = subprocess.run([sys.executable, "-c", _SIGINT_IN_LOAD, "analyze", "--model", str(tiny_folder), "--text",
                        SENTENCE, "--out", str(tmp_path / "a.json")], capture_output=True, timeout=600, env=_env(),
                       cwd=ROOT, preexec_fn=_sigint_as_in_a_terminal)
    err = r.stderr.decode()
    assert r.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "interrupted" in err and len(err.strip().splitlines()) == 1


_READY_THEN_MAIN = """
import os, pathlib, sys
from attnviz.cli import main
pathlib.Path(sys.argv[1] + ".tmp").write_text("ready")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # appears whole: Python has started, main() is next
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow  # a fresh Python that imports torch
def test_ctrl_c_anywhere_in_the_cli_is_quiet(tiny_folder, tmp_path):
    """Real SIGINTs at several moments after Python's own start-up (imports, model load, analysis,
    faithfulness), the processes side by side. (An interrupt inside the interpreter's own start-up,
    before any attnviz code runs, is Python's to report.)"""
    delays = [0.0, 0.3, 1.0, 2.5]
    procs = []
    for k, delay in enumerate(delays):
        ready = tmp_path / f"ready{k}"
        p = subprocess.Popen([sys.executable, "-c", _READY_THEN_MAIN, str(ready), "analyze", "--model",
                              str(tiny_folder), "--text", SENTENCE, "--out", str(tmp_path / f"a{k}.json"),
                              "--faithfulness"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=ROOT,
                             preexec_fn=_sigint_as_in_a_terminal)
        procs.append(dict(p=p, delay=delay, ready=ready, at=None, done=False))
    deadline = time.perf_counter() + 600  # four Pythons starting side by side on a loaded machine
    while not all(e["done"] for e in procs) and time.perf_counter() < deadline:
        for e in procs:
            if e["done"]:
                continue
            if e["at"] is None and e["ready"].exists():
                e["at"] = time.perf_counter() + e["delay"]
            if e["at"] is not None and time.perf_counter() >= e["at"]:
                e["p"].send_signal(signal.SIGINT)
                e["done"] = True
            elif e["p"].poll() is not None:
                e["done"] = True  # ended before the signal: the assertions below say how
        time.sleep(0.01)
    procs = [(e["p"], e["delay"]) for e in procs]
    for p, delay in procs:
        out, err = p.communicate(timeout=600)
        err = err.decode()
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err)
        # 130, or killed by SIGINT (which a shell also reports as 130): CPython re-raises SIGINT at exit when
        # the interrupt arrived inside C-level code run during an import, even though main() caught it.
        # 0 only if it finished before the signal.
        assert p.returncode in (130, -signal.SIGINT, 0), (delay, p.returncode, err)
        if p.returncode != 0:
            assert len(err.strip().splitlines()) <= 1, err
    assert sum(p.returncode != 0 for p, _ in procs) >= 3  # the signals did land mid-run


def test_long_input_warns_before_the_work(tokenizer):
    """A text far above the usual cap through the library: warned (with what it will cost) before computing."""
    import transformers as T
    from attnviz.models.load import wrap

    cfg = T.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    lm = wrap(T.BertForMaskedLM(cfg).eval(), tokenizer, spec="long")
    text = "the keys to the cabinet are here . " * 40  # ~320 tokens
    with pytest.warns(attnviz.LongInputWarning) as w:
        a = attnviz.analyze(lm, text, max_tokens=512, methods=["attention"])
    msg = str(w[0].message)
    assert "tokens" in msg and "minutes" in msg
    assert any("tokens" in n and "minutes" in n for n in a.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", attnviz.LongInputWarning)
        attnviz.analyze(lm, SENTENCE, methods=["attention"])  # a normal sentence: no warning
    with pytest.raises(InputError, match="limit is 128"):
        attnviz.analyze(lm, text)  # the default cap still refuses it outright


_INTERRUPT_IN_DEL = """
import sys
from attnviz import cli

class Finaliser:
    def __del__(self):
        raise KeyboardInterrupt  # what a Ctrl-C delivered while a library's __del__ runs looks like

def parser_then_finaliser():
    Finaliser()  # dropped at once: its __del__ runs here, inside main()
    print("went on after the interrupt", file=sys.stderr)
    return 0

cli.build_parser = parser_then_finaliser  # main() calls it first
sys.exit(cli.main(["analyze"]))
"""


def test_ctrl_c_inside_a_finaliser_still_interrupts_quietly():
    """Python cannot raise out of __del__; it prints "Exception ignored ... KeyboardInterrupt" with a traceback
    and goes on. The CLI treats it as the interrupt it is (the flaky case of the test above, made certain)."""
    p = subprocess.run([sys.executable, "-c", _INTERRUPT_IN_DEL], capture_output=True, text=True, env=_env(), cwd=ROOT,
                       timeout=600)
    assert p.returncode == 130, (p.returncode, p.stderr)
    assert p.stderr.strip() == "interrupted", p.stderr


# ---------------------------------------------------------------- 8. NaN beyond the probe sentence
def _bert_with(tokenizer, poison):
    """A tiny random BERT MLM with poison(model) applied to its weights (under no_grad)."""
    model, _ = _fresh_bert(tokenizer)
    with torch.no_grad():
        poison(model)
    return model


LONG = "the keys to the cabinet [MASK] on the table . " * 5  # 52 tokens: reaches position 40


@pytest.mark.parametrize("where", ["position 40", "token type 1", "an unused buffer", "inf in the output bias"])
def test_load_check_finds_nonfinite_weights_the_probe_never_reads(tokenizer, where):
    from attnviz.models.load import wrap

    def poison(m):
        if where == "position 40":
            m.bert.embeddings.position_embeddings.weight[40, 3] = float("nan")
        elif where == "token type 1":
            m.bert.embeddings.token_type_embeddings.weight[1] = float("nan")
        elif where == "an unused buffer":
            m.register_buffer("spare_scale", torch.tensor([1.0, float("nan")]))
        else:
            m.cls.predictions.bias[7] = float("inf")  # a vocabulary entry the probe's top answers never show

    model = _bert_with(tokenizer, poison)
    lm = wrap(model, tokenizer, spec="poisoned")
    assert not lm.check.ok and not lm.decompositions_ok
    name = {"position 40": "position_embeddings", "token type 1": "token_type_embeddings",
            "an unused buffer": "spare_scale", "inf in the output bias": "predictions.bias"}[where]
    assert "not finite" in lm.check.reason and name in lm.check.reason and "\n" not in lm.check.reason
    assert "not finite" in lm.disabled_reason and "still works" not in lm.disabled_reason
    if where == "position 40":
        assert "[40, 3]" in lm.check.reason  # the first bad value's index
    clean = wrap(_fresh_bert(tokenizer)[0], tokenizer, spec="clean")
    assert clean.check.ok  # the same model without the poison passes


def test_nonfinite_weights_of_an_unreadable_architecture_are_found(tokenizer, monkeypatch):
    """A model whose layers attnviz cannot read gets the weight check too (its raw attention is still shown)."""
    from attnviz.models import load

    def unsupported(model):
        raise load.UnsupportedArchitecture("not readable here")

    monkeypatch.setattr(load, "read_architecture", unsupported)
    model = _bert_with(tokenizer, lambda m: m.bert.embeddings.position_embeddings.weight[40].fill_(float("nan")))
    lm = load.wrap(model, tokenizer, spec="unreadable")
    assert lm.arch is None and lm.check is not None and not lm.check.ok
    assert "position_embeddings" in lm.check.reason
    assert load.wrap(_fresh_bert(tokenizer)[0], tokenizer, spec="ok").check is None  # finite: nothing to say


def _expected_layers(mp) -> str:
    """The layers (from 1) where a map holds NaN/inf, written as the note writes them, computed plainly."""
    bad = [l + 1 for l in range(mp.layer.shape[0]) if not np.isfinite(mp.layer[l]).all()
           or (mp.heads is not None and not np.isfinite(mp.heads[l]).all())]
    return f"layer {bad[0]}" if len(bad) == 1 else f"layers {bad[0]}-{bad[-1]}"


def test_nonfinite_analysis_note_names_each_map_and_its_layers(tokenizer):
    from attnviz.models.load import wrap

    model = _bert_with(tokenizer, lambda m: m.bert.embeddings.position_embeddings.weight[40, 3].fill_(float("nan")))
    lm = wrap(model, tokenizer, spec="pos40", check=False)  # as if loaded by code that skips the check
    a = attnviz.analyze(lm, LONG, max_tokens=64, methods=["attention", "rollout"])
    assert len(a.tokens) > 41 and not np.isfinite(a.maps["attention"].layer).all()
    note = next(n for n in a.notes if n and n.startswith("values are not finite"))
    for m in ("attention", "rollout"):
        assert f"{m} ({_expected_layers(a.maps[m])})" in note, note
    assert "the prediction" in note and "from the embeddings on" in note  # the cause: the first bad hidden state
    short = attnviz.analyze(lm, SENTENCE, max_tokens=64, methods=["attention"])  # never reaches position 40
    assert np.isfinite(short.maps["attention"].layer).all()
    assert not any(n and "not finite" in n for n in short.notes)
    checked = attnviz.analyze(wrap(model, tokenizer, spec="pos40"), LONG, max_tokens=64, methods=["attention"])
    note = next(n for n in checked.notes if n.startswith("values are not finite"))
    assert "attention (layers 1-2)" in note and "position_embeddings" in note  # the load check's reason


# ---------------------------------------------------------------- 9. a hub that drips
@pytest.fixture
def drip_server():
    """drip_server(mode) -> port of an HTTP server on 127.0.0.1 that drips: mode "body" sends its status line
    and headers at once and then a body of 400 bytes, one byte every 0.5 s; "headers" drips the headers
    themselves. The /api/models/ request of "files" is answered at once (a model with a config.json) and
    every file GET drips its body (HEAD: headers at once, no body). Each server records its request lines."""
    servers = []

    def start(mode):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(32)
        seen = []

        def serve(c):
            try:
                req = c.recv(65536)
                seen.append(req.split(b"\r\n", 1)[0])
                if mode == "files" and req.startswith(b"GET /api/models/"):
                    body = json.dumps({"id": "someorg/some-model", "sha": "a" * 40,
                                       "siblings": [{"rfilename": "config.json"}]}).encode()
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                              % len(body) + body)
                    return
                head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Repo-Commit: " + b"a" * 40
                        + b"\r\nETag: \"e\"\r\nContent-Length: 400\r\n\r\n")
                if mode == "headers":
                    for k in range(len(head)):
                        time.sleep(0.5)
                        c.sendall(head[k:k + 1])
                    return
                c.sendall(head)
                if req.startswith(b"HEAD "):
                    return
                for _ in range(400):
                    time.sleep(0.5)
                    c.sendall(b" ")
            except OSError:
                pass
            finally:
                c.close()

        def accept():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                threading.Thread(target=serve, args=(c,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        servers.append(srv)
        return srv.getsockname()[1], seen

    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("mode", ["body", "headers"])
@pytest.mark.parametrize("streamed", [False, True])
def test_hub_requests_have_a_deadline_as_a_whole(drip_server, monkeypatch, mode, streamed):
    """Every read of the dripping server returns within the timeout: only a deadline on the whole request ends it."""
    import httpx2

    from attnviz.models import hub

    monkeypatch.setenv("ATTNVIZ_HUB_TIMEOUT", "1")
    port, seen = drip_server(mode)
    client = hub.wrap_client(httpx2.Client(timeout=None))
    url = f"http://127.0.0.1:{port}/someorg/some-model/resolve/main/config.json"
    with pytest.raises(hub.HubDeadline) as e:  # 400 bytes at 2 per second: 200 s without the deadline
        if streamed:
            with client.stream("GET", url) as r:
                for _ in r.iter_bytes():
                    pass
        else:
            client.get(url)
    msg = str(e.value)
    assert "\n" not in msg and "'config.json'" in msg and "1 s (ATTNVIZ_HUB_TIMEOUT)" in msg
    assert ("headers" in msg) == (mode == "headers")
    client.close()


def test_hub_install_bounds_the_default_client_and_every_download(monkeypatch):
    """install(): huggingface_hub's client comes with the deadline transport, and Xet downloads (outside that
    client) are off, so every file goes through it; a client someone else installed is left alone."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _http as h

    from attnviz.models import hub

    monkeypatch.setattr(h, "_GLOBAL_CLIENT_FACTORY", h.default_client_factory)
    monkeypatch.setattr(h, "_GLOBAL_CLIENT", None, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    hub.install()
    client = h._GLOBAL_CLIENT_FACTORY()
    assert isinstance(client._transport, hub.DeadlineTransport) and constants.HF_HUB_DISABLE_XET
    client.close()
    h.close_session()
    mine = lambda: None  # noqa: E731
    monkeypatch.setattr(h, "_GLOBAL_CLIENT_FACTORY", mine)
    hub.install()
    assert h._GLOBAL_CLIENT_FACTORY is mine


def test_hub_deadline_allows_a_large_file_at_a_fair_rate(monkeypatch):
    """The body's deadline grows with the file's size (MIN_BYTES_PER_S), so a real download is not cut."""
    import httpx2

    from attnviz.models import hub

    monkeypatch.setenv("ATTNVIZ_HUB_TIMEOUT", "1")
    body = bytes(range(256)) * 4096  # 1 MiB, sent at once
    client = hub.wrap_client(httpx2.Client(transport=httpx2.MockTransport(
        lambda request: httpx2.Response(200, content=body))))
    assert client.get("http://hub.invalid/m/resolve/main/model.safetensors").content == body
    s = hub._DeadlineStream([b""], "u", started=0.0, size=10 * 2 ** 20, sock=None)
    assert s._allowed() == pytest.approx(1 + 10 * 2 ** 20 / hub.MIN_BYTES_PER_S)  # 1 s + 10 MiB at 50 kB/s


@pytest.mark.slow  # a fresh Python that imports torch
@pytest.mark.parametrize("mode", ["body", "files"])
def test_hub_that_drips_fails_in_one_line(drip_server, tmp_path, mode):
    """The model's API answer (mode body) or its files (mode files) arrive a byte every 0.5 s: one line, rc 2."""
    port, seen = drip_server(mode)
    env = _env(HF_HUB_OFFLINE=None, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"),
               ATTNVIZ_HUB_TIMEOUT="2", HTTPS_PROXY=None, HTTP_PROXY=None, ALL_PROXY=None,
               https_proxy=None, http_proxy=None, all_proxy=None, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    r = run_cli(["analyze", "--model", "someorg/some-model", "--text", "a b c", "--out", str(tmp_path / "a.json")],
                env=env)  # 400 bytes at 2 per second per request without a deadline: run_cli's 600 s guard fails it
    assert any(q.startswith(b"GET /api/models/someorg/some-model") for q in seen), seen
    assert r.returncode == 2, r.stderr
    line = _one_line_error(r.stderr)
    assert "past the deadline (2 s (ATTNVIZ_HUB_TIMEOUT)" in line and "someorg/some-model" in line
    assert "hf download someorg/some-model --local-dir" in line
    if mode == "files":
        assert "'config.json'" in line and any(b"/resolve/" in q for q in seen)
    assert not (tmp_path / "a.json").exists()


# ---------------------------------------------------------------- 10. builtin: stays inside the assets folder
@pytest.fixture
def assets_with_links(tmp_path, tiny_folder, monkeypatch):
    """ATTNVIZ_ASSETS with models/: 'real' (a copy of the tiny BERT), 'outside' (a link to a model folder
    elsewhere), 'cfg_link' (a real folder whose config.json links out), 'sub_link' (a folder holding a link to
    a folder outside), 'inner_link' (a link to 'real', inside the assets folder)."""
    import shutil

    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(tiny_folder, elsewhere)
    models = tmp_path / "assets" / "models"
    models.mkdir(parents=True)
    shutil.copytree(tiny_folder, models / "real")
    (models / "outside").symlink_to(elsewhere, target_is_directory=True)
    shutil.copytree(tiny_folder, models / "cfg_link")
    (models / "cfg_link" / "config.json").unlink()
    (models / "cfg_link" / "config.json").symlink_to(elsewhere / "config.json")
    shutil.copytree(tiny_folder, models / "sub_link")
    (models / "sub_link" / "extra").symlink_to(tmp_path, target_is_directory=True)
    (models / "inner_link").symlink_to(models / "real", target_is_directory=True)
    monkeypatch.setenv("ATTNVIZ_ASSETS", str(tmp_path / "assets"))
    return models


@pytest.mark.parametrize("name,words", [("outside", "is a link"), ("cfg_link", "config.json' links to"),
                                        ("sub_link", "extra' links to"), ("inner_link", "is a link")])
def test_builtin_names_never_follow_links_out_of_the_assets_folder(assets_with_links, name, words):
    from attnviz.models.load import builtin_names, resolve

    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(f"builtin:{name}")
    msg = str(e.value)
    assert words in msg and "\n" not in msg and f"built-in model '{name}'" in msg
    assert resolve("builtin:real") == ("builtin", str((assets_with_links / "real").resolve()))
    assert "outside" not in builtin_names() and "inner_link" not in builtin_names()
    assert "real" in builtin_names()


def test_builtin_real_folder_still_loads(assets_with_links):
    lm = attnviz.load_model("builtin:real")
    assert lm.check.ok and lm.source == str((assets_with_links / "real").resolve())


# ---------------------------------------------------------------- 11. model specs: one short line, paths are paths
@pytest.mark.parametrize("spec", ["A" * 5000, "some\nmodel", "org/model\r\nX-Injected: 1", "builtin:agree\nment",
                                  "./" + "d/" * 3000 + "m", "a\x00b", "x" * 97])
def test_model_spec_errors_are_one_short_line(spec, capsys, tmp_path):
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(spec)
    msg = str(e.value)
    assert "\n" not in msg and "\r" not in msg and len(msg) < 400, msg
    if len(spec) > 100:
        assert f"({len(spec):,} characters)" in msg
    rc = main(["analyze", "--model", spec, "--text", SENTENCE, "--out", str(tmp_path / "a.json")])
    assert rc == 2
    line = _one_line_error(capsys.readouterr().err)
    assert len(line) < 400


def test_an_existing_relative_path_is_a_path_not_a_hub_id(tmp_path, monkeypatch):
    from attnviz.models.load import resolve

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "smol_renamed.txt").write_bytes(b"GGUF" + bytes(60))  # a GGUF file under another name
    (tmp_path / "m" / "notes.txt").write_text("not a model")
    monkeypatch.chdir(tmp_path)
    assert resolve("m/smol_renamed.txt") == ("gguf", str((tmp_path / "m" / "smol_renamed.txt").resolve()))
    with pytest.raises(ModelLoadError) as e:
        resolve("m/notes.txt")
    assert "is a file but not a GGUF file" in str(e.value) and "m/notes.txt" in str(e.value)
    assert resolve("m2/model") == ("hub", "m2/model")  # no such path: still a hub id


def test_a_served_process_loads_only_the_models_it_offers(monkeypatch, tiny_folder, tmp_path):
    """ATTNVIZ_SERVE_MODELS (attnviz app --serve): built-in and packaged models, and the specs it lists; any
    other path is refused before anything is read (the folder below exists and would load)."""
    from attnviz.models.load import resolve

    other = tmp_path / "other"
    import shutil

    shutil.copytree(tiny_folder, other)
    monkeypatch.setenv("ATTNVIZ_SERVE_MODELS", json.dumps([str(tiny_folder)]))
    assert resolve(str(tiny_folder)) == ("folder", str(tiny_folder))
    for spec in (str(other), "/etc", "someorg/some-model", str(tiny_folder) + "/", "../" + str(other)):
        with pytest.raises(ModelLoadError) as e:
            resolve(spec)
        assert "this server offers only" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ModelLoadError) as e:
        resolve("builtin:no-such-model")  # built-in names pass the allowlist and are checked as always
    assert "unknown built-in" in str(e.value)
    monkeypatch.setenv("ATTNVIZ_SERVE_MODELS", "not json")  # a damaged setting allows the built-in models only
    with pytest.raises(ModelLoadError):
        resolve(str(tiny_folder))
    monkeypatch.delenv("ATTNVIZ_SERVE_MODELS")
    assert resolve(str(other)) == ("folder", str(other))  # not serving: any folder


# ---------------------------------------------------------------- 12. every number in its range, before any work
ANALYZE = ["analyze", "--model", "builtin:agreement", "--text", SENTENCE]
STUDY = ["study", "--model", "builtin:agreement", "--data", "builtin:agreement"]


@pytest.mark.parametrize("cmd,args,words", [
    (ANALYZE, ["--threads", "1000000"], "--threads must be at most"),  # segfaulted (rc 139, nothing printed)
    (ANALYZE, ["--threads", "0"], "--threads must be at least 1"),
    (ANALYZE, ["--ig-steps", "99999999999999999999"], "--ig-steps must be at most 1024"),  # an OverflowError
    (ANALYZE, ["--ig-steps", "20000"], "--ig-steps must be at most 1024"),  # ran unbounded
    (ANALYZE, ["--ig-tol", "-1"], "--ig-tol must be 0 (fixed steps) or between 0 and 1"),
    (ANALYZE, ["--ig-tol", "nan"], "--ig-tol must be 0 (fixed steps) or between 0 and 1"),
    (ANALYZE, ["--ig-tol", "1"], "--ig-tol must be 0 (fixed steps) or between 0 and 1"),
    (ANALYZE, ["--option", "steps=99999999999999999999"], "--option steps must be at most 1024"),
    (ANALYZE, ["--option", "atb_ff.steps=0"], "--option atb_ff.steps must be at least 1"),
    (ANALYZE, ["--option", "steps=abc"], "--option steps=abc: steps takes a whole number from 1 to 1024"),
    (ANALYZE, ["--option", "workers=-1"], "--option workers must be at least 1"),
    (ANALYZE, ["--option", "flow.workers=100000"], "--option flow.workers must be at most"),
    (ANALYZE, ["--max-tokens", "1000000000"], "--max-tokens must be at most 4096"),
    (ANALYZE, ["--target", "-1"], "--target must be at least 0"),
    (STUDY, ["--threads", "1000000"], "--threads must be at most"),
    (STUDY, ["--ig-steps", "20000"], "--ig-steps must be at most 1024"),
    (STUDY, ["--ig-tol", "-0.5"], "--ig-tol must be 0 (fixed steps) or between 0 and 1"),
    (STUDY, ["--max-tokens", "0"], "--max-tokens must be at least 1"),
    (STUDY, ["--engine", "ray", "--workers", "-1"], "--workers must be at least 1"),
    (STUDY, ["--engine", "ray", "--gpus-per-worker", "nan"], "--gpus-per-worker must be a finite number"),
    (["app"], ["--port", "70000"], "--port must be at most 65535"),
    (ANALYZE, ["--threads", "many"], "argument --threads: invalid int value: 'many'"),  # argparse: one line too
])
def test_numbers_out_of_range_are_one_line_before_any_work(cmd, args, words, tmp_path, capsys, no_model_load,
                                                           monkeypatch):
    monkeypatch.setattr(os, "execv", lambda *a: pytest.fail("the app was started"))  # never this process replaced
    out = [] if cmd == ["app"] else ["--out", str(tmp_path / ("a.json" if cmd == ANALYZE else "s"))]
    assert main(cmd + out + args) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert words in line, line
    assert any(w in line for w in ("range is", "between 0 and 1", "at least", " to ", "-h lists the options"))
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "s").exists()


def test_threads_at_the_bound_are_accepted(monkeypatch):
    from attnviz import cli

    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    cli._threads(cli.max_threads())
    assert seen == [4 * (os.cpu_count() or 1)]


@pytest.mark.parametrize("name,content,words", [
    ("numbers.json", "[1, 2, 3]", "holds no sentences: each item must be a sentence"),  # ran: 0 sentences, 3 skipped
    ("nulls.jsonl", "null\n5\n", "holds no sentences"),
    ("objects.jsonl", '{"sentence": "the keys [MASK] here ."}\n', "an object without a \"text\" string"),
    ("binary.txt", b"\x80\x81\xfe\xff the keys", "is not UTF-8 text (byte 1"),  # a codec error without the file
])
def test_data_must_hold_sentences(name, content, words, tmp_path, capsys, no_model_load):
    data = tmp_path / name
    data.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(STUDY[:3] + ["--data", str(data), "--out", str(tmp_path / "s")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert words in line and str(data) in line, line


# ---------------------------------------------------------------- 13. --out: never someone else's file, never empty
@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_out_never_replaces_a_file_attnviz_did_not_write(tiny_folder, tmp_path, capsys, suffix):
    out = tmp_path / f"notes{suffix}"
    out.write_text("my own notes, not an analysis")
    args = ["analyze", "--model", str(tiny_folder), "--text", SENTENCE, "--out", str(out), "--methods", "attention"]
    assert main(args) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "not a file attnviz wrote" in line and "--force" in line
    assert out.read_text() == "my own notes, not an analysis"
    assert main(args + ["--force"]) == 0  # asked for: replaced
    written = out.read_bytes()
    assert written != b"my own notes, not an analysis"
    assert main(args) == 0  # an analysis of ours is replaced without --force
    capsys.readouterr()
    d = _strict_json(out.read_text()) if suffix == ".json" else export.read_npz(out.read_bytes())
    assert d["format"] == export.FORMAT and d["methods"] == ["attention"]


def test_study_out_never_writes_over_files_no_study_wrote(tmp_path, capsys, no_model_load):
    from attnviz import cli

    d = tmp_path / "report"
    d.mkdir()
    (d / "summary.html").write_text("<p>my report</p>")
    assert main(STUDY + ["--out", str(d)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "summary.html" in line and "--force" in line
    cli.check_study_folder(str(d), force=True)  # --force lets the study write there
    (d / "config.json").write_text(json.dumps({"methods": ["attention"], "baselines": ["blank_out"]}))
    cli.check_study_folder(str(d))  # a study's folder: resumed, its files are ours
    assert (d / "summary.html").read_text() == "<p>my report</p>"


def test_study_summaries_are_written_whole_or_not_at_all(make_tiny, tmp_path, monkeypatch):
    """The disk fills while the summaries are written: no empty or partial summary file, no temporary file."""
    from attnviz import faithfulness as F

    res = F.study(make_tiny("bert"), ["the keys [MASK] here .", "a dog [MASK] ."], baselines=["blank_out"], ig_steps=2)
    out = tmp_path / "s"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        res.write(out)
    assert list(out.iterdir()) == []
    monkeypatch.undo()
    paths = res.write(out)
    assert all(Path(p).stat().st_size > 0 for p in paths.values())
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(p).name for p in paths.values())


_FSIZE_THEN_MAIN = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk fails
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from attnviz.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow  # fresh Pythons
def test_a_full_disk_leaves_no_empty_outputs(tiny_folder, tmp_path):
    """Files may not grow past a limit (RLIMIT_FSIZE: 64 kB for the analysis JSON with heads, ~300 kB; 4 kB for
    the study, whose records fit and whose summary.json and summary.html do not). One line, rc 2, and no empty
    or partial output left."""
    def run(limit, args):
        return subprocess.run([sys.executable, "-c", _FSIZE_THEN_MAIN, str(limit), *args], capture_output=True,
                              env=_env(), cwd=ROOT, timeout=600)

    out = tmp_path / "a.json"
    r = run(64_000, ["analyze", "--model", str(tiny_folder), "--text", SENTENCE, "--out", str(out), "--heads"])
    assert r.returncode == 2, r.stderr
    assert "File too large" in _one_line_error(r.stderr)
    assert list(tmp_path.iterdir()) == []
    data = tmp_path / "d.txt"
    data.write_text("the keys [MASK] here .\na dog [MASK] .\n")
    s = tmp_path / "s"
    r = run(4_000, ["study", "--model", str(tiny_folder), "--data", str(data), "--out", str(s), "--quiet",
                     "--baselines", "blank_out", "--ig-steps", "2", "--ig-tol", "0"])
    assert r.returncode == 2, r.stderr
    _one_line_error(r.stderr)
    left = {p.name: p.stat().st_size for p in s.iterdir()}
    assert "summary.html" not in left and not any(n.endswith(".tmp") for n in left), left
    assert all(size > 0 for n, size in left.items() if n.startswith(("summary", "ranking"))), left
    assert len(_lines_of(s / "records.jsonl")) == 2  # the finished sentences are kept


def _lines_of(p: Path) -> list:
    return p.read_bytes().splitlines()


# ---------------------------------------------------------------- 14. a study survives a deleted lock
def test_deleted_lock_lets_no_second_writer_in_and_records_stay_unique(make_tiny, tmp_path):
    """Mid-run, DIR/.lock is deleted and the same study is started again into the same folder: the second
    writer is refused (the records file itself is locked), the first finishes, every sentence is on file once."""
    from attnviz import faithfulness as F
    from attnviz.errors import AttnvizError

    lm = make_tiny("bert")
    items = [f"the {w} [MASK] here ." for w in ("keys", "dog", "cats", "table", "cabinet", "dogs")]
    kw = dict(baselines=["blank_out"], ig_steps=2)
    out = tmp_path / "s"
    second = {}

    def progress(done, total):
        if done == 2 and not second:
            (out / ".lock").unlink()  # the lock file is gone while the first study writes
            try:
                second["result"] = F.study(lm, items, out_dir=out, **kw)  # a second writer, same study
            except AttnvizError as e:
                second["error"] = str(e)

    res = F.study(lm, items, out_dir=out, progress=progress, **kw)
    assert "another study is writing into" in second.get("error", ""), second
    assert res.n_sentences == len(items)
    keys = [json.loads(line)["key"] for line in _lines_of(out / "records.jsonl")]
    assert len(keys) == len(items) == len(set(keys))
    again = F.study(lm, items, out_dir=out, **kw)  # the lock released: a rerun resumes everything
    assert again.resumed == len(items) and len(_lines_of(out / "records.jsonl")) == len(items)


def test_records_file_removed_mid_run_stops_the_study_in_one_line(make_tiny, tmp_path):
    from attnviz import faithfulness as F
    from attnviz.errors import AttnvizError

    lm = make_tiny("bert")
    out = tmp_path / "s"

    def progress(done, total):
        if done == 1:
            (out / "records.jsonl").unlink()

    with pytest.raises(AttnvizError) as e:
        F.study(lm, ["the keys [MASK] here .", "a dog [MASK] .", "the cats [MASK] ."], out_dir=out,
                progress=progress, baselines=["blank_out"], ig_steps=2)
    assert "records.jsonl was removed while this study wrote into it" in str(e.value) and "\n" not in str(e.value)


def test_repeated_records_are_read_once_and_counted(make_tiny, tmp_path):
    """A records file doubled by an earlier mishap: the resumed study and load_study count each sentence once
    and say how many lines they left out."""
    from attnviz import faithfulness as F
    from attnviz.faithfulness.study import load_study

    lm = make_tiny("bert")
    items = ["the keys [MASK] here .", "a dog [MASK] .", "the cats [MASK] ."]
    kw = dict(baselines=["blank_out"], ig_steps=2)
    out = tmp_path / "s"
    first = F.study(lm, items, out_dir=out, **kw)
    rec = out / "records.jsonl"
    lines = _lines_of(rec)
    rec.write_bytes(b"\n".join(lines + lines[:2]) + b"\n")  # 2 sentences on file twice
    res = F.study(lm, items, out_dir=out, **kw)
    assert res.resumed == 3 and res.n_sentences == 3
    assert any("2 repeated records" in n for n in res.notes), res.notes
    np.testing.assert_array_equal(res.rho, first.rho)
    loaded = load_study(out)
    assert loaded.n_sentences == 3 and any("2 repeated records" in n for n in loaded.notes)


# ---------------------------------------------------------------- 15. the app: long links, a server for a class
def _app(query: dict):
    from streamlit.testing.v1 import AppTest

    os.environ["ATTNVIZ_TORCH_THREADS"] = "1"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    return at


def _app_errors(at) -> str:
    return " ".join(e.value for e in at.error).replace("\\", "")  # the app escapes markdown


def test_app_drops_an_overlong_query_value_at_once(app_spec):
    """A 100,000-character ?model= is dropped before anything reads it (it took 51 s to be refused), the
    default model is shown, and one message says why."""
    at = _app({"model": "A" * 100_000, "text": SENTENCE, "layer": "9" * 5000})
    assert not at.exception
    errors = _app_errors(at)
    assert "'model' value is 100,000 characters long (at most 1,024): it was ignored" in errors
    assert "'layer' value is 5,000 characters long" in errors
    assert at.session_state.spec == app_spec and "AAAA" not in errors


def test_served_app_never_loads_a_path_typed_into_its_url(app_spec, tiny_folder, monkeypatch):
    """With ATTNVIZ_SERVE_MODELS (attnviz app --serve) a loadable folder named in the URL is not loaded (the
    default model is shown, with one message); the folder the teacher allowed loads and is offered in the picker."""
    monkeypatch.setenv("ATTNVIZ_SERVE_MODELS", "[]")
    at = _app({"model": str(tiny_folder), "text": SENTENCE})
    assert not at.exception
    assert "this server offers only its built-in and packaged models" in _app_errors(at)
    assert at.session_state.spec == app_spec
    assert str(tiny_folder) not in at.sidebar.selectbox[0].options
    monkeypatch.setenv("ATTNVIZ_SERVE_MODELS", json.dumps([str(tiny_folder)]))
    at = _app({"model": str(tiny_folder), "text": SENTENCE})
    assert not at.exception and not at.error
    assert at.session_state.spec == str(tiny_folder)
    assert str(tiny_folder) in at.sidebar.selectbox[0].options


@pytest.mark.parametrize("extra,env", [([], "[]"), (["--allow-model", "TINY"], "TINY")])
def test_app_serve_binds_where_told_and_passes_the_allowlist(monkeypatch, tiny_folder, tmp_path, extra, env):
    """`attnviz app --serve --address A` starts Streamlit on A with the served settings and ATTNVIZ_SERVE_MODELS
    (local folders as absolute real paths, here given relative); the plain command stays on 127.0.0.1."""
    from attnviz import cli
    from attnviz.models.allow import ENV

    started = []

    class Started(Exception):
        pass

    def execv(exe, cmd):  # the command becomes Streamlit: recorded here, then the call ends
        started.append((cmd, os.environ.get(ENV)))
        raise Started

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.setattr(os, "name", "posix")
    monkeypatch.setenv(ENV, "[]")  # recorded as it was before this test (a plain delenv of an unset name is not)
    monkeypatch.delenv(ENV)
    monkeypatch.chdir(tiny_folder.parent)
    extra = [tiny_folder.name if x == "TINY" else x for x in extra]
    with pytest.raises(Started):
        main(["app", "--serve", "--address", "0.0.0.0", "--port", "8600"] + extra)
    cmd, allowed = started[-1]
    assert cmd[cmd.index("--server.address") + 1] == "0.0.0.0" and cmd[cmd.index("--server.port") + 1] == "8600"
    for opt in cli.SERVE_OPTIONS[::2]:
        assert opt in cmd
    assert json.loads(allowed) == ([] if env == "[]" else [os.path.realpath(tiny_folder)])
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(Started):
        main(["app"])
    cmd, allowed = started[-1]
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1" and allowed is None
    assert "--client.toolbarMode" not in cmd


@pytest.mark.parametrize("args,words", [(["--serve"], "--serve needs --address"),
                                        (["--allow-model", "builtin:agreement"], "--allow-model applies with --serve"),
                                        (["--serve", "--address", "0.0.0.0", "--allow-model", "/etc"],
                                         "--allow-model /etc: folder '/etc' has no config.json")])
def test_app_serve_refusals_are_one_line(args, words, capsys, monkeypatch):
    from attnviz.models.allow import ENV

    monkeypatch.setenv(ENV, "[]")  # recorded as it was before this test, then unset for it
    monkeypatch.delenv(ENV)
    monkeypatch.setattr(os, "execv", lambda *a: pytest.fail("the server was started"))
    assert main(["app"] + args) == 2
    assert words in _one_line_error(capsys.readouterr().err)


def test_app_sh_stays_on_this_machine():
    sh = (ROOT / "scripts" / "app.sh").read_text()
    assert '--server.address "${ATTNVIZ_ADDRESS:-127.0.0.1}"' in sh


@pytest.fixture(scope="module")
def nan_beyond_probe_folder(tokenizer, tmp_path_factory):
    """A tiny BERT saved with NaN in position 40 of its position embeddings (the probe sentence never reaches it)."""
    model, _ = _fresh_bert(tokenizer)
    with torch.no_grad():
        model.bert.embeddings.position_embeddings.weight[40, 3] = float("nan")
    d = tmp_path_factory.mktemp("nan_pos40")
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return str(d)


@pytest.mark.parametrize("page", ["explore", "heads", "flow_graph"])
def test_every_page_says_where_values_are_not_finite(nan_beyond_probe_folder, page):
    """A model with NaN beyond the probe sentence, a text that reaches it: Explore, Heads and Flow graph say
    which maps, which layers and why (never a silent blank map)."""
    at = open_app_page(page, nan_beyond_probe_folder, LONG)
    assert not at.exception
    shown = " ".join([w.value for w in at.warning] + [c.value for c in at.caption]).replace("\\", "")
    assert "position_embeddings" in shown and "not finite" in shown, shown[:2000]
    assert "attention (layers 1-2)" in shown, shown[:2000]


def test_a_model_wrapped_without_its_check_says_why_its_decompositions_are_off(make_tiny):
    """check=False: no self-check ran, so the decompositions are off, and the analysis says so in words
    (it used to add None to its notes)."""
    import attnviz

    lm = make_tiny("bert", seed=3, check=False)
    assert not lm.decompositions_ok
    a = attnviz.analyze(lm, "the keys [MASK] here .", methods=["attention", "attn_res_ln"])
    assert None not in a.notes
    assert any("check=False" in n for n in a.notes)
    assert "attention" in a.maps and "attn_res_ln" not in a.maps
