"""How degenerate each blank-out blank is, per model: the median over attributed positions of
|Δf| / |f0| for every sentence, summarised over sentences (median and quartiles). A blank whose
changes are all close to f0 (about 1) cannot rank tokens.

    python scripts/baseline_degeneracy.py --models builtin:agreement,pkg:smollm2 --n 40 \
        --linzen /path/to/linzen_testset [--blanks token,pad,word,mean,zero] [--out table.json]

Sentences: Linzen et al. (2016)'s agreement set when --linzen is given (its licence, CC BY-NC, keeps
it out of the repository), else the shipped real-style agreement set. The target quantity is the
model's own (p(prediction) at the verb; the cosine of the final hidden state for encoders without a
head), as the faithfulness study uses it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def items_for(args) -> list:
    from attnviz import datasets
    from attnviz.evaluate import read_linzen
    if args.linzen:
        return read_linzen(args.linzen, limit=args.n * 3)
    return datasets.read_jsonl(datasets.set_path("real_agreement"))


def run(spec: str, items: list, blanks: list, n: int) -> dict:
    import torch
    import attnviz
    from attnviz import faithfulness as F
    from attnviz.faithfulness.importance import DEGENERATE, blank_choice, blank_fill
    torch.set_num_threads(1)
    lm = attnviz.load_model(spec)
    per = {b: [] for b in blanks}
    used, t0 = 0, time.perf_counter()
    for it in items:
        if used >= n:
            break
        try:
            got = {b: F.importance(lm, it["text"], baselines=["blank_out"], blank=b) for b in blanks}
        except Exception as e:  # noqa: BLE001 - an item a model cannot read is skipped and counted
            print(f"  skipped: {e}", file=sys.stderr)
            continue
        for b, imp in got.items():
            per[b].append(imp.blank_degeneracy)
        used += 1
    tok = lm.tokenizer
    ids = tok("the keys")["input_ids"]
    out = dict(model=spec, sentences=used, seconds=round(time.perf_counter() - t0, 1),
               auto=blank_choice(lm), first_token=tok.convert_ids_to_tokens(ids[:1])[0],
               bos_added=bool(getattr(tok, "bos_token_id", None) is not None and ids[0] == tok.bos_token_id),
               blanks={})
    for b, v in per.items():
        v = np.asarray([x for x in v if np.isfinite(x)])
        q = np.percentile(v, [25, 50, 75]) if v.size else [np.nan] * 3
        out["blanks"][b] = dict(what=blank_fill(lm, b)[2], median=float(q[1]), q1=float(q[0]), q3=float(q[2]),
                                degenerate_share=float(np.mean(v >= DEGENERATE)) if v.size else None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="builtin:agreement,pkg:minilm,pkg:mpnet,pkg:smollm2,pkg:gemma3")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--linzen", default=None)
    ap.add_argument("--blanks", default="token,pad,word,mean,zero")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    items = items_for(args)
    rows = []
    for spec in args.models.split(","):
        blanks = [b for b in args.blanks.split(",")]
        try:
            r = run(spec, items, blanks, args.n)
        except Exception as e:  # noqa: BLE001 - a model that is not installed is reported, not fatal
            print(f"{spec}: {e}", file=sys.stderr)
            continue
        rows.append(r)
        print(json.dumps(r), flush=True)
    print("\n| model | sentences | auto | " + " | ".join(args.blanks.split(",")) + " |")
    print("|---|---:|---|" + "---:|" * len(args.blanks.split(",")))
    for r in rows:
        cells = [f"{v['median']:.2f} ({v['q1']:.2f}–{v['q3']:.2f})" for v in r["blanks"].values()]
        print(f"| {r['model']} | {r['sentences']} | {r['auto']} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
