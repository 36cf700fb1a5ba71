"""The hand-written real-style sets against the training side: none of their sentences comes from the built-in
grammar, and every answer is one whole token of the built-in tokenizer (as training.common.Encoded needs)."""
from __future__ import annotations

import json
import re

from attnviz.datasets import read_jsonl, set_path
from attnviz.resources import models_dir

AGREEMENT = set_path("real_agreement.jsonl")
PRONOUN = set_path("real_pronoun.jsonl")
AGREEMENT2 = set_path("real_agreement2.jsonl")
PRONOUN2 = set_path("real_pronoun2.jsonl")
DEV_PRONOUN2 = set_path("real_dev_pronoun2.jsonl")


def _items(path):
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


def test_not_from_our_grammar():
    """No real-style sentence occurs in the grammar's test sets or the hand-written set, and the
    sentences use words the grammar's lexicon does not have (they are not grammar output)."""
    from training.lexicon import all_word_forms

    def norm(t):
        return " ".join(re.findall(r"\w+|\[MASK\]", t.lower()))

    grammar = {norm(it["text"]) for f in ("agreement_test.jsonl", "pronoun_test.jsonl")
               for it in read_jsonl(set_path(f))}
    grammar |= {norm(it["text"]) for it in read_jsonl(set_path("handwritten.jsonl"))}
    lexicon = set(all_word_forms())
    for path in (AGREEMENT, AGREEMENT2, PRONOUN, PRONOUN2, DEV_PRONOUN2):
        items = _items(path)
        assert not {norm(it["text"]) for it in items} & grammar
        words = [w for it in items for w in re.findall(r"[a-z]+", it["text"].lower())]
        outside = sum(w not in lexicon for w in words) / len(words)
        assert outside > 0.1, f"{path.name}: only {outside:.1%} of words outside the grammar's lexicon"


def test_answers_are_single_tokens_of_the_builtin_tokenizer():
    """Every answer and wrong word is one whole entry of the built-in vocabulary (so the built-in
    models' contrast is defined) and [MASK] encodes to exactly one mask token."""
    from transformers import AutoTokenizer

    from training.common import Encoded

    tok = AutoTokenizer.from_pretrained(str(models_dir() / "agreement"))
    for path in (AGREEMENT, AGREEMENT2, PRONOUN, PRONOUN2, DEV_PRONOUN2):
        items = _items(path)
        enc = Encoded(tok, items)  # raises on a missing/duplicate [MASK] or a word outside the vocabulary
        assert len(enc) == len(items)
        for it in items:
            for w in (it["answer"], it["wrong"]):
                assert tok.tokenize(w) == [w], (w, tok.tokenize(w))
