"""The `attnviz` command: analyze (JSON/NPZ, optional faithfulness) and the resumable study,
checked against the model's own outputs and the written records."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.cli import main, read_data

from conftest import SENTENCE


@pytest.fixture(scope="module")
def tiny_folder(tiny_bert_folder, make_tiny):
    """conftest's tiny BERT folder and its LoadedModel."""
    return tiny_bert_folder, make_tiny("bert")


def _probs(lm, ids, pos):
    with torch.no_grad():
        return torch.softmax(lm.model(input_ids=ids).logits[0, pos].double(), -1)


def test_analyze_json_matches_model(tiny_folder, tmp_path, capsys):
    folder, lm = tiny_folder
    out = tmp_path / "a.json"
    rc = main(["analyze", "--model", str(folder), "--text", SENTENCE, "--out", str(out), "--faithfulness",
               "--contrast", "is,are", "--baselines", "blank_out,leave_one_out", "--methods", "attention,rollout"])
    printed = capsys.readouterr().out
    assert rc == 0 and str(out) in printed
    d = json.loads(out.read_text())
    # the faithfulness notes are printed too (here leave-one-out's on BERT's absolute positions)
    assert d["faithfulness"]["notes"] and all(f"note: {n}" in printed for n in d["faithfulness"]["notes"])
    assert any("absolute position embeddings" in n for n in d["faithfulness"]["notes"])
    assert f"target {d['target']} ('{d['tokens'][d['target']]}')" in printed
    ids = lm.tokenizer(SENTENCE, return_tensors="pt").input_ids
    assert d["tokens"] == lm.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    with torch.no_grad():
        att = lm.model(input_ids=ids, output_attentions=True).attentions
    for l in range(2):
        np.testing.assert_allclose(d["maps"]["attention"]["layer"][l], att[l][0].mean(0).numpy(), atol=1e-6)
    assert d["maps"]["attention"]["heads"] is None  # only with --heads
    f = d["faithfulness"]
    t = d["target"]
    is_, are = lm.tokenizer.convert_tokens_to_ids(["is", "are"])
    p0 = _probs(lm, ids, t)
    assert f["f0"] == pytest.approx(float(p0[is_] - p0[are]), abs=1e-9)
    for j in (1, 3):  # blank-out by hand at two positions
        b = ids.clone()
        b[0, j] = lm.tokenizer.unk_token_id
        p = _probs(lm, b, t)
        assert f["importance"]["blank_out"][j] == pytest.approx(abs(float(p[is_] - p[are]) - f["f0"]), rel=1e-3, abs=1e-9)
    assert f["importance"]["blank_out"][0] is None  # [CLS] is not attributed
    assert f["correlations"]["methods"] == ["attention", "rollout"]
    assert np.array(f["correlations"]["spearman"], dtype=float).shape == (2, 2, 2)


