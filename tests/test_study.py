"""The corpus study's folder under misuse: two writers, other data, doubled and damaged records files,
items that cannot be studied, argument ranges (issue 13, items 4-6). Each check compares with an
independent reference: a clean run's records, the items' own indices, the folder's bytes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import attnviz.faithfulness as F
from attnviz.cli import main
from attnviz.errors import AttnvizError

ITEMS = [dict(text="the key to the cabinets [MASK] here .", answer="is", wrong="are"),
         dict(text="the keys [MASK] on the table .", answer="are", wrong="is"),
         dict(text="a dog near the cats [MASK] .", answer="is", wrong="are"),
         "the cat [MASK] on the mat .",
         dict(text="the teacher of the students [MASK] tired .", answer="is", wrong="are")]
KW = dict(baselines=["blank_out", "grad_norm"], ig_steps=4)


@pytest.fixture(scope="module")
def lm(make_tiny):
    return make_tiny("bert")


@pytest.fixture(scope="module")
def reference(lm):
    """The study without a folder: the numbers every folder-based run must reproduce."""
    return F.study(lm, ITEMS, **KW)


def _lines(p: Path) -> list:
    return p.read_bytes().splitlines()


# ---------------------------------------------------------------- item 4: one writer, one dataset
def test_a_second_writer_is_refused_while_the_folder_is_locked(lm, tmp_path):
    from attnviz.faithfulness.study import FolderLock

    lock = FolderLock(tmp_path)  # a writer holds the folder
    try:
        with pytest.raises(AttnvizError, match=f"another study is writing into {tmp_path} \\(process {os.getpid()}"):
            F.study(lm, ITEMS, out_dir=tmp_path, **KW)
        assert not (tmp_path / "records.jsonl").read_bytes()  # the refused study wrote nothing (the holder made it)
    finally:
        lock.release()
    res = F.study(lm, ITEMS, out_dir=tmp_path, **KW)  # released: the study runs
    assert res.n_sentences == 5 and len(_lines(tmp_path / "records.jsonl")) == 5


STUDY_CMD = ["study", "--model", "builtin:agreement", "--data", "builtin:agreement", "--n", "40", "--quiet",
             "--baselines", "blank_out", "--ig-steps", "4", "--ig-tol", "0", "--threads", "1"]


@pytest.mark.slow  # a second Python process and a 40-sentence study
def test_two_commands_on_one_folder_never_double_it(tmp_path, capsys):
    """A real second process while the first runs: refused; the first killed with SIGKILL leaves no
    stale lock; the rerun completes with every sentence once."""
    out = tmp_path / "s"
    code = f"import sys; from attnviz.cli import main; sys.exit(main({STUDY_CMD + ['--out', str(out)]!r}))"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        rec = out / "records.jsonl"
        t = time.monotonic()
        while (not rec.exists() or len(_lines(rec)) < 2) and time.monotonic() - t < 600 and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, p.stderr.read().decode()
        p.send_signal(signal.SIGSTOP)  # paused mid-run: it holds the folder and cannot finish meanwhile
        assert main(STUDY_CMD + ["--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: another study is writing into {out} (process {p.pid} on ")
        assert len(err.strip().splitlines()) == 1
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    killed_at = len(_lines(out / "records.jsonl"))
    assert 2 <= killed_at < 40
    assert main(STUDY_CMD + ["--out", str(out)]) == 0  # the kernel dropped the dead writer's lock
    assert f"40 sentences ({killed_at} from an earlier run" in capsys.readouterr().out
    recs = [json.loads(x) for x in _lines(out / "records.jsonl")]
    assert sorted(r["i"] for r in recs) == list(range(40)) and len({r["key"] for r in recs}) == 40


def test_other_data_into_the_same_folder_is_refused(lm, tmp_path, reference):
    F.study(lm, ITEMS[:3], out_dir=tmp_path, **KW)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["data"]["n_items"] == 3 and len(cfg["data"]["sha1"]) == 40
    from attnviz.faithfulness.study import item_fingerprint

    assert _lines(tmp_path / "data.sha1") == [item_fingerprint(s).encode() for s in ITEMS[:3]]
    other = [ITEMS[0], dict(ITEMS[1], answer="is", wrong="are"), ITEMS[2]]  # same texts, other labels
    for data in (other, ["a completely different sentence [MASK] ."] + ITEMS[1:]):
        with pytest.raises(AttnvizError, match="holds a study of other data"):
            F.study(lm, data, out_dir=tmp_path, **KW)
    # the same data with more items extends the study; fewer items reuse it
    more = F.study(lm, ITEMS, out_dir=tmp_path, **KW)
    assert more.resumed == 3 and more.n_sentences == 5
    np.testing.assert_array_equal(more.rho, reference.rho)
    assert json.loads((tmp_path / "config.json").read_text())["data"]["n_items"] == 5
    assert F.study(lm, ITEMS[:2], out_dir=tmp_path, **KW).resumed == 2
    # afresh is allowed
    assert F.study(lm, other, out_dir=tmp_path, resume=False, **KW).resumed == 0


def test_other_data_is_refused_in_a_folder_without_a_data_fingerprint(lm, tmp_path):
    """Folders written before data.sha1 existed: the records' keys (position and text) decide."""
    F.study(lm, ITEMS[:3], out_dir=tmp_path, **KW)
    (tmp_path / "data.sha1").unlink()
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["data"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(AttnvizError, match="item 1 differs"):
        F.study(lm, [ITEMS[0], "another sentence [MASK] here ."], out_dir=tmp_path, **KW)
    assert F.study(lm, ITEMS, out_dir=tmp_path, **KW).resumed == 3


def test_load_study_counts_each_sentence_once(lm, tmp_path, reference):
    F.study(lm, ITEMS, out_dir=tmp_path, **KW)
    rec = tmp_path / "records.jsonl"
    rec.write_bytes(rec.read_bytes() * 2)  # what two unlocked writers made: every sentence twice
    loaded = F.load_study(tmp_path)
    assert loaded.n_sentences == 5
    np.testing.assert_array_equal(loaded.rho, reference.rho)
    assert any("5 repeated records" in n for n in loaded.notes)
    again = F.study(lm, ITEMS, out_dir=tmp_path, **KW)  # and the resume reads each once
    assert again.resumed == 5 and again.n_sentences == 5


# ---------------------------------------------------------------- item 5: damaged records files
def test_resume_skips_and_reports_damaged_lines(lm, tmp_path, reference):
    F.study(lm, ITEMS, out_dir=tmp_path, **KW)
    rec = tmp_path / "records.jsonl"
    lines = _lines(rec)
    lines[1] = lines[1][:20] + b"\xff\xfe\x80" + lines[1][23:]  # sentence 1's record: bytes that are not UTF-8
    lines[3:3] = [b"null", b'{"i":3}', b"[1, 2]", b'{"key": "2:x", "i": 2, "text": "t", "f0": 0.1, "rho": [[1]], "tau": 5}']
    rec.write_bytes(b"\n".join(lines) + b"\n")
    res = F.study(lm, ITEMS, out_dir=tmp_path, **KW)
    assert res.resumed == 4 and res.n_sentences == 5  # sentence 1 was scored again
    np.testing.assert_array_equal(res.rho, reference.rho)
    note = next(n for n in res.notes if "damaged line" in n)
    assert str(rec) in note and "5 damaged lines" in note
    for part in ("line 2: bytes that are not UTF-8", "line 4: not a record (null)", "line 5: no valid 'key'",
                 "line 6: not a record (a list)", "line 7: no valid 'rho'"):
        assert part in note, note
    loaded = F.load_study(tmp_path)  # the loader reports them too, and does not fail
    assert loaded.n_sentences == 5 and any("5 damaged lines" in n for n in loaded.notes)


def test_the_command_reports_damaged_lines_and_goes_on(tmp_path, capsys):
    out = tmp_path / "s"
    cmd = STUDY_CMD[:6] + ["3"] + STUDY_CMD[7:] + ["--out", str(out)]
    assert main(cmd) == 0
    with open(out / "records.jsonl", "ab") as f:
        f.write(b"\x80\x81 not text\nnull\n")
    capsys.readouterr()
    assert main(cmd) == 0
    printed = capsys.readouterr().out
    assert "3 sentences (3 from an earlier run, 0 skipped)" in printed
    assert "2 damaged lines skipped (line 4: bytes that are not UTF-8" in printed


# ---------------------------------------------------------------- item 6: bad items, argument ranges
def test_items_that_cannot_be_studied_are_skipped_and_listed(lm, tmp_path, reference):
    bad = {1: {"text": 5}, 3: {"text": None}, 5: None, 6: {"txt": "x"}, 8: {"text": "lone \ud800 surrogate [MASK] ."},
           9: {"text": "the cat [MASK] .", "answer": 3, "wrong": "are"}, 10: 7}
    items, good = [], []
    for k in range(12):
        if k in bad:
            items.append(bad[k])
        else:
            good.append(k)
            items.append(ITEMS[len(good) - 1])
    res = F.study(lm, items, out_dir=tmp_path, **KW)
    assert [i for i, _ in res.skipped] == sorted(bad)
    why = dict(res.skipped)
    assert why[1] == "'text' is not a string (a number)" and why[3] == "'text' is not a string (null)"
    assert "lone surrogate" in why[8] and why[9] == "'answer' is not a string (a number)" and why[6] == "no 'text'"
    np.testing.assert_array_equal(res.rho, reference.rho)  # the good ones, as if alone
    assert [r["i"] for r in res.records] == good


def test_the_command_lists_skipped_items(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "the keys [MASK] here .", "answer": "are", "wrong": "is"}\n{"text": 5}\n'
                    '{"text": null}\nnull\n{"text": "bad \\ud800 [MASK] ."}\n')
    assert main(["study", "--model", "builtin:agreement", "--data", str(data), "--out", str(tmp_path / "o"),
                 "--quiet", "--baselines", "blank_out", "--ig-steps", "2", "--ig-tol", "0"]) == 0
    out = capsys.readouterr().out
    assert "1 sentences (0 from an earlier run, 4 skipped)" in out
    for line in ("skipped item 1: 'text' is not a string (a number)", "skipped item 2: 'text' is not a string (null)",
                 "skipped item 3: not a sentence or an object with a 'text' (null)",
                 "skipped item 4: 'text' is not valid Unicode (character 5 is a lone surrogate)"):
        assert line in out


