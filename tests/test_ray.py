"""The Ray engine of the corpus study on a real two-node cluster (two `ray start` processes).

The cluster and its drivers run inside a network namespace with only loopback (Ray registers nodes on
the machine's network interface even when told 127.0.0.1; there it falls back to 127.0.0.1) and a pid
namespace of their own (every process the test started ends when it does). tests/ray_cluster_run.py
does the work and writes a report; this test checks the report and the records against the local
engine run here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray engine needs ray (pip install 'attnviz[ray]')")

N = 24
SCRIPT = Path(__file__).with_name("ray_cluster_run.py")
NS = ["unshare", "-n", "-p", "-f", "--mount-proc"]


def _namespaces_ok() -> str:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return "unshare or ip (util-linux, iproute2) not installed"
    r = subprocess.run(NS + ["bash", "-c", "ip link set lo up"], capture_output=True, text=True, timeout=30)
    return "" if r.returncode == 0 else f"network/pid namespaces not allowed here: {r.stderr.strip()[:200]}"


def _records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    why = _namespaces_ok()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("ray")
    out, report = d / "study", d / "report.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = f"ip link set lo up && {sys.executable} {SCRIPT} {out} {report} {N}"
    r = subprocess.run(NS + ["bash", "-c", cmd], capture_output=True, text=True, timeout=3000, env=env)
    assert report.exists(), f"the cluster script wrote no report: {r.stderr[-3000:]}"
    rep = json.loads(report.read_text())
    assert r.returncode == 0, f"cluster script failed: {r.stderr[-3000:]}\n{rep}"
    return out, rep


@pytest.fixture(scope="module")
def local_records(tmp_path_factory):
    """The same study on the local engine in this process, one torch thread (as the Ray workers)."""
    import torch

    from attnviz.cli import main

    out = tmp_path_factory.mktemp("local") / "study"
    threads = torch.get_num_threads()
    try:
        assert main(["study", "--model", "builtin:agreement", "--data", "builtin:agreement", "--n", str(N),
                     "--out", str(out), "--threads", "1", "--quiet"]) == 0
    finally:
        torch.set_num_threads(threads)
    return out / "records.jsonl"


@pytest.mark.slow
def test_two_node_cluster_kill_driver_worker_and_node_then_resume(cluster_run, local_records):
    out, rep = cluster_run
    # two nodes, both on loopback
    assert rep["nodes"] == ["127.0.0.1", "127.0.0.1"]
    # driver 1 was killed midway
    assert 0 < rep["killed_driver_at"] < N
    assert rep["after_kill_2s"] == rep["killed_driver_at"]  # nothing writes once the driver is gone
    assert rep["workers_after_driver_kill"] == [], "the killed driver's actors outlived it"
    # a second driver on the same folder was refused while driver 1 held it
    sd = rep["second_driver"]
    assert sd["first_running"] and sd["rc"] == 2, sd
    assert sd["stderr"].strip().splitlines()[-1].startswith(f"error: another study is writing into {out} (process ")
    # driver 2 resumed, lost the second node, then its remaining worker once, and finished
    assert rep["killed_node"] is not None and rep["killed_worker"] is not None
    assert rep["killed_node_at"] <= rep["killed_worker_at"] < N
    d2 = rep["driver2"]
    assert d2["rc"] == 0, d2["stderr"]
    assert f"{N} sentences ({rep['killed_driver_at']} from an earlier run, 0 skipped)" in d2["stdout"]
    # both actors died (the lost node's and the killed one): their batches were sent again
    assert "on 2 nodes (127.0.0.1:6390), batches of 2 sentences; 2 worker deaths" in d2["stdout"], d2["stdout"][-1500:]
    # exactly once: every sentence, none twice
    recs = _records(out / "records.jsonl")
    assert sorted(r["i"] for r in recs) == list(range(N))
    # the same bytes as the local engine, sentence by sentence
    ray_lines = sorted((out / "records.jsonl").read_text().splitlines(), key=lambda s: json.loads(s)["i"])
    local_lines = sorted(local_records.read_text().splitlines(), key=lambda s: json.loads(s)["i"])
    assert ray_lines == local_lines
    # and the cluster was stopped
    assert rep["ray_stop_rc"] == 0 and rep["left_after_stop"] == []


@pytest.mark.slow
def test_a_model_the_workers_cannot_load_is_a_clear_error(cluster_run):
    _, rep = cluster_run
    c = rep["cannot_load"]
    assert c["error"] is not None and c["error"].startswith("a Ray worker cannot load the model 'builtin:no-such-model'")
    assert "unknown built-in model" in c["error"]  # the worker's own error, not the start timeout's
    assert rep["start_timeout"].startswith(
        "no Ray worker started within 0.5 s on the Ray cluster this process is connected to")


@pytest.mark.slow
def test_mediation_study_on_the_cluster_equals_the_local_engine(cluster_run):
    """The mediation study's pairs through the Ray engine (after two of them on the local engine, which
    it resumed): each record equals score_pair's here, one torch thread, its timing aside."""
    import torch

    import attnviz
    from attnviz.mediation.pairs import shipped_pairs
    from attnviz.mediation.study import STUDY_KINDS, pair_key, score_pair

    _, rep = cluster_run
    m = rep["mediation"]
    pairs = shipped_pairs("agreement", 6)
    assert m["n_pairs"] == 6 and m["resumed"] == 2 and m["skipped"] == []
    assert m["keys"] == [pair_key(p) for p in pairs]  # in the pairs' order
    assert "ray: 1 worker on 1 node (connected cluster), batches of 1 pair" in m["notes"], m["notes"]
    recs = _records(Path(m["out"]) / "records.jsonl")
    assert sorted(r["key"] for r in recs) == sorted(m["keys"])  # each pair once
    lm = attnviz.load_model("builtin:agreement")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        by_key = {r["key"]: r for r in recs}
        for p in pairs:
            got, ref = dict(by_key[pair_key(p)]), score_pair(lm, p, STUDY_KINDS)
            assert got.pop("seconds") > 0 and ref.pop("seconds") > 0
            assert got == json.loads(json.dumps(ref))  # TE, y, every NIE and head score: the same floats
            assert got["te"] != 0 and any(v != 0 for row in got["nie"]["attention"] for v in row)
    finally:
        torch.set_num_threads(threads)


def test_an_unreachable_cluster_is_one_line_within_seconds(capsys):
    """The command says so before it loads the model (a closed port on loopback)."""
    import socket

    from attnviz.cli import main

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    rc = main(["study", "--model", "builtin:no-such-model", "--data", "builtin:agreement", "--n", "2",
               "--out", "/nonexistent/never-written", "--engine", "ray", "--address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused")
    assert len(err.strip().splitlines()) == 1  # refused at once (no connect timeout waited), before the model


def test_address_checks_without_a_cluster():
    """Malformed addresses and a closed port are refused at once (no Ray started)."""
    import socket

    from attnviz.errors import AttnvizError
    from attnviz.faithfulness.ray_engine import check_address, split_address

    assert split_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    for bad in ("head", "head:", "head:x", "head:70000", "ray://head:10001"):
        with pytest.raises(AttnvizError):
            split_address(bad)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nothing listens on
    with pytest.raises(AttnvizError, match="cannot reach the Ray cluster at .*: Connection refused"):
        check_address(f"127.0.0.1:{port}")  # refused at once: no connect timeout waited
