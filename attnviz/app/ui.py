"""Shared app state and helpers for every page: the model, the sentence, the cached analysis.

Pages import it as `from attnviz.app import ui` and call ui.model(), ui.text(), ui.analysis(...).
attnviz/app/main.py calls ui.init_state(), ui.sidebar() and ui.sync_url() on every run.

The state that makes a view lives in st.session_state under the keys of URL_KEYS (the widgets use
these keys directly, with persist_state="session" so that the values survive page switches) and is mirrored in st.query_params under the names in URL_KEYS, so a URL
reproduces the view.
"""
from __future__ import annotations

import os
import re
from typing import Optional, Sequence

import streamlit as st
from streamlit.errors import StreamlitAPIException

import attnviz
from attnviz import METHODS, InputError, ModelLoadError, figures
from attnviz.text import readable_token
# secs and time_left are the pages' too (ui.secs, ui.time_left): estimates and time left said alike everywhere
from attnviz.jobs import (Cancelled, Job, ResultCache, first_job, plan_view, secs, take_cached, time_left,  # noqa: F401
                          retime, trace_seconds, view_jobs)
from attnviz.models import allow
from attnviz.models.load import builtin_names, is_builtin, packaged_available
from attnviz.app.store import SharedStore, cache_dir


DEFAULT_SPEC = "builtin:agreement"
FALLBACK_SPEC = "pkg:minilm"
# the token cap: the model's own maximum (LoadedModel.max_tokens, its config's max_position_embeddings)
# unless ATTNVIZ_MAX_TOKENS or the Model page sets one
ENV_CAP = os.environ.get("ATTNVIZ_MAX_TOKENS")
DEFAULT_CAP = int(ENV_CAP) if ENV_CAP else None
# a method with a cost estimate (MethodInfo.estimate) above this waits until asked for
ASK_SECONDS = float(os.environ.get("ATTNVIZ_ASK_SECONDS", os.environ.get("ATTNVIZ_FLOW_ASK_SECONDS", "5")))
# a part of a streamed view (analysis(stream=True)) estimated at most this long is computed before the page
# draws, so that a new link draws its maps once (one script run, one render) instead of the cheap ones
# first and all of them again a moment later
INLINE_SECONDS = float(os.environ.get("ATTNVIZ_INLINE_SECONDS", "1") or 0)
# seconds to pause at every progress report: slow motion for tests and live demonstrations of Cancel (0: off)
PROGRESS_PAUSE = float(os.environ.get("ATTNVIZ_PROGRESS_PAUSE", "0") or 0)

# examples for masked LMs (the built-in models, BERT family): each is answered right, with the
# right form far ahead of the wrong one, by builtin:agreement (pinned by tests/test_app.py, which
# prints the probabilities) ...
PRESETS = {
    "Verb number, no attractor": "the keys [MASK] red .",
    "Verb number, 1 attractor": "the keys to the cabinet [MASK] red .",
    "Verb number, 2 attractors": "the key to the cabinets near the doors [MASK] red .",
    "Verb number, 3 attractors": "the keys to the cabinet near the door of the kitchen [MASK] red .",
    "Pronoun resolution": "the woman who met the boys lost [MASK] keys .",
    "Pronoun resolution (his)": "the man who met the girls lost [MASK] phone .",
    "No [MASK] (target = first token)": "the dogs in the garden are happy .",
}
# ... and for causal LMs, which read only the words before [MASK]: each one is answered right by
# SmolLM2-135M-Instruct (pkg:smollm2), the right form top of the list and ahead of the wrong one by 6x
# or more (pinned by tests/test_app.py and tests/test_real_models.py)
CAUSAL_PRESETS = {
    "Verb number, no attractor": "The cats [MASK] sleeping on the sofa .",
    "Verb number, 1 attractor": "The keys to the cabinet [MASK] on the table .",
    "Verb number, 2 attractors": "The key to the cabinets near the doors [MASK] on the table .",
    "Verb number, 3 attractors": "The keys to the cabinet near the door of the kitchen [MASK] on the table .",
    "Pronoun resolution (her)": "The mother told the boys that she had lost [MASK] keys .",
    "Pronoun resolution (his)": "John told the girls that he had lost [MASK] keys .",
    "No [MASK] (target = last token)": "the dogs in the garden are",
}
# what each example is about: the subject the blank agrees with, the right form and the wrong one
# (the contrast pair shown beside the prediction)
STORY = {
    PRESETS["Verb number, no attractor"]: ("keys", "are", "is"),
    PRESETS["Verb number, 1 attractor"]: ("keys", "are", "is"),
    PRESETS["Verb number, 2 attractors"]: ("key", "is", "are"),
    PRESETS["Verb number, 3 attractors"]: ("keys", "are", "is"),
    PRESETS["Pronoun resolution"]: ("woman", "her", "his"),
    PRESETS["Pronoun resolution (his)"]: ("man", "his", "her"),
    CAUSAL_PRESETS["Verb number, no attractor"]: ("cats", "are", "is"),
    CAUSAL_PRESETS["Verb number, 1 attractor"]: ("keys", "are", "is"),
    CAUSAL_PRESETS["Verb number, 2 attractors"]: ("key", "is", "are"),
    CAUSAL_PRESETS["Verb number, 3 attractors"]: ("keys", "are", "is"),
    CAUSAL_PRESETS["Pronoun resolution (her)"]: ("she", "her", "his"),
    CAUSAL_PRESETS["Pronoun resolution (his)"]: ("he", "his", "her"),
}
DEFAULT_TEXT = PRESETS["Verb number, 1 attractor"]
DEFAULT_METHODS = list(METHODS.default_view())  # MethodInfo.default_view
PRESET_NONE = "— pick an example —"
AUTO = -1  # the target / source pickers' "automatic" / "all" choice

