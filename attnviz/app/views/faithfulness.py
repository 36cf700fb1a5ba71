"""Faithfulness: do the maps agree with what actually changes the prediction?

For the current sentence: importance baselines next to the maps' target rows, and a method × layer
table of rank correlations. Below: the corpus study on the built-in evaluation set.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from attnviz import METHODS
from attnviz import faithfulness as F
from attnviz import figures
from attnviz.text import token_labels
from attnviz.errors import AttnvizError, InputError
from attnviz.faithfulness.correlation import DOMINATED_SHARE
from attnviz.jobs import Job, ResultCache, run

from attnviz.app import ui

STATS = {"spearman": "Spearman ρ", "kendall": "Kendall τ-b"}


def named_as_everywhere(fig, methods):
    """The faithfulness figures name maps by their registry keys ('value_norm'): use the labels every
    other page uses ('Value-weighted norm') in panel titles, trace names, legends and hovers."""
    import re

    pat = re.compile(r"\b(" + "|".join(re.escape(m) for m in sorted(methods, key=len, reverse=True)) + r")\b")

    def sub(t):
        return pat.sub(lambda mm: ui.method_label(mm.group(1)), t) if isinstance(t, str) and methods else t

    for ann in fig.layout.annotations or ():
        ann.text = sub(ann.text)
    for tr in fig.data:
        if tr.name:
            tr.name = sub(tr.name)
        if getattr(tr, "legendgroup", None):
            tr.legendgroup = sub(tr.legendgroup)
        if getattr(tr, "hovertemplate", None):
            tr.hovertemplate = sub(tr.hovertemplate)
    return fig
IG_TOL = 0.01  # integrated gradients: steps doubled (up to 256) until the completeness error is within 1 %

lm = ui.page("Faithfulness", "Which input tokens actually change the prediction (blank one out, delete it, or follow the "
             "gradient), and do the maps' rows for the target agree? Abnar & Zuidema (2020) found rollout and "
             "flow agree better than raw attention in upper layers; check it here for any sentence.")
available, left_out = F.available_methods(lm, list(METHODS))
default_methods = [m for m in METHODS.core() if m in available]
kind = F.output_kind(lm)

# ---------------------------------------------------------------- settings
c1, c2 = st.columns(2)
with c1:
    if "fa_methods" not in st.session_state:
        st.session_state.fa_methods = default_methods
    st.multiselect("Maps", available, key="fa_methods", persist_state="session", format_func=ui.method_label,
                   help="The maps whose target row is compared with the importance baselines.")
    if "fa_baselines" not in st.session_state:
        st.session_state.fa_baselines = list(F.BASELINES)
    st.multiselect("Importance baselines", list(F.BASELINES), key="fa_baselines", persist_state="session",
                   format_func=F.baseline_label)
with c2:
    if kind == "hidden":
        st.caption("This model has no output head: the target quantity is the cosine similarity of the "
                   "target's final hidden state to its unperturbed value (no contrast possible).")
        contrast = None
    else:
        k1, k2 = st.columns(2)
        right = k1.text_input("Correct word (optional)", key="fa_correct", persist_state="session",
                              help="With both words the target is p(correct) − p(wrong); "
                                   "else p(the model's prediction).")
        wrong = k2.text_input("Wrong word (optional)", key="fa_wrong", persist_state="session")
        contrast = (right.strip(), wrong.strip()) if right.strip() and wrong.strip() else None
    ig_steps = st.number_input("Integrated-gradient steps", 1, 256, 32, key="fa_ig_steps", persist_state="session",
                               help="Gauss-Legendre nodes on the straight path from the zero word embedding; "
                                    "doubled (up to 256) until the completeness error is within 1 %.")
    include_target = st.checkbox("Include the target token", key="fa_include_target", persist_state="session",
                                 help="By default the target position itself is left out of the comparison "
                                      "(it cannot be deleted, and every map gives it a large self-share).")

methods = [m for m in st.session_state.get("fa_methods", []) if m in available]
baselines = [b for b in st.session_state.get("fa_baselines", []) if b in F.BASELINES]
if not methods or not baselines:
    st.info("Pick at least one map and one importance baseline.")
    st.stop()

a = ui.analysis(methods)
if a is None:
    st.stop()
if kind == "token" and contrast is None and (tip := ui.contrast_tip(a)) is not None:
    st.caption(tip)


def _score(lm, a, methods: tuple, baselines: tuple, contrast, ig_steps: int, include_target: bool, progress):
    import time

    t0 = time.perf_counter()
    r = F.score_sentence(lm, a.text, methods=list(methods), baselines=list(baselines), contrast=contrast,
                         ig_steps=ig_steps, include_target=include_target, analysis=a, max_tokens=ui.cap(),
                         ig_tol=IG_TOL,
                         progress=lambda s, f: progress(F.baseline_label(s) if s in F.BASELINES else s, f))
    # one sentence of the study = its analysis (maps) + this scoring: both measured here
    seconds = time.perf_counter() - t0 + float(sum(a.timings.values()))
    return r.importance, r.correlations, r.notes, seconds


# the importance baselines run the model about 2n + 3·steps times: on a long text and a large model that
# is minutes, so the estimate comes first (a button over ui.ASK_SECONDS), then a progress bar and Cancel
_maps = tuple(m for m in methods if m in a.maps)
_key = ("faithfulness", lm.spec, a.text, a.target, _maps, tuple(baselines), contrast, int(ig_steps),
        bool(include_target), ui.cap())
_fwd = ui.trace_seconds(a, 0.0) / 2  # the trace is the model's forward and our recomputation
_est = F.estimate_seconds(len(a.tokens), baselines, _fwd, int(ig_steps))
_worst = F.estimate_seconds(len(a.tokens), baselines, _fwd, int(ig_steps), F.IG_MAX_STEPS)
_note = (f", up to {ui.secs(_worst)} if integrated gradients must double their {int(ig_steps)} steps up to "
         f"{F.IG_MAX_STEPS} to reach a 1 % completeness error" if _worst > 1.5 * _est else "")
_job = Job(_key, ("importance",), _est, "the token importance",
           lambda progress: _score(lm, a, _maps, tuple(baselines), contrast, int(ig_steps), bool(include_target),
                                   progress),
           note=_note, what=f"Measuring token importance (estimated {ui.secs(_est)}"
                            + (f", at most {ui.secs(_worst)}" if _note else "") + ")")
_res = ui.run_job(_job, len(a.tokens))
if _res is None:  # asked for, cancelled or failed: the page says which above
    st.stop()
imp, corr, notes, sentence_seconds = _res

labels = token_labels(imp.tokens)
_unsure = (contrast is None and a.prediction and ui.unsure_note(
    a.prediction[0][1], "this explains an uncertain guess"
    + ("; a correct and a wrong word (above) ask the sharper question." if kind == "token" else "."))) or ""
st.info(f"Target quantity: {ui.plain(imp.target.label)} = {imp.f0:.4g} on this sentence. {_unsure}".rstrip(),
        icon=":material/target:")
for m, why in a.disabled.items():
    if m in methods:
        st.warning(f"{ui.method_label(m)}: {ui.plain(why)}", icon=":material/block:")
for note in notes:
    if not note.startswith("undefined"):
        st.caption(ui.plain(note))
explain = [f"blank-out replaces a token with {ui.plain(imp.blank_token)}" if imp.blank_token else None,
           "leave-one-out deletes it" if "leave_one_out" in imp.values else None]
if imp.ig:
    grown = ""
    if int(imp.ig["steps"]) > int(ig_steps):
        grown = (f" (doubled from the {int(ig_steps)} asked until the error was within {100 * IG_TOL:.0f} %)"
                 if imp.ig["completeness_rel"] <= IG_TOL else
                 f" (doubled from the {int(ig_steps)} asked; the error is still above {100 * IG_TOL:.0f} % at the limit)")
    explain.append(f"integrated gradients: {imp.ig['steps']} steps{grown}, completeness error "
                   f"{imp.ig['completeness_abs']:.1e} ({100 * imp.ig['completeness_rel']:.2g} % of f(x) − f(baseline))")
st.caption("; ".join(e for e in explain if e) + f". Compared over {len(imp.positions)} tokens "
           f"(special tokens{'' if include_target else ' and the target'} left out).")


# ---------------------------------------------------------------- bars (a fragment: the slider reruns only this)
@st.fragment
def bars_panel(imp, rows: dict, L: int):
    layer = st.slider("Layer of the maps' rows", 1, L, L, key="fa_layer")
    fig = named_as_everywhere(figures.importance_figure(imp, rows, layer - 1), list(rows))
    st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(fig), key="fa_bars", config={"displayModeBar": False})
    st.caption("Red: importance baselines (absolute change of the target quantity, or gradient sizes). "
               "Blue: each map's row for the target at this layer. Each panel has its own scale: the "
               "correlations below compare ranks only.")


rows = F.target_rows(a.maps, imp.target.position, corr.methods)
st.subheader("Importance and the maps' rows", anchor=False)
bars_panel(imp, rows, corr.n_layers)

# ---------------------------------------------------------------- correlation table
CHANCE_NOTE_MAX = 20  # up to this many tokens compared, the table says what chance alone reaches
st.subheader("Rank correlation with importance", anchor=False)
t1, t2 = st.columns(2)
baseline = t1.selectbox("Against", corr.baselines, format_func=F.baseline_label, key="fa_table_baseline")
stat = t2.radio("Statistic", list(STATS), format_func=STATS.get, horizontal=True, key="fa_table_stat")


def corr_table(values: np.ndarray, methods: list) -> pd.DataFrame:
    """[M, L] -> DataFrame (rows: method labels, columns L1..)."""
    return pd.DataFrame(values, index=[ui.method_label(m) for m in methods],
                        columns=[f"L{l + 1}" for l in range(values.shape[1])])


def styled(df: pd.DataFrame):
    return (df.style.highlight_max(axis=0, props="font-weight: bold; background-color: rgba(46,160,67,0.35)")
            .format("{:+.3f}", na_rep="n/a"))


bi = corr.baselines.index(baseline)
df = corr_table(corr.stat(stat)[:, :, bi], corr.methods)
st.dataframe(styled(df), key="fa_table")
best = corr.best(stat)[:, bi]
st.caption("Highlighted: the best map in each layer (" +
           ", ".join(f"L{l + 1} {ui.method_label(corr.methods[m])}" for l, m in enumerate(best) if m >= 0) +
           "). n/a: undefined.")

n_cmp = int(np.max(corr.n_tokens[:, :, bi])) if corr.n_tokens.size else 0
if 3 <= n_cmp <= CHANCE_NOTE_MAX:  # few tokens: say what chance alone reaches
    c, exact = F.chance_level(n_cmp, stat)
    sym = "ρ" if stat == "spearman" else "τ"
    if c is None:
        st.caption(f"**With {n_cmp} tokens no value here is beyond chance:** among the {math.factorial(n_cmp)} "
                   f"orderings of {n_cmp} tokens, 2 give |{sym}| = 1, more than one time in 20. This table "
                   "shows how the maps compare on this sentence, not which is right; the corpus study below "
                   "averages many sentences.")
    else:
        st.caption(f"**With {n_cmp} tokens, chance alone reaches |{sym}| ≥ {c:.2f} one time in 20** "
                   + ("(counted over every ordering of the tokens)" if exact else "(about: normal approximation)")
                   + "; smaller values say little about one sentence. The corpus study below averages many.")

dom = F.dominated_rows(rows, imp.positions)
if dom:
    tok_labels = token_labels(a.tokens)
    parts = [f"{ui.method_label(m)} in {ui.layer_span([l for l, _, _ in hits])} (on "
             + ", ".join(ui.plain(tok_labels[j]) for j in sorted({j for _, j, _ in hits})) + ")"
             for m, hits in dom.items()]
    st.caption(f"**One token holds {100 * DOMINATED_SHARE:.0f} % or more of the target's row:** "
               + "; ".join(parts) + ". There the ranks of the other tokens rest on the remaining 1 % or less, "
               f"so those correlations say little. {ui.FIRST_TOKEN_PILEUP}")

st.subheader("Which map should you believe? Ranked layer by layer", anchor=False)
rk = corr.ranking(stat)


def ranking_table(rk, baseline: str) -> pd.DataFrame:
    """Rows L1.., columns #1, #2, ...: the maps ordered by their correlation at that layer, 'Label (+0.12)'
    (', tied' where maps share a place); undefined ones last as 'Label (n/a)'."""
    data = {}
    for l in range(rk.n_layers):
        cells = []
        for m, v, r in rk.order(l, baseline):
            if not np.isfinite(r):
                cells.append(f"{ui.method_label(m)} (n/a)")
            else:
                tie = ", tied" if np.sum(rk.rank[:, l, rk.baselines.index(baseline)] == r) > 1 else ""
                cells.append(f"{ui.method_label(m)} ({v:+.2f}){tie}")
        data[f"L{l + 1}"] = cells
    return pd.DataFrame.from_dict(data, orient="index", columns=[f"#{k + 1}" for k in range(len(rk.methods))])


st.table(ranking_table(rk, baseline))
order = sorted(range(len(rk.methods)), key=lambda i: (not np.isfinite(rk.summary[i, bi]),
                                                       rk.summary[i, bi] if np.isfinite(rk.summary[i, bi]) else 0))
lo, hi = rk.layers[0] + 1, rk.layers[-1] + 1
st.caption(f"Each row: the maps in the order of their {STATS[stat]} against {F.baseline_label(baseline)} at that "
           "layer (#1 = agrees best; 'tied': equal correlations, sharing the average of their places; n/a: "
           f"undefined, not ranked). Summary rank = the mean place over the upper half of the layers (L{lo}–L{hi}) "
           "— on this sentence: " +
           ", ".join(f"{ui.method_label(rk.methods[i])} {rk.summary[i, bi]:.1f}" for i in order
                     if np.isfinite(rk.summary[i, bi])) +
           ". One sentence is noisy: the corpus study below averages many.")
undefined = [n for n in notes if n.startswith("undefined")]
for n in undefined:
    st.warning(ui.plain(n) + " — a constant vector has no ranking, so the correlation is not defined there.",
               icon=":material/warning:")

# ---------------------------------------------------------------- corpus study
st.divider()
st.subheader("Corpus study: the built-in evaluation set", anchor=False)
st.caption("The same correlations averaged over held-out agreement sentences (target p(answer) − p(wrong) "
           "when the model has an output head), as in Abnar & Zuidema (2020), Table 1.")


@st.cache_resource
def _study_store() -> ResultCache:
    """Finished studies, shared by all sessions (read-only once stored), the 16 used last."""
    return ResultCache(maxsize=16)


s1, s2 = st.columns([1, 3])
n_items = s1.number_input("Sentences", 1, 2000, 200, step=50, key="fa_study_n")
key = (lm.spec, int(n_items), tuple(corr.methods), tuple(corr.baselines), int(ig_steps), bool(include_target))
store = _study_store()
if s2.button("Run the study", key="fa_study_go", icon=":material/play_arrow:"):
    try:
        from attnviz.datasets import load_eval_set

        items = load_eval_set("agreement", int(n_items))
    except (OSError, ValueError) as e:
        ui.show_error(InputError(f"the built-in evaluation set cannot be read: {e}"))
        items = None
    if items:
        bar = st.progress(0.0, text=f"0 / {len(items)} sentences")

        def _study(progress):
            return F.study(lm, items, methods=list(corr.methods), baselines=list(corr.baselines),
                           ig_steps=int(ig_steps), include_target=bool(include_target), ig_tol=IG_TOL,
                           progress=lambda done, total: progress(f"{done} / {total} sentences", done / max(total, 1)))

        try:
            store.put(key, run(_study, report=lambda stage, f, left: bar.progress(f, text=f"{stage or ''}{left}")))
        except AttnvizError as e:
            ui.show_error(e)
        bar.empty()

@st.cache_data(show_spinner=False, max_entries=16)
def _set_mean_tokens(spec: str, _lm, k: int = 20):
    """Mean token count of the set's first k sentences under this model's tokenizer (None if the set is
    missing)."""
    try:
        from attnviz.datasets import load_eval_set

        items = load_eval_set("agreement", k)
    except (OSError, ValueError):
        return None
    lens = [len(_lm.tokenizer(it["text"])["input_ids"]) for it in items]
    return float(np.mean(lens)) if lens else None


@st.cache_data(show_spinner="Timing sentences of the set for the estimate…", max_entries=16)
def _time_one_study_sentence(spec: str, methods: tuple, baselines: tuple, ig_steps: int, include_target: bool, _lm,
                             k: int = 3):
    """Seconds per sentence the study takes for the set's first k sentences with these settings (None if
    the set is missing)."""
    import time

    try:
        from attnviz.datasets import load_eval_set

        items = load_eval_set("agreement", k)
    except (OSError, ValueError):
        return None
    t0 = time.perf_counter()
    try:
        F.study(_lm, items, methods=list(methods), baselines=list(baselines), ig_steps=ig_steps,
                include_target=include_target, ig_tol=IG_TOL)
    except AttnvizError:
        return None
    return (time.perf_counter() - t0) / max(1, len(items))


res = store.get(key)
if res is None:
    # timing the set's sentences costs three sentences' work: worth it when a sentence takes a moment;
    # on a large model this sentence's own (already measured) time is the honest estimate when it is about
    # as long as the set's sentences; when it is not (a 160-token paragraph against ~15-token items: its
    # 42 s a sentence made "139 min" of a 10-minute study), the set's first sentence is timed instead
    k = ui.study_timing_sentences(sentence_seconds, len(a.tokens), _set_mean_tokens(lm.spec, lm))
    per = None if k is None else _time_one_study_sentence(
        lm.spec, tuple(corr.methods), tuple(corr.baselines), int(ig_steps), bool(include_target), lm, k)
    if per is None:
        per = sentence_seconds
        how = f"this sentence took {per:.2f} s"
    elif k > 1:
        how = f"the set's first {k} sentences took {per:.2f} s each"
    else:
        how = f"the set's first sentence took {per:.2f} s"
    est = per * int(n_items)
    st.caption(f"Press the button to run it (progress is shown). Estimate: about {est:.0f} s "
               f"({est / 60:.1f} min) for {int(n_items)} sentences — {how} with these settings, "
               "measured just now on this machine (the time per sentence varies with its length and the "
               "machine's load).")
else:
    facts = [f"{res.n_sentences} sentences in {res.seconds:.0f} s"]
    if res.accuracy() is not None:
        facts.append(f"model accuracy {100 * res.accuracy():.1f} %")
    if res.skipped:
        facts.append(f"{len(res.skipped)} skipped")
    st.caption("; ".join(facts) + ". " + " ".join(ui.plain(n) for n in res.notes))
    sb = st.selectbox("Against", res.baselines, format_func=F.baseline_label, key="fa_study_baseline")
    sstat = st.radio("Statistic", list(STATS), format_func=STATS.get, horizontal=True, key="fa_study_stat")
    summ = res.summary()[sstat]
    bj = res.baselines.index(sb)
    st.dataframe(styled(corr_table(summ["mean"][:, :, bj], res.methods)), key="fa_study_table")
    st.caption("Mean over sentences; highlighted: the best map per layer. Standard deviations and counts below.")
    with st.expander("Standard deviation and number of defined correlations"):
        st.dataframe(corr_table(summ["std"][:, :, bj], res.methods).style.format("{:.3f}", na_rep="n/a"),
                     key="fa_study_std")
        st.dataframe(corr_table(summ["count"][:, :, bj].astype(float), res.methods).style.format("{:.0f}"),
                     key="fa_study_count")
    srk = res.ranking(sstat)
    st.markdown("**Ranking over the study** (the maps ordered by their mean correlation, per layer)")
    st.table(ranking_table(srk, sb))
    bj_order = sorted(range(len(srk.methods)), key=lambda i: (not np.isfinite(srk.summary[i, bj]),
                                                               srk.summary[i, bj] if np.isfinite(srk.summary[i, bj]) else 0))
    st.caption(f"Summary rank (mean place over L{srk.layers[0] + 1}–L{srk.layers[-1] + 1}) against "
               f"{F.baseline_label(sb)}: " +
               ", ".join(f"{ui.method_label(srk.methods[i])} {srk.summary[i, bj]:.1f}" for i in bj_order
                         if np.isfinite(srk.summary[i, bj])) + f". {len(srk.ties())} ties, "
               f"{len(srk.undefined())} undefined means (not ranked) over all baselines.")
    ref = F.ABNAR_ZUIDEMA_TABLE1
    st.caption("Abnar & Zuidema (2020) Table 1, Spearman vs blank-out, layers " +
               "/".join(map(str, ref["layers"])) + ": " +
               "; ".join(f"{ui.method_label(m)} " + "/".join(f"{v:+.2f}" for v in ref[m])
                         for m in ref if m != "layers"))
    st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(named_as_everywhere(figures.study_figure(res, sstat), list(res.methods))), key="fa_study_fig")
