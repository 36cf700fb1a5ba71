"""Corpus study: mean ± std of the rank correlations per method × layer × baseline over many sentences.

Resumable: with out_dir, each finished sentence is appended to out_dir/records.jsonl (flushed and
fsynced) before the next starts, so a crash or Ctrl-C loses no finished sentence; a rerun with the
same settings skips what is there. A half-written last line (a crash mid-write) is dropped; other
damaged lines are reported and their sentences scored again. One writer at a time: the folder is
locked while a study writes (FolderLock: OS locks on DIR/.lock and on records.jsonl itself, so deleting
.lock lets no second writer in), and a second study into it is refused. A record repeated in the file
(same key) is read once, and the notes say how many were left out. config.json keeps the
settings and the data's fingerprint (data.sha1: one per item), so other data or other settings in
the same folder are refused; the same data with more items (a larger --n) extends the study.
Records are keyed by position and text (i:sha1), and each key is written once.

Engines: "local" (this process, one sentence after another) and "ray" (ray_engine: actors on a Ray
cluster; the driver, holding the lock, is the only writer). Both compute each record with
record.score_record, so the same settings and threads give the same bytes.
"""
from __future__ import annotations

import csv
import hashlib
import html as H
import io
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import AttnvizError, InputError
from ..resources import write_whole
from ..trace import MULTI_TOKEN_RULE
from .correlation import Ranking, ranking
from .importance import BASELINES, DEFAULT_IG_STEPS, DEFAULT_IG_TOL, DEGENERATE, output_kind
from .ray_engine import run_on_ray
from .record import from_lists, score_record
from .sentence import CORE_METHODS, available_methods

STUDY_METHODS = CORE_METHODS
STATS = ("spearman", "kendall")

# Abnar & Zuidema (2020) Table 1: Spearman vs blank-out, verb-number model, layers 1 / 3 / 6
ABNAR_ZUIDEMA_TABLE1 = {"layers": (1, 3, 6), "attention": (0.69, -0.11, 0.29), "rollout": (0.32, 0.51, 0.71),
                        "flow": (0.32, 0.70, 0.70)}


def _check_item(s) -> tuple:
    """A raw study item -> (item dict, None), or (None, why it cannot be studied)."""
    if isinstance(s, str):
        it = {"text": s}
    elif isinstance(s, dict):
        it = s
    else:
        return None, f"not a sentence or an object with a 'text' ({_json_type(s)})"
    if "text" not in it:
        return None, "no 'text'"
    for k in ("text", "answer", "wrong"):
        v = it.get(k)
        if k != "text" and v is None:
            continue
        if not isinstance(v, str):
            return None, f"'{k}' is not a string ({_json_type(v)})"
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            return None, f"'{k}' is not valid Unicode (character {e.start + 1} is a lone surrogate)"
    return it, None


def _json_type(v) -> str:
    if v is None:
        return "null"
    return {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object",
            str: "a string"}.get(type(v), type(v).__name__)


def _key(i: int, text: str) -> str:
    return f"{i}:{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def item_fingerprint(s) -> str:
    """A raw study item (str, dict, or anything a data file holds) -> 16 hex digits naming its content."""
    blob = json.dumps(s, sort_keys=True, ensure_ascii=True, default=repr)
    return hashlib.sha1(blob.encode("ascii")).hexdigest()[:16]


