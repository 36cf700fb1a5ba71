"""Fuzzing (hypothesis). The text input: whatever the text, analyze() and encode() either return finite
results or raise one of the project's own errors (attnviz.errors), never anything else. The command line:
whatever the arguments, `attnviz` ends with exit status 0 or 2, a refusal is one line, never a traceback.

Run with -s to see how many cases ran; derandomised, so every run tries the same cases
(ATTNVIZ_FUZZ_CASES=N, ATTNVIZ_CLI_FUZZ_CASES=N for more)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnviz
from attnviz.errors import AttnvizError
from attnviz.trace import encode

AGREEMENT = Path(__file__).resolve().parents[1] / "attnviz" / "data" / "models" / "agreement"
N_CASES = int(os.environ.get("ATTNVIZ_FUZZ_CASES", 150))  # more for a longer hunt

WORDS = ["the", "keys", "to", "cabinet", "[MASK]", "[mask]", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "<s>", "</s>",
         "<|endoftext|>", "is", "are", ".", ",", "🙂", "é", "ß", "\u200b", "\u202e", "\x00", "\t", "\n", "  ",
         "مرحبا", "日本", "\ud800", "\udcff", "a" * 40, "##ing", "'", '"', "\\", "<script>"]
texts = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=30).map(" ".join),  # sentences of hostile tokens
    st.text(max_size=80),  # any unicode (no surrogates)
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
            max_size=25),  # surrogates and unassigned code points included
    st.binary(max_size=30),  # bytes: decoded when UTF-8, else refused
    st.sampled_from([None, 5, 3.5, ["a"], "[MASK]", " [MASK] ", "[MASK] [MASK]", "word " * 200]),
)


@pytest.fixture(scope="module")
def models(make_tiny):
    out = {"bert": make_tiny("bert"), "llama": make_tiny("llama")}
    if (AGREEMENT / "config.json").is_file():
        out["agreement"] = attnviz.load_model("builtin:agreement")
    return out


def _finite(a) -> None:
    for name, m in a.maps.items():
        assert np.isfinite(m.layer).all(), name
        assert m.heads is None or np.isfinite(m.heads).all(), name
    for name, v in a.mixing.items():
        assert np.isfinite(v).all(), name
    for _, p in a.prediction:
        assert math.isfinite(p) and 0 <= p <= 1
    assert math.isfinite(a.trace_err)
    n = len(a.tokens)
    assert 0 <= a.target < n and a.special.shape == (n,)


@pytest.mark.slow  # 150 hypothesis cases through analyze
def test_fuzz_text_inputs(models):
    ran = {"cases": 0, "analyzed": 0, "refused": 0}

    @settings(max_examples=N_CASES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(text=texts)
    def case(text):
        ran["cases"] += 1
        for name, lm in models.items():
            try:
                enc = encode(lm, text)
                assert enc.ids.shape[1] == len(enc.tokens) and 0 <= enc.target < len(enc.tokens)
                a = attnviz.analyze(lm, text, methods=None if name != "agreement" else
                                    ["attention", "rollout", "value_norm", "attn_res_ln", "atb_ff_res_ln"])
            except AttnvizError as e:
                assert str(e) and "\n" not in str(e)
                ran["refused"] += 1
                continue
            _finite(a)
            ran["analyzed"] += 1

    case()
    print(f"\nfuzz: {ran['cases']} texts x {len(models)} models: {ran['analyzed']} analyses finite, "
          f"{ran['refused']} refused with the project's own errors")
    assert ran["cases"] >= N_CASES and ran["analyzed"] > 0 and ran["refused"] > 0


# ---------------------------------------------------------------- the command line's argument space
# Each generated command line runs in this process through attnviz.cli.main (no new Python per case). What
# must hold: no traceback (main returns or argparse's -h exits 0), exit status 0 or 2, every refusal (2) one
# line on stderr starting "error:", no hang (a guard ends the run with the stacks after HANG_BOUND seconds
# per case: faulthandler), no crash (a segfault would end pytest itself). Not started for real: Streamlit
# (`app`: os.execv is recorded instead) and a Ray cluster (--engine ray: run_on_ray refuses in one line);
# `evaluate` (its own parser, tested in test_evaluate_linzen.py) scores whole sets and is left out.
HANG_BOUND = 600  # seconds per command line (the slowest accepted case, a study on a tiny model, takes seconds)
CLI_CASES = int(os.environ.get("ATTNVIZ_CLI_FUZZ_CASES", 200))

NUMBERS = st.one_of(st.integers(-10 ** 25, 10 ** 25).map(str), st.integers(-3, 40).map(str),
                    st.sampled_from(["0", "1", "2", "-1", "nan", "inf", "-inf", "1e309", "0.5", "0.01", "1_000", "٣",
                                     "0x10", "", " 7", "9" * 5000, "abc", "1.5"]))
JUNK = st.one_of(st.text(max_size=12), st.sampled_from(["-", "--", "---x", "--model=", "-h", "--out", "\x00", "\ud800",
                                                        "a" * 3000, "--threads", "--option"]))


def _cli_world(tmp: Path, tiny: Path) -> dict:
    """The files the command lines name: a tiny model folder, data files of several kinds, outputs."""
    (tmp / "sents.txt").write_text("the keys [MASK] here .\na dog [MASK] .\n")
    (tmp / "items.jsonl").write_text('{"text": "the keys [MASK] here .", "answer": "are", "wrong": "is"}\n')
    (tmp / "nums.json").write_text("[1, 2, 3]")
    (tmp / "bin.txt").write_bytes(b"\xff\xfe\x00 binary")
    (tmp / "empty.txt").write_text("")
    (tmp / "notes.json").write_text("someone's notes")
    (tmp / "folder").mkdir(exist_ok=True)
    return {"tiny": str(tiny), "tmp": str(tmp)}


def _cli_argv(w: dict):
    """A strategy of command lines over every subcommand and option, with hostile values."""
    tmp = w["tmp"]
    models = st.sampled_from([w["tiny"], w["tiny"], "builtin:nope", "", "A" * 5000, "x\ny", "/etc", "pkg:nope",
                              "org/model\r\n", "builtin:../x", tmp + "/sents.txt"])
    texts = st.one_of(st.sampled_from(["the keys to the cabinet [MASK] on the table .", "", "\ud800 [MASK]",
                                       "word " * 80, "[MASK]", "a\x00b"]), st.text(max_size=30))
    outs = st.sampled_from([tmp + "/a.json", tmp + "/a.npz", tmp, "", tmp + "/notes.json", tmp + "/sub/x/a.json",
                            "/proc/attnviz.json", tmp + "/sents.txt/a.json", "\ud800.json", tmp + "/" + "n" * 300])
    study_outs = st.sampled_from([tmp + "/s", tmp + "/s2", tmp + "/sents.txt", "", tmp + "/folder"])
    datas = st.sampled_from([tmp + "/sents.txt", tmp + "/items.jsonl", tmp + "/nums.json", tmp + "/bin.txt",
                             tmp + "/empty.txt", tmp + "/none.txt", "builtin:nope", tmp])
    options = st.one_of(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
        ["steps", "workers", "rule", "atb_ff.steps", "flow.workers", "nope", "attention.x", "x.steps", ""]), NUMBERS),
        st.sampled_from(["steps", "=", "rule=gauss", "rule=nope", "steps=", "workers=None"]))
    flag_values = {
        "--model": models, "--text": texts, "--out": outs, "--methods": st.sampled_from(
            ["attention", "attention,rollout", "bogus", "", "attention,,", "flow"]),
        "--option": options, "--target": NUMBERS, "--baselines": st.sampled_from(["blank_out", "bogus", "", "grad_norm"]),
        "--contrast": st.sampled_from(["is,are", "is", ",,", "zzz,qqq", ""]), "--ig-steps": NUMBERS,
        "--ig-tol": NUMBERS, "--max-tokens": NUMBERS, "--threads": NUMBERS,
        "--device": st.sampled_from(["cpu", "cuda", "cuda:7", "gpu", "", "A" * 300]),
    }
    bare = ["--heads", "--faithfulness", "--force"]
    study_values = dict(flag_values, **{"--out": study_outs, "--data": datas, "--n": NUMBERS, "--workers": NUMBERS,
                                        "--gpus-per-worker": NUMBERS, "--batch-size": NUMBERS,
                                        "--engine": st.sampled_from(["local", "ray", "spark"]),
                                        "--address": st.sampled_from(["nohost", "127.0.0.1:1", "host:port", ""])})
    study_bare = ["--include-target", "--no-contrast", "--fresh", "--quiet", "--force"]
    app_values = {"--port": NUMBERS, "--address": st.sampled_from(["127.0.0.1", "0.0.0.0", "", "::1", "A" * 300]),
                  "--allow-model": models}

    def command(name, required, values, flags):
        pairs = st.lists(st.one_of(
            st.sampled_from(sorted(values)).flatmap(lambda f: values[f].map(lambda v, f=f: [f, v])),
            st.sampled_from(flags).map(lambda f: [f]) if flags else st.nothing(),
            JUNK.map(lambda j: [j])), max_size=5)
        keep = st.lists(st.booleans(), min_size=len(required), max_size=len(required))
        req = st.tuples(*[values[f] for f in required]) if required else st.just(())
        return st.tuples(keep, req, pairs).map(lambda t: [name] + [x for k, f, v in zip(t[0], required, t[1]) if k
                                                                    for x in (f, v)] + [x for p in t[2] for x in p])

    def valid_then(base, values, flags):  # a command that would run, then up to 3 options of any value
        extra = st.lists(st.one_of(st.sampled_from(sorted(values)).flatmap(
            lambda f: values[f].map(lambda v, f=f: [f, v])), st.sampled_from(flags).map(lambda f: [f])), max_size=3)
        return extra.map(lambda e: base + [x for p in e for x in p])

    sentence = "the keys to the cabinet [MASK] on the table ."
    return st.one_of(
        command("analyze", ["--model", "--text", "--out"], flag_values, bare),
        command("study", ["--model", "--data", "--out"], study_values, study_bare),
        valid_then(["analyze", "--model", w["tiny"], "--text", sentence, "--out", tmp + "/v.json", "--force"],
                   {k: v for k, v in flag_values.items() if k not in ("--model", "--out")}, bare),
        valid_then(["study", "--model", w["tiny"], "--data", tmp + "/sents.txt", "--out", tmp + "/vs", "--quiet",
                    "--ig-steps", "2", "--ig-tol", "0", "--baselines", "blank_out", "--fresh"],
                   {k: v for k, v in study_values.items() if k not in ("--model", "--out", "--data")}, study_bare),
        command("app", [], app_values, ["--serve", "--server.foo"]),
        st.just(["methods"]), st.lists(JUNK, max_size=4))


@pytest.mark.slow  # CLI_CASES command lines, some of them whole analyses and studies on a tiny model
def test_fuzz_command_lines(tiny_bert_folder, tmp_path, monkeypatch):
    import contextlib
    import faulthandler
    import io
    import sys

    import torch

    from attnviz.cli import main
    from attnviz.errors import AttnvizError
    from attnviz.models.allow import ENV

    w = _cli_world(tmp_path, tiny_bert_folder)
    started = []

    class Started(Exception):
        pass

    def execv(exe, cmd):
        started.append(cmd)
        raise Started

    def no_ray(*a, **k):
        raise AttnvizError("the Ray engine is not started in this test")

    monkeypatch.setattr(os, "execv", execv)
    import attnviz.faithfulness  # noqa: F401  (attnviz.faithfulness.study is also the name of a function there)

    monkeypatch.setattr(sys.modules["attnviz.faithfulness.study"], "run_on_ray", no_ray)
    monkeypatch.setenv(ENV, "[]")  # recorded as it was before this test, then unset for it
    monkeypatch.delenv(ENV)
    threads = torch.get_num_threads()
    counts = {"cases": 0, "ran": 0, "refused": 0, "help": 0, "app started": 0}
    by_command = {}

    @settings(max_examples=CLI_CASES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(argv=_cli_argv(w))
    def case(argv):
        counts["cases"] += 1
        out, err = io.StringIO(), io.StringIO()
        faulthandler.dump_traceback_later(HANG_BOUND, exit=True)  # the hang guard: stacks, then the run ends
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = main(list(argv))
                except SystemExit as e:  # -h: argparse prints the help and exits 0
                    rc = e.code
                    assert rc == 0, (argv, rc, err.getvalue())
                    counts["help"] += 1
                except Started:
                    rc = None
                    counts["app started"] += 1
        finally:
            faulthandler.cancel_dump_traceback_later()
            torch.set_num_threads(threads)
            os.environ.pop(ENV, None)
        text = err.getvalue()
        assert "Traceback" not in text, (argv, text)
        if rc is None or argv and argv[0] in ("-h", "--help") or "-h" in argv and rc == 0 and counts["help"]:
            return
        assert rc in (0, 2), (argv, rc, text)
        key = argv[0] if argv and argv[0] in ("analyze", "study", "app", "methods") else "other"
        by_command.setdefault(key, {"ran": 0, "refused": 0})
        if rc == 2:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: "), (argv, text)
            counts["refused"] += 1
            by_command[key]["refused"] += 1
        else:
            counts["ran"] += 1
            by_command[key]["ran"] += 1

    try:
        case()
    finally:
        print(f"\ncli fuzz: {counts['cases']} command lines: {counts['ran']} ran (rc 0), {counts['refused']} refused "
              f"(rc 2, one line each), {counts['help']} printed help, {counts['app started']} would start the app; "
              f"by command {by_command}")
    assert counts["cases"] >= CLI_CASES and counts["refused"] > 0 and counts["ran"] > 0