@pytest.mark.parametrize("args, message", [
    (["--n", "-298"], "--n must be at least 1, got -298"),
    (["--n", "0"], "--n must be at least 1, got 0"),
    (["--ig-steps", "-1"], "--ig-steps must be at least 1, got -1"),
    (["--ig-steps", "0"], "--ig-steps must be at least 1, got 0"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    (["--threads", "-1"], "--threads must be at least 1, got -1"),
    (["--workers", "2"], "--workers only apply with --engine ray"),
    (["--engine", "ray", "--workers", "0"], "--workers must be at least 1, got 0"),
    (["--engine", "ray", "--gpus-per-worker", "-1"], "--gpus-per-worker must be at least 0"),
    (["--engine", "ray", "--address", "nohost"], "--address must be HOST:PORT"),
    (["--out", "FILE"], "is a file: give a folder for the study"),
])
def test_study_arguments_out_of_range_are_one_line_errors(tmp_path, capsys, args, message):
    """Refused before any work: the model named here does not exist, so reaching the load would say so."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    args = [str(afile) if a == "FILE" else a for a in args]
    out = [] if "--out" in args else ["--out", str(tmp_path / "o")]
    rc = main(["study", "--model", "builtin:no-such-model", "--data", "builtin:agreement"] + out + args)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists() and afile.read_text() == "x"


def test_library_argument_ranges(lm):
    for kw in (dict(ig_steps=0), dict(ig_steps=-1), dict(max_tokens=0), dict(engine="ray", workers=0),
               dict(engine="spark"), dict(engine="ray", gpus_per_worker=-1)):
        with pytest.raises(AttnvizError):
            F.study(lm, ITEMS[:1], **kw)


# ---------------------------------------------------------------- fuzz: study items of any shape
def _no_nan(c):
    raise ValueError(f"{c} in a record")


def test_fuzz_study_items(lm, tmp_path):
    """hypothesis over study items (strings, dicts with text/answer/wrong of any JSON type, surrogates,
    other values): study() never raises, every item is either scored or skipped with a reason, the
    folder's records are exactly the scored and refused ones, and every value written is finite."""
    import math

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    words = ["the", "keys", "[MASK]", "is", "are", ".", "\ud800", "🙂", "", " "]
    texts = st.one_of(st.lists(st.sampled_from(words), max_size=8).map(" ".join), st.text(max_size=12))
    anything = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), texts,
                         st.lists(st.integers(), max_size=2))
    item = st.one_of(texts, anything,
                     st.fixed_dictionaries({"text": st.one_of(texts, anything)},
                                           optional={"answer": st.one_of(texts, anything),
                                                     "wrong": st.one_of(texts, anything)}))
    ran = {"cases": 0, "items": 0, "scored": 0, "skipped": 0}
    n_cases = int(os.environ.get("ATTNVIZ_FUZZ_CASES", 40))

    @settings(max_examples=n_cases, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(item, min_size=1, max_size=4))
    def run(items):
        out = tmp_path / f"f{ran['cases']}"
        res = F.study(lm, items, methods=["attention", "rollout"], baselines=["blank_out"], out_dir=out)
        ran["cases"] += 1
        ran["items"] += len(items)
        scored = [r["i"] for r in res.records]
        skipped = [i for i, _ in res.skipped]
        assert sorted(scored + skipped) == list(range(len(items)))
        assert all(isinstance(why, str) and why for _, why in res.skipped)
        ran["scored"] += len(scored)
        ran["skipped"] += len(skipped)
        assert all(math.isfinite(r["f0"]) for r in res.records)
        assert np.isnan(res.rho).sum() + np.isfinite(res.rho).sum() == res.rho.size  # NaN = undefined, no inf
        lines = (out / "records.jsonl").read_bytes().splitlines() if (out / "records.jsonl").exists() else []
        recs = [json.loads(x, parse_constant=_no_nan) for x in lines]  # no NaN / Infinity written
        assert len({r["key"] for r in recs}) == len(recs)
        assert len(recs) == len(scored) + sum(1 for r in recs if "error" in r)

    run()
    print(f"study-item fuzz: {ran}")
    assert ran["cases"] == n_cases and ran["scored"] > 0 and ran["skipped"] > 0


