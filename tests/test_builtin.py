"""The shipped built-in models (attnviz/data/models/agreement*): predictions, format, tokenizer, and the
grammar's held-out sets they ship with. The grammar itself is tested in training/tests/test_grammar.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnviz.datasets import load_eval_set, read_jsonl, set_path

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
    _, tok = shipped
    vocab = tok.get_vocab()
    items = load_eval_set("agreement") + load_eval_set("pronoun")
    for f in ("real_agreement.jsonl", "real_pronoun.jsonl", "real_pronoun2.jsonl", "handwritten.jsonl"):
        items += read_jsonl(set_path(f))
    words = {w for it in items for w in (it["answer"], it["wrong"])}
    assert len(words) >= 20
    missing = sorted(w for w in words if w not in vocab)
    assert not missing
    for p in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", "'", "7"):
        assert p in vocab


def test_eval_sets_shipped():
    agr, pro = load_eval_set("agreement"), load_eval_set("pronoun")
    assert len(agr) >= 1000 and len(pro) >= 500
    assert len({i["text"] for i in agr}) == len(agr)
    assert sum(i["n_attractors"] >= 2 for i in agr) >= 500
    assert len(load_eval_set("agreement", n=200)) == 200
    with pytest.raises(ValueError):
        load_eval_set("sentiment")


def test_training_log_decides_pieces_and_length(tmp_path, monkeypatch):
    """A built-in model trained on WordPiece text (train_log.json: word_pieces, max_train_tokens) gets no
    'pieces it never saw' warning and its own length limit; one without those keys keeps the old rules."""
    import json
    import types

    from attnviz import tokencheck

    for name, log in (("new", {"word_pieces": True, "max_train_tokens": 61}), ("old", {"seed": 0})):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "train_log.json").write_text(json.dumps(log))
    monkeypatch.setenv("ATTNVIZ_ASSETS", str(tmp_path))  # the built-in models' folder is tmp_path/models
    monkeypatch.setattr(tokencheck, "_LONGEST", {})
    new, old = types.SimpleNamespace(spec="builtin:new"), types.SimpleNamespace(spec="builtin:old")
    assert tokencheck.pieces_unseen(new) is False and tokencheck.pieces_unseen(old) is True
    assert tokencheck.longest_training_input(new) == 61
    assert tokencheck.pieces_unseen(types.SimpleNamespace(spec="pkg:minilm")) is False
