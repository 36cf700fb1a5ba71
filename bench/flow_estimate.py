"""Attention flow's time estimate (shown before a long run, and deciding where flow is offered)
against the measured time, on real attention of ordinary English.

    python bench/flow_estimate.py [--cases pkg:minilm:64,pkg:minilm:128,pkg:smollm2:128,...] [--threads 1]

For each case: the model's head-averaged attention of the first n tokens of a few paragraphs, one
warm-up call, then attnviz.methods.flow timed once, beside flow.estimate(lm, n) and the ratio
estimate / measured (above 1: the estimate errs long, as it should).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_flow import TEXT  # noqa: E402

MORE = (" Years later, when the keeper had grown too old to climb the stairs, the children of the village took "
        "turns lighting the lamp. They argued about whose turn it was, kept a notebook of every storm, and "
        "painted the tower again each spring with paint they bought from the money they earned selling fish "
        "at the market on Saturdays. A travelling writer heard the story from a woman who ran the bakery near "
        "the church, and wrote a short book about the lighthouse and the people who cared for it. The book "
        "was not famous, but it was read in schools along the coast, and teachers asked their pupils what "
        "they would keep burning even if nobody seemed to need it. Some answered with jokes, some with long "
        "letters to their grandparents, and one boy wrote that he would keep his promise to his little "
        "sister, who was afraid of the dark and slept better when the hall light was left on.")
MORE += (" The bakery itself had a history of its own. It had opened in the year the railway reached the coast, "
        "when the first visitors came from the city to walk on the beach and eat cakes in the afternoon. The "
        "founder was a widow from the mountains who had never seen the sea before she married, and she "
        "baked the bread of her own village, dark and heavy, until the visitors asked for something lighter. "
        "Her daughter learned to make pastries from a cook who worked in a hotel for one summer, and the shop "
        "became known for them across the whole region. During the war the ovens stood cold for two winters "
        "because there was no flour, and the family sold vegetables from their garden instead. When peace "
        "came they reopened on a Sunday morning, and people queued in the rain from the door of the shop to "
        "the steps of the church to buy the first loaves. The granddaughter, who runs it now, still keeps the "
        "old recipe book on a shelf above the counter, its pages stained with butter and marked with notes in "
        "three different hands. She says that the recipes have changed less than the customers, who now come "
        "by car, take photographs of the cakes before eating them, and ask whether the flour is organic. "
        "On quiet evenings she sits by the window with a cup of coffee and watches the beam of the lighthouse "
        "sweep across the water, and she thinks of the old keeper, who bought a loaf from her grandmother every "
        "morning for forty years and never once complained about the price.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="pkg:minilm:64,pkg:minilm:128,pkg:minilm:256,pkg:smollm2:64,pkg:smollm2:128,"
                    "builtin:agreement:64")
    ap.add_argument("--threads", type=int, default=1, help="flow's threads (workers)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import attnviz

    fm = importlib.import_module("attnviz.methods.flow")
    loaded = {}
    print(f"flow threads {args.threads}; estimate = flow.estimate(lm, n)")
    print(f"{'model':<20} {'tokens':>6} {'measured s':>11} {'estimate s':>11} {'est/meas':>9} {'max-flow pairs':>15}")
    for case in args.cases.split(","):
        spec, n = case.rsplit(":", 1)
        n = int(n)
        if spec not in loaded:
            loaded[spec] = attnviz.load_model(spec)
        m = loaded[spec]
        ids = m.tokenizer(TEXT + MORE, return_tensors="pt")["input_ids"][:, :n]
        if ids.shape[1] < n:
            print(f"{spec:<20} {n:>6}  the text has only {ids.shape[1]} tokens: skipped")
            continue
        with torch.inference_mode():
            att = m.model(ids, output_attentions=True).attentions
        A = torch.stack(att, 0)[:, 0].double().mean(1).numpy()
        A = A / A.sum(-1, keepdims=True)
        small = A[:, :8, :8] / A[:, :8, :8].sum(-1, keepdims=True)
        fm.flow(small, normalize=False, workers=args.threads)  # compile / warm the kernels
        st: dict = {}
        t = time.perf_counter()
        fm.flow(A, normalize=False, workers=args.threads, stats=st)
        dt = time.perf_counter() - t
        est = fm.estimate(m, n)
        print(f"{spec:<20} {n:>6} {dt:>11.2f} {est:>11.2f} {est / dt:>9.2f} {st.get('maxflow_pairs', 0):>15}", flush=True)


if __name__ == "__main__":
    main()