# session-state key -> query-parameter name (plus "page": the page's file name, which main.py
# follows when a session starts, because Streamlit can leave the path of the URL one page behind
# after st.switch_page)
URL_KEYS = {"spec": "model", "text": "text", "methods": "methods", "layer": "layer", "head": "head",
            "target": "target", "hide": "hide", "merge": "merge", "cells": "cells", "present": "present"}
# widgets bound to the URL by Streamlit itself (bind="query-params" on Explore): sync_url leaves them alone
BOUND = ("layer", "head", "hide", "merge", "cells")

# ------------------------------------------------------------------------------------ text helpers

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$:])")


def plain(s) -> str:
    """Any string -> markdown that shows exactly that text (no formatting, no HTML, no directives)."""
    return _MD_SPECIAL.sub(r"\\\1", str(s)).replace("\n", " ")


def show_error(e: Exception) -> None:
    """One-line error box: the exception's message as plain text."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    st.error(plain(msg), icon=":material/error:")


def method_label(name: str) -> str:
    info = METHODS.get(name)
    return info.label if info else name


def value_name(name: str) -> str:
    """What a map's colour bar measures: the quantity and its unit (MethodInfo.unit)."""
    info = METHODS.get(name)
    return info.unit if info else "value"


def explain(name: str) -> str:
    """One or two sentences shown under a map (MethodInfo.explain; the About page has the long form)."""
    info = METHODS.get(name)
    return info.explain if info else ""


def is_share(name: str) -> bool:
    """Rows sum to 1: one colour scale can serve all such maps."""
    info = METHODS.get(name)
    return bool(info and info.rows_sum_to_one)


def flash_load_error() -> None:
    """The error of a model that failed to load (the previous one kept), shown once."""
    msg = st.session_state.pop("_load_flash", None)
    if msg:
        st.error(plain(msg), icon=":material/error:")


# ------------------------------------------------------------------------------------ state

def default_spec() -> str:
    """builtin:agreement when its folder exists, else the packaged MiniLM."""
    return DEFAULT_SPEC if DEFAULT_SPEC.split(":", 1)[1] in builtin_names() else FALLBACK_SPEC


def _parse_int(v, default):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def init_state() -> None:
    """Once per browser session: fill the view state from the URL, then defaults."""
    ss = st.session_state
    if ss.get("_init"):
        return
    qp = st.query_params
    spec_q = qp.get("model")
    if spec_q:
        ss.spec = spec_q
    else:
        ss.spec = default_spec()
        if ss.spec != DEFAULT_SPEC:
            ss._fallback_note = (f"The built-in model '{DEFAULT_SPEC}' is not installed (no folder "
                                 f"assets/models/agreement): showing '{ss.spec}' instead.")
    ss.text = qp.get("text", DEFAULT_TEXT)
    ss._text_default = "text" not in qp  # a causal model gets its own default example (sidebar())
    methods = [m for m in (qp.get("methods") or "").split(",") if m in METHODS]
    ss.methods = methods if "methods" in qp else list(DEFAULT_METHODS)
    ss.layer = max(1, _parse_int(qp.get("layer"), 1))
    ss.head = str(qp.get("head", "all"))
    t = qp.get("target")
    ss.target = AUTO if t in (None, "", "auto") else max(AUTO, _parse_int(t, AUTO))
    ss.hide = qp.get("hide", "false").lower() in ("1", "true", "yes")
    ss.merge = qp.get("merge", "false").lower() in ("1", "true", "yes")
    ss.cells = qp.get("cells", "false").lower() in ("1", "true", "yes")
    ss.present = qp.get("present", "0").lower() in ("1", "true", "yes")
    # presentation mode without a layer or head in the URL opens where the story is (Explore: story())
    ss._story = ss.present and "layer" not in qp and "head" not in qp
    ss.cap = DEFAULT_CAP
    ss.preset = PRESET_NONE
    ss._wanted_page = qp.get("page")
    ss._init = True


def url_state() -> dict:
    """The query parameters that reproduce the current view."""
    ss = st.session_state
    return {"page": ss.get("_page", "explore"), "model": spec(), "text": text(), "methods": ",".join(ss.get("methods", [])),
            "layer": str(ss.get("layer", 1)), "head": str(ss.get("head", "all")),
            "target": "auto" if target() is None else str(target()),
            "hide": "true" if ss.get("hide") else "false", "merge": "true" if ss.get("merge") else "false",
            "cells": "true" if ss.get("cells") else "false", **({"present": "1"} if ss.get("present") else {})}


def sync_url(force: bool = False) -> None:
    """Mirror the view state into st.query_params (only keys whose value changed)."""
    want = url_state()
    if "present" not in want and "present" in st.query_params:
        del st.query_params["present"]
    for k, v in want.items():
        if k in BOUND:
            continue
        if st.query_params.get(k) != v or force:
            st.query_params[k] = v


def spec() -> str:
    """The current model spec (session state, set from the URL or the pickers)."""
    s = st.session_state.get("spec")
    return s if s else default_spec()


def text() -> str:
    """The current sentence."""
    t = st.session_state.get("text")
    return DEFAULT_TEXT if t is None else str(t)


def cap() -> int:
    """The token cap: the one set (ATTNVIZ_MAX_TOKENS, the Model page), else the model's own maximum."""
    c = st.session_state.get("cap", DEFAULT_CAP) or DEFAULT_CAP
    if c:
        return int(c)
    lm, _ = _try_load()
    return lm.max_tokens if lm is not None else 128