# ---------------------------------------------------------------- baseline checks in the study table
def test_the_study_counts_degenerate_blank_out_and_ig_misses(lm, tmp_path, capsys):
    """blank_deg per record = median over the attributed tokens of |f(blanked) - f0| / |f0|, written here
    with plain HF forwards (tokens replaced by the tokenizer's blank id, f = p(answer) - p(wrong) at the
    [MASK]); the study's counts are those of the records; an IG bound no step count reaches is missed
    on every sentence, and the CLI and ranking.md say both."""
    import torch
    from attnviz.faithfulness.importance import DEGENERATE, blank_token

    items = [it for it in ITEMS if isinstance(it, dict)]
    res = F.study(lm, items, baselines=["blank_out", "integrated_gradients"], ig_steps=2, ig_tol=1e-12)
    tok, model = lm.tokenizer, lm.model
    bid = blank_token(tok)[0]
    plain = []
    for it in items:
        ids = tok(it["text"], return_tensors="pt")["input_ids"][0]
        t = int((ids == tok.mask_token_id).nonzero()[0, 0])
        a, w = tok.convert_tokens_to_ids(it["answer"]), tok.convert_tokens_to_ids(it["wrong"])

        def f(x):
            with torch.no_grad():
                p = torch.softmax(model(input_ids=x[None]).logits[0, t].double(), -1)
            return float(p[a] - p[w])

        f0 = f(ids)
        special = set(tok.all_special_ids)
        d = []
        for j in range(len(ids)):
            if j == t or int(ids[j]) in special:
                continue
            x = ids.clone()
            x[j] = bid
            d.append(abs(f(x) - f0))
        plain.append(float(np.median(d)) / abs(f0))
    got = [r["blank_deg"] for r in res.records]
    np.testing.assert_allclose(got, plain, rtol=1e-3)  # float32 forwards, batched against one at a time
    checks = res.baseline_checks()
    assert checks["blank_out"]["measured"] == len(items)
    assert checks["blank_out"]["degenerate"] == sum(v >= DEGENERATE for v in plain)
    assert checks["blank_out"]["median"] == pytest.approx(float(np.median(plain)), rel=1e-3)
    ig = checks["integrated_gradients"]
    assert ig["tol"] == 1e-12 and ig["measured"] == len(items) and ig["missed"] == len(items)
    assert all(r["ig_met"] is False for r in res.records)
    loose = F.study(lm, items, baselines=["integrated_gradients"], ig_steps=2, ig_tol=0.99)
    assert loose.baseline_checks()["integrated_gradients"]["missed"] == \
        sum(r["ig_rel"] > 0.99 for r in loose.records)
    paths = res.write(tmp_path)
    md = Path(paths["ranking_md"]).read_text()
    assert f"in {len(items)} of {len(items)} sentences" in md and "blank-out degenerate" in md
    assert json.loads(Path(paths["json"]).read_text())["baseline_checks"]["integrated_gradients"]["missed"] == len(items)
    # a baseline that is degenerate on most sentences is flagged in the table's lines (old records: not measured)
    import dataclasses
    recs = [dict(r, blank_deg=v) for r, v in zip(res.records, [0.95, 0.5, 1.2, None])]
    worn = dataclasses.replace(res, records=recs)
    b = worn.baseline_checks()["blank_out"]
    assert (b["measured"], b["degenerate"], b["median"]) == (3, 2, pytest.approx(0.95))
    assert "DEGENERATE on most sentences" in worn.check_lines()[0]
    main(["study", "--model", "builtin:agreement", "--data", str(_items_file(tmp_path, items)), "--out",
          str(tmp_path / "cli"), "--baselines", "blank_out", "--methods", "attention", "--quiet"])
    assert "baseline check: blank-out degenerate" in capsys.readouterr().out


def _items_file(tmp_path: Path, items: list) -> Path:
    p = tmp_path / "items.jsonl"
    p.write_text("".join(json.dumps(it) + "\n" for it in items))
    return p
