"""The built-in grammar and lexicon (training/grammar.py, training/lexicon.py), the corpus-to-item rule of
train_real and the corpus filter of training/scripts/build_corpus.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnviz.datasets import load_eval_set
from training import grammar, lexicon

TRAINING = Path(__file__).resolve().parents[1]


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


def test_real_corpus_items_mask_one_auxiliary_and_one_possessive():
    """train_real.real_items: hand-written expectations for the corpus-to-item rule."""
    import random

    from training.train_real import real_items

    items = real_items(["The keys of the old house were lost in his garden .",
                        "Nothing to mask here ."], random.Random(0))
    assert [(it["task"], it["text"], it["answer"], it["wrong"]) for it in items] == [
        ("agreement", "The keys of the old house [MASK] lost in his garden .", "were", "was"),
        ("pronoun", "The keys of the old house were lost in [MASK] garden .", "his", "her"),
    ]


def test_build_corpus_cleaning_rules():
    """training/scripts/build_corpus.py: the sentence filter keeps prose, drops fragments and symbols."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_corpus", TRAINING / "scripts" / "build_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.clean("the cat is on the mat") == "the cat is on the mat ."
    assert mod.clean("Too short") is None
    assert mod.clean("|__| /\\ |__| /\\ ---- ==== ++++ ####") is None
    assert mod.SENT_SPLIT.split("One two three. Four five six.") == ["One two three.", "Four five six."]