def target():
    """The chosen row (target position), None for automatic ([MASK], else [CLS] / the last token)."""
    t = st.session_state.get("target", AUTO)
    return None if t is None or t == AUTO else int(t)


def _reset_target() -> None:
    st.session_state.target = AUTO


def _loaded_task() -> Optional[str]:
    """The task of the current model if it loads, else None; shows nothing (the page shows the error)."""
    lm, _ = _try_load()
    return None if lm is None else lm.task


def presets() -> dict:
    """The examples that suit the current model: causal LMs read only the words before [MASK]."""
    return CAUSAL_PRESETS if _loaded_task() == "causal_lm" else PRESETS


def _apply_preset() -> None:
    choice = st.session_state.get("preset")
    table = presets()
    if choice in table:
        st.session_state.text = table[choice]
        st.session_state.target = AUTO
        st.session_state._story = bool(st.session_state.get("present"))  # open the new example where its story is
    st.session_state.preset = PRESET_NONE


def set_spec(new_spec: str) -> None:
    """Switch model (from a callback): forget the chosen row and any cached load error. When the new
    model fails to load and another one loaded before, that one stays, and the error is shown once."""
    ss = st.session_state
    ss.spec = new_spec
    ss.target = AUTO
    errors = ss.setdefault("_load_errors", {})
    errors.pop(new_spec, None)
    lm, err = _try_load()
    prev = ss.get("_good_spec")
    if lm is None and prev and prev != new_spec:
        ss.spec = prev
        ss._load_flash = f"Could not load '{new_spec}': {err}. Still using {prev}."
        errors.pop(new_spec, None)  # a later try loads it afresh


def _spec_picked() -> None:
    """The sidebar's model picker changed (a callback): switch through set_spec."""
    set_spec(st.session_state.spec)


PACKAGED_LABELS = {"pkg:minilm": "pkg:minilm — pretrained MiniLM (no output head)",
                   "pkg:smollm2": "pkg:smollm2 — pretrained SmolLM2-135M (causal LM, 30 layers)"}


def known_specs() -> list:
    out = [f"builtin:{n}" for n in builtin_names()]
    out += [s for s in PACKAGED_LABELS if packaged_available(s.split(":", 1)[1])]
    out += [s for s in allow.served() or [] if s not in out]  # served to a class: the teacher's models
    if spec() not in out:
        out.append(spec())
    return out


def _spec_label(s: str) -> str:
    if s in PACKAGED_LABELS:
        return PACKAGED_LABELS[s]
    if s.startswith("builtin:"):
        return f"{s} — built-in"
    return s


# pages that do not read the sidebar's sentence: what the sentence box says there instead of how to write it
def _present_switched() -> None:
    """Presentation mode turned on (a callback): the next Explore run opens where the story is."""
    st.session_state._story = bool(st.session_state.get("present"))


OWN_SENTENCES = {"minimal_pair": "**Not used on this page:** Minimal pair compares its own two sentences, "
                                 "A and B, written on the page. This box is for the other pages."}


def sidebar() -> None:
    """The model picker and the sentence box shared by all pages."""
    with st.sidebar:
        st.selectbox("Model", known_specs(), key="spec", persist_state="session", format_func=_spec_label, on_change=_spec_picked,
                     help="More choices (a local folder, a Hugging Face id) on the Model page.")
        note = st.session_state.get("_fallback_note")
        if note and spec() != DEFAULT_SPEC:
            st.info(plain(note), icon=":material/info:")
        if st.session_state.pop("_text_default", False) and _loaded_task() == "causal_lm" and text() == DEFAULT_TEXT:
            st.session_state.text = CAUSAL_PRESETS["Verb number, 1 attractor"]  # read before the blank: its own example
        st.toggle("Presentation mode", key="present", on_change=_present_switched,
                  help="For a projector: large text in every figure, maps side by side, the sentence, the "
                       "prediction and the first map on the first screen, the view opened where the story is. "
                       "In the URL as present=1.")
        st.selectbox("Examples", [PRESET_NONE] + list(presets()), key="preset", on_change=_apply_preset)
        st.text_area("Sentence", key="text", persist_state="session", on_change=_reset_target, height=110,
                     help="Write [MASK] where the model should predict a word.")
        own = OWN_SENTENCES.get(st.session_state.get("_page"))
        if own:
            st.caption(own)
        elif _loaded_task() == "causal_lm":
            st.caption("Write **\\[MASK\\]** for the word the model predicts. This model reads left to "
                       "right: it sees only the words before \\[MASK\\] and predicts the next word. Press "
                       "Ctrl+Enter (or click outside the box) to apply.")
        else:
            st.caption("Write **\\[MASK\\]** for the word the model predicts. Press Ctrl+Enter (or click "
                       "outside the box) to apply.")


# ------------------------------------------------------------------------------------ model and analysis

ENV_DEVICE = os.environ.get("ATTNVIZ_DEVICE", "").strip() or "cpu"


def device() -> str:
    """Where models run: the Model page's choice, else ATTNVIZ_DEVICE, else cpu."""
    return st.session_state.get("device") or ENV_DEVICE


def devices() -> list:
    """cpu and every CUDA device this PyTorch sees (cuda:0, cuda:1, ...)."""
    import torch

    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if device() not in out:  # an ATTNVIZ_DEVICE this machine lacks: listed, so the page can say why it fails
        out.append(device())
    return out


def set_device(new: str) -> None:
    """Switch device (from a callback): the model is loaded there afresh (self-check on that device);
    if that fails, the previous device stays and the error is shown once."""
    ss = st.session_state
    prev = device()
    ss.device = new
    ss.setdefault("_load_errors", {}).clear()
    lm, err = _try_load()
    if lm is None and new != prev:
        ss.device = prev
        ss.device_pick = prev
        ss._load_flash = f"Could not load '{spec()}' on {new}: {err}. Still on {prev}."
        ss["_load_errors"].clear()


