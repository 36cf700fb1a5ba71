"""Kobayashi et al. (2021)'s context-mixing ratios across models: for each model, the mean over
sentences (95 % interval) of each ratio averaged over the layers and the non-special tokens.
The paper's direction: attention weights alone (Attn-W) say most of a token's representation comes
from context; with the residual and LayerNorm in the picture (AttnResLn-N) far less does.

    python scripts/mixing_table.py --models builtin:agreement,pkg:minilm,pkg:mpnet,pkg:smollm2,pkg:gemma3 \
        --n 200 [--linzen FOLDER] > mixing.md
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

RATIOS = ("Attn-W", "AttnRes-W", "Attn-N", "AttnRes-N", "AttnResLn-N")


def sentences(args) -> list:
    from attnviz import datasets
    from attnviz.evaluate import read_linzen
    if args.linzen:
        items = read_linzen(args.linzen, limit=args.n)
    else:
        items = datasets.read_jsonl(datasets.set_path("real_agreement"))[:args.n]
    return [it["text"] for it in items]


def one(spec: str, texts: list) -> dict:
    import torch
    import attnviz
    torch.set_num_threads(1)
    lm = attnviz.load_model(spec)
    per = {r: [] for r in RATIOS}
    for t in texts:
        a = attnviz.analyze(lm, t, methods=["attention", "rollout", "value_norm", "attn_res", "attn_res_ln"])
        keep = ~np.asarray(a.special, dtype=bool)
        for r in RATIOS:
            if r in a.mixing:
                per[r].append(float(np.asarray(a.mixing[r])[:, keep].mean()))
    out = {}
    for r, v in per.items():
        v = np.asarray(v)
        if v.size > 1:
            out[r] = (100 * v.mean(), 100 * 1.96 * v.std(ddof=1) / math.sqrt(v.size), v.size)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="builtin:agreement,pkg:minilm,pkg:mpnet,pkg:smollm2,pkg:gemma3")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--linzen", default=None)
    args = ap.parse_args()
    texts = sentences(args)
    print("| model | sentences | " + " | ".join(f"{r} (%)" for r in RATIOS) + " |")
    print("|---|---:|" + "---:|" * len(RATIOS))
    for spec in args.models.split(","):
        try:
            res = one(spec, texts)
        except Exception as e:  # noqa: BLE001 - a model that is not installed is reported, not fatal
            print(f"{spec}: {e}", file=sys.stderr)
            continue
        n = max((v[2] for v in res.values()), default=0)
        print(f"| {spec} | {n} | " + " | ".join(f"{res[r][0]:.1f} ± {res[r][1]:.1f}" if r in res else "—"
                                            for r in RATIOS) + " |", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
