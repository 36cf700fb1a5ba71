"""Adversarial-attention frontier speed: 16 λ values × 200 Adam steps, one head's target row, on
builtin:agreement at 16 tokens, as a ratio to one plain forward pass of that model measured in the
same run (the machines are shared and noisy; the ratio is what carries over).

    python bench/adversarial.py [--model builtin:agreement] [--layers 1,2,3,4,5,6] [--restarts 1,3]

Prints, for each layer of the head site and each number of restarts (the batch is 16 × restarts),
the frontier's wall time, its ratio to one forward pass, and the time of one optimisation step.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

# 16 tokens with [CLS] and [SEP] in the built-in vocabulary
SENTENCE = "the keys to the cabinet near the old doors [MASK] on the table ."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:agreement")
    ap.add_argument("--text", default=SENTENCE)
    ap.add_argument("--layers", default="", help="1-based layers of the head site (default: all)")
    ap.add_argument("--head", type=int, default=1, help="1-based head")
    ap.add_argument("--restarts", default="1,3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--points", type=int, default=16, help="number of λ values")
    ap.add_argument("--repeats", type=int, default=31, help="forward passes timed for the reference")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import numpy as np

    import attnviz
    from attnviz import adversarial as A
    from attnviz.trace import encode

    lm = attnviz.load_model(args.model)
    enc = encode(lm, args.text)
    L, H = lm.n_layers, lm.n_heads
    layers = [int(x) for x in args.layers.split(",")] if args.layers else list(range(1, L + 1))
    lambdas = [0.0] + list(np.logspace(-3, 1.5, args.points - 1))

    def forward():
        with torch.inference_mode():
            lm.model(input_ids=enc.ids)

    for _ in range(3):
        forward()
    tf = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        forward()
        tf.append(time.perf_counter() - t)
    fwd = statistics.median(tf)
    print(f"{args.model}: {lm.n_layers} layers, {H} heads; '{enc.text}' = {len(enc.tokens)} tokens; "
          f"torch threads {torch.get_num_threads()}")
    print(f"one plain forward pass (the model's own, batch 1): {fwd * 1e3:.2f} ms (median of {args.repeats})")
    print(f"frontier: {len(lambdas)} λ values, {args.steps} steps, 100 permutations + uniform, head {args.head}")
    A.frontier(lm, enc, A.Site("head", 0, 0), lambdas=lambdas, steps=3, restarts=1)  # warm-up (first-call costs)
    print(f"{'layer':>5} {'restarts':>8} {'batch':>5} {'seconds':>8} {'x forward':>10} {'ms/step':>8} "
          f"{'baselines s':>11}   <= 5 s")
    for R in [int(r) for r in args.restarts.split(",")]:
        for layer in layers:
            site = A.Site("head", layer - 1, args.head - 1)
            t = time.perf_counter()
            fr = A.frontier(lm, enc, site, lambdas=lambdas, steps=args.steps, restarts=R)
            dt = time.perf_counter() - t
            step = fr.timings["optimise"] / args.steps
            print(f"{layer:>5} {R:>8} {len(lambdas) * R:>5} {dt:>8.2f} {dt / fwd:>10.0f} {step * 1e3:>8.1f} "
                  f"{fr.timings['baselines']:>11.2f}   {'yes' if dt <= 5 else 'NO'}")
    # the same forward once more, so a slowdown of the machine during the run shows
    tf2 = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        forward()
        tf2.append(time.perf_counter() - t)
    print(f"one plain forward pass again at the end: {statistics.median(tf2) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
