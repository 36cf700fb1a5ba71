"""The real-style training items (issue #16) are labelled right: checked by reading each sentence back
with plain rules (who is the main-clause subject, what number the head noun has), not by the
generator's own bookkeeping."""
from __future__ import annotations

import pytest

from attnviz.builtin import lexicon as L
from attnviz.builtin import real_style as R

MALE = ["john", "peter", "omar", "george", "luis"]
FEMALE = ["mary", "anna", "sofia", "linda", "grace"]
NOUNS = ["bridge", "clock", "garden", "letter", "window", "river", "tower", "church", "coin", "village"]
LISTS = R.Lists(male=MALE, female=FEMALE, surnames=["smith", "garcia", "brown"], nouns_sg=NOUNS)


def _sex_words():
    male = set(MALE) | set(R.MALE_TITLES) | {m for m, _ in L.GENDERED_PAIRS} | set(R.KIN["m"])
    female = set(FEMALE) | set(R.FEMALE_TITLES) | {f for _, f in L.GENDERED_PAIRS} | set(R.KIN["f"])
    return male, female


def _subject_segment(it):
    words = it["text"].lower().split()
    mask = words.index("[mask]")
    text = " ".join(words[:mask - 1])  # the words before the main verb's first word and [MASK]
    kind = it["construction"]
    if kind in ("rc", "whose", "appos"):
        return text.split(" , ")[0]
    if kind == "fronted":
        return text.split(" , ")[-1]
    return text.split(" , ")[-1]  # "in 1900 , X": the last segment


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pronoun_items_refer_to_the_subject(seed):
    male, female = _sex_words()
    items = R.items("pronoun", 400, LISTS, seed)
    kinds = {it["construction"] for it in items}
    assert {"rc", "whose", "appos", "fronted"} <= kinds
    for it in items:
        assert it["text"].count("[MASK]") == 1
        seg = _subject_segment(it).split()
        sexes = {"m" for w in seg if w in male} | {"f" for w in seg if w in female}
        plural = " and " in f" {' '.join(seg)} " or any(w in R.PLURAL_PEOPLE for w in seg)
        if plural:
            assert it["answer"] == "their", it
        else:
            assert len(sexes) == 1, (it, seg)
            want = "his" if sexes == {"m"} else "her"
            assert it["answer"] == want and it["wrong"] == {"his": "her", "her": "his"}[want], it
            # every other person before the blank has the other sex
            words = it["text"].lower().split()
            rest = [w for w in words[:words.index("[mask]")] if w not in seg]
            own = male if want == "his" else female
            assert not [w for w in rest if w in own], it
        if it["n_attractors"] == 0:
            assert it["construction"] in ("simple", "year", "adv")


@pytest.mark.parametrize("seed", [0, 1])
def test_agreement_items_agree_with_the_head_noun(seed):
    sg, pl = set(NOUNS), {L.plural(n) for n in NOUNS}
    for it in R.items("agreement", 400, LISTS, seed):
        words = it["text"].lower().split()
        assert words[0] == "the"
        head = words[2] if words[1] in L.ADJECTIVES else words[1]
        assert head in sg | pl, it
        number = "sg" if head in sg else "pl"
        # the answer is the verb form of the head's number: 3rd singular / plural
        a, w = it["answer"], it["wrong"]
        pairs = {("is", "are"), ("was", "were"), ("has", "have")} | {(L.third_singular(v), v) for v in R.LEXICAL}
        assert ((a, w) if number == "sg" else (w, a)) in pairs, it
        # attractors: the nouns between the head and [MASK] with the other number
        between = words[words.index(head) + 1:words.index("[mask]")]
        other = pl if number == "sg" else sg
        assert sum(x in other for x in between) == it["n_attractors"], it