def data_fingerprint(fps: Sequence[str]) -> dict:
    """Per-item fingerprints -> the data's entry in config.json: {"n_items", "sha1"}."""
    return {"n_items": len(fps), "sha1": hashlib.sha1("\n".join(fps).encode("ascii")).hexdigest()}


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

    def ranking(self, stat: str = "spearman", layers: Optional[Sequence[int]] = None) -> Ranking:
        """The methods ranked by their mean correlation per (layer, baseline), and the summary rank
        (correlation.SUMMARY_RULE: mean rank over the upper half of the layers). A mean is undefined
        where no sentence gave a defined correlation."""
        return ranking(self.methods, self.baselines, self.summary()[stat]["mean"], stat, layers)

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

    def ranking_report(self, rk: Optional[Ranking] = None) -> str:
        """ranking.md: the definition, the summary-rank table, one rank-per-layer table per baseline,
        the ties and the undefined means."""
        rk = rk or self.ranking()
        s = self.settings
        out = [f"# Ranking of the maps: {s.get('model', '?')}, {self.n_sentences} sentences, mean Spearman ρ", "",
               rk.rule + ".", "",
               "Cells: summary rank (mean ρ over the same layers); lower rank = closer to the baseline.", "",
               rk.markdown(), ""]
        checks = self.check_lines()
        if checks:
            out += ["Baselines on these sentences:", ""] + [f"- {c}" for c in checks] + [""]
        for b in rk.baselines:
            out += [f"## Rank per layer (mean ρ) vs {b}", "", rk.layer_markdown(b), ""]
        ties = rk.ties()
        out.append(f"Ties (means equal to 9 decimals, sharing one place): {len(ties)}" + (":" if ties else "."))
        out += [f"- L{l + 1} vs {b}: {', '.join(w)}" for l, b, w in ties]
        und = rk.undefined()
        out += ["", f"Undefined means (no sentence with a defined correlation; not ranked): {len(und)}"
                + (":" if und else ".")]
        out += [f"- {m} L{l + 1} vs {b}" for m, l, b in und]
        mt = self.multi_token_line()
        if mt:
            out += ["", mt]
        return "\n".join(out) + "\n"

    def to_json(self) -> dict:
        return dict(settings=self.settings, methods=self.methods, baselines=self.baselines, n_layers=self.n_layers,
                    n_sentences=self.n_sentences, skipped=[dict(i=i, reason=r) for i, r in self.skipped],
                    left_out=self.left_out, resumed=self.resumed, seconds=self.seconds, notes=self.notes,
                    ig_completeness_rel_max=_num(max((r.get("ig_rel", 0.0) or 0.0) for r in self.records)
                                                 if self.records else float("nan")),
                    accuracy=self.accuracy(), baseline_checks=self.baseline_checks(), summary=self.rows(), ranking=self.ranking().to_dict(),
                    reference_abnar_zuidema_table1=ABNAR_ZUIDEMA_TABLE1, multi_token=self.multi_token())

    def baseline_checks(self) -> dict:
        """How far the baselines can be trusted on this study's sentences:
        blank_out: sentences with a measured degeneracy (median |Δf| / |f0| over the attributed tokens),
            how many reach DEGENERATE (blanking any token changes f by about all of f0: the baseline
            cannot rank tokens), and the median degeneracy;
        integrated_gradients: the relative completeness bound, how many sentences ran IG, how many
            missed the bound, and the largest relative completeness error.
        Records written before these fields existed count as not measured."""
        out = {}
        if "blank_out" in self.baselines:
            deg = [float(r["blank_deg"]) for r in self.records if r.get("blank_deg") is not None]
            out["blank_out"] = dict(measured=len(deg), degenerate=int(sum(d >= DEGENERATE for d in deg)),
                                    threshold=DEGENERATE, median=_num(np.median(deg)) if deg else None)
        if "integrated_gradients" in self.baselines:
            tol = self.settings.get("ig_tol")
            tol = DEFAULT_IG_TOL if tol is None else (float(tol) if tol > 0 else None)
            rel = [float(r["ig_rel"]) for r in self.records if r.get("ig_rel") is not None]
            missed = 0 if tol is None else int(sum(v > tol for v in rel))
            out["integrated_gradients"] = dict(tol=tol, measured=len(rel), missed=missed,
                                               max_rel=_num(max(rel)) if rel else None)
        return out

    def check_lines(self) -> list:
        """baseline_checks in words, one line per baseline (for the CLI, ranking.md and the html)."""
        lines = []
        c = self.baseline_checks()
        b = c.get("blank_out")
        if b is not None:
            if b["measured"]:
                flag = " — DEGENERATE on most sentences: its correlations say little" \
                    if b["degenerate"] * 2 > b["measured"] else ""
                lines.append(f"blank-out degenerate (median |Δf|/|f0| ≥ {b['threshold']:g}) in {b['degenerate']} of "
                             f"{b['measured']} sentences (median {b['median']:.2f}){flag}")
            else:
                lines.append("blank-out degeneracy: not measured (records of an older version)")
        g = c.get("integrated_gradients")
        if g is not None:
            if g["tol"] is None:
                lines.append(f"integrated gradients: fixed steps, no completeness bound (largest relative error "
                             f"{g['max_rel'] if g['max_rel'] is not None else float('nan'):.3g})")
            else:
                lines.append(f"integrated gradients missed its {100 * g['tol']:.2g} % completeness bound in "
                             f"{g['missed']} of {g['measured']} sentences"
                             + (f" (largest relative error {g['max_rel']:.3g})" if g["max_rel"] is not None else ""))
        return lines

    def accuracy(self) -> Optional[float]:
        """Share of contrast items with p(correct) > p(wrong) (None without contrasts)."""
        f = [r["f0"] for r in self.records if r.get("contrast")]
        return float(np.mean([v > 0 for v in f])) if f else None

    def multi_token(self) -> dict:
        """Contrast words of several tokens (trace.MULTI_TOKEN_RULE): the rule, how many studied sentences
        scored a contrast word as the sum of its pieces' log-probabilities (causal LMs; the record's
        `pieces`, the longer word's token count, above 1) and how many items were refused for one (masked
        LMs: the skip reason names the rule)."""
        return dict(rule=dict(MULTI_TOKEN_RULE),
                    scored=int(sum((r.get("pieces") or 1) > 1 for r in self.records)),
                    refused=int(sum(MULTI_TOKEN_RULE["masked_lm"] in str(why) for _, why in self.skipped)))

    def multi_token_line(self) -> Optional[str]:
        """multi_token in words (None when no sentence had a contrast word of several tokens)."""
        mt = self.multi_token()
        if not mt["scored"] and not mt["refused"]:
            return None
        return (f"contrast words of several tokens: {mt['scored']} sentences scored by the sum of the pieces' "
                f"log-probabilities, {mt['refused']} refused (a masked LM's [MASK] holds one token)")

    def write(self, out_dir, png: bool = False, figure=None) -> dict:
        """summary.csv, summary.json, summary.html, ranking.csv, ranking.md (and summary.png if png) into
        out_dir -> {kind: path}. The html shows the ranking (mean Spearman ρ) below `figure`, the study's
        plotly figure (attnviz.figures.faithfulness.study_figure(res), drawn by the caller: the engine
        imports no plotly), when given; png writes that figure (needs kaleido + chromium)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"csv": out / "summary.csv", "json": out / "summary.json", "html": out / "summary.html",
                 "ranking_csv": out / "ranking.csv", "ranking_md": out / "ranking.md"}
        rows = self.rows()
        rk = self.ranking()

        def csv_text(fields, rows_):
            buf = io.StringIO(newline="")
            w = csv.DictWriter(buf, fieldnames=fields)
            w.writeheader()
            w.writerows(rows_)
            return buf.getvalue()

        # each file whole or not at all (resources.write_whole): a full disk leaves no empty summary behind
        write_whole(paths["ranking_csv"], csv_text(["method", "layer", "baseline", "stat", "value", "rank"], rk.rows()))
        write_whole(paths["ranking_md"], self.ranking_report(rk))
        write_whole(paths["csv"], csv_text(list(rows[0]) if rows else ["method"], rows))
        write_whole(paths["json"], json.dumps(self.to_json(), indent=1, allow_nan=False))
        write_whole(paths["html"], _html_page(figure, self, rk))
        if png:
            if figure is None:
                raise ValueError("summary.png is the study figure: pass figure= to write it")
            paths["png"] = out / "summary.png"
            write_whole(paths["png"], figure.to_image(format="png", width=1400,
                                                      height=450 * ((len(self.baselines) + 2) // 3)))
        return {k: str(v) for k, v in paths.items()}


def _html_page(fig, res, rk) -> str:
    """The study figure (when given) and the ranking tables (summary rank per baseline; rank per layer)
    on one page."""
    def table(head, body):
        th = "".join(f"<th>{H.escape(str(h))}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{H.escape(str(c))}</td>" for c in r) + "</tr>" for r in body)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"

    fmt = lambda r, v: "n/a" if not math.isfinite(r) else f"{r:g} ({v:+.2f})"  # noqa: E731
    order = sorted(range(len(rk.methods)), key=lambda i: (not math.isfinite(rk.overall[i]),
                                                           rk.overall[i] if math.isfinite(rk.overall[i]) else 0))
    lo, hi = rk.layers[0] + 1, rk.layers[-1] + 1
    parts = [f"<h2>Ranking: summary rank over layers {lo}–{hi} (mean ρ over those layers)</h2>",
             f"<p>{H.escape(rk.rule)}.</p>",
             table(["method"] + rk.baselines + ["overall"],
                   [[rk.methods[i]] + [fmt(round(float(rk.summary[i, b]), 2), rk.upper_value[i, b])
                                       for b in range(len(rk.baselines))]
                    + ["n/a" if not math.isfinite(rk.overall[i]) else f"{rk.overall[i]:.2f}"] for i in order])]
    for bi, b in enumerate(rk.baselines):
        parts.append(f"<h3>Rank per layer (mean ρ) vs {H.escape(b)}</h3>")
        parts.append(table(["method"] + [f"L{l + 1}" for l in range(rk.n_layers)],
                           [[m] + [fmt(rk.rank[mi, l, bi], rk.value[mi, l, bi]) for l in range(rk.n_layers)]
                            for mi, m in enumerate(rk.methods)]))
    checks = res.check_lines()
    if checks:
        parts.append("<p>" + "<br>".join(H.escape(c) for c in checks) + "</p>")
    extra = [f"undefined means (not ranked): {len(rk.undefined())}", f"ties: {len(rk.ties())}"]
    parts.append("<p>" + H.escape("; ".join(extra)) + " (listed in summary.json, ranking).</p>")
    style = ("<style>table{border-collapse:collapse;font:13px sans-serif;margin:8px 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}</style>")
    body = ("" if fig is None else fig.to_html(full_html=False, include_plotlyjs="cdn")) + "".join(parts)
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'>{style}</head><body>{body}</body></html>"


def _num(v) -> Optional[float]:
    v = float(v)
    return v if math.isfinite(v) else None


def _record_problem(rec, n_methods: int, n_baselines: int, n_layers: Optional[int] = None) -> Optional[str]:
    """Why a parsed line of records.jsonl is not a usable record (None when it is)."""
    if not isinstance(rec, dict):
        return f"not a record ({_json_type(rec)})"
    key, i = rec.get("key"), rec.get("i")
    if not isinstance(i, int) or isinstance(i, bool) or i < 0:
        return "no sentence number 'i'"
    if not isinstance(key, str) or not key.startswith(f"{i}:"):
        return "no valid 'key'"
    if not isinstance(rec.get("text"), str):
        return "no 'text'"
    if "error" in rec:
        return None if isinstance(rec["error"], str) else "'error' is not text"
    if not isinstance(rec.get("f0"), (int, float)) or isinstance(rec.get("f0"), bool):
        return "no 'f0'"
    for k in ("rho", "tau"):
        try:
            a = from_lists(rec[k])
        except (KeyError, TypeError, ValueError):
            return f"no valid '{k}'"
        if a.ndim != 3 or a.shape[0] != n_methods or a.shape[2] != n_baselines or \
                (n_layers is not None and a.shape[1] != n_layers):
            return f"'{k}' has the wrong shape {list(a.shape)}"
    return None


def _read_records(path: Path, n_methods: int, n_baselines: int, n_layers: Optional[int] = None,
                  repair: bool = False) -> tuple:
    """records.jsonl -> (usable records in file order, [(line number, why damaged)]).

    A half-written last line (a crash mid-write) is ignored; with repair (only by the holder of the
    folder's lock) it is also cut off the file so the next append starts on a fresh line. Other
    damaged lines (bytes that are not UTF-8, not JSON, not a record) are reported and skipped; the
    file is not changed, so a damaged line's sentence is simply scored again."""
    if not path.exists():
        return [], []
    data = path.read_bytes()
    good_end = data.rfind(b"\n") + 1
    if good_end < len(data):
        if repair:
            with open(path, "r+b") as f:
                f.truncate(good_end)
        data = data[:good_end]
    recs, damaged = [], []
    for no, raw in enumerate(data.split(b"\n")[:-1], 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            damaged.append((no, f"bytes that are not UTF-8 (at byte {e.start + 1})"))
            continue
        except json.JSONDecodeError:
            damaged.append((no, "not JSON"))
            continue
        why = _record_problem(rec, n_methods, n_baselines, n_layers)
        if why:
            damaged.append((no, why))
        else:
            recs.append(rec)
    return recs, damaged


def _repeat_note(path: Path, n: int) -> str:
    return (f"{path}: {n} repeated record{'s' if n > 1 else ''} of the same sentences left out (each sentence "
            "counted once)")


def _damage_note(path: Path, damaged: list) -> str:
    shown = "; ".join(f"line {no}: {why}" for no, why in damaged[:5])
    more = f"; and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    return (f"{path}: {len(damaged)} damaged line{'s' if len(damaged) > 1 else ''} skipped ({shown}{more}); "
            "their sentences are scored again")


class FolderLock:
    """An exclusive lock on a study folder: one writer at a time.

    Two OS locks (flock), both held while the study writes: on DIR/.lock, which names the holder for the
    message a second writer gets, and on DIR/records.jsonl itself, the file the records go to. Deleting
    .lock therefore lets no second writer in (the records file stays locked), and a records file removed
    or replaced while the study runs is noticed before the next append (check()). The kernel drops both
    locks when the holder exits in any way (also SIGKILL), so a crashed study never leaves a stale lock."""

    def __init__(self, out: Path):
        import fcntl  # POSIX only: imported where a study folder is locked

        self.out = out
        self.path = out / ".lock"
        self.records = out / "records.jsonl"
        self.fd = self.rec_fd = None
        try:
            self.fd = self._lock(self.path, fcntl)
            self.rec_fd = self._lock(self.records, fcntl, append=True)
        except BaseException:
            self.release()
            raise
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (f"process {os.getpid()} on {socket.gethostname()}, since "
                            f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n").encode("utf-8"), 0)

    def _lock(self, path: Path, fcntl, append: bool = False) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_APPEND if append else 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = self.path.read_text(encoding="utf-8", errors="replace").strip()[:500]
            except OSError:
                holder = ""
            raise AttnvizError(f"another study is writing into {self.out} ({holder or 'holder unknown'}): wait for it "
                               "to finish or stop it, or give another output folder") from None
        except OSError as e:
            os.close(fd)
            raise AttnvizError(f"cannot lock {self.out} ({e.strerror or e}): a study needs a folder on a file system "
                               "with file locks") from None
        return fd

    def check(self) -> None:
        """AttnvizError unless DIR/records.jsonl is still the file this lock holds (not removed, not replaced)."""
        mine = os.fstat(self.rec_fd)
        try:
            now = os.stat(self.records)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise AttnvizError(f"{self.records} was {'removed' if now is None else 'replaced'} while this study wrote "
                               "into it: the study stopped; run it again to resume from what the folder holds")

    def truncate(self) -> None:
        """Empty the locked records file (a fresh start keeps the file, and so the lock)."""
        os.ftruncate(self.rec_fd, 0)

    def append(self, data: bytes) -> None:
        """data at the end of the locked records file, flushed to disk."""
        self.check()
        view = memoryview(data)
        while view:
            view = view[os.write(self.rec_fd, view):]
        os.fsync(self.rec_fd)

    def release(self) -> None:
        for attr in ("rec_fd", "fd"):
            fd = getattr(self, attr, None)
            if fd is not None:
                os.close(fd)  # closing the last descriptor releases the flock
                setattr(self, attr, None)


class StudyFolder:
    """out_dir while a study writes into it: locked, settings and data checked, records read and appended.

    Files: config.json (the settings and the data's fingerprint), data.sha1 (one fingerprint per item,
    the longest list seen), records.jsonl (one JSON line per finished sentence, fsynced), .lock."""

    def __init__(self, out_dir, settings: dict, fps: Sequence[str], keys: Sequence[Optional[str]], resume: bool,
                 n_layers: int):
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise AttnvizError(f"the output folder {out} is a file: give a folder (it is created if missing)")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise AttnvizError(f"cannot create the output folder {out}: {e.strerror or e}") from None
        self.out = out
        self.lock = FolderLock(out)
        try:
            self._open(settings, list(fps), list(keys), resume, n_layers)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, settings, fps, keys, resume, n_layers):
        out = self.out
        self.cfg_path, self.rec_path, self.fps_path = out / "config.json", out / "records.jsonl", out / "data.sha1"
        self.done, self.damaged, self.notes = {}, [], []
        mine = {k: v for k, v in settings.items() if k != "data"}
        if self.cfg_path.exists() and resume:
            try:
                old = json.loads(self.cfg_path.read_text(encoding="utf-8"))
                if not isinstance(old, dict):
                    raise ValueError
            except (ValueError, UnicodeDecodeError):
                raise AttnvizError(f"{self.cfg_path} is damaged: use another output folder, or start afresh "
                                   "(--fresh)") from None
            theirs = {k: v for k, v in old.items() if k != "data"}
            if theirs != mine:
                diff = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
                raise AttnvizError(f"{out} holds a study with other settings ({', '.join(diff)}): "
                                   "use another output folder, or start afresh")
            old_fps = self._read_fps()
            k = next((j for j, (a, b) in enumerate(zip(old_fps, fps)) if a != b), None)
            recs, self.damaged = _read_records(self.rec_path, len(settings["methods"]), len(settings["baselines"]),
                                               n_layers, repair=True)
            if k is None:  # old folders without data.sha1: the records' keys must match the items
                k = next((r["i"] for r in recs if r["i"] < len(keys) and keys[r["i"]] is not None
                          and r["key"] != keys[r["i"]]), None)
            if k is not None:
                raise AttnvizError(f"{out} holds a study of other data (item {k} differs; the folder's data has "
                                   f"{len(old_fps) or 'unknown'} items, this one {len(fps)}): use another output "
                                   "folder, or start afresh")
            for r in recs:
                self.done.setdefault(r["key"], r)
            if self.damaged:
                self.notes.append(_damage_note(self.rec_path, self.damaged))
            if len(self.done) < len(recs):
                self.notes.append(_repeat_note(self.rec_path, len(recs) - len(self.done)))
            if len(fps) > len(old_fps):  # the same data, more of it (a larger --n): remember the longer list
                self._write_fps(fps)
                self._write_cfg(settings, fps)
        else:
            self.lock.truncate()  # the records file stays (and so does its lock)
            if self.fps_path.exists():
                self.fps_path.unlink()
            self._write_fps(fps)
            self._write_cfg(settings, fps)

    def _read_fps(self) -> list:
        if not self.fps_path.exists():
            return []
        return self.fps_path.read_text(encoding="ascii", errors="replace").split()

    def _write_fps(self, fps):
        tmp = self.fps_path.with_suffix(".tmp")
        tmp.write_text("".join(f + "\n" for f in fps), encoding="ascii")
        os.replace(tmp, self.fps_path)

    def _write_cfg(self, settings, fps):
        tmp = self.cfg_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(settings, data=data_fingerprint(fps)), indent=1), encoding="utf-8")
        os.replace(tmp, self.cfg_path)

    def append(self, recs: Sequence[dict]) -> list:
        """Append records not already on file (one write, flushed and fsynced) -> the ones written."""
        new = [r for r in recs if r["key"] not in self.done]
        if new:
            self.lock.append("".join(json.dumps(r, allow_nan=False) + "\n" for r in new).encode("utf-8"))
            for r in new:
                self.done[r["key"]] = r
        return new

    def close(self) -> None:
        self.lock.release()