def _device_picked() -> None:
    set_device(st.session_state.get("device_pick") or "cpu")


@st.cache_resource(show_spinner=False, max_entries=4)
def _load_on(spec_: str, device_: str):
    with st.spinner(_load_message(spec_)):
        return attnviz.load_model(spec_, device=device_)


def _load(spec_: str):
    """The LoadedModel of spec_ on the session's device (cached per spec and device). Results cached
    by spec alone are shared between devices: they agree to float32 tolerance (tests/test_device.py)."""
    return _load_on(spec_, device())


def _load_message(spec_: str) -> str:
    """What the spinner says while a model loads: a GGUF file without a converted copy takes longer."""
    from attnviz.models.load import converted_copy, resolve
    try:
        kind, source = resolve(spec_)
        if kind == "gguf":
            from pathlib import Path
            if not (converted_copy(source) / "config.json").is_file():
                return (f"Loading {Path(source).name}: the first load converts it to float32 and keeps a copy "
                        "(about half a minute); later loads take a second or two…")
    except Exception:  # noqa: BLE001 - the load itself reports what is wrong
        pass
    return "Loading the model…"


def _try_load():
    """(LoadedModel, None) or (None, one-line reason) for the current spec. A failure is remembered
    for the session, so a hub id that cannot be reached is not retried on every rerun."""
    s = spec()
    errors = st.session_state.setdefault("_load_errors", {})
    if s in errors:
        return None, errors[s]
    try:
        return _load(s), None
    except ModelLoadError as e:
        errors[s] = str(e)
    except Exception as e:  # noqa: BLE001 - the app keeps running whatever the loader hits
        errors[s] = f"could not load '{s}': {e}"
    return None, errors[s]


def keep_working_model() -> None:
    """Called by main.py before the sidebar: remember the last model that loaded in this session
    (set_spec goes back to it when a newly picked model fails to load)."""
    ss = st.session_state
    lm, _ = _try_load()
    if lm is not None:
        ss._good_spec = spec()


def model():
    """The LoadedModel for the current spec, or None after showing the one-line reason."""
    flash_load_error()
    lm, err = _try_load()
    if lm is None:
        show_error(ModelLoadError(err))
    return lm


BUILTIN_CAVEAT = ("**Built-in model:** a small model (6 layers) trained here on a little real English and "
                  "above all for two tasks, the verb's number and the possessive (his/her/its/their) at a "
                  "[MASK] (see the Model page), so its prediction means most at such a blank; elsewhere it "
                  "is a weak guesser. In its training grammar a person noun without a gender (author, "
                  "teacher) takes “their”.")
UNSURE_BELOW = 0.2


def prediction_caveats(a, lm) -> list:
    """What a reader should know before trusting the prediction shown: a built-in model's narrow
    training, a top probability so low that the model is unsure."""
    out = []
    if is_builtin(lm):
        out.append(BUILTIN_CAVEAT)
    if a.prediction:
        note = unsure_note(a.prediction[0][1], "read the maps as how it arrives at an uncertain guess.")
        if note:
            out.append(note)
    return out


def unsure_note(p: float, then: str) -> Optional[str]:
    """"**The model is unsure:** its top answer has probability 0.11 (under 0.2); " + then, or None when
    the top answer's probability p is UNSURE_BELOW or more. Every page that shows a prediction says it so."""
    if p >= UNSURE_BELOW:
        return None
    return f"**The model is unsure:** its top answer has probability {p:.2f} (under {UNSURE_BELOW:.1f}); {then}"


def _p(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"


def _ranked_choices(a, min_total: float = 1e-3) -> list:
    """Analysis.choices groups whose total probability reaches min_total, likeliest group first, each
    as [(word, probability)] from the likeliest word down."""
    groups = [g for g in getattr(a, "choices", []) or [] if sum(g[1]) >= min_total]
    return [sorted(zip(words, probs), key=lambda wp: -wp[1])
            for words, probs in sorted(groups, key=lambda g: -sum(g[1]))]


def choices_caption(a, min_total: float = 1e-3, most: int = 2) -> Optional[str]:
    """The agreement and pronoun words at a [MASK] blank (Analysis.choices), most likely group first,
    e.g. "are 0.020 vs is 1.5e-04 (are 133× as likely)"; None when no group reaches min_total."""
    groups = _ranked_choices(a, min_total)[:most]
    if not groups:
        return None
    parts = []
    for ranked in groups:
        (w1, p1), (w2, p2) = ranked[0], ranked[1]
        text = " vs ".join(f"{w} {_p(p)}" for w, p in ranked)
        ratio = p1 / p2 if p2 > 0 else float("inf")
        if ratio >= 1.05:
            text += f" ({w1} {ratio:,.0f}× as likely as {w2})" if ratio >= 10 else f" ({w1} {ratio:.1f}× as likely as {w2})"
        parts.append(text)
    return ("**Agreement words at the blank:** " + "; ".join(parts)
            + ". The model's own probabilities, in its top list or not.")


def contrast_tip(a, min_total: float = 1e-3) -> Optional[str]:
    """Faithfulness without a contrast: how to test the verb's number (or the pronoun) instead of
    p(the top prediction), naming the two forms the model likes most at this blank; None elsewhere."""
    groups = _ranked_choices(a, min_total)
    if not groups:
        return None
    (w1, p1), (w2, p2) = groups[0][:2]
    top = readable_token(a.prediction[0][0]) if a.prediction else "?"
    return (f"**Tip:** the target is now p('{top}'). To test agreement, type **{w1}** and **{w2}** as the "
            f"correct and wrong words (the model gives them {_p(p1)} and {_p(p2)} here; which one is "
            f"grammatical is for you to say, swap them if needed).")


def model_card(source) -> Optional[str]:
    """The README.md of a model folder (a built-in model's card: its data, accuracy tables and
    limitations), without its YAML front matter; None when there is none."""
    from pathlib import Path

    try:
        path = Path(str(source)) / "README.md"
        text = path.read_text(encoding="utf-8") if source and path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None
    if not text:
        return None
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end >= 0:
            text = text[end + 4:]
    lines, fenced = [], False
    for line in text.strip().splitlines():  # headings two levels down: the card sits inside a page
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,4} ", line):
            line = "##" + line
        lines.append(line)
    return "\n".join(lines) or None


