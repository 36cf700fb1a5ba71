"""The gradient baselines of an encoder without an output head: ||∂h_t/∂e_j||_F for every token j.

    python bench/jacobian.py                       # pkg:minilm, one sentence, median of 3
    python bench/jacobian.py --model pkg:mpnet --repeats 1

The Jacobian of the d-dimensional hidden state h_t needs d backward passes. "reference" runs a new
forward for every batch of 64 rows and differentiates that batch (a plain autograd loop written here);
"attnviz" is faithfulness.importance.jacobian_norms: one forward, its graph differentiated 64 rows at
a time (vmapped backward). It prints both times, their ratio and the largest relative difference of
the two results (they must agree). One thread (OMP_NUM_THREADS / --threads).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
SENTENCE = 'the release [MASK] a non-anamorphic picture and a "making of" feature section.'


def reference(model, e: torch.Tensor, t: int, rows: int = 64):
    """(||J_j||_F [n], ||J_j e_j|| [n]) with a forward per batch of `rows` Jacobian rows."""
    n = e.shape[1]
    with torch.no_grad():
        d_out = model(inputs_embeds=e).last_hidden_state.shape[-1]
    fro2 = torch.zeros(n, dtype=torch.float64)
    jvp = torch.zeros(n, d_out, dtype=torch.float64)
    for s in range(0, d_out, rows):
        cs = torch.arange(s, min(d_out, s + rows))
        x = e.expand(len(cs), -1, -1).clone().requires_grad_(True)
        h = model(inputs_embeds=x).last_hidden_state[:, t]
        (g,) = torch.autograd.grad(h[torch.arange(len(cs)), cs].sum(), x)
        g = g.double()
        fro2 += (g * g).sum((0, 2))
        jvp[:, cs] = (g * e[0].double()).sum(-1).T
    return fro2.sqrt(), jvp.norm(dim=-1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pkg:minilm")
    ap.add_argument("--text", default=SENTENCE)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    import attnviz
    from attnviz.trace import encode
    imp = importlib.import_module("attnviz.faithfulness.importance")
    lm = attnviz.load_model(a.model)
    if imp.output_kind(lm) != "hidden":
        raise SystemExit(f"{a.model} has an output head: its gradient baselines need one backward pass, not a Jacobian")
    enc = encode(lm, a.text)
    e = lm.model.get_input_embeddings()(enc.ids).detach()
    d = e.shape[-1]
    print(f"{a.model}: {enc.ids.shape[1]} tokens, hidden size {d}, target position {enc.target}, "
          f"{a.threads} thread(s)")
    times = {"reference": [], "attnviz": []}
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        ref = reference(lm.model, e, enc.target)
        times["reference"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ours = imp.jacobian_norms(lm, enc, enc.target)
        times["attnviz"].append(time.perf_counter() - t0)
    diff = max(float((torch.as_tensor(o) - r).abs().max() / r.abs().max()) for o, r in zip(ours, ref))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"  {k:9s} {v:8.2f} s   (runs: {', '.join(f'{x:.2f}' for x in times[k])})")
    print(f"  ratio reference / attnviz: {med['reference'] / med['attnviz']:.2f}x; "
          f"largest relative difference {diff:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
