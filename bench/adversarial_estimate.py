"""The Adversarial page's time estimate (shown before the search starts) against the measured time.

    python bench/adversarial_estimate.py [--models builtin:agreement,pkg:smollm2] [--threads 1]

For each model and a head (head 1) in its top, middle and first layer: attnviz.adversarial.estimate_seconds
(a few steps of the search timed; its own cost printed too), then the search it estimates run once —
frontier (16 λ × 200 steps) with one restart, and with three restarts plus Jain & Wallace's search
(100 steps) — and the ratio estimate / measured. 16-token sentences as in bench/adversarial.py.
"""
from __future__ import annotations

import argparse
import time

import torch

import attnviz
import attnviz.adversarial as A

TEXTS = {"causal": "The keys to the old wooden cabinet in the hall near the big front door are",
         "masked": "the keys to the cabinet near the old doors [MASK] on the table ."}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="builtin:agreement,pkg:smollm2")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch threads {args.threads}")
    for spec in args.models.split(","):
        lm = attnviz.load_model(spec)
        text = TEXTS["causal" if lm.arch.causal else "masked"]
        L = len(lm.arch.layers)
        print(f"{spec}: {L} layers; {len(A.encode(lm, text).tokens)} tokens")
        print("layer restarts jw-steps  estimate (its cost)  measured  estimate/measured")
        for layer in (L - 1, L // 2, 0):
            site = A.Site("head", layer, 0)
            for rs, jw in ((1, 0), (3, 100)):
                t0 = time.perf_counter()
                est = A.estimate_seconds(lm, text, site, restarts=rs, jw_steps=jw)
                cost = time.perf_counter() - t0
                t0 = time.perf_counter()
                A.frontier(lm, text, site, restarts=rs)
                if jw:
                    A.jain_wallace(lm, text, site, steps=jw)
                meas = time.perf_counter() - t0
                print(f"{layer + 1:5d} {rs:8d} {jw:8d}  {est:8.2f} s ({cost:.2f} s)  {meas:8.2f} s  {est / meas:6.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