def page(title: str, caption: str):
    """A page's title and explanation, then its model: the LoadedModel, or the page stops after the
    one-line reason it could not be loaded."""
    if present():  # a projector's first screen is for the figures: a small title, the explanation folded
        present_style()
        st.subheader(title, anchor=False, help=caption)
    else:
        st.title(title)
        st.caption(caption)
    lm = model()
    if lm is None:
        st.stop()
    return lm


# finished results of long computations (the analyses and the pages' jobs), shared by every session and
# tab of the server: the 64 used last in memory, more on disk across restarts, one computation per key at
# a time (attnviz.app.store.SharedStore); they are shared, never changed in place
RESULTS = SharedStore(maxsize=64, folder=cache_dir())


def cached_result(key: tuple):
    """The result with_progress computed for key, or None."""
    return RESULTS.get(key)


def with_progress(key: tuple, compute, what: str, cancel_key=None):
    """compute(progress) once per key (cached for every session in RESULTS), with a progress bar that names
    the stage and the time left; progress(f) or progress(stage, f) with f in [0, 1] (attnviz.jobs.run).
    cancel_key: the progress callback raises jobs.Cancelled once that key is in the session's cancelled set
    (the Cancel button's callback puts it there; Streamlit also stops the running script at the button's
    click, at the bar's next update); nothing is cached then."""
    got = RESULTS.get(key)
    if got is not None:
        return got
    bar = st.progress(0.0, text=f"{what}…")

    def report(stage, f, left) -> None:
        name = "" if stage is None else (method_label(stage) if stage in METHODS else str(stage)) + ", "
        bar.progress(f, text=f"{what}: {name}{100 * f:.0f} %{left}")

    cancelled = None if cancel_key is None else (lambda: cancel_key in st.session_state.get("_cancelled", set()))

    def waiting(seconds) -> None:  # another session computes the same: its result is ours when it ends
        bar.progress(0.0, text=f"{what}: being computed for another session or tab — waiting for it ({seconds:.0f} s)")

    try:
        return RESULTS.run(key, compute, waiting=waiting, report=report, cancelled=cancelled, pause=PROGRESS_PAUSE)
    finally:
        bar.empty()


def _confirm(key) -> None:
    st.session_state.setdefault("_asked", set()).add(key)
    st.session_state.setdefault("_cancelled", set()).discard(key)


def _cancel(key) -> None:
    st.session_state.setdefault("_cancelled", set()).add(key)


def study_timing_sentences(sentence_seconds: float, n_tokens: int, set_tokens: Optional[float]) -> Optional[int]:
    """How many of the evaluation set's sentences to time for the corpus study's estimate: 3 when this
    sentence took at most 2 s (cheap); none (this sentence's own time stands) when it took longer and
    is about as long as the set's sentences (2/3 to 1.5 times their mean token count, or that mean is
    unknown); else 1 (a 160-token paragraph is no measure for 15-token items)."""
    if sentence_seconds <= 2.0:
        return 3
    if set_tokens is None or 2 / 3 <= n_tokens / set_tokens <= 1.5:
        return None
    return 1


def run_job(job: Job, n_tokens: int):
    """One long computation of a page (an attnviz.jobs.Job, not a map of the analysis) by run_jobs' rules
    -> its result, or None when it waits for its button, was cancelled or failed (the page has said which)."""
    got = RESULTS.get(job.key)
    if got is None:
        run_jobs(_Pending([job], n_tokens))
        got = RESULTS.get(job.key)
    return got


class _Pending:
    """What run_jobs reads of an analysis: the jobs pending and the tokens (for the warning's count)."""

    def __init__(self, jobs: list, n_tokens: int):
        self.pending, self.tokens = jobs, range(n_tokens)


