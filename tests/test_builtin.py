"""The built-in grammar, tokenizer and the shipped model assets/models/agreement."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnviz.builtin import grammar, lexicon, load_eval_set

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "attnviz" / "data" / "models"
SHIPPED = MODELS / "agreement"

# (text, answer, wrong): the shipped model must rank the answer above the wrong word at [MASK].
CASES = [
    ("the keys to the cabinet [MASK] on the table.", "are", "is"),
    ("the key to the cabinets [MASK] on the table.", "is", "are"),
    ("the book that the students like [MASK] new.", "is", "are"),
    ("the books that the student likes [MASK] new.", "are", "is"),
    ("the key to the cabinets and the doors [MASK] on the table.", "is", "are"),
    ("the girl with the dogs [MASK] a red ball.", "has", "have"),
    ("the dogs near the house [MASK] quickly.", "run", "runs"),
    ("the boys [MASK] happy.", "are", "is"),
    ("the king talked to mary about [MASK] book.", "his", "her"),
    ("mary showed john [MASK] garden.", "her", "his"),
    ("the company told the workers about [MASK] plans.", "its", "their"),
    ("the girls talked to the king about [MASK] house.", "their", "his"),
    ("the queen who met john sold [MASK] horse.", "her", "his"),
    ("the author talked to sara about [MASK] book.", "their", "her"),
    ("john and mary [MASK] happy.", "are", "is"),
]


def load_shipped(spec: str = "builtin:agreement"):
    """(model, tokenizer) of a built-in model, loaded by plain transformers with eager attention.

    Kept separate so the same checks can run on `attnviz.load_model(spec)` (see below)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    folder = MODELS / spec.split(":", 1)[1]
    model = AutoModelForMaskedLM.from_pretrained(str(folder), attn_implementation="eager")
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(folder))


@torch.no_grad()
def margins(model, tok, cases) -> list[float]:
    """logit(answer) - logit(wrong) at the [MASK] of each case."""
    out = []
    for text, answer, wrong in cases:
        enc = tok(text, return_tensors="pt")
        pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero().item()
        logits = model(**enc).logits[0, pos]
        out.append(float(logits[tok.convert_tokens_to_ids(answer)]
                         - logits[tok.convert_tokens_to_ids(wrong)]))
    return out


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    return load_shipped()


def test_shipped_model_predictions(shipped):
    model, tok = shipped
    m = margins(model, tok, CASES)
    failed = [(c[0], c[1], round(x, 2)) for c, x in zip(CASES, m) if x <= 0]
    assert not failed, failed


def test_shipped_model_via_attnviz_load_model(shipped):
    import attnviz

    if not hasattr(attnviz, "load_model"):
        pytest.skip("attnviz.load_model not available")
    lm = attnviz.load_model("builtin:agreement")
    m_ref = margins(*shipped, CASES[:4])
    m = margins(lm.model, lm.tokenizer, CASES[:4])
    assert m == pytest.approx(m_ref, abs=1e-4)


def test_shipped_models_format_and_size():
    for name in ("agreement", "agreement-seed1", "agreement-seed2"):
        folder = MODELS / name
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "vocab.txt", "README.md"):
            assert (folder / f).is_file(), f"{name}/{f} missing"
        assert (folder / "model.safetensors").stat().st_size <= 20e6


def test_shipped_config_is_abnar_zuidema_setting(shipped):
    c = shipped[0].config
    assert (c.model_type, c.num_hidden_layers, c.num_attention_heads, c.hidden_size) == \
        ("bert", 6, 8, 128)
    assert c.max_position_embeddings == 128


def test_oov_word_is_split_not_dropped(shipped):
    _, tok = shipped
    toks = tok.tokenize("the xylophones are here.")
    assert "[UNK]" not in toks
    assert toks[0] == "the" and toks[-3:] == ["are", "here", "."]
    assert len(toks) > 5  # "xylophones" became several pieces
    assert tok.convert_tokens_to_string(toks[1:-3]).replace(" ", "") == "xylophones"
    assert tok.tokenize("a € sign") == ["a", "[UNK]", "sign"]  # odd character: visible [UNK]


def test_every_answer_is_one_token(shipped):
    """Every word the model is asked to choose (answer and wrong word of the grammar's test sets, the
    real sets and the hand-written set) is one vocabulary entry, so the two logits compared are the
    words themselves; other words may be split into pieces (the WordPiece vocabulary learned from
    real text)."""
    from attnviz.builtin.common import PACKAGE_DATA, read_jsonl

    _, tok = shipped
    vocab = tok.get_vocab()
    items = load_eval_set("agreement") + load_eval_set("pronoun")
    for f in ("real_agreement.jsonl", "real_pronoun.jsonl", "real_pronoun2.jsonl", "handwritten.jsonl"):
        items += read_jsonl(PACKAGE_DATA / f)
    words = {w for it in items for w in (it["answer"], it["wrong"])}
    assert len(words) >= 20
    missing = sorted(w for w in words if w not in vocab)
    assert not missing
    for p in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", "'", "7"):
        assert p in vocab


