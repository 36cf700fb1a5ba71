"""The papers' comparison across models, from `attnviz study` runs (scripts/cross_model_study.sh):
for each run, at the top layer and at the middle layer, the mean Spearman ρ of every map against
every baseline (95 % interval over sentences) and the paired differences rollout − raw and
flow − raw (Abnar & Zuidema's question) with their 95 % intervals; sentences whose correlation is
undefined (a constant vector) are left out of that cell and counted.

    python scripts/cross_model_tables.py runs/builtin runs/minilm ... > tables.md
    python scripts/cross_model_tables.py --summary runs/builtin runs/minilm ...   # one table, top layer
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np


def ci(v) -> tuple:
    v = np.asarray([x for x in v if x is not None and math.isfinite(x)], dtype=float)
    if v.size < 2:
        return float("nan"), float("nan"), int(v.size)
    return float(v.mean()), float(1.96 * v.std(ddof=1) / math.sqrt(v.size)), int(v.size)


def fmt(m, h) -> str:
    return "—" if not math.isfinite(m) else f"{m:+.2f} ± {h:.2f}"


def run_table(folder: Path) -> str:
    cfg = json.loads((folder / "config.json").read_text())
    allrecs = [json.loads(l) for l in (folder / "records.jsonl").read_text().splitlines() if l.strip()]
    recs = [r for r in allrecs if "rho" in r]
    errors = [r["error"] for r in allrecs if "rho" not in r]
    methods, baselines = cfg["methods"], cfg["baselines"]
    L = len(recs[0]["rho"][0]) if recs else 0
    out = [f"### {cfg['model']} ({len(recs)} sentences scored, {len(errors)} refused, {L} layers)", ""]
    if errors:
        out += [f"Refused, e.g.: {errors[0]}", ""]
    for layer, name in ((L - 1, f"top layer ({L})"), ((L - 1) // 2, f"middle layer ({(L - 1) // 2 + 1})")):
        out += [f"Mean Spearman ρ at the {name} (95 % interval over sentences; n = sentences with a defined ρ):", "",
                "| map | " + " | ".join(baselines) + " |", "|---|" + "---:|" * len(baselines)]
        for mi, m in enumerate(methods):
            cells = []
            for bi in range(len(baselines)):
                mean, h, n = ci([r["rho"][mi][layer][bi] for r in recs])
                cells.append(f"{fmt(mean, h)} (n {n})")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")
        if "attention" in methods:
            ai = methods.index("attention")
            out += ["Paired differences against raw attention, same sentences:", "",
                    "| difference | " + " | ".join(baselines) + " |", "|---|" + "---:|" * len(baselines)]
            for other in ("rollout", "flow"):
                if other not in methods:
                    continue
                oi = methods.index(other)
                cells = []
                for bi in range(len(baselines)):
                    d = []
                    for r in recs:
                        a, b = r["rho"][oi][layer][bi], r["rho"][ai][layer][bi]
                        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
                            d.append(a - b)
                    mean, h, n = ci(d)
                    cells.append(f"{fmt(mean, h)} (n {n})")
                out.append(f"| {other} − raw | " + " | ".join(cells) + " |")
            out.append("")
    ig = [r.get("ig_rel") for r in recs if r.get("ig_rel") is not None]
    if ig:
        tol = cfg.get("ig_tol") or 0
        out.append(f"Integrated gradients: {sum(1 for x in ig if tol and x > tol)} of {len(ig)} sentences missed the "
                   f"{100 * tol:.0f} % completeness bound.")
        out.append("")
    return "\n".join(out)


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--summary":
        print(summary_table(args[1:]))
        return 0
    for f in args:
        print(run_table(Path(f)))
    return 0


def summary_table(folders) -> str:
    """One row per run and difference: rollout − raw and flow − raw at the top layer against every
    baseline (what `--summary` prints)."""
    lines = []
    for folder in folders:
        folder = Path(folder)
        cfg = json.loads((folder / "config.json").read_text())
        recs = [json.loads(l) for l in (folder / "records.jsonl").read_text().splitlines() if l.strip()]
        recs = [r for r in recs if "rho" in r]
        if not recs:
            continue
        methods, baselines = cfg["methods"], cfg["baselines"]
        if not lines:
            lines = ["| model (sentences) | difference at the top layer | " + " | ".join(baselines) + " |",
                     "|---|---|" + "---:|" * len(baselines)]
        L = len(recs[0]["rho"][0])
        ai = methods.index("attention")
        for other in ("rollout", "flow"):
            oi = methods.index(other)
            cells = []
            for bi in range(len(baselines)):
                d = [r["rho"][oi][L - 1][bi] - r["rho"][ai][L - 1][bi] for r in recs
                     if r["rho"][oi][L - 1][bi] is not None and r["rho"][ai][L - 1][bi] is not None
                     and math.isfinite(r["rho"][oi][L - 1][bi]) and math.isfinite(r["rho"][ai][L - 1][bi])]
                mean, h, n = ci(d)
                cells.append(f"{fmt(mean, h)} (n {n})")
            lines.append(f"| {cfg['model']} ({len(recs)}) | {other} − raw (layer {L}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