def run_jobs(a, where=None) -> bool:
    """Compute the long parts a view left for later (a.pending, from analysis(stream=True)), one after
    another, each with its estimate shown first: over ASK_SECONDS it waits for a button; else it runs with
    a progress bar and a Cancel button. A cancelled part shows "cancelled" and a button to run it again.
    where: a container to draw in. -> True when something new was computed (the caller reruns to draw it)."""
    new = False
    box = where if where is not None else st.container()
    for job in getattr(a, "pending", []):
        ss = st.session_state
        with box:
            if job.key in ss.get("_cancelled", set()):
                st.info(f"Cancelled: {plain(job.label)} (estimated {secs(job.estimate)}) was not computed.",
                        icon=":material/cancel:")
                st.button(f"Compute {job.label} (about {secs(job.estimate)})", key=f"again_{job.slug}_{abs(hash(job.key))}",
                          on_click=_confirm, args=(job.key,))
                continue
            if job.estimate > ASK_SECONDS and job.key not in ss.get("_asked", set()):
                st.warning(f"Computing {plain(job.label)} for {len(a.tokens)} tokens would take about "
                           f"{secs(job.estimate)}{job.note}. It is left out until you ask for it.", icon=":material/hourglass:")
                st.button(f"Compute {job.label} (about {secs(job.estimate)})", key=f"ask_go_{job.slug}_{abs(hash(job.key))}",
                          on_click=_confirm, args=(job.key,))
                continue
            slot = st.empty()
            slot.button("Cancel", key=f"cancel_{job.slug}_{abs(hash(job.key))}", on_click=_cancel, args=(job.key,),
                        icon=":material/cancel:", help=f"Stop computing {job.label}; the maps drawn stay.")
            try:
                with_progress(job.key, job.compute, job.what, job.key)
                new = True
            except Cancelled:
                _cancel(job.key)
                st.info(f"Cancelled: {plain(job.label)} was not computed.", icon=":material/cancel:")
            except InputError as e:
                show_error(e)
            except Exception as e:  # noqa: BLE001 - one method failing must not take the other maps down
                show_error(RuntimeError(f"{job.label} failed: {e}"))
            finally:
                slot.empty()
    return new


def analysis(methods: Optional[Sequence[str]] = None, ask: bool = True,
             text_: Optional[str] = None, stream: bool = False,
             mixing: bool = False) -> Optional["attnviz.Analysis"]:
    """attnviz.analyze for the current (spec, text, methods, target, cap), cached; None (after an
    error box) when the model or the text cannot be used. methods: default the selected ones.

    The cheap maps (attention, rollout: the trace alone) come first, in one analyze() call; the rest
    (one call with the mixing ratios; each method with its own cost estimate apart) are jobs with an
    estimate (attnviz.jobs.plan_view, view_jobs). stream=True: only what is cached, or estimated at most
    INLINE_SECONDS (computed here), is merged in, the others are listed in a.pending for run_jobs()
    (Explore draws the cheap maps first, then runs them).
    stream=False: the jobs run here (ask=False: only cached ones are used, nothing is drawn, e.g. inside a
    fragment). mixing: compute the context-mixing ratios too (Explore's exports). text_: another sentence than the sidebar's (the minimal pair), analysed at its automatic target."""
    lm = model()
    if lm is None:
        return None
    if methods is None:
        methods = st.session_state.get("methods") or DEFAULT_METHODS
    s, t, c = spec(), (text() if text_ is None else str(text_)), cap()
    target_ = target() if text_ is None else None
    try:
        vp = plan_view(lm, s, t, methods, target_, c)  # every estimate is asked about in run_jobs
        if vp.fell_back:  # a row left over from another text: back to the automatic target
            try:
                st.session_state.target = AUTO
            except StreamlitAPIException:  # the row picker is already drawn in this run
                pass
        first = first_job(lm, vp)
        base = retime(lm, with_progress(first.key, first.compute, first.what), vp)
    except InputError as e:
        if ask:
            show_error(e)
        return None
    todo = view_jobs(lm, vp, trace_seconds(base), mixing)
    a, pending = take_cached(base, todo, RESULTS.get, vp)
    if not ask:
        pending = []
    elif pending and not stream:
        run_jobs(_Pending(pending, vp.n_tokens))
        a, pending = take_cached(base, todo, RESULTS.get, vp)
    elif pending:  # streamed, but a part estimated under INLINE_SECONDS is computed before anything is drawn
        cancelled = st.session_state.get("_cancelled", set())
        quick = [j for j in pending if j.estimate <= min(INLINE_SECONDS, ASK_SECONDS) and j.key not in cancelled]
        if quick:
            run_jobs(_Pending(quick, vp.n_tokens))  # its error or "Cancelled" is said here, once
            a, pending = take_cached(base, todo, RESULTS.get, vp)
            pending = [j for j in pending if j.key not in {q.key for q in quick}]
    a.pending = pending
    return a


def word_ids(a) -> Optional[list]:
    """Word index of each token of an Analysis (fast tokenizers), or None."""
    lm = model()
    if lm is None:
        return None
    try:
        enc = lm.tokenizer(a.text)
        if len(enc["input_ids"]) != len(a.tokens):
            return None
        return enc.word_ids()
    except Exception:  # noqa: BLE001 - slow tokenizers have no word_ids: fall back to '##' pieces
        return None


def view_for(a):
    """The attnviz.figures.View for the current toggles (hide special tokens, merge subwords)."""
    from attnviz.figures import make_view
    ss = st.session_state
    merge = bool(ss.get("merge"))
    return make_view(a.tokens, a.special, a.target, hide_special=bool(ss.get("hide")),
                     merge_words=merge, word_ids=word_ids(a) if merge else None)


def token_report(a, lm=None, typed: Optional[str] = None):
    """attnviz.tokencheck.check_tokens for an Analysis of the current model."""
    from attnviz.tokencheck import check_tokens, longest_training_input, pieces_unseen

    lm = lm or model()
    tok = getattr(lm, "tokenizer", None)
    return check_tokens(a.tokens, a.special, a.target, text=text() if typed is None else typed,
                        task=getattr(lm, "task", "encoder"), unk_token=getattr(tok, "unk_token", None),
                        mask_token=getattr(tok, "mask_token", None), word_ids=word_ids(a), blank=a.blank,
                        trained_tokens=longest_training_input(lm) if lm is not None else None,
                        pieces_unseen=pieces_unseen(lm) if lm is not None else False,
                        has_prediction=bool(a.prediction))


def ordinal(k: int) -> str:
    """2 -> "2nd", 3 -> "3rd", 11 -> "11th", 21 -> "21st"."""
    k = int(k)
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