def test_lexicon_size():
    forms = lexicon.all_word_forms()
    assert len(forms) >= 2000
    assert {"king", "kings", "queen", "runs", "run", "is", "are", "has", "have",
            "mary", "john"} <= set(forms)
    assert len(lexicon.MALE_NAMES) >= 100 and len(lexicon.FEMALE_NAMES) >= 100


def test_inflection_rules():
    assert [lexicon.plural(w) for w in ("key", "box", "city", "man", "knife", "day")] == \
        ["keys", "boxes", "cities", "men", "knives", "days"]
    assert [lexicon.third_singular(w) for w in ("run", "watch", "carry", "have", "go")] == \
        ["runs", "watches", "carries", "has", "goes"]
    assert [lexicon.past(w) for w in ("talk", "show", "stop", "give", "carry")] == \
        ["talked", "showed", "stopped", "gave", "carried"]


@pytest.mark.parametrize("task", grammar.TASKS)
def test_grammar_is_deterministic_and_well_formed(task):
    a = grammar.generate(task, 300, seed=7)
    assert a == grammar.generate(task, 300, seed=7)
    assert a != grammar.generate(task, 300, seed=8)
    keys = {"text", "answer", "wrong", "task", "construction", "n_attractors"}
    for it in a:
        assert keys <= set(it)
        assert it["text"].count("[MASK]") == 1
        assert it["task"] == task and it["answer"] != it["wrong"]
        assert isinstance(it["n_attractors"], int) and it["n_attractors"] <= it["n_intervening"]
    atts = {it["n_attractors"] for it in a}
    assert atts == (set(range(5)) if task == "agreement" else set(range(4)))


@pytest.mark.parametrize("task", grammar.TASKS)
def test_train_and_test_splits_do_not_overlap(task):
    test = {it["text"] for it in grammar.generate(task, 300, seed=5, split="test")}
    shipped = {it["text"] for it in load_eval_set(task)}
    for seed in (0, 1, 2):
        train = {it["text"] for it in grammar.generate(task, 3000, seed=seed, split="train")}
        assert not train & test
        assert not train & shipped


def test_pronoun_wrong_is_nearest_attractor():
    it = next(i for i in grammar.generate("pronoun", 200, seed=1)
              if i["construction"] == "about" and i["n_attractors"] == 1)
    assert it["wrong"] != it["answer"]
    items = grammar.generate("pronoun", 500, seed=2)
    assert {i["answer"] for i in items} == {"his", "her", "its", "their"}


def test_eval_sets_shipped():
    agr, pro = load_eval_set("agreement"), load_eval_set("pronoun")
    assert len(agr) >= 1000 and len(pro) >= 500
    assert len({i["text"] for i in agr}) == len(agr)
    assert sum(i["n_attractors"] >= 2 for i in agr) >= 500
    assert len(load_eval_set("agreement", n=200)) == 200
    with pytest.raises(ValueError):
        load_eval_set("sentiment")


def test_real_corpus_items_mask_one_auxiliary_and_one_possessive():
    """train_real.real_items: hand-written expectations for the corpus-to-item rule."""
    import random

    from attnviz.builtin.train_real import real_items

    items = real_items(["The keys of the old house were lost in his garden .",
                        "Nothing to mask here ."], random.Random(0))
    assert [(it["task"], it["text"], it["answer"], it["wrong"]) for it in items] == [
        ("agreement", "The keys of the old house [MASK] lost in his garden .", "were", "was"),
        ("pronoun", "The keys of the old house were lost in [MASK] garden .", "his", "her"),
    ]


def test_build_corpus_cleaning_rules():
    """scripts/build_corpus.py: the sentence filter keeps prose, drops fragments and symbols."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_corpus", ROOT / "scripts" / "build_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.clean("the cat is on the mat") == "the cat is on the mat ."
    assert mod.clean("Too short") is None
    assert mod.clean("|__| /\\ |__| /\\ ---- ==== ++++ ####") is None
    assert mod.SENT_SPLIT.split("One two three. Four five six.") == ["One two three.", "Four five six."]


def test_training_log_decides_pieces_and_length(tmp_path, monkeypatch):
    """A built-in model trained on WordPiece text (train_log.json: word_pieces, max_train_tokens) gets no
    'pieces it never saw' warning and its own length limit; one without those keys keeps the old rules."""
    import json
    import types

    from attnviz import tokencheck
    from attnviz.models import load

    for name, log in (("new", {"word_pieces": True, "max_train_tokens": 61}), ("old", {"seed": 0})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train_log.json").write_text(json.dumps(log))
    monkeypatch.setattr(load, "BUILTIN_DIR", tmp_path)
    monkeypatch.setattr(tokencheck, "_LONGEST", {})
    new, old = types.SimpleNamespace(spec="builtin:new"), types.SimpleNamespace(spec="builtin:old")
    assert tokencheck.pieces_unseen(new) is False and tokencheck.pieces_unseen(old) is True
    assert tokencheck.longest_training_input(new) == 61
    assert tokencheck.pieces_unseen(types.SimpleNamespace(spec="pkg:minilm")) is False
