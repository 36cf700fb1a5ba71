"""Fuzzing the text input (hypothesis): whatever the text, analyze() and encode() either return finite
results or raise one of the project's own errors (attnviz.errors), never anything else.

Run with -s to see how many cases ran; derandomised, so every run tries the same cases
(ATTNVIZ_FUZZ_CASES=N for more)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnviz
from attnviz.errors import AttnvizError
from attnviz.trace import encode

AGREEMENT = Path(__file__).resolve().parents[1] / "attnviz" / "data" / "models" / "agreement"
N_CASES = int(os.environ.get("ATTNVIZ_FUZZ_CASES", 150))  # more for a longer hunt

WORDS = ["the", "keys", "to", "cabinet", "[MASK]", "[mask]", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "<s>", "</s>",
         "<|endoftext|>", "is", "are", ".", ",", "🙂", "é", "ß", "\u200b", "\u202e", "\x00", "\t", "\n", "  ",
         "مرحبا", "日本", "\ud800", "\udcff", "a" * 40, "##ing", "'", '"', "\\", "<script>"]
texts = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=30).map(" ".join),  # sentences of hostile tokens
    st.text(max_size=80),  # any unicode (no surrogates)
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
            max_size=25),  # surrogates and unassigned code points included
    st.binary(max_size=30),  # bytes: decoded when UTF-8, else refused
    st.sampled_from([None, 5, 3.5, ["a"], "[MASK]", " [MASK] ", "[MASK] [MASK]", "word " * 200]),
)


@pytest.fixture(scope="module")
def models(make_tiny):
    out = {"bert": make_tiny("bert"), "llama": make_tiny("llama")}
    if (AGREEMENT / "config.json").is_file():
        out["agreement"] = attnviz.load_model("builtin:agreement")
    return out


def _finite(a) -> None:
    for name, m in a.maps.items():
        assert np.isfinite(m.layer).all(), name
        assert m.heads is None or np.isfinite(m.heads).all(), name
    for name, v in a.mixing.items():
        assert np.isfinite(v).all(), name
    for _, p in a.prediction:
        assert math.isfinite(p) and 0 <= p <= 1
    assert math.isfinite(a.trace_err)
    n = len(a.tokens)
    assert 0 <= a.target < n and a.special.shape == (n,)


@pytest.mark.slow  # 150 hypothesis cases through analyze
def test_fuzz_text_inputs(models):
    ran = {"cases": 0, "analyzed": 0, "refused": 0}

    @settings(max_examples=N_CASES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(text=texts)
    def case(text):
        ran["cases"] += 1
        for name, lm in models.items():
            try:
                enc = encode(lm, text)
                assert enc.ids.shape[1] == len(enc.tokens) and 0 <= enc.target < len(enc.tokens)
                a = attnviz.analyze(lm, text, methods=None if name != "agreement" else
                                    ["attention", "rollout", "value_norm", "attn_res_ln", "atb_ff_res_ln"])
            except AttnvizError as e:
                assert str(e) and "\n" not in str(e)
                ran["refused"] += 1
                continue
            _finite(a)
            ran["analyzed"] += 1

    case()
    print(f"\nfuzz: {ran['cases']} texts x {len(models)} models: {ran['analyzed']} analyses finite, "
          f"{ran['refused']} refused with the project's own errors")
    assert ran["cases"] >= N_CASES and ran["analyzed"] > 0 and ran["refused"] > 0