SINK_SHARE = 0.5  # a column (Explore) or input (Flow graph) with at least this share of the total gets a caption
# why rollout and flow end at a causal model's first token (Explore, Flow graph, Faithfulness say it alike)
FIRST_TOKEN_PILEUP = ("The first token of a causal model reads only itself, so what reaches it stays there: over "
                      "many layers rollout and flow pile up at it.")


def layer_span(layers) -> str:
    """0-based layer indices -> "layer 3" / "layers 11–30" / "layers 2, 5–7" (counted from 1)."""
    ls = sorted({int(x) + 1 for x in layers})
    runs, start = [], None
    for k, x in enumerate(ls):
        if start is None:
            start = x
        if k + 1 == len(ls) or ls[k + 1] != x + 1:
            runs.append(f"{start}" if start == x else f"{start}–{x}")
            start = None
    return ("layer " if len(ls) == 1 else "layers ") + ", ".join(runs)


STRIP_OPEN_MAX = 64  # longer texts get the token strip folded (an expander), so the maps are in view


def show_token_strip(a, lm=None, key: str = "strip", typed: Optional[str] = None) -> None:
    """The tokens as the model reads them ([UNK] and split words marked), what is predicted, and a
    warning when the prediction may not be meaningful."""
    from attnviz.tokencheck import strip_html

    rep = token_report(a, lm, typed)
    with st.container(key=key):
        n = len(a.tokens)
        if n <= STRIP_OPEN_MAX:
            st.html(strip_html(a.tokens, rep.marks, a.target))
        else:  # a long text's strip is screens of chips above the maps: folded, with what it would show
            marked = [f"{rep.marks.count('unk')} unknown" if "unk" in rep.marks else "",
                      f"{rep.marks.count('piece')} in word pieces" if "piece" in rep.marks else ""]
            extra = ", ".join(m for m in marked if m)
            with st.expander(f"The {n} tokens as the model reads them" + (f" ({extra})" if extra else ""),
                             expanded=False):
                st.html(strip_html(a.tokens, rep.marks, a.target))
        legend = []
        if "unk" in rep.marks:
            legend.append(":red[red]: unknown to the model")
        if "piece" in rep.marks:
            legend.append(":orange[orange]: a word split into pieces")
        st.caption(plain(rep.predicted) + ("  \n" + " · ".join(legend) if legend else ""))
        if rep.warnings:
            st.warning("**The prediction may not be meaningful.** " + " ".join(plain(w) for w in rep.warnings),
                       icon=":material/warning:")


def head_options(H: int) -> list:
    """The head picker's choices: "all" (the layer map), then "1".."H" (these strings go in the URL)."""
    return ["all"] + [str(h) for h in range(1, H + 1)]


def head_index() -> int:
    """The chosen head: 0 for all heads (the layer map), else 1..H."""
    h = st.session_state.get("head", "all")
    return 0 if h in (None, "all", "") else max(0, _parse_int(h, 0))


def clamp_layer_head(L: int, H: int) -> None:
    """Keep the layer (1..L) and head ("all" or 1..H) in range for the current model (before widgets)."""
    ss = st.session_state
    ss.layer = min(max(1, _parse_int(ss.get("layer"), 1)), L)
    h = head_index()
    ss.head = "all" if h == 0 or h > H else str(h)


# ------------------------------------------------------------------------------------ presentation mode

def present() -> bool:
    """Presentation mode is on (the sidebar's switch, present=1 in the URL)."""
    return bool(st.session_state.get("present"))


def fig_font():
    """The smallest font (px) for every text of a figure: figures.PRESENT_FONT in presentation mode, else
    None (the regular sizes)."""
    return figures.PRESENT_FONT if present() else None


PRESENT_CSS = """<style>
.block-container, [data-testid="stMainBlockContainer"] {padding-top: 3.8rem !important; padding-bottom: 2rem !important;}
.st-key-headline p {margin-bottom: 0.1rem;}
</style>"""


def big(fig):
    """fig with every text at least figures.PRESENT_FONT px in presentation mode (figures.enlarge), else fig."""
    return figures.enlarge(fig, figures.PRESENT_FONT) if present() else fig


def theme():
    """The theme argument of st.plotly_chart for figures that use Streamlit's: None in presentation mode
    (Streamlit's theme would set its own, smaller tick fonts over figures.enlarge's)."""
    return None if present() else "streamlit"


def present_style() -> None:
    """Presentation mode's page style: less empty space above the first line."""
    st.html(PRESENT_CSS)


DETERMINERS = {"the", "a", "an", "this", "that", "these", "those", "my", "his", "her", "their", "our", "its"}


def subject_word(text_: str):
    """The subject an example is about (STORY), else the word after the sentence's first determiner
    ("the keys to the cabinet ..." -> "keys"), else None."""
    if text_ in STORY:
        return STORY[text_][0]
    words = re.findall(r"[\w']+|\[MASK\]", text_.lower())
    for w, nxt in zip(words, words[1:]):
        if w in DETERMINERS and nxt.isalpha():
            return nxt
    return None


def word_positions(tokens, word: str) -> list:
    """The token positions that spell `word`: its one token, or the pieces it is split into."""
    clean = [readable_token(t).strip().lower() for t in tokens]
    hits = [i for i, c in enumerate(clean) if c == word.lower()]
    if hits:
        return hits[:1]
    for i, c in enumerate(clean):  # a word split into pieces: the pieces that spell it from token i on
        got, j = "", i
        while j < len(clean) and len(got) < len(word) and word.lower().startswith(got + clean[j].lstrip("#")) and clean[j]:
            got += clean[j].lstrip("#")
            j += 1
        if got == word.lower():
            return list(range(i, j))
    return []


