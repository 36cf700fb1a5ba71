"""Corpus study: mean ± std of the rank correlations per method × layer × baseline over many sentences.

Resumable: with out_dir, each finished sentence is appended to out_dir/records.jsonl (flushed and
fsynced) before the next starts, so a crash or Ctrl-C loses no finished sentence; a rerun with the
same settings skips what is there. A half-written last line (a crash mid-write) is dropped.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import AttnvizError, InputError
from .importance import BASELINES, DEFAULT_IG_STEPS, output_kind
from .sentence import CORE_METHODS, available_methods, score_sentence

STUDY_METHODS = CORE_METHODS
STATS = ("spearman", "kendall")

# Abnar & Zuidema (2020) Table 1: Spearman vs blank-out, verb-number model, layers 1 / 3 / 6
ABNAR_ZUIDEMA_TABLE1 = {"layers": (1, 3, 6), "attention": (0.69, -0.11, 0.29), "rollout": (0.32, 0.51, 0.71),
                        "flow": (0.32, 0.70, 0.70)}


def _item(s) -> dict:
    if isinstance(s, str):
        return {"text": s}
    if not isinstance(s, dict) or "text" not in s:
        raise InputError("each study item must be a sentence or a dict with a 'text' key")
    return s


def _key(i: int, text: str) -> str:
    return f"{i}:{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


@dataclass
class StudyResult:
    """Per-sentence correlations rho/tau [S, M, L, B] (NaN where undefined) and what was skipped."""

    methods: list
    baselines: list
    n_layers: int
    rho: np.ndarray
    tau: np.ndarray
    records: list  # per scored sentence: i, text, n_tokens, f0, ig completeness ...
    skipped: list = field(default_factory=list)  # (i, reason)
    settings: dict = field(default_factory=dict)
    left_out: dict = field(default_factory=dict)  # method -> reason (model cannot compute it)
    resumed: int = 0  # sentences taken from an earlier run
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def n_sentences(self) -> int:
        return self.rho.shape[0]

    def summary(self) -> dict:
        """{stat: {"mean","std","count"}: [M, L, B]}; std with ddof=1 (NaN below 2 defined values)."""
        out = {}
        for stat, a in (("spearman", self.rho), ("kendall", self.tau)):
            cnt = np.isfinite(a).sum(0)
            with np.errstate(invalid="ignore", divide="ignore"):
                s = np.where(np.isfinite(a), a, 0.0).sum(0)
                mean = np.where(cnt > 0, s / np.maximum(cnt, 1), np.nan)
                dev = np.where(np.isfinite(a), a - mean, 0.0)
                std = np.where(cnt > 1, np.sqrt((dev ** 2).sum(0) / np.maximum(cnt - 1, 1)), np.nan)
            out[stat] = {"mean": mean, "std": std, "count": cnt}
        return out

    def rows(self) -> list:
        """Long-format rows: method, layer (1-based), baseline, stat, mean, std, n_defined, n_undefined."""
        summ = self.summary()
        S = self.n_sentences
        rows = []
        for mi, m in enumerate(self.methods):
            for l in range(self.n_layers):
                for bi, b in enumerate(self.baselines):
                    for stat in STATS:
                        d = summ[stat]
                        c = int(d["count"][mi, l, bi])
                        rows.append(dict(method=m, layer=l + 1, baseline=b, stat=stat,
                                         mean=_num(d["mean"][mi, l, bi]), std=_num(d["std"][mi, l, bi]),
                                         n_defined=c, n_undefined=S - c))
        return rows

    def table(self, baseline: str, stat: str = "spearman", methods: Optional[Sequence[str]] = None) -> dict:
        """{method: [(mean, std) per layer]} for one baseline."""
        summ = self.summary()[stat]
        bi = self.baselines.index(baseline)
        return {m: [(float(summ["mean"][mi, l, bi]), float(summ["std"][mi, l, bi])) for l in range(self.n_layers)]
                for mi, m in enumerate(self.methods) if methods is None or m in methods}

    def markdown(self, baseline: str, stat: str = "spearman", methods: Optional[Sequence[str]] = None) -> str:
        """A method × layer table of mean ± std (the best mean per layer in bold)."""
        tab = self.table(baseline, stat, methods)
        L = self.n_layers
        best = {}
        for l in range(L):
            vals = {m: v[l][0] for m, v in tab.items() if math.isfinite(v[l][0])}
            if vals:
                best[l] = max(vals, key=vals.get)
        head = "| method | " + " | ".join(f"L{l + 1}" for l in range(L)) + " |"
        lines = [head, "|---" * (L + 1) + "|"]
        for m, v in tab.items():
            cells = []
            for l, (mu, sd) in enumerate(v):
                c = "n/a" if not math.isfinite(mu) else f"{mu:+.2f} ± {sd:.2f}"
                cells.append(f"**{c}**" if best.get(l) == m else c)
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return dict(settings=self.settings, methods=self.methods, baselines=self.baselines, n_layers=self.n_layers,
                    n_sentences=self.n_sentences, skipped=[dict(i=i, reason=r) for i, r in self.skipped],
                    left_out=self.left_out, resumed=self.resumed, seconds=self.seconds, notes=self.notes,
                    ig_completeness_rel_max=_num(max((r.get("ig_rel", 0.0) or 0.0) for r in self.records)
                                                 if self.records else float("nan")),
                    accuracy=self.accuracy(), summary=self.rows(), reference_abnar_zuidema_table1=ABNAR_ZUIDEMA_TABLE1)

    def accuracy(self) -> Optional[float]:
        """Share of contrast items with p(correct) > p(wrong) (None without contrasts)."""
        f = [r["f0"] for r in self.records if r.get("contrast")]
        return float(np.mean([v > 0 for v in f])) if f else None

    def write(self, out_dir, png: bool = False) -> dict:
        """summary.csv, summary.json, summary.html (and summary.png if png) into out_dir -> {kind: path}."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"csv": out / "summary.csv", "json": out / "summary.json", "html": out / "summary.html"}
        rows = self.rows()
        with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["method"])
            w.writeheader()
            w.writerows(rows)
        paths["json"].write_text(json.dumps(self.to_json(), indent=1, allow_nan=False), encoding="utf-8")
        from .figures import study_figure
        fig = study_figure(self)
        fig.write_html(str(paths["html"]), include_plotlyjs="cdn")
        if png:
            paths["png"] = out / "summary.png"
            fig.write_image(str(paths["png"]), width=1400, height=450 * ((len(self.baselines) + 2) // 3))
        return {k: str(v) for k, v in paths.items()}


def _num(v) -> Optional[float]:
    v = float(v)
    return v if math.isfinite(v) else None


def _nanlist(a: np.ndarray):
    return [[[None if not math.isfinite(v) else float(v) for v in row] for row in m] for m in a]


def _unnan(x) -> np.ndarray:
    return np.array([[[np.nan if v is None else v for v in row] for row in m] for m in x], dtype=np.float64)


def _read_records(path: Path) -> list:
    """Complete JSON lines of records.jsonl; a half-written last line is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good_end = data.rfind(b"\n") + 1
    if good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
        data = data[:good_end]
    recs = []
    for line in data.splitlines():
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return recs


def study(lm, sentences: Sequence, methods: Optional[Sequence[str]] = None, baselines: Optional[Sequence[str]] = None,
          ig_steps: int = DEFAULT_IG_STEPS, include_target: bool = False, use_contrast: bool = True,
          out_dir=None, resume: bool = True, max_tokens: int = 128,
          progress: Optional[Callable[[int, int], None]] = None, ig_tol: Optional[float] = None) -> StudyResult:
    """Model + sentences (str, or dicts with text and optional answer / wrong) -> StudyResult.

    The target is p(answer) - p(wrong) for items that name both (use_contrast), else the model's
    prediction (module importance). With out_dir the study is resumable (module docstring).
    """
    t_start = time.perf_counter()
    items = [_item(s) for s in sentences]
    methods, left_out = available_methods(lm, STUDY_METHODS if methods is None else methods)
    baselines = list(BASELINES if baselines is None else baselines)
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; known: {list(BASELINES)}")
    notes = []
    if use_contrast and output_kind(lm) == "hidden":
        use_contrast = False
        notes.append("this model has no output head: the items' answer / wrong words are not used "
                     "(target: cosine of the final hidden state)")
    settings = dict(model=lm.spec, methods=methods, baselines=baselines, ig_steps=int(ig_steps),
                    ig_tol=None if ig_tol is None else float(ig_tol),
                    include_target=bool(include_target), use_contrast=bool(use_contrast), max_tokens=int(max_tokens))
    done = {}
    rec_path = None
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        cfg_path, rec_path = out / "config.json", out / "records.jsonl"
        if cfg_path.exists() and resume:
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
            if old != settings:
                diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
                raise AttnvizError(f"{out} holds a study with other settings ({', '.join(diff)}): "
                                   "use another output folder, or start afresh")
            for r in _read_records(rec_path):
                done[r["key"]] = r
        else:
            if rec_path.exists():
                rec_path.unlink()
            cfg_path.write_text(json.dumps(settings, indent=1), encoding="utf-8")
    total = len(items)
    rho, tau, records, skipped = [], [], [], []
    resumed = 0
    n_layers = lm.n_layers
    if progress:
        progress(0, total)
    for i, it in enumerate(items):
        key = _key(i, it["text"])
        rec = done.get(key)
        if rec is not None:
            resumed += 1
        else:
            contrast = (it["answer"], it["wrong"]) if use_contrast and it.get("answer") and it.get("wrong") else None
            try:
                res = score_sentence(lm, it["text"], methods=methods, baselines=baselines, contrast=contrast,
                                     ig_steps=ig_steps, include_target=include_target, max_tokens=max_tokens,
                                     flow_workers=1, ig_tol=ig_tol)
                c = res.correlations
                rec = dict(key=key, i=i, text=it["text"], n_tokens=len(res.importance.tokens), f0=res.importance.f0,
                           contrast=contrast is not None, ig_rel=res.importance.ig.get("completeness_rel"),
                           ig_steps=res.importance.ig.get("steps"),
                           rho=_nanlist(c.rho), tau=_nanlist(c.tau))
            except InputError as e:
                rec = dict(key=key, i=i, text=it["text"], error=str(e))
            if rec_path is not None:
                with open(rec_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, allow_nan=False) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
        if "error" in rec:
            skipped.append((i, rec["error"]))
        else:
            rho.append(_unnan(rec["rho"]))
            tau.append(_unnan(rec["tau"]))
            records.append({k: v for k, v in rec.items() if k not in ("rho", "tau")})
        if progress:
            progress(i + 1, total)
    shape = (0, len(methods), n_layers, len(baselines))
    R = np.stack(rho) if rho else np.zeros(shape)
    T = np.stack(tau) if tau else np.zeros(shape)
    return StudyResult(methods, baselines, n_layers, R, T, records, skipped, settings, left_out, resumed,
                       time.perf_counter() - t_start, notes)


def load_study(out_dir) -> StudyResult:
    """A (possibly unfinished) study from out_dir/config.json and records.jsonl, without the model."""
    out = Path(out_dir)
    cfg_path = out / "config.json"
    if not cfg_path.exists():
        raise AttnvizError(f"{out} holds no study (no config.json)")
    settings = json.loads(cfg_path.read_text(encoding="utf-8"))
    rho, tau, records, skipped = [], [], [], []
    for rec in sorted(_read_records(out / "records.jsonl"), key=lambda r: r["i"]):
        if "error" in rec:
            skipped.append((rec["i"], rec["error"]))
            continue
        rho.append(_unnan(rec["rho"]))
        tau.append(_unnan(rec["tau"]))
        records.append({k: v for k, v in rec.items() if k not in ("rho", "tau")})
    if not rho:
        raise AttnvizError(f"{out} holds no finished sentence yet")
    R, T = np.stack(rho), np.stack(tau)
    return StudyResult(settings["methods"], settings["baselines"], R.shape[2], R, T, records, skipped, settings)
