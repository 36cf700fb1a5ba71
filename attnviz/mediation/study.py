"""The corpus mediation study: `mediate` over many minimal pairs, the mean NIE per head with confidence
intervals, how concentrated the effect is, and how well attention-based head scores predict it.

    res = mediation_study(lm, shipped_pairs("agreement", 300), out_dir="runs/med")
    res = mediation_study(lm, pairs, out_dir="runs/med", engine="ray", address="head:6379", workers=8)
    res.summary()          # dict (also summary.json); res.markdown() the tables of docs/mediation.md

Resumable: with out_dir every finished pair is appended to out_dir/records.jsonl (flushed) as it comes
back, keyed by its texts and contrast; a rerun (on either engine) skips the pairs found there. Engines:
"local" (one pair after another in this process) and "ray" (the faithfulness study's Ray engine,
faithfulness.ray_engine: actors that load the model once and call score_item; this process writes).

Head scores (all on the base text x, at the target row t, `subj` the positions that differ between A
and B: the subject or the antecedent):
    attention         sum over subj of alpha^h[t, s]
    value_norm        || sum over subj of alpha^h[t, s] f^h(x_s) ||  (Kobayashi et al. 2020, per head)
    alti_head         max(0, ||y_t||_1 - ||y_t - z||_1), z = sum over subj of alpha^h[t, s] f^h(x_s),
                      y_t the attention block's output plus the residual at t (Ferrando et al. 2022's
                      proximity rule applied to one head's part from the subject)
    head_output_norm  || sum over j of alpha^h[t, j] f^h(x_j) ||  (what the head writes at the target)
    attention_change  1/2 sum over j of |alpha^h_B[t, j] - alpha^h_A[t, j]|  (how much the head's target
                      row moves between the texts: the attention intervention's input)
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..trace import trace as run_trace
from .core import align, heads_for_share, mediate
from .pairs import Pair

SCORES = ("attention", "value_norm", "alti_head", "head_output_norm", "attention_change")
STUDY_KINDS = ("attention", "head_output")
SHARES = (0.5, 0.8)
TOPK = (1, 5, 10)

def pair_key(p: Pair) -> str:
    raw = json.dumps([p.base, p.counterfactual, list(p.contrast)], ensure_ascii=True)
    return hashlib.sha1(raw.encode("ascii")).hexdigest()[:16]


def head_scores(lm, base_text: str, cf_text: str, subj: Sequence[int], max_tokens: int = 128) -> dict:
    """score name -> [L, H] float64 (SCORES), from the traces of both texts."""
    ta, tb = run_trace(lm, base_text, max_tokens=max_tokens), run_trace(lm, cf_text, max_tokens=max_tokens)
    t = ta.target
    subj = list(subj)
    out = {k: [] for k in SCORES}
    with torch.inference_mode():
        for l, st in enumerate(ta.layers):
            pa = st.probs.double()  # [H, n, n]
            pb = tb.layers[l].probs.double()
            fx = ta.fx[l].double()  # [H, n, d]
            a_ts = pa[:, t, subj]  # [H, |subj|]
            z = torch.einsum("hs,hsd->hd", a_ts, fx[:, subj])  # [H, d]
            y = st.resid_attn.double()[t]  # [d]
            whole = torch.einsum("hj,hjd->hd", pa[:, t], fx)
            out["attention"].append(a_ts.sum(-1))
            out["value_norm"].append(z.norm(dim=-1))
            out["alti_head"].append((y.abs().sum() - (y[None] - z).abs().sum(-1)).clamp_min(0))
            out["head_output_norm"].append(whole.norm(dim=-1))
            out["attention_change"].append(0.5 * (pb[:, t] - pa[:, t]).abs().sum(-1))
    return {k: torch.stack(v).cpu().numpy() for k, v in out.items()}


def score_pair(lm, p: Pair, kinds: Sequence[str] = STUDY_KINDS, max_tokens: int = 128) -> dict:
    """One pair -> its record (JSON-ready): TE, y, the NIE maps of `kinds`, the head scores."""
    m = mediate(lm, p.base, p.counterfactual, p.contrast, kinds=kinds, max_tokens=max_tokens)
    sc = head_scores(lm, p.base, p.counterfactual, m.changed, max_tokens)
    return dict(key=pair_key(p), pair=p.to_dict(), n_tokens=len(m.tokens_base), target=m.target, changed=m.changed,
                te=m.total_effect, y_base=m.y_base, y_cf=m.y_cf, p_base=list(m.p_base), p_cf=list(m.p_cf),
                nie={k: m.nie[k].tolist() for k in kinds}, scores={k: v.tolist() for k, v in sc.items()},
                seconds=m.seconds)


@dataclass
class MediationStudy:
    """Records of a corpus mediation study and their summary.

    records: one dict per pair (score_pair); skipped: (pair index, reason). Units as in Mediation:
    effects are relative changes of y = p(c1)/p(c2) (0.41 = +41 %)."""

    model: str
    records: list
    skipped: list = field(default_factory=list)
    kinds: tuple = STUDY_KINDS
    seconds: float = 0.0
    resumed: int = 0

    @property
    def n_pairs(self) -> int:
        return len(self.records)

    def arrays(self, kind: str = "attention") -> tuple:
        """(TE [N], NIE [N, L, H]) float64."""
        te = np.array([r["te"] for r in self.records], dtype=np.float64)
        nie = np.array([r["nie"][kind] for r in self.records], dtype=np.float64)
        return te, nie

    def summary(self, kind: str = "attention", n_boot: int = 1000, seed: int = 0) -> dict:
        """Mean NIE per head with 95 % CIs, concentration, and Spearman of each head score against NIE."""
        from scipy import stats

        if not self.records:
            raise InputError("the study has no pairs to summarise")
        te, nie = self.arrays(kind)
        N, L, H = nie.shape
        mean = nie.mean(0)
        sd = nie.std(0, ddof=1) if N > 1 else np.full((L, H), np.nan)
        tq = float(stats.t.ppf(0.975, N - 1)) if N > 1 else float("nan")
        half = tq * sd / math.sqrt(N)
        share = nie / te[:, None, None]  # NIE as a share of the pair's TE
        sh_mean = share.mean(0)
        sh_half = tq * (share.std(0, ddof=1) if N > 1 else np.nan) / math.sqrt(N)
        # concentration per pair: heads for 50 / 80 % of its TE, and the TE's share in its top-k heads
        conc = {}
        for s in SHARES:
            ks = [heads_for_share(nie[i].ravel(), te[i], s) for i in range(N)]
            got = [k for k in ks if k is not None]
            conc[f"{int(s * 100)}%"] = dict(reached=len(got) / N, median_heads=float(np.median(got)) if got else None,
                                            mean_te_heads=heads_for_share(mean.ravel(), float(te.mean()), s))
        order = np.sort((nie * np.sign(te)[:, None, None]).reshape(N, -1), axis=1)[:, ::-1]
        topk = {f"top{k}": float(np.mean(order[:, :k].sum(1) / np.abs(te))) for k in TOPK}
        logk = {}
        lg = np.log1p(np.clip(nie, -1 + 1e-12, None))
        lte = np.log1p(te)
        lorder = np.sort((lg * np.sign(lte)[:, None, None]).reshape(N, -1), axis=1)[:, ::-1]
        for k in TOPK:
            logk[f"top{k}"] = float(np.mean(lorder[:, :k].sum(1) / np.abs(lte)))
        logk["all_heads"] = float(np.mean(lg.reshape(N, -1).sum(1) / lte))
        # Spearman of each head score with NIE: per pair across the L*H heads (mean, 95 % CI), and between
        # the corpus means (bootstrap over pairs)
        rng = np.random.default_rng(seed)
        boots = rng.integers(0, N, size=(n_boot, N))
        sp = {}
        for name in SCORES:
            sc = np.array([r["scores"][name] for r in self.records], dtype=np.float64)
            per = _spearman_rows(sc.reshape(N, -1), nie.reshape(N, -1) * np.sign(te)[:, None])
            ok = per[np.isfinite(per)]
            pm = float(ok.mean()) if len(ok) else float("nan")
            ph = float(stats.t.ppf(0.975, len(ok) - 1) * ok.std(ddof=1) / math.sqrt(len(ok))) if len(ok) > 1 else float("nan")
            corpus = _spearman(sc.mean(0).ravel(), mean.ravel() * np.sign(te.mean()))
            bs = _spearman_rows(sc.reshape(N, -1)[boots].mean(1),
                                nie.reshape(N, -1)[boots].mean(1) * np.sign(te[boots].mean(1))[:, None])
            bs = bs[np.isfinite(bs)]
            sp[name] = dict(per_pair_mean=pm, per_pair_ci=[pm - ph, pm + ph], per_pair_n=int(len(ok)),
                            corpus=corpus, corpus_ci=[float(np.quantile(bs, 0.025)), float(np.quantile(bs, 0.975))]
                            if len(bs) else [float("nan")] * 2)
        top = np.argsort(-(mean * np.sign(te.mean())).ravel(), kind="stable")[:10]
        heads = [dict(layer=int(i // H) + 1, head=int(i % H) + 1, mean_nie=float(mean.ravel()[i]),
                      ci=[float(mean.ravel()[i] - half.ravel()[i]), float(mean.ravel()[i] + half.ravel()[i])],
                      mean_share=float(sh_mean.ravel()[i])) for i in top]
        by_layer = (mean * np.sign(te.mean())).clip(min=0).sum(1)
        att = {}
        for r, t in zip(self.records, te):
            a = r["pair"].get("n_attractors")
            att.setdefault(a, []).append(t)
        return dict(model=self.model, kind=kind, n_pairs=N, layers=L, heads=H,
                    te=dict(mean=float(te.mean()), median=float(np.median(te)),
                            ci=[float(te.mean() - tq * te.std(ddof=1) / math.sqrt(N)),
                                float(te.mean() + tq * te.std(ddof=1) / math.sqrt(N))] if N > 1 else None,
                            log_mean=float(np.mean(np.log1p(te))), positive=float(np.mean(te > 0))),
                    base_correct=float(np.mean([r["y_base"] < 1 for r in self.records])),
                    mean_nie=mean.tolist(), ci_half=half.tolist(), mean_share=sh_mean.tolist(),
                    share_ci_half=np.asarray(sh_half).tolist(), concentration=conc, top_share=topk, log_top_share=logk,
                    spearman=sp, top_heads=heads,
                    layer_share=(by_layer / by_layer.sum()).tolist() if by_layer.sum() > 0 else None,
                    te_by_attractors={str(k): dict(n=len(v), median_te=float(np.median(v)))
                                      for k, v in sorted(att.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))},
                    skipped=len(self.skipped), seconds=self.seconds)

    def markdown(self, kind: str = "attention", summary: Optional[dict] = None) -> str:
        """The tables of a study: TE, the top heads, concentration, Spearman of the head scores (from
        `summary`, this kind's summary(), when given)."""
        s = summary if summary is not None else self.summary(kind)
        lines = [f"**{s['model']}**, {s['n_pairs']} pairs, NIE of the {kind.replace('_', ' ')} intervention "
                 f"({s['layers']} layers × {s['heads']} heads); {s['skipped']} pairs skipped",
                 "",
                 f"TE: mean {s['te']['mean']:+.4g} (95 % CI {_ci(s['te']['ci'])}), median {s['te']['median']:+.4g}, "
                 f"mean log(1+TE) {s['te']['log_mean']:.3f}; TE > 0 in {s['te']['positive']:.0%} of pairs; "
                 f"the model prefers the right word on A in {s['base_correct']:.0%}.",
                 "",
                 "| head (layer.head) | mean NIE (95 % CI) | mean NIE / TE |",
                 "|---|---|---|"]
        for h in s["top_heads"][:5]:
            lines.append(f"| {h['layer']}.{h['head']} | {h['mean_nie']:+.4g} ({_ci(h['ci'])}) | {h['mean_share']:+.2%} |")
        c = s["concentration"]
        lines += ["",
                  "Concentration: pairs whose heads' NIEs (largest first) reach 50 % / 80 % of their TE: "
                  f"{c['50%']['reached']:.0%} / {c['80%']['reached']:.0%} (median heads needed where reached: "
                  f"{_num(c['50%']['median_heads'])} / {_num(c['80%']['median_heads'])}); share of the TE in the "
                  f"top 1 / 5 / 10 heads: {s['top_share']['top1']:.2%} / {s['top_share']['top5']:.2%} / "
                  f"{s['top_share']['top10']:.2%}; on the log scale (log(1+NIE) / log(1+TE)): "
                  f"{s['log_top_share']['top1']:.2%} / {s['log_top_share']['top5']:.2%} / "
                  f"{s['log_top_share']['top10']:.2%}, all heads {s['log_top_share']['all_heads']:.2%}.",
                  "",
                  "| head score | Spearman with NIE per pair (mean, 95 % CI) | Spearman of the corpus means (95 % bootstrap CI) |",
                  "|---|---|---|"]
        for name, v in s["spearman"].items():
            lines.append(f"| {name} | {v['per_pair_mean']:+.3f} ({_ci(v['per_pair_ci'], 3)}) | "
                         f"{v['corpus']:+.3f} ({_ci(v['corpus_ci'], 3)}) |")
        return "\n".join(lines)

    def write(self, out_dir) -> dict:
        """summary.json (every kind), heads.csv (mean NIE per head with CIs) and summary.md into out_dir."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        sums = {k: self.summary(k) for k in self.kinds}
        (out / "summary.json").write_text(json.dumps(sums, indent=1, allow_nan=True), encoding="utf-8")
        rows = ["kind,layer,head,mean_nie,ci_low,ci_high,mean_share_of_te"]
        for k, s in sums.items():
            for l in range(s["layers"]):
                for h in range(s["heads"]):
                    m, hf = s["mean_nie"][l][h], s["ci_half"][l][h]
                    rows.append(f"{k},{l + 1},{h + 1},{m:.6g},{m - hf:.6g},{m + hf:.6g},{s['mean_share'][l][h]:.6g}")
        (out / "heads.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        (out / "summary.md").write_text("\n\n".join(self.markdown(k, sums[k]) for k in self.kinds) + "\n", encoding="utf-8")
        return {"summary": str(out / "summary.json"), "heads": str(out / "heads.csv"), "markdown": str(out / "summary.md")}


def _spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair of a, b [k, m] (average ranks for ties; NaN for a constant row)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a, axis=1), rankdata(b, axis=1)
    ra -= ra.mean(1, keepdims=True)
    rb -= rb.mean(1, keepdims=True)
    den = np.sqrt((ra * ra).sum(1) * (rb * rb).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(1) / np.where(den > 0, den, 1), np.nan)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(_spearman_rows(np.asarray(a, dtype=np.float64)[None], np.asarray(b, dtype=np.float64)[None])[0])


def _ci(ci, digits: int = 4) -> str:
    if ci is None or not all(math.isfinite(x) for x in ci):
        return "n/a"
    return f"{ci[0]:+.{digits}g} … {ci[1]:+.{digits}g}"


def _num(v) -> str:
    return "n/a" if v is None else f"{v:g}"


ENGINES = ("local", "ray")


def score_item(lm, i: int, key: str, p: Pair, settings: dict) -> dict:
    """One pair of a study -> its record (score_pair), or {key, i, error} when this model cannot patch
    it. The scoring function of both engines (the Ray actors call it with the pairs sent to them)."""
    try:
        align(lm, p.base, p.counterfactual, settings["max_tokens"])
        return score_pair(lm, p, tuple(settings["kinds"]), settings["max_tokens"])
    except InputError as e:
        return dict(key=key, i=i, error=str(e))


def mediation_study(lm, pairs: Sequence[Pair], *, kinds: Sequence[str] = STUDY_KINDS, out_dir=None, resume: bool = True,
                    max_tokens: int = 128, progress: Optional[Callable] = None, engine: str = "local",
                    address: Optional[str] = None, workers: Optional[int] = None, gpus_per_worker: float = 0,
                    threads: Optional[int] = None, batch_size: Optional[int] = None,
                    notes: Optional[list] = None) -> MediationStudy:
    """`mediate` over the pairs. Pairs that cannot be patched (different numbers of tokens on this
    model's tokenizer, a contrast word of several tokens) are skipped with the reason.
    progress(done, total): first with the pairs taken from an earlier run, then after each pair (each
    batch of pairs on Ray).

    engine "local": one pair after another in this process. engine "ray": the pairs are scored on a
    Ray cluster by the faithfulness study's engine (faithfulness.ray_engine.run_on_ray): address
    HOST:PORT of a running cluster (None: a local one is started), workers actors (default: as many as
    the cluster's CPUs / threads allow), each loading the model (lm.spec) once and using threads torch
    threads (default 1) and gpus_per_worker GPUs, batch_size pairs per task; this process is the only
    writer of records.jsonl. A record is the local engine's for the same pair and threads (its
    `seconds` aside), and either engine resumes the other's folder. notes (a list) receives the
    engine's notes (workers, nodes, worker deaths)."""
    t0 = time.perf_counter()
    if engine not in ENGINES:
        raise InputError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    for name, v in (("max_tokens", max_tokens), ("workers", workers), ("threads", threads), ("batch_size", batch_size)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InputError(f"{name} must be a whole number of at least 1, got {v!r}")
    kinds = tuple(kinds)
    pairs = list(pairs)
    settings = dict(kinds=list(kinds), max_tokens=max_tokens)
    done: dict = {}
    f = None
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "records.jsonl"
        cfg = dict(model=lm.spec, kinds=list(kinds), max_tokens=max_tokens)
        cpath = out / "config.json"
        if path.exists() and resume:
            if cpath.exists() and json.loads(cpath.read_text()) != cfg:
                raise InputError(f"{out_dir} holds a study with other settings ({cpath}): use another folder or --fresh")
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a half-written last line
                done[r["key"]] = r
        elif path.exists():
            path.unlink()
        cpath.write_text(json.dumps(cfg))
        f = open(path, "a", encoding="utf-8")
    keys = [pair_key(p) for p in pairs]
    resumed = sum(1 for k in keys if k in done)
    errors: dict = {}
    todo, queued = [], set()
    for i, (k, p) in enumerate(zip(keys, pairs)):
        if k not in done and k not in queued:
            queued.add(k)
            todo.append((i, k, p))
    count = [len(pairs) - len(todo)]
    if progress is not None and count[0]:
        progress(count[0], len(pairs))

    def finished(recs: list) -> None:
        new = []
        for r in recs:
            if r["key"] in done or r["key"] in errors:
                continue  # each pair once
            if "error" in r:
                errors[r["key"]] = r["error"]
            else:
                done[r["key"]] = r
                new.append(r)
            count[0] += 1
        if new and f is not None:  # one write per batch
            f.write("".join(json.dumps(r) + "\n" for r in new))
            f.flush()
        if progress is not None:
            progress(count[0], len(pairs))

    try:
        if engine == "local":
            for i, k, p in todo:
                finished([score_item(lm, i, k, p, settings)])
        elif todo:
            from ..faithfulness.ray_engine import run_on_ray  # the studies' shared Ray engine

            run_on_ray(lm, todo, settings, finished, address=address, workers=workers, gpus_per_worker=gpus_per_worker,
                       threads=threads, batch_size=batch_size, notes=notes, score=score_item, unit="pair")
    finally:
        if f is not None:
            f.close()
    records, skipped = [], []
    for i, k in enumerate(keys):
        if k in done:
            records.append(done[k])
        elif k in errors:
            skipped.append((i, errors[k]))
    return MediationStudy(model=lm.spec, records=records, skipped=skipped, kinds=kinds,
                          seconds=time.perf_counter() - t0, resumed=resumed)


def run_cli(args, items: list) -> int:
    """`attnviz study --mediation`: minimal pairs from `items` (the data's items; agreement items get the
    subject's number changed, pronoun items the antecedent's gender, items with base / counterfactual /
    contrast are taken as they are), the first --n of those this model can patch, then the study into
    --out (records.jsonl, summary.json, heads.csv, summary.md). --engine local (this process) or ray
    (--address, --workers, --threads per worker, --gpus-per-worker, --batch-size pairs per task)."""
    import sys

    import attnviz

    from .pairs import pairs_from_items

    ray_flags = [(f, v) for f, v in (("--address", args.address), ("--workers", args.workers),
                                     ("--gpus-per-worker", args.gpus_per_worker), ("--batch-size", args.batch_size))
                 if v is not None]
    if args.engine != "ray" and ray_flags:
        raise InputError(f"{', '.join(f for f, _ in ray_flags)} only apply with --engine ray")
    for flag, v in (("--n", args.n), ("--workers", args.workers), ("--batch-size", args.batch_size)):
        if v is not None and v < 1:
            raise InputError(f"{flag} must be at least 1, got {v}")
    if args.gpus_per_worker is not None and args.gpus_per_worker < 0:
        raise InputError(f"--gpus-per-worker must be at least 0, got {args.gpus_per_worker:g}")
    if args.engine == "ray" and args.device != "cpu":
        raise InputError(f"--device {args.device} applies to --engine local; with --engine ray give --gpus-per-worker "
                         "(each actor then runs on its GPU)")
    if args.address:  # an unreachable cluster is said within seconds, before the model loads
        from ..faithfulness.ray_engine import check_address

        check_address(args.address)
    kinds = tuple(k.strip() for k in (args.kinds or ",".join(STUDY_KINDS)).split(",") if k.strip())
    bad = [k for k in kinds if k not in ("attention", "head_output")]
    if bad or not kinds:
        raise InputError(f"--kinds: the study summarises head maps, choose from attention, head_output (not {', '.join(bad)})")
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = attnviz.load_model(args.model, device=args.device)
    pairs, why = [], {}
    for p in pairs_from_items(items, tokenizer=lm.tokenizer):
        try:
            align(lm, p.base, p.counterfactual, args.max_tokens)
        except InputError as e:
            why[str(e).split("(")[0].strip()] = why.get(str(e).split("(")[0].strip(), 0) + 1
            continue
        pairs.append(p)
        if args.n is not None and len(pairs) >= args.n:
            break
    if not pairs:
        raise InputError(f"no minimal pair could be built from --data {args.data} for this model "
                         "(agreement items need a subject after 'the', pronoun items a name first)")
    bar, notes = None, []
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=len(pairs), unit="pair", file=sys.stderr)
    try:
        res = mediation_study(lm, pairs, kinds=kinds, out_dir=args.out, resume=not args.fresh,
                              max_tokens=args.max_tokens,
                              progress=None if bar is None else (lambda d, T: bar.update(d - bar.n)),
                              engine=args.engine, address=args.address, workers=args.workers,
                              gpus_per_worker=args.gpus_per_worker or 0, threads=args.threads,
                              batch_size=args.batch_size, notes=notes)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the finished pairs are saved in {args.out}; run the same command again to resume",
              file=sys.stderr)
        return 130
    finally:
        if bar is not None:
            bar.close()
    paths = res.write(args.out)
    sums = json.loads(Path(paths["summary"]).read_text(encoding="utf-8"))
    print(f"{res.n_pairs} pairs ({res.resumed} from an earlier run, {len(res.skipped)} skipped) in {res.seconds:.1f} s; "
          f"model {lm.spec}")
    for reason, c in why.items():
        print(f"left out {c} pair(s): {reason}")
    for note in notes:
        print(note)
    for k in kinds:
        print("\n" + res.markdown(k, sums[k]))
    print("\nwritten: " + ", ".join(paths.values()))
    return 0