def story(a):
    """Where an Analysis's story is: (layer, head, share, word), 0-based layer and head, the raw-attention
    head whose target row puts the most weight on the subject (subject_word), share that weight; None
    without raw attention per head, a target or a subject found in the tokens."""
    mp = a.maps.get("attention")
    if mp is None or mp.heads is None or a.target is None:
        return None
    word = subject_word(a.text if not a.blank else text())
    pos = word_positions(a.tokens, word) if word else []
    pos = [p for p in pos if p != a.target]
    if not pos:
        return None
    w = mp.heads[:, :, a.target][..., pos].sum(-1)  # [L, H]
    l, h = (int(x) for x in divmod(int(w.argmax()), w.shape[1]))
    return l, h, float(w[l, h]), word


def open_story(a) -> None:
    """Once after presentation mode starts or an example is picked: the layer and head of story(a)."""
    ss = st.session_state
    if not ss.get("_story"):
        return
    ss._story = False
    got = story(a)
    if got is not None:
        ss.layer, ss.head = got[0] + 1, str(got[1] + 1)
        st.query_params["layer"], st.query_params["head"] = str(ss.layer), ss.head  # the link opens here too


def contrast(a, typed: Optional[str] = None):
    """The words the blank chooses between, with the model's probabilities, the right one first when the
    example (typed, default the sidebar's sentence) says which: [(word, p)], or [] where there is no such
    choice (Analysis.choices)."""
    typed = text() if typed is None else typed
    if typed in STORY and a.choices:
        _, right, wrong = STORY[typed]
        for words, probs in a.choices:
            if right in words and wrong in words:
                got = dict(zip(words, probs))
                return [(right, got[right]), (wrong, got[wrong])] + [(w, p) for w, p in zip(words, probs)
                                                                     if w not in (right, wrong)]
    groups = _ranked_choices(a)
    return groups[0] if groups else []


def ratio_text(p1: float, p2: float) -> str:
    """How many times p1 is p2: "277×", "1.4×", "∞"."""
    if p2 <= 0:
        return "∞"
    r = p1 / p2
    return f"{r:,.0f}×" if r >= 10 else f"{r:.1f}×"


def prediction_line(a, typed: Optional[str] = None):
    """The prediction in one line: "are 0.61 — 277× is" (the contrast pair, the likelier first) or the
    top word and its probability; None without a prediction."""
    if not a.prediction:
        return None
    pair = contrast(a, typed)
    if len(pair) >= 2:
        (w1, p1), (w2, p2) = sorted(pair[:2], key=lambda wp: -wp[1])
        return f"{w1} {_p(p1)} — {ratio_text(p1, p2)} {w2}"
    word, p = a.prediction[0]
    return f"{readable_token(word).strip()} {_p(p)}"


def extra_bars(a) -> list:
    """The contrast words the top-k list leaves out, as (word, p), for figures.prediction_bars(extra=)."""
    top = {readable_token(t).strip().lower() for t, _ in a.prediction}
    return [(w, p) for w, p in contrast(a) if w.lower() not in top]


def show_contrast(a) -> None:
    """The contrast words side by side, each with its probability (large); the right one marked when
    the example says which, so a wrong form ahead ("their" for "she ... lost [MASK] keys") shows at once."""
    import html as _html

    pair = contrast(a)
    if len(pair) < 2:
        return
    typed = text()
    right = STORY[typed][1] if typed in STORY else None
    top = max(p for _, p in pair)
    cells = []
    for w, p in pair:
        mark = ""
        if right is not None:
            mark = " ✓" if w == right else ""
        lead = p == top
        colour = "#2ca02c" if lead and (right is None or w == right) else ("#d62728" if lead else "#555")
        cells.append(f'<div style="flex:1;min-width:7em;border:1px solid #ddd;border-radius:6px;padding:4px 10px">'
                     f'<div style="font-size:1.1rem;color:#555">p(<b>{_html.escape(w)}</b>){mark}</div>'
                     f'<div style="font-size:1.9rem;font-weight:700;color:{colour}">{_p(p)}</div></div>')
    st.html(f'<div class="contrast" style="display:flex;gap:10px;flex-wrap:wrap">{"".join(cells)}</div>')


def query_keys(a, layer: int, view) -> Optional[dict]:
    """The neuron view's data for a layer of the current text: {"q": [H, n, d], "k": [H, n, d] (a key/value
    head repeated for the query heads that share it), "scale": 1/√d, "layer", "causal"}, from the trace
    (queries and keys after rotary embeddings); None when the view hides or merges tokens (its rows are
    then not the model's positions) or the trace has no queries. Cached for every session in RESULTS."""
    import numpy as np

    if len(view.labels) != len(a.tokens):
        return None
    lm = model()
    if lm is None:
        return None
    key = ("query_keys", spec(), text(), target(), cap(), int(layer))

    def compute(progress):
        from attnviz.trace import encode, trace as run_trace

        tr = run_trace(lm, encode(lm, text(), max_tokens=cap(), target=target()))
        st_ = tr.layers[layer]
        if st_.q is None or st_.k is None:
            return {}
        def arr(x):
            return x.detach().cpu().double().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float64)

        q, k = arr(st_.q), arr(st_.k)
        k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)
        return {"q": q, "k": k, "scale": 1.0 / float(np.sqrt(q.shape[-1])), "layer": int(layer),
                "causal": lm.task == "causal_lm"}

    try:
        got = RESULTS.run(key, compute)
    except Exception:  # noqa: BLE001 - the neuron view is an extra: the head view stands without it
        return None
    if not got or got["q"].shape[1] != len(a.tokens):
        return None
    return got
