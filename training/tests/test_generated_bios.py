"""training/scripts/generate_bios.py: the sentences made from SmolLM2's biographies.
Checked against hand-written biographies and the expected sentences written out, not the script's
own bookkeeping; and `train_real --generated` turns them into items whose answer is the word masked."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

TRAINING = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("generate_bios", TRAINING / "scripts" / "generate_bios.py")
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
    from training import train_real

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


def test_parse_names():
    # a listing answer as SmolLM2 writes one: numbering, bullets, bold, comments after a dash or comma
    text = ("Here are ten famous composers from Austria:\n\n1. **Wolfgang Amadeus Mozart**\n"
            "2. Franz Schubert - known for his Lieder\n- Joseph Haydn (1732-1809)\n* Anton Bruckner, organist\n"
            "5. the list goes on\n6. Johann Strauss II\n7. Ludwig van Beethoven\n"
            "8. A composer who wrote many operas\n9. Gustav Mahler.\n10. Ab\n")
    assert G.parse_names(text) == ["Wolfgang Amadeus Mozart", "Franz Schubert", "Joseph Haydn", "Anton Bruckner",
                                   "Johann Strauss II", "Ludwig van Beethoven", "Gustav Mahler"]


def test_named_biography_uses_the_listed_name():
    # --famous: the subject is the name the biography was asked for, even where the first sentence
    # does not start with it
    bio = "Born in Bonn in 1770, the composer was deaf in later life. He wrote his ninth symphony in Vienna."
    for seed in range(4):
        got = G.sentences_from_bio(bio, random.Random(seed), ["Ludwig", "van", "Beethoven"])
        assert len(got) == 1
        assert got[0] in {f"{n} wrote his ninth symphony in Vienna ."
                          for n in ("Ludwig van Beethoven", "Ludwig", "Beethoven")}
    # without the name the first sentence gives no subject: the sentence keeps its He (two male words)
    assert G.sentences_from_bio(bio, random.Random(0)) == ["He wrote his ninth symphony in Vienna ."]


def test_too_close_to_a_held_out_item():
    held = [G.words("Beethoven wrote [MASK] ninth symphony in Vienna after he lost his hearing .")]
    # shares 6 of its 8 words with the held item -> dropped
    assert G.too_close("Beethoven wrote his ninth symphony in Vienna .", held)
    # shares 'his' and 'in' only -> kept
    assert not G.too_close("Mozart spent his last years in Salzburg with his wife .", held)
    # a long sentence containing most of a short held item's words -> dropped (both ways)
    short = [G.words("Anna sold [MASK] house .")]
    assert G.too_close("In 1920 Anna sold her house and her farm to a cousin who lived in Leeds .", short)
    # the real held-out files are read (dev, test and hand-written items)
    assert len(G.held_out_words()) > 500


def test_write_sentences_famous(tmp_path):
    import json

    (tmp_path / "bios.jsonl").write_text("\n".join(json.dumps(b) for b in [
        {"prompt": "Write a short biography of Clara Schumann.", "name": "Clara Schumann",
         "text": "Clara Schumann was a pianist. She gave her first concert at nine. She married Robert."},
        {"prompt": "Write a short biography of Clara Schumann.", "name": "Clara Schumann",
         "text": "She gave her first concert at nine."},
    ]) + "\n", encoding="utf-8")
    held = [G.words("Clara gave [MASK] first concert at nine in Leipzig .")]
    n, dropped = G.write_sentences(tmp_path, 0, held)
    assert (n, dropped) == (0, 1)          # the one sentence (twice, deduplicated) is too close
    n, dropped = G.write_sentences(tmp_path, 0, [G.words("Robert played [MASK] cello .")])
    assert (n, dropped) == (1, 0)
    assert (tmp_path / "sentences.txt").read_text(encoding="utf-8").split(" gave her first concert at nine .")[0] \
        in {"Clara Schumann", "Clara", "Schumann"}
