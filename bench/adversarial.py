"""Adversarial-attention frontier speed: 16 λ values × 200 Adam steps, one head's target row, 16
tokens, on pkg:smollm2 (layers 1, 15, 30) and builtin:agreement (layers 1, 3, 6).

    python bench/adversarial.py [--models pkg:smollm2,builtin:agreement] [--restarts 1,3]
                                [--threads 1,2] [--steps 200] [--plain-steps 3] [--device cuda]
                                [--text SENTENCE]

On a GPU the search step runs as a CUDA graph (ATTNVIZ_CUDA_GRAPHS=0: without; run both for the ratio).

For each torch thread count, model, number of restarts and layer it prints the frontier's wall time
(prepare + optimisation + 100 permutations + uniform) and two ratios against references measured in
the same run (the machine is shared and noisy; the ratios are what carry over):
- "x forward": the frontier's time / one plain forward pass of the model (its own model(input_ids),
  batch 1, median of 31);
- "plain/fast": one optimisation step through the plain formulation (run_layers on every position of
  every layer from the site on, with the attention override; the pre-fast-path way) / one step through
  the fast path, same batch, same Problem, timed in the same run (median of --plain-steps).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

TEXTS = {
    # 16 tokens each
    "builtin:agreement": "the keys to the cabinet near the old doors [MASK] on the table .",
    "pkg:smollm2": "The keys to the old wooden cabinet in the hall near the big front door are",
}
LAYERS = {"builtin:agreement": [1, 3, 6], "pkg:smollm2": [1, 15, 30]}


def median_time(f, repeats):
    f()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="pkg:smollm2,builtin:agreement")
    ap.add_argument("--layers", default="", help="1-based layers (default: 1, 15, 30 / 1, 3, 6)")
    ap.add_argument("--head", type=int, default=1, help="1-based head")
    ap.add_argument("--restarts", default="1,3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--points", type=int, default=16, help="number of λ values")
    ap.add_argument("--threads", default="1,2", help="torch thread counts to run, in turn")
    ap.add_argument("--plain-steps", type=int, default=3, help="steps timed on the plain formulation")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (the model, the search and the timing there)")
    ap.add_argument("--text", default=None, help="the sentence (default: the model's 16-token sentence above; "
                    "a model folder gets the SmolLM2 one)")
    args = ap.parse_args()

    import attnviz
    from attnviz import adversarial as A
    from attnviz.trace import encode

    lambdas = [0.0] + list(np.logspace(-3, 1.5, args.points - 1))
    for spec in args.models.split(","):
        lm = attnviz.load_model(spec, device=args.device)
        sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
        default = TEXTS["builtin:agreement"] if spec.startswith("builtin:") else TEXTS["pkg:smollm2"]
        enc = encode(lm, args.text or TEXTS.get(spec, default))
        layers = [int(x) for x in args.layers.split(",")] if args.layers else LAYERS.get(spec, [1, lm.n_layers])
        print(f"\n{spec}: {lm.n_layers} layers, {lm.n_heads} heads; '{enc.text}' = {len(enc.tokens)} tokens, "
              f"target {enc.target} '{enc.tokens[enc.target]}'")
        graphs = lm.device.type == "cuda" and os.environ.get("ATTNVIZ_CUDA_GRAPHS", "1") != "0"
        print(f"frontier: {len(lambdas)} λ values, {args.steps} steps, 100 permutations + uniform, head {args.head}"
              + (f"; CUDA graphs {'on' if graphs else 'off (ATTNVIZ_CUDA_GRAPHS=0)'}" if lm.device.type == "cuda" else ""))
        for threads in [int(x) for x in args.threads.split(",")]:
            torch.set_num_threads(threads)

            def forward():
                with torch.inference_mode():
                    lm.model(input_ids=enc.ids.to(lm.device))
                sync()

            fwd = median_time(forward, 31)
            print(f"device {lm.device}, torch threads {threads}: one plain forward pass {fwd * 1e3:.2f} ms (median of 31)")
            print(f"{'layer':>5} {'restarts':>8} {'seconds':>8} {'x forward':>9} {'ms/step':>8} "
                  f"{'plain ms/step':>13} {'plain/fast':>10}  <= 10 s")
            for R in [int(r) for r in args.restarts.split(",")]:
                for layer in layers:
                    site = A.Site("head", layer - 1, args.head - 1)
                    t = time.perf_counter()
                    fr = A.frontier(lm, enc, site, lambdas=lambdas, steps=args.steps, restarts=R)
                    sync()
                    dt = time.perf_counter() - t
                    for note in fr.notes:
                        if "CUDA graph" in note:
                            print("  note:", note)
                    step = fr.timings["optimise"] / args.steps
                    # one step (forward + backward) of batch 16·R, fast path and plain formulation
                    pb = A.prepare(lm, enc, site)
                    theta = torch.randn(len(lambdas) * R, 1, int(pb.allowed.sum()), device=lm.device,
                                        requires_grad=True)

                    def one(fast):
                        pb.fast = fast
                        j, tv, _ = pb.distances(pb.softmax_rows(theta))
                        (tv - j).sum().backward()
                        sync()

                    with torch.enable_grad():
                        t_fast = median_time(lambda: one(True), args.plain_steps)
                        t_plain = median_time(lambda: one(False), args.plain_steps)
                    print(f"{layer:>5} {R:>8} {dt:>8.2f} {dt / fwd:>9.0f} {step * 1e3:>8.1f} {t_plain * 1e3:>13.1f} "
                          f"{t_plain / t_fast:>10.1f}  {'yes' if dt <= 10 else 'NO'}", flush=True)
            print(f"one plain forward pass again at the end: {median_time(forward, 31) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
