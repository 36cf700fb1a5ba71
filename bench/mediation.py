"""Causal mediation on one minimal pair: the work in forward-pass equivalents and the time as a ratio to
one batched forward over the same number of token-layers, measured in the same run.

    python bench/mediation.py [--models builtin:agreement,pkg:smollm2] [--threads 1] [--repeat 2] [--json FILE]

For each model and pair (builtin: "the key to the cabinets [MASK] on the table ." / keys; SmolLM2: a
16-token pair), every mediator kind is timed (attnviz.mediate with all five kinds; the head map is the
first kind, so its time is when the head map is ready). Printed per kind:

- nominal layer passes: what the kind costs if every mediator recomputed its layers over all n
  tokens (a mediator in layer l: L - l passes; the issue's (L·H + (L+1)·n)·L/2 for heads + residual);
- run: the layer passes actually computed, in n-token units (the last layer computes the target row
  only; a causal model recomputes only the positions from the patched one on; unchanged mediators are
  not computed); forward-pass equivalents = passes / L;
- the reference: plain batched forwards (models.forward.layer_forward, the layers of the same model,
  batch of 64 rows of n tokens) timed in the same process right after, per layer pass; the ratio is the
  kind's seconds / (its run passes × that time per pass): 1.0 is the arithmetic floor of the passes
  actually run. The ratio to the nominal work (seconds / nominal passes × per-pass time) is printed too.

Absolute goals (issue): every kind for one pair on builtin ≤ 1 s; SmolLM2 at 16 tokens ≤ 60 s on one
thread with the head map ≤ 10 s. The machine is shared: compare ratios, not seconds, across days.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAIRS = {
    "builtin:agreement": ("the key to the cabinets [MASK] on the table .", "the keys to the cabinets [MASK] on the table .",
                          ("are", "is")),
    # 16 tokens on SmolLM2's tokenizer (the text before [MASK] is the input)
    "pkg:smollm2": ("The keys to the old wooden cabinet in the big house near the quiet blue river [MASK]",
                    "The key to the old wooden cabinet in the big house near the quiet blue river [MASK]", ("are", "is")),
}


def per_pass_seconds(lm, n: int, batch: int = 64, reps: int = 2) -> float:
    """Seconds of one layer pass over n tokens in a plain batched forward (layer_forward over every layer,
    `batch` rows), the best of `reps`."""
    import torch

    from attnviz.models.forward import layer_forward, rope_for

    layers = lm.layers()
    d = layers[0].wq.shape[0]
    x0 = torch.randn(batch, n, d) * 0.5
    rope = rope_for(lm.arch, x0[:1])
    best = float("inf")
    with torch.inference_mode():
        for _ in range(reps):
            x = x0
            t = time.perf_counter()
            for w in layers:
                x = layer_forward(w, x, rope=rope).resid_out
            best = min(best, time.perf_counter() - t)
    return best / (batch * len(layers))


def bench_model(spec: str, repeat: int) -> dict:
    import torch

    import attnviz
    from attnviz.mediation import KINDS, mediate, nominal_layer_passes
    from attnviz.trace import encode

    lm = attnviz.load_model(spec)
    a, b, contrast = PAIRS[spec]
    n = len(encode(lm, a).tokens)
    L, H = lm.n_layers, lm.n_heads
    mediate(lm, a, b, contrast, kinds=("attention",))  # warm-up
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        stamps = {}
        m = mediate(lm, a, b, contrast, progress=lambda k, d, T, r: stamps.__setitem__(k, time.perf_counter() - t0))
        total = time.perf_counter() - t0
        ref = per_pass_seconds(lm, n)
        runs.append((total, stamps, m, ref))
    total, stamps, m, ref = min(runs, key=lambda r: r[0])
    rows = []
    for k in KINDS:
        wk = m.work[k]
        nom = nominal_layer_passes(L, H, n, (k,))
        rows.append(dict(kind=k, nominal_passes=nom, run_passes=wk["layer_passes"], forward_equiv=wk["layer_passes"] / L,
                         computed=wk["computed"], skipped=wk["skipped"], seconds=wk["seconds"],
                         ratio_run=wk["seconds"] / (wk["layer_passes"] * ref),
                         ratio_nominal=wk["seconds"] / (nom * ref), ready_at=stamps.get(k)))
    return dict(model=spec, n_tokens=n, layers=L, heads=H, threads=torch.get_num_threads(), total_seconds=total,
                head_map_seconds=stamps.get("attention"), per_pass_ms=ref * 1e3,
                forward_ms=ref * L * 1e3, te=m.total_effect, kinds=rows,
                issue_nominal=nominal_layer_passes(L, H, n), load=os.getloadavg()[0],
                all_runs=[r[0] for r in runs])


def show(r: dict) -> None:
    print(f"\n## {r['model']}: {r['n_tokens']} tokens, {r['layers']} layers × {r['heads']} heads, "
          f"{r['threads']} thread(s), load average {r['load']:.1f}")
    print(f"one plain forward over n tokens (batched reference): {r['forward_ms']:.2f} ms "
          f"({r['per_pass_ms']:.3f} ms per layer pass); TE {r['te']:+.4g}")
    print(f"the issue's nominal work (heads + residual): {r['issue_nominal']:.0f} layer passes = "
          f"{r['issue_nominal'] / r['layers']:.0f} forward passes")
    print("| kind | nominal passes | run passes | forward-pass equiv. | computed / skipped | seconds | ready at | "
          "× floor (run) | × nominal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in r["kinds"]:
        print(f"| {k['kind']} | {k['nominal_passes']:.0f} | {k['run_passes']:.0f} | {k['forward_equiv']:.1f} | "
              f"{k['computed']} / {k['skipped']} | {k['seconds']:.2f} | {k['ready_at']:.2f} s | "
              f"{k['ratio_run']:.2f} | {k['ratio_nominal']:.2f} |")
    print(f"all kinds: {r['total_seconds']:.2f} s (runs: {', '.join(f'{x:.2f}' for x in r['all_runs'])}); "
          f"head map ready at {r['head_map_seconds']:.2f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="builtin:agreement,pkg:smollm2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    out = []
    for spec in [s.strip() for s in args.models.split(",") if s.strip()]:
        r = bench_model(spec, args.repeat)
        show(r)
        out.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
