"""ATBFFRESLN for all layers at 32 tokens on MiniLM with the default IG steps, against one plain
forward pass of the model measured in the same run (torch threads 1).

    python bench/ffn.py [--tokens 32] [--steps N] [--repeat 5] [--dtype float32|float64]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import attnviz
from attnviz.methods import atb_ff
from attnviz.trace import encode, trace

WORDS = ("the old farmer who lives near the river sold three of his cows to the baker and the children "
         "watched them walk slowly down the dusty road toward the market before the long summer rain "
         "began to fall over the quiet hills").split()


def text_of(lm, n_tokens: int) -> str:
    """A sentence of exactly n_tokens tokens (including [CLS]/[SEP])."""
    for k in range(1, len(WORDS) + 1):
        text = " ".join(WORDS[:k])
        n = len(encode(lm, text).tokens)
        if n == n_tokens:
            return text
        if n > n_tokens:
            break
    raise SystemExit(f"cannot build a {n_tokens}-token sentence from the word list")


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out), min(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=atb_ff.DEFAULT_STEPS)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    lm = attnviz.load_model("pkg:minilm")
    text = text_of(lm, args.tokens)
    enc = encode(lm, text)
    ids = enc.ids

    def forward():
        with torch.inference_mode():
            lm.model(input_ids=ids, attention_mask=torch.ones_like(ids))

    tr = trace(lm, enc, dtype=dtype)

    def method():
        tr.forget("atb_ff")
        return atb_ff.analyse(tr, args.steps)

    forward()
    method()  # warm-up
    f_med, f_min = timed(forward, args.repeat * 4)
    t_med, t_min = timed(lambda: trace(lm, enc, dtype=dtype), args.repeat)
    m_med, m_min = timed(method, args.repeat)
    res = method()
    err = res["maps"]["atb_ff_res_ln"].completeness.worst
    L = tr.n_layers
    print(f"MiniLM, {len(enc.tokens)} tokens, {L} layers, IG steps {args.steps} (Gauss-Legendre), trace {args.dtype}")
    print(f"one forward pass (reference): median {f_med * 1e3:8.1f} ms   min {f_min * 1e3:8.1f} ms")
    print(f"trace (forward + recompute):  median {t_med * 1e3:8.1f} ms   min {t_min * 1e3:8.1f} ms")
    print(f"ATBFFRESLN, all layers, all three scopes + ratios:")
    print(f"                              median {m_med * 1e3:8.1f} ms   min {m_min * 1e3:8.1f} ms")
    print(f"ratio ATBFFRESLN / forward:   {m_med / f_med:8.1f}x (median)   {m_min / f_min:8.1f}x (min)")
    print(f"budget 3 s: {'met' if m_med <= 3.0 else 'NOT met'} ({m_med:.2f} s); worst completeness error {err:.1e}")


if __name__ == "__main__":
    main()