def test_analyze_npz_and_errors(tiny_folder, tmp_path, capsys):
    folder, _ = tiny_folder
    out = tmp_path / "a.npz"
    assert main(["analyze", "--model", str(folder), "--text", SENTENCE, "--out", str(out), "--methods", "attention"]) == 0
    z = np.load(out)
    assert z["maps/attention/layer"].shape[0] == 2 and z["maps/attention/heads"].shape[1] == 4
    capsys.readouterr()
    assert main(["analyze", "--model", str(tmp_path / "nothing"), "--text", "x", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    assert main(["analyze", "--model", str(folder), "--text", "  ", "--out", str(out)]) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["study", "--model", str(folder), "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "s")]) == 2
    assert "no such data file" in capsys.readouterr().err


def test_analyze_device(tiny_folder, tmp_path, capsys):
    """--device cpu gives the default's numbers; a device this machine lacks is one line and exit 2,
    said before any file is written."""
    folder, _ = tiny_folder
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = ["analyze", "--model", str(folder), "--text", SENTENCE, "--methods", "attention,attn_res_ln"]
    assert main(base + ["--out", str(a)]) == 0 and main(base + ["--out", str(b), "--device", "cpu"]) == 0
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    for m in ("attention", "attn_res_ln"):
        np.testing.assert_array_equal(np.array(da["maps"][m]["layer"]), np.array(db["maps"][m]["layer"]))
    capsys.readouterr()
    c = tmp_path / "c.json"
    bad = ["tpu"] + ([] if torch.cuda.is_available() else ["cuda"])
    for dev in bad:
        assert main(base + ["--out", str(c), "--device", dev]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err and dev in err
        assert not c.exists()


def test_study_device(tiny_folder, tmp_path, capsys):
    """study --device cpu writes the default's records; a device this machine lacks, or --device with
    --engine ray (which takes --gpus-per-worker), is one line and exit 2, before the folder is made."""
    folder, _ = tiny_folder
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(dict(text="the keys [MASK] on the table .", answer="are", wrong="is")) + "\n")
    base = ["study", "--model", str(folder), "--data", str(data), "--quiet", "--baselines", "blank_out",
            "--ig-steps", "4", "--methods", "attention,attn_res_ln"]
    assert main(base + ["--out", str(tmp_path / "a")]) == 0
    assert main(base + ["--out", str(tmp_path / "b"), "--device", "cpu"]) == 0
    ra, rb = ((tmp_path / d / "records.jsonl").read_text().splitlines() for d in "ab")
    ra, rb = json.loads(ra[0]), json.loads(rb[0])
    assert ra["rho"] == rb["rho"] and len(ra["rho"]) == 2
    capsys.readouterr()
    bad = [["--device", "tpu"], ["--device", "cpu:x"], ["--device", "cuda", "--engine", "ray"]]
    if not torch.cuda.is_available():
        bad.append(["--device", "cuda"])
    for extra in bad:
        out = tmp_path / "c"
        assert main(base + ["--out", str(out)] + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err and extra[1] in err, err
        assert not out.exists()


def test_read_data_formats(tmp_path):
    (tmp_path / "a.txt").write_text("one [MASK] .\n\ntwo [MASK] .\n")
    assert read_data(str(tmp_path / "a.txt")) == ["one [MASK] .", "two [MASK] ."]
    (tmp_path / "a.jsonl").write_text('{"text": "x [MASK]", "answer": "is", "wrong": "are"}\n{"text": "y [MASK]"}\n')
    assert read_data(str(tmp_path / "a.jsonl"), 1) == [{"text": "x [MASK]", "answer": "is", "wrong": "are"}]
    (tmp_path / "a.json").write_text('["p [MASK]", "q [MASK]"]')
    assert read_data(str(tmp_path / "a.json")) == ["p [MASK]", "q [MASK]"]


def test_study_command_writes_tables_and_resumes(tiny_folder, tmp_path, capsys):
    folder, _ = tiny_folder
    items = [dict(text="the key to the cabinets [MASK] here .", answer="is", wrong="are"),
             dict(text="the keys [MASK] on the table .", answer="are", wrong="is"),
             dict(text="a dog near the cats [MASK] .", answer="is", wrong="are"),
             dict(text="the teachers of the student [MASK] tired .", answer="are", wrong="is")]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(it) + "\n" for it in items))
    out = tmp_path / "study"
    base = ["study", "--model", str(folder), "--data", str(data), "--out", str(out), "--quiet",
            "--baselines", "blank_out,grad_norm", "--ig-steps", "4"]
    assert main(base + ["--n", "2"]) == 0
    capsys.readouterr()
    assert main(base) == 0  # resumes: the first two come from the earlier run
    printed = capsys.readouterr().out
    assert "4 sentences (2 from an earlier run, 0 skipped)" in printed
    assert "mean Spearman (± std) vs blank_out" in printed and "| attention |" in printed
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["i"] for r in recs] == [0, 1, 2, 3]
    rho = np.array([[[[np.nan if v is None else v for v in row] for row in m] for m in r["rho"]] for r in recs])
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    methods = json.loads((out / "config.json").read_text())["methods"]
    for row in rows:
        if row["stat"] != "spearman":
            continue
        mi, l, bi = methods.index(row["method"]), int(row["layer"]) - 1, ["blank_out", "grad_norm"].index(row["baseline"])
        vals = rho[:, mi, l, bi]
        vals = vals[np.isfinite(vals)]
        assert int(row["n_defined"]) == len(vals)
        if len(vals):
            assert float(row["mean"]) == pytest.approx(vals.mean(), abs=1e-12)
        if len(vals) > 1:
            assert float(row["std"]) == pytest.approx(vals.std(ddof=1), abs=1e-12)
    assert (out / "summary.html").stat().st_size > 1000
    js = json.loads((out / "summary.json").read_text())
    assert js["n_sentences"] == 4 and js["reference_abnar_zuidema_table1"]["flow"] == [0.32, 0.70, 0.70]


def test_console_script_runs():
    """The installed entry point (pyproject's [project.scripts]) reaches main()."""
    r = subprocess.run([str(Path(sys.executable).with_name("attnviz")), "study", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--data" in r.stdout and "resum" in r.stdout
