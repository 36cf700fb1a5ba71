"""The adversarial-attention frontier of one sentence at every layer: the figures and tables of
docs/adversarial.md.

    python scripts/frontier_report.py [--model builtin:agreement] [--text "..."] [--out docs/adversarial]
                                      [--steps 200] [--restarts 3] [--jw-steps 500] [--heads]

For each layer: the site "all heads of the layer" (the target row of every head), its frontier
(16 λ, restarts, Adam steps), 100 permutations, uniform attention, the other seeds' models
(builtin:NAME-seedK when they exist) and Jain & Wallace's search. With --heads also every single
head (restarts 1) for a per-head table. Writes OUT/frontier_layers.png (one panel per layer),
OUT/frontier_layers.json (every number) and OUT/frontier_table.md (the tables), and prints the tables.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PRESET = "the keys to the cabinet [MASK] on the table ."


def summarise(fr, jw) -> dict:
    """Frontier + J&W -> the numbers of one table row."""
    def at(x):
        return float(fr.tvd[fr.at_jsd(x)]) if fr.jsd.max() >= x else None

    pm = fr.perm_summary()
    return dict(
        max_jsd_tvd_001=float(fr.jsd[fr.within(0.01)]), max_jsd_tvd_005=float(fr.jsd[fr.within(0.05)]),
        tvd_at_jsd_01=at(0.1), tvd_at_jsd_03=at(0.3), max_jsd=float(fr.jsd.max()),
        perm_jsd_median=pm["jsd_median"], perm_tvd_median=pm["tvd_median"], perm_tvd_max=pm["tvd_max"],
        uniform_jsd=fr.uniform[0], uniform_tvd=fr.uniform[1],
        seeds=[dict(spec=s.spec, jsd=s.jsd, tvd=s.tvd) for s in fr.seeds],
        jw_best_jsd=None if jw is None else jw.best_jsd, jw_accepted=None if jw is None else int(jw.accepted.sum()),
        jw_tvd=None if jw is None else [float(v) for v in jw.tvd], jw_jsd=None if jw is None else [float(v) for v in jw.jsd],
        envelope_jsd=[float(v) for v in fr.jsd[fr.envelope]], envelope_tvd=[float(v) for v in fr.tvd[fr.envelope]],
        points=int(len(fr.jsd)), seconds=fr.timings.get("total"),
    )


def fmt(v, d=3):
    return "–" if v is None else f"{v:.{d}f}"


def figure(results, title, log_y=False):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    L = len(results)
    cols = 3 if L > 4 else L
    cols = 4 if L in (7, 8) else cols
    rows = math.ceil(L / cols)
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=True,
                        subplot_titles=[f"layer {r['layer']} (all heads)" if r["layer"] != "all" else "all layers, all heads"
                                        for r in results],
                        horizontal_spacing=0.04, vertical_spacing=0.12)
    for k, r in enumerate(results):
        s = r["summary"]
        rr, cc = k // cols + 1, k % cols + 1
        show = k == 0
        fig.add_trace(go.Scatter(x=s["envelope_jsd"], y=s["envelope_tvd"], mode="lines", line=dict(color="#1f77b4", shape="vh"),
                                 name="frontier", showlegend=show), row=rr, col=cc)
        fig.add_trace(go.Scatter(x=r["perm_jsd"], y=r["perm_tvd"], mode="markers", marker=dict(color="#ff7f0e", symbol="x", size=4),
                                 name="permutations", showlegend=show), row=rr, col=cc)
        fig.add_trace(go.Scatter(x=[s["uniform_jsd"]], y=[s["uniform_tvd"]], mode="markers",
                                 marker=dict(color="#8c564b", symbol="diamond", size=9), name="uniform", showlegend=show),
                      row=rr, col=cc)
        if s["seeds"]:
            fig.add_trace(go.Scatter(x=[p["jsd"] for p in s["seeds"]], y=[p["tvd"] for p in s["seeds"]], mode="markers",
                                     marker=dict(color="#17becf", symbol="triangle-up", size=10), name="other seeds",
                                     showlegend=show), row=rr, col=cc)
        if s["jw_jsd"]:
            fig.add_trace(go.Scatter(x=s["jw_jsd"], y=s["jw_tvd"], mode="markers",
                                     marker=dict(color="#9467bd", symbol="star", size=9), name="Jain & Wallace",
                                     showlegend=show), row=rr, col=cc)
    fig.update_xaxes(range=[0, math.log(2) + 0.01])
    fig.update_xaxes(title_text="JSD(α′, α)", row=rows)
    if log_y:
        fig.update_yaxes(type="log", range=[-5, 0])
        fig.update_yaxes(title_text="TVD(ŷ′, ŷ) (log)", col=1)
    else:
        fig.update_yaxes(range=[0, 1])
        fig.update_yaxes(title_text="TVD(ŷ′, ŷ)", col=1)
    fig.update_layout(title=title, height=330 * rows + 120, width=1100, plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.08))
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:agreement")
    ap.add_argument("--text", default=PRESET)
    ap.add_argument("--out", default=str(ROOT / "docs" / "adversarial"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--jw-steps", type=int, default=500)
    ap.add_argument("--heads", action="store_true", help="also every single head (restarts 1)")
    ap.add_argument("--all", action="store_true", help="also the site 'all heads of all layers'")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import attnviz
    from attnviz import adversarial as A
    from attnviz.adversarial.pipeline import run_pipeline

    lm = attnviz.load_model(args.model)
    others = [attnviz.load_model(s) for s in A.seed_specs(lm.spec)]
    enc = A.encode(lm, args.text)
    L, H = lm.n_layers, lm.n_heads
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    results = []
    sites = [A.Site("layer", l) for l in range(L)] + ([A.Site("all")] if args.all else [])
    for site in sites:
        run = run_pipeline(lm, enc, site, steps=args.steps, restarts=args.restarts, jw_steps=args.jw_steps,
                           seeds=others)
        fr, jw = run.frontier, run.jw
        for why in run.seeds_skipped:
            print(f"{site.label()}: a seed left out: {why}", file=sys.stderr)
        s = summarise(fr, jw)
        results.append(dict(layer="all" if site.kind == "all" else site.layer + 1, summary=s, perm_jsd=[float(v) for v in fr.perm_jsd],
                            perm_tvd=[float(v) for v in fr.perm_tvd], caption=fr.caption(0.01)))
        print(f"{site.label()}: {fr.caption(0.01)}  ({s['seconds']:.1f} s)", flush=True)
    heads = []
    if args.heads:
        for l in range(L):
            for h in range(H):
                fr = A.frontier(lm, enc, A.Site("head", l, h), steps=args.steps, restarts=1)
                heads.append(dict(layer=l + 1, head=h + 1, max_jsd_tvd_001=float(fr.jsd[fr.within(0.01)]),
                                  perm_tvd_median=fr.perm_summary()["tvd_median"],
                                  tvd_at_jsd_03=float(fr.tvd[fr.at_jsd(0.3)]) if fr.jsd.max() >= 0.3 else None))
            print(f"heads of layer {l + 1} done", flush=True)
    y0 = A.prepare(lm, enc, A.Site("layer", 0)).y0.numpy()
    top = np.argsort(-y0)[:5]
    pred = ", ".join(f"{lm.tokenizer.convert_ids_to_tokens(int(i))} {y0[i]:.3f}" for i in top)
    cmd = ("python scripts/frontier_report.py --model " + args.model + (f" --text \"{args.text}\"" if args.text != PRESET else "")
           + (f" --steps {args.steps}" if args.steps != 200 else "") + (f" --restarts {args.restarts}" if args.restarts != 3 else "")
           + (f" --jw-steps {args.jw_steps}" if args.jw_steps != 500 else "") + (" --heads" if args.heads else "") + (" --all" if args.all else ""))
    lines = [f"Model `{args.model}`, sentence `{enc.text}` ({len(enc.tokens)} tokens, target `{enc.tokens[enc.target]}` "
             f"at position {enc.target}); prediction: {pred}.",
             f"Site: the target row of every head of the layer (JSD = mean over the {H} rows). Frontier: 16 λ × "
             f"{args.restarts} restarts, {args.steps} Adam steps; 100 permutations; Jain & Wallace {args.jw_steps} steps. "
             f"Total {time.perf_counter() - t_all:.0f} s, torch threads {torch.get_num_threads()}.", "",
             f"Command: `{cmd}`", "",
             "| layer | max JSD at TVD ≤ 0.01 | max JSD at TVD ≤ 0.05 | TVD at JSD ≥ 0.1 | TVD at JSD ≥ 0.3 | "
             "permutations: JSD / TVD (median) | uniform: JSD / TVD | other seeds: JSD / TVD | J&W: max JSD within ε (accepted) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        seeds = "; ".join(f"{fmt(p['jsd'])} / {fmt(p['tvd'], 4)}" for p in s["seeds"]) or "–"
        jwc = "–" if s["jw_best_jsd"] is None else f"{fmt(s['jw_best_jsd'])} ({s['jw_accepted']}/5)"
        lines.append(f"| {r['layer']} | {fmt(s['max_jsd_tvd_001'])} | {fmt(s['max_jsd_tvd_005'])} | {fmt(s['tvd_at_jsd_01'], 4)} | "
                     f"{fmt(s['tvd_at_jsd_03'], 4)} | {fmt(s['perm_jsd_median'])} / {fmt(s['perm_tvd_median'], 4)} | "
                     f"{fmt(s['uniform_jsd'])} / {fmt(s['uniform_tvd'], 4)} | {seeds} | {jwc} |")
    if heads:
        lines += ["", "Single heads (restarts 1): max JSD at TVD ≤ 0.01 — rows layers, columns heads.", "",
                  "| layer | " + " | ".join(f"h{h + 1}" for h in range(H)) + " |", "|---" * (H + 1) + "|"]
        for l in range(L):
            row = [x for x in heads if x["layer"] == l + 1]
            lines.append(f"| {l + 1} | " + " | ".join(fmt(x["max_jsd_tvd_001"], 2) for x in row) + " |")
    table = "\n".join(lines)
    print(table)
    (out / "frontier_table.md").write_text(table + "\n", encoding="utf-8")
    (out / "frontier_layers.json").write_text(json.dumps(dict(model=args.model, text=enc.text, layers=results, heads=heads,
                                                             command=cmd), indent=1), encoding="utf-8")
    for log_y, name in ((False, "frontier_layers"), (True, "frontier_layers_log")):
        fig = figure(results, f"{args.model}: '{enc.text}' — attention vs output distance per layer"
                     + (" (log TVD)" if log_y else ""), log_y)
        try:
            fig.write_image(str(out / f"{name}.png"), scale=1)
        except Exception as e:  # noqa: BLE001 - kaleido needs a Chrome; the HTML always works
            print(f"(PNG not written: {e}); writing HTML", file=sys.stderr)
            fig.write_html(str(out / f"{name}.html"), include_plotlyjs="cdn")


if __name__ == "__main__":
    main()
