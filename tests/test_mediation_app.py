"""The Mediation page (AppTest) on the built-in model: the total effect against the model's own
probabilities, the head map against attnviz.mediate (itself checked against forward hooks on the
Hugging Face model in test_mediation.py), the knock-out line against hooks on the output projection."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from conftest import plotly_array

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.app


def _chart(at, key):
    for c in at.get("plotly_chart"):
        if c.proto.id.endswith("-" + key):
            return json.loads(c.proto.spec)
    raise AssertionError(f"no chart {key!r}")


def _ratio(lm, text, words):
    from attnviz.trace import encode

    enc = encode(lm, text)
    with torch.no_grad():
        p = torch.softmax(lm.model(input_ids=enc.ids).logits[0, enc.target].double(), -1)
    ids = [lm.tokenizer.convert_tokens_to_ids(w) for w in words]
    return float(p[ids[0]] / p[ids[1]])


def test_mediation_page_on_the_builtin_model(app_spec):
    from streamlit.testing.v1 import AppTest

    if app_spec != "builtin:agreement":
        pytest.skip("the page's presets are for the built-in model")
    lm = attnviz.load_model(app_spec)
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["model"] = app_spec
    at.run()
    at.switch_page("attnviz/app/views/mediation.py").run()
    assert not at.exception, [e.value for e in at.exception]
    A, B = at.session_state["med_a"], at.session_state["med_b"]
    C = (at.session_state["med_c1"], at.session_state["med_c2"])
    te = _ratio(lm, B, C) / _ratio(lm, A, C) - 1
    shown = [m.value for m in at.metric if m.label.startswith("Total effect")][0]
    assert shown == (f"× {1 + te:.3g}" if 1 + te < 1e4 else f"× {1 + te:.1e}")
    assert te > 1.0  # the preset works on this model: B's plural subject raises p(are)/p(is) a lot
    ref = attnviz.mediate(lm, A, B, C, kinds=("attention",))
    z = plotly_array(_chart(at, "med_heads")["data"][0]["z"]).astype(float)
    share = np.log1p(ref.nie["attention"]) / np.log(1 + te)  # the share of the change of log y
    np.testing.assert_allclose(z, 100 * share, rtol=1e-4, atol=1e-6)
    for key in ("med_head_out", "med_map_0", "med_map_1"):
        _chart(at, key)  # the head-output map, the patching map and the attention/rollout/flow rows are drawn
    lines = [m.value for m in at.markdown if m.value.startswith("**A:** p(")]
    assert len(lines) == 1 and "→" in lines[0]


def test_minimal_pair_opens_its_pair_on_mediation(app_spec):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["model"] = app_spec
    at.run()
    at.switch_page("attnviz/app/views/minimal_pair.py").run()
    assert not at.exception, [e.value for e in at.exception]
    a, b = at.session_state["pair_a"], at.session_state["pair_b"]
    at.button(key="pair_mediation").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["med_a"] == a and at.session_state["med_b"] == b
    assert any(t.value == "Mediation" for t in at.title)


def test_explore_knocks_out_the_chosen_head(app_spec):
    """Explore at layer 3, head 2: the toggle shows the prediction with that head zeroed, as knock_out
    (checked against a hook on the HF output projection in test_ablation.py) gives it."""
    from streamlit.testing.v1 import AppTest

    from attnviz.mediation.ablation import knock_out

    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["model"] = app_spec
    at.query_params["layer"] = "3"
    at.query_params["head"] = "2"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.toggle(key="knock_head").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    lm = attnviz.load_model(app_spec)
    k = knock_out(lm, at.session_state["text"], [(2, 1)], "zero")
    lines = [m.value for m in at.markdown if m.value.startswith("Prediction **")]
    assert len(lines) == 1
    assert f"{k.top_after[0][1]:.3f}" in lines[0] and f"{k.top_before[0][1]:.3f}" in lines[0]