ENGINES = ("local", "ray")


def study(lm, sentences: Sequence, methods: Optional[Sequence[str]] = None, baselines: Optional[Sequence[str]] = None,
          ig_steps: int = DEFAULT_IG_STEPS, include_target: bool = False, use_contrast: bool = True,
          out_dir=None, resume: bool = True, max_tokens: int = 128,
          progress: Optional[Callable[[int, int], None]] = None, ig_tol: Optional[float] = None,
          engine: str = "local", address: Optional[str] = None, workers: Optional[int] = None,
          gpus_per_worker: float = 0, threads: Optional[int] = None, batch_size: Optional[int] = None) -> StudyResult:
    """Model + sentences (str, or dicts with text and optional answer / wrong) -> StudyResult.

    The target is p(answer) - p(wrong) for items that name both (use_contrast), else the model's
    prediction (module importance). With out_dir the study is resumable (module docstring).
    Items that cannot be studied (no text, text not a string or not valid Unicode) are skipped and
    listed in .skipped. progress(done, total) is called with the count taken from an earlier run
    first, then after each finished sentence (or batch of sentences, on Ray).

    engine="ray" scores the sentences on a Ray cluster (attnviz.faithfulness.ray_engine): address
    HOST:PORT of a running cluster (None: a local one is started), workers actors (default: as many as
    the cluster's CPUs / threads allow), each loading the model (lm.spec) once and using threads torch
    threads (default 1) and gpus_per_worker GPUs; batch_size sentences per task. The records, the
    folder format and the resume are the local engine's."""
    t_start = time.perf_counter()
    if engine not in ENGINES:
        raise InputError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    for name, v in (("ig_steps", ig_steps), ("max_tokens", max_tokens), ("workers", workers), ("threads", threads),
                    ("batch_size", batch_size)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InputError(f"{name} must be a whole number of at least 1, got {v!r}")
    if not isinstance(gpus_per_worker, (int, float)) or gpus_per_worker < 0:
        raise InputError(f"gpus_per_worker must be at least 0, got {gpus_per_worker!r}")
    sentences = list(sentences)
    checked = [_check_item(s) for s in sentences]
    fps = [item_fingerprint(s) for s in sentences]
    keys = [None if it is None else _key(i, it["text"]) for i, (it, _) in enumerate(checked)]
    methods, left_out = available_methods(lm, methods)
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
    n_layers = lm.n_layers
    folder = None if out_dir is None else StudyFolder(out_dir, settings, fps, keys, resume, n_layers)
    try:
        done = {} if folder is None else folder.done
        if folder is not None:
            notes.extend(folder.notes)
        todo = [(i, keys[i], it) for i, (it, _) in enumerate(checked) if it is not None and keys[i] not in done]
        total = len(sentences)
        resumed = sum(1 for k in keys if k is not None and k in done)
        count = [total - len(todo)]
        if progress:
            progress(count[0], total)

        def finished(recs):
            if folder is not None:
                new = folder.append(recs)  # each key once; also enters them in done
            else:
                new = [r for r in recs if r["key"] not in done]
                done.update((r["key"], r) for r in new)
            count[0] += len(new)
            if progress:
                progress(count[0], total)

        if engine == "local":
            for i, key, it in todo:
                finished([score_record(lm, i, key, it, settings)])
        elif todo:
            run_on_ray(lm, todo, settings, finished, address=address, workers=workers,
                       gpus_per_worker=gpus_per_worker, threads=threads, batch_size=batch_size, notes=notes)
    finally:
        if folder is not None:
            folder.close()
    rho, tau, records, skipped = [], [], [], []
    for i, (it, why) in enumerate(checked):
        if it is None:
            skipped.append((i, why))
            continue
        rec = done[keys[i]]
        if "error" in rec:
            skipped.append((i, rec["error"]))
            continue
        rho.append(from_lists(rec["rho"]))
        tau.append(from_lists(rec["tau"]))
        records.append({k: v for k, v in rec.items() if k not in ("rho", "tau")})
    shape = (0, len(methods), n_layers, len(baselines))
    R = np.stack(rho) if rho else np.zeros(shape)
    T = np.stack(tau) if tau else np.zeros(shape)
    settings = dict(settings, data=data_fingerprint(fps))
    return StudyResult(methods, baselines, n_layers, R, T, records, skipped, settings, left_out, resumed,
                       time.perf_counter() - t_start, notes)


def load_study(out_dir) -> StudyResult:
    """A (possibly unfinished) study from out_dir/config.json and records.jsonl, without the model.

    Read only (no lock: a study may be writing); each sentence is counted once (a record whose key
    was seen before is left out and counted in the notes); damaged lines are skipped and reported."""
    out = Path(out_dir)
    cfg_path = out / "config.json"
    if not cfg_path.exists():
        raise AttnvizError(f"{out} holds no study (no config.json)")
    try:
        settings = json.loads(cfg_path.read_text(encoding="utf-8"))
        methods, baselines = list(settings["methods"]), list(settings["baselines"])
    except (ValueError, UnicodeDecodeError, TypeError, KeyError):
        raise AttnvizError(f"{cfg_path} is damaged") from None
    recs, damaged = _read_records(out / "records.jsonl", len(methods), len(baselines))
    notes = [_damage_note(out / "records.jsonl", damaged)] if damaged else []
    seen, unique = set(), []
    for r in recs:
        if r["key"] not in seen:
            seen.add(r["key"])
            unique.append(r)
    if len(unique) < len(recs):
        notes.append(_repeat_note(out / "records.jsonl", len(recs) - len(unique)))
    Ls = [len(r["rho"][0]) for r in unique if "error" not in r]
    if Ls and any(L != Ls[0] for L in Ls):  # one number of layers: the first record's
        n = len(unique)
        unique = [r for r in unique if "error" in r or len(r["rho"][0]) == Ls[0]]
        notes.append(f"{n - len(unique)} records with another number of layers left out")
    rho, tau, records, skipped = [], [], [], []
    for rec in sorted(unique, key=lambda r: r["i"]):
        if "error" in rec:
            skipped.append((rec["i"], rec["error"]))
            continue
        rho.append(from_lists(rec["rho"]))
        tau.append(from_lists(rec["tau"]))
        records.append({k: v for k, v in rec.items() if k not in ("rho", "tau")})
    if not rho:
        raise AttnvizError(f"{out} holds no finished sentence yet")
    R, T = np.stack(rho), np.stack(tau)
    return StudyResult(methods, baselines, R.shape[2], R, T, records, skipped, settings, notes=notes)
