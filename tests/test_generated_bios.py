"""scripts/generate_bios.py (issue #16, round 6): the sentences made from SmolLM2's biographies.
Checked against hand-written biographies and the expected sentences written out, not the script's
own bookkeeping; and `train_real --generated` turns them into items whose answer is the word masked."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("generate_bios", ROOT / "scripts" / "generate_bios.py")
G = importlib.util.module_from_spec(spec)
spec.loader.exec_module(G)

BIO = ("Ludmila Novak was a Czech composer of the 19th century. Born in Prague, she wrote her first opera "
       "at twenty. She spent her last years in Vienna, where her pupils gathered. Her music was admired by "
       "Dvorak, who praised his own students less. The city honoured the composer with a statue. "
       "She died in 1901 and left her")


def test_subject_name():
    assert G.subject_name("Ludmila Novak was a Czech composer.") == ["Ludmila", "Novak"]
    assert G.subject_name("Ludwig van Beethoven (1770-1827) was a composer.") == ["Ludwig", "van", "Beethoven"]
    assert G.subject_name("Henry VIII was a king.") == ["Henry", "VIII"]
    assert G.subject_name("The filmmaker of that film was Hans.") is None      # not a name
    assert G.subject_name("Born in 1900, he was a painter.") is None
    assert G.subject_name("She was a queen.") is None
    assert G.subject_name("Anna wrote many books.") is None                  # no 'was' / 'is'


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sentences_from_bio(seed):
    got = G.sentences_from_bio(BIO, random.Random(seed))
    # 'Born in Prague , she wrote her ...' has two female words -> kept as is;
    # 'She spent her last years ...' starts with She -> the name in its place (full, first or last);
    # 'Her music ... his own students' mixes both sexes -> dropped; no his/her -> dropped;
    # the last sentence is cut off (no final stop) -> dropped.
    assert got[0] == "Born in Prague , she wrote her first opera at twenty ."
    assert len(got) == 2
    assert got[1] in {f"{n} spent her last years in Vienna , where her pupils gathered ."
                      for n in ("Ludmila Novak", "Ludmila", "Novak")}


def test_sentence_with_the_blank_as_only_sign_is_dropped():
    bio = "Karel Novak was a painter. His paintings hang in Prague."
    assert G.sentences_from_bio(bio, random.Random(0)) == []


def test_spaced_punctuation():
    assert G.spaced("In Paris, he met “Anna” (a poet).") == 'In Paris , he met " Anna " ( a poet ) .'


def test_train_real_generated_items(tmp_path):
    from attnviz.builtin import train_real

    sents = ["Ludmila spent her last years in Vienna , where she taught .",
             "Karel was a painter and he sold his work ."]
    items = train_real.real_items(sents, random.Random(0))
    pron = [it for it in items if it["task"] == "pronoun"]
    assert [(it["answer"], it["wrong"]) for it in pron] == [("her", "his"), ("his", "her")]
    for it, s in zip(pron, sents):
        assert it["text"].replace("[MASK]", it["answer"]) == s
    with pytest.raises(SystemExit, match="generate_bios.py"):
        train_real.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "o"), "--generated",
                         str(tmp_path / "none"), "--steps", "1"])
