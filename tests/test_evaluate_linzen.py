"""The Linzen et al. (2016) reader of attnviz.evaluate (`attnviz evaluate --linzen FOLDER`), on tiny files of
that format written here: the items read, what a masked and a causal model are given, the items not judged,
and the table by attractor count against verdicts computed with plain transformers."""
from __future__ import annotations

import json

import pytest
import torch

from attnviz.errors import InputError
from attnviz.evaluate import LinzenSet, read_linzen

# (tokenized sentence as in subj_agr_filtered.text, gold line: verb index, correct, wrong, attractors)
LINES = [
    ("the keys to the cabinet are on the table . <eos>", "5\tare\tis\t1"),
    ("the key to the cabinets is on the table . <eos>", "5\tis\tare\t1"),
    ("the girls near the old house have a red ball . <eos>", "6\thave\thas\t0"),
    ("the boy , who met the `` kings '' , is n't happy . <eos>", "10\tis\tare\t1"),
    ("the dog 's owners were here ( again ) . <eos>", "4\twere\twas\t0"),
    ("the xylophonist of the bands flumbergasts the crowd . <eos>", "5\tflumbergasts\tflumbergast\t1"),
]


def _write(folder, lines=LINES, stem="subj_agr_filtered"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.text").write_text("".join(t + "\n" for t, _ in lines), encoding="utf-8")
    (folder / f"{stem}.gold").write_text("".join(g + "\n" for _, g in lines), encoding="utf-8")
    return folder


def test_reader_puts_mask_at_the_verb_and_closes_up_the_tokenization(tmp_path):
    items = read_linzen(_write(tmp_path / "lz"))
    assert [(it["text"], it["answer"], it["wrong"], it["n_attractors"]) for it in items] == [
        ("the keys to the cabinet [MASK] on the table.", "are", "is", 1),
        ("the key to the cabinets [MASK] on the table.", "is", "are", 1),
        ("the girls near the old house [MASK] a red ball.", "have", "has", 0),
        ('the boy, who met the "kings", [MASK]n\'t happy.', "is", "are", 1),
        ("the dog's owners [MASK] here (again).", "were", "was", 0),
        ("the xylophonist of the bands [MASK] the crowd.", "flumbergasts", "flumbergast", 1),
    ]
    assert {it["task"] for it in items} == {"agreement"} and [it["line"] for it in items] == list(range(1, 7))
    assert len(read_linzen(tmp_path / "lz", limit=2)) == 2
    # the folder, either file or their stem name the same set
    for arg in ("lz", "lz/subj_agr_filtered.gold", "lz/subj_agr_filtered.text", "lz/subj_agr_filtered"):
        assert LinzenSet.from_arg(str(tmp_path / arg)) == LinzenSet(tmp_path / "lz")


def test_reader_takes_the_sentence_form_of_a_capitalised_gold_verb(tmp_path):
    (item,) = read_linzen(_write(tmp_path, [("the boys are here . <eos>", "2\tAre\tIs\t0")]))
    assert (item["text"], item["answer"], item["wrong"]) == ("the boys [MASK] here.", "are", "is")


@pytest.mark.parametrize("gold,why", [("5\tis\tare\t1", "not the correct form 'is'"),
                                      ("12\tare\tis\t1", "outside the sentence"),
                                      ("5\tare\tis", "4 tab-separated fields"),
                                      ("five\tare\tis\t1", "must be integers")])
def test_reader_refuses_a_malformed_gold_line(tmp_path, gold, why):
    with pytest.raises(InputError, match=why):
        read_linzen(_write(tmp_path, [("the keys to the cabinet are on the table . <eos>", gold)]))


def test_reader_refuses_files_that_are_not_line_aligned(tmp_path):
    _write(tmp_path)
    (tmp_path / "subj_agr_filtered.gold").write_text("5\tare\tis\t1\n", encoding="utf-8")
    with pytest.raises(InputError, match="line-aligned"):
        read_linzen(tmp_path)
    with pytest.raises(InputError, match="no such folder"):
        LinzenSet.from_arg(str(tmp_path / "missing"))


@torch.no_grad()
def _logits(model, ids) -> torch.Tensor:
    """[n, V] logits of one unpadded sequence from the model's own forward pass."""
    return model(input_ids=torch.tensor([ids])).logits[0]


def test_masked_lm_scores_the_full_sentence_with_mask_at_the_verb(tmp_path, capsys):
    """builtin:agreement on the tiny file: the unknown verb pair is not judged; the other five are judged as
    plain transformers judges the detokenized sentence with [MASK] at the verb; the table counts them by
    attractor count."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from attnviz.cli import main
    from attnviz.resources import models_dir

    folder = _write(tmp_path / "lz")
    out = tmp_path / "res.json"
    assert main(["evaluate", "--model", "builtin:agreement", "--linzen", str(folder), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "### linzen (6 items" in text and "Judged 5 of 6 sentences (not judged: 1 with an answer or wrong word that is not one token" in text
    (res,) = json.loads(out.read_text())
    (s,) = res["sets"]
    j = s["judged"]
    assert (j["items"], j["not_judged"], j["all"]["n"]) == (6, 1, 5)

    path = models_dir() / "agreement"
    model = AutoModelForMaskedLM.from_pretrained(str(path), attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(str(path))
    right = {0: 0, 1: 0}
    for it in read_linzen(folder)[:5]:
        ids = tok(it["text"])["input_ids"]
        (pos,) = [i for i, t in enumerate(ids) if t == tok.mask_token_id]
        logits = _logits(model, ids)[pos]
        a, w = tok.convert_tokens_to_ids(it["answer"]), tok.convert_tokens_to_ids(it["wrong"])
        right[it["n_attractors"]] += int(logits[a] > logits[w])
    assert {k: (c["n"], c["right"]) for k, c in j["by_attractors"].items()} == {"0": (2, right[0]), "1": (3, right[1])}
    assert j["all"]["right"] == right[0] + right[1]
    assert j["all"]["low"] <= j["all"]["acc"] <= j["all"]["high"]


def _tiny_causal(tmp_path):
    """A tiny random GPT-2 with a byte-level BPE tokenizer learned here (word-initial tokens carry 'Ġ')."""
    import transformers as T
    from tokenizers import ByteLevelBPETokenizer

    import attnviz

    words = "the keys key to cabinet cabinets are is on table girls near old house have has a red ball".split()
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([" ".join(words)] * 50, vocab_size=400, min_frequency=1,
                            special_tokens=["<|endoftext|>"])
    path = tmp_path / "bpe.json"
    bpe._tokenizer.save(str(path))
    tok = T.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    cfg = T.GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=64,
                       bos_token_id=None, eos_token_id=None)
    model = T.GPT2LMHeadModel._from_config(cfg, attn_implementation="eager").eval()
    return attnviz.wrap(model, tok, spec="tiny:gpt2-bpe", check=False)


def score_items_of(lm, items):
    from attnviz.evaluate import score_items
    return score_items(lm, items)[0]


def test_causal_lm_scores_the_prefix_before_the_verb(tmp_path):
    """A causal model reads only the words before the verb: its margin is the plain forward pass's on the
    prefix alone (no padding); a verb form that is several tokens is scored as the sum of its pieces'
    log-probabilities (evaluate.MULTI_TOKEN_RULE), not left unjudged."""
    from attnviz.evaluate import evaluate_file

    lm = _tiny_causal(tmp_path)
    folder = _write(tmp_path / "lz", LINES[:3] + LINES[5:])
    items = read_linzen(folder)
    res = evaluate_file(lm, LinzenSet(folder), batch_size=2)
    j = res["judged"]
    assert (j["items"], j["all"]["n"], j["not_judged"]) == (4, 4, 0)
    assert res["multi_token"]["scored"] == 1
    tok = lm.tokenizer
    right = 0
    for it in items[:3]:
        prefix = it["text"].split("[MASK]")[0].strip()
        logits = _logits(lm.model, tok(prefix)["input_ids"])[-1]
        a, w = (tok.convert_tokens_to_ids("Ġ" + it[f]) for f in ("answer", "wrong"))
        right += int(logits[a] > logits[w])
    right_multi = [p["correct"] for p in score_items_of(lm, items[3:])]
    assert j["all"]["right"] == right + sum(right_multi)
    from attnviz.evaluate import score_items

    preds, _ = score_items(lm, items[:3], batch_size=3)
    for it, p in zip(items[:3], preds):
        prefix = it["text"].split("[MASK]")[0].strip()
        logits = _logits(lm.model, tok(prefix)["input_ids"])[-1]
        a, w = (tok.convert_tokens_to_ids("Ġ" + it[f]) for f in ("answer", "wrong"))
        assert p["margin"] == pytest.approx(float(logits[a] - logits[w]), abs=1e-4)
