"""Adversarial-attention frontier speed: 16 λ values × 200 Adam steps, one head's target row, on
builtin:agreement at 16 tokens, as a ratio to one plain forward pass of that model measured in the
same run (the machines are shared and noisy; the ratio is what carries over).

    python bench/adversarial.py [--model builtin:agreement] [--layers 1,2,3,4,5,6] [--restarts 3,1]
                                [--threads 2,1] [--prune-at N]

Prints, for each torch thread count (2 is torch's default on the 2-core machine, what the app
uses), each number of restarts (the batch is 16 × restarts until the restarts are pruned at step
steps // 4, then 16) and each layer of the head site: the frontier's wall time, its ratio to one
forward pass, and the mean time of one optimisation step.
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
    ap.add_argument("--restarts", default="3,1")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--points", type=int, default=16, help="number of λ values")
    ap.add_argument("--repeats", type=int, default=31, help="forward passes timed for the reference")
    ap.add_argument("--threads", default="2,1", help="torch thread counts to run, in turn")
    ap.add_argument("--prune-at", type=int, default=None, help="step at which restarts are pruned "
                    "(default: frontier's, steps // 4; >= steps: never)")
    args = ap.parse_args()
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

    def time_forward():
        for _ in range(3):
            forward()
        tf = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            forward()
            tf.append(time.perf_counter() - t)
        return statistics.median(tf)

    print(f"{args.model}: {lm.n_layers} layers, {H} heads; '{enc.text}' = {len(enc.tokens)} tokens")
    print(f"frontier: {len(lambdas)} λ values, {args.steps} steps, 100 permutations + uniform, head {args.head}, "
          f"restarts pruned at step {args.steps // 4 if args.prune_at is None else args.prune_at}")
    for threads in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(threads)
        fwd = time_forward()
        print(f"\ntorch threads {threads}: one plain forward pass (the model's own, batch 1) {fwd * 1e3:.2f} ms "
              f"(median of {args.repeats})")
        A.frontier(lm, enc, A.Site("head", 0, 0), lambdas=lambdas, steps=3, restarts=1)  # warm-up
        print(f"{'layer':>5} {'restarts':>8} {'batch':>5} {'seconds':>8} {'x forward':>10} {'ms/step':>8} "
              f"{'baselines s':>11}   <= 5 s")
        for R in [int(r) for r in args.restarts.split(",")]:
            for layer in layers:
                site = A.Site("head", layer - 1, args.head - 1)
                t = time.perf_counter()
                fr = A.frontier(lm, enc, site, lambdas=lambdas, steps=args.steps, restarts=R, prune_at=args.prune_at)
                dt = time.perf_counter() - t
                step = fr.timings["optimise"] / args.steps
                print(f"{layer:>5} {R:>8} {len(lambdas) * R:>5} {dt:>8.2f} {dt / fwd:>10.0f} {step * 1e3:>8.1f} "
                      f"{fr.timings['baselines']:>11.2f}   {'yes' if dt <= 5 else 'NO'}")
        # the same forward once more, so a slowdown of the machine during the run shows
        print(f"one plain forward pass again at the end: {time_forward() * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
