"""The built-in models' accuracy tables: training/EVAL.md and each model's README.md (model card).

    python -m training.evaluate            # every built-in agreement* model folder
    python -m training.evaluate --no-write # print only
    python -m training.evaluate --model SPEC --set NAME   # the same as attnviz evaluate --model ...

For each model: accuracy on the grammar's held-out test sets (attnviz/data/sets/*_test.jsonl), on
the hand-written set (handwritten.jsonl) and on the real-style sets (attnviz.datasets.SETS "real" and
"real-dev", scored by attnviz.evaluate), by construction and by number of attractors. Accuracy = the
answer's logit at [MASK] beats the wrong word's; top-1 = the answer is the arg-max over the whole
vocabulary. Also the tokenizer's coverage of ordinary English sentences (ordinary_sentences.txt):
share of [UNK] tokens and of words split into subwords. Writes training/EVAL.md (with
training/PILOT_REAL.md appended), training/eval_results.json and each model's README.md (from its
train_log.json).

The grammar and hand-written sets are scored here with the training batcher (training.common.Encoded,
the MLM head at [MASK] only); tests/test_real_sets.py checks that attnviz.evaluate gives the same
verdicts.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from attnviz.datasets import load_eval_set, read_jsonl, set_files, set_path
from attnviz.evaluate import evaluate_spec, spec_report, wilson

from .common import MODEL_CONFIG, MODELS_DIR, TRAINING_DIR, Encoded, target_logits
from .lexicon import all_word_forms

HANDWRITTEN = set_path("handwritten.jsonl")
REPRO_NOTE = ("Checked for seed 0: a second run of the same command wrote a byte-identical "
              "model.safetensors (sha256 ddc3991ab476…).")
ORDINARY = set_path("ordinary_sentences.txt")


def load(folder: Path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(str(folder), attn_implementation="eager", trust_remote_code=False)
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)


@torch.no_grad()
def predict(model, tokenizer, items: list[dict], batch_size: int = 256) -> list[dict]:
    """Per item: correct (answer logit > wrong logit), top1 (answer is the arg-max), pred (arg-max
    word), margin (answer logit - wrong logit)."""
    enc = Encoded(tokenizer, items)
    out = []
    for s in range(0, len(enc), batch_size):
        idx = list(range(s, min(len(enc), s + batch_size)))
        b = enc.batch(idx, tokenizer.pad_token_id)
        logits = target_logits(model, b)
        rows = torch.arange(len(idx))
        margin = logits[rows, b["answer"]] - logits[rows, b["wrong"]]
        top = logits.argmax(-1)
        for r in range(len(idx)):
            out.append({"correct": bool(margin[r] > 0), "top1": bool(top[r] == b["answer"][r]),
                        "pred": tokenizer.convert_ids_to_tokens(int(top[r])),
                        "margin": float(margin[r])})
    return out


def breakdown(items: list[dict], preds: list[dict]) -> dict:
    """Accuracy and counts overall, for 2+ attractors, by construction, by attractor count."""
    def summary(sel):
        if not sel:
            return None
        return {"n": len(sel), "acc": float(np.mean([p["correct"] for p in sel])),
                "top1": float(np.mean([p["top1"] for p in sel]))}

    by_c, by_a = defaultdict(list), defaultdict(list)
    for it, p in zip(items, preds):
        by_c[it["construction"]].append(p)
        by_a[it["n_attractors"]].append(p)
    return {"all": summary(preds),
            "att2plus": summary([p for it, p in zip(items, preds) if it["n_attractors"] >= 2]),
            "by_construction": {k: summary(v) for k, v in sorted(by_c.items())},
            "by_attractors": {k: summary(v) for k, v in sorted(by_a.items())}}


def tokenizer_coverage(tokenizer, sentences: list[str]) -> dict:
    """Word-level and token-level coverage of ordinary sentences by the vocabulary."""
    pre = tokenizer.backend_tokenizer.pre_tokenizer
    norm = tokenizer.backend_tokenizer.normalizer
    n_words = n_whole = n_split = n_unk_words = n_tokens = n_unk_tokens = 0
    split_examples, unk_examples = [], []
    for s in sentences:
        for word, _ in pre.pre_tokenize_str(norm.normalize_str(s)):
            toks = tokenizer.tokenize(word)
            n_words += 1
            n_tokens += len(toks)
            n_unk_tokens += toks.count(tokenizer.unk_token)
            if toks == [tokenizer.unk_token]:
                n_unk_words += 1
                unk_examples.append(word)
            elif len(toks) == 1:
                n_whole += 1
            else:
                n_split += 1
                if len(split_examples) < 8:
                    split_examples.append(f"{word} -> {' '.join(toks)}")
    return {"sentences": len(sentences), "words": n_words, "tokens": n_tokens,
            "whole_word_share": n_whole / n_words, "split_word_share": n_split / n_words,
            "unk_word_share": n_unk_words / n_words, "unk_token_share": n_unk_tokens / n_tokens,
            "split_examples": split_examples, "unk_examples": sorted(set(unk_examples))}


def evaluate_model(folder: Path) -> dict:
    model, tok = load(folder)
    res = {"name": folder.name}
    for task in ("agreement", "pronoun"):
        items = load_eval_set(task)
        res[task] = breakdown(items, predict(model, tok, items))
    hw = read_jsonl(HANDWRITTEN)
    hw_preds = predict(model, tok, hw)
    res["handwritten"] = breakdown(hw, hw_preds)
    res["handwritten_by_task"] = {
        t: breakdown([i for i in hw if i["task"] == t], [p for i, p in zip(hw, hw_preds)
                                                         if i["task"] == t])["all"]
        for t in ("agreement", "pronoun")}
    res["handwritten_items"] = [dict(it, **p) for it, p in zip(hw, hw_preds)]
    log = folder / "train_log.json"
    res["train"] = json.loads(log.read_text()) if log.exists() else None
    res["size_mb"] = (folder / "model.safetensors").stat().st_size / 1e6
    # the hand-written real-English sets: the test sets, then the dev sets the recipe was tuned on
    res["real"] = evaluate_spec(str(folder), set_files("real") + [f for f in set_files("real-dev") if f.is_file()])
    return res


def _set_counts(r: dict, name: str, task: str) -> tuple[int, int] | None:
    """(items right, items scored) of one real set, by its file stem, or None."""
    for s in r.get("real", {}).get("sets", []):
        if s["set"] == name and task in s["tasks"]:
            a = s["tasks"][task]["all"]
            return round(a["acc"] * a["n"]), a["n"]
    return None


def _share(r: dict, name: str, task: str) -> float | None:
    c = _set_counts(r, name, task)
    return c[0] / c[1] if c else None


REAL_SETS_NOTE = (
    "real_pronoun2.jsonl and real_agreement2.jsonl were written after the models were trained, "
    "by other hands, from specs matched to the first sets (pronouns: his / her / their, 0-4 attractors, relative "
    "clauses about two thirds; agreement: 0-4 attractors, encyclopedia and news style, answer and wrong verb each "
    "one token of the built-in vocabulary), frozen before any built-in model scored them, and never trained or tuned "
    "on. The first dev sets and the real-style generator were written while reading the first test sets' kind of "
    "sentence, so the first test sets flatter the models. The interval is the 95 % Wilson score interval.")
REAL_TEST_SETS = (("real_agreement", "agreement"), ("real_agreement2", "agreement"), ("real_pronoun", "pronoun"),
                  ("real_pronoun2", "pronoun"))


def real_test_table(results: list[dict]) -> list[str]:
    """Each real test set (and the two pronoun sets together) per model: items right of n, accuracy
    and its 95 % Wilson interval, so that a reader sees how much a set can tell apart."""
    rows = ["| model | set | right / n | accuracy (%) | 95 % interval (%) |", "|---|---|---:|---:|---|"]
    for r in results:
        both = [0, 0]
        for name, task in REAL_TEST_SETS:
            c = _set_counts(r, name, task)
            if c is None:
                continue
            if task == "pronoun":
                both = [both[0] + c[0], both[1] + c[1]]
            lo, hi = wilson(*c)
            rows.append(f"| {r['name']} | {name} | {c[0]} / {c[1]} | {100 * c[0] / c[1]:.1f} "
                        f"| {100 * lo:.1f}–{100 * hi:.1f} |")
        if both[1] and _set_counts(r, "real_pronoun2", "pronoun"):
            lo, hi = wilson(*both)
            rows.append(f"| {r['name']} | real_pronoun + real_pronoun2 | {both[0]} / {both[1]} "
                        f"| {100 * both[0] / both[1]:.1f} | {100 * lo:.1f}–{100 * hi:.1f} |")
    return rows


# ---- markdown ---------------------------------------------------------------------------------

def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _table_rows(groups: dict, label: str) -> list[str]:
    rows = [f"| {label} | n | accuracy (%) | top-1 (%) |", "|---|---:|---:|---:|"]
    for k, v in groups.items():
        rows.append(f"| {k} | {v['n']} | {_pct(v['acc'])} | {_pct(v['top1'])} |")
    return rows


def summary_table(results: list[dict]) -> list[str]:
    """Narrow tables (grammar and hand-written sets; real test sets; real dev sets), each of at most six
    columns, so that they fit the app's model card at 1024 px; the top-1 and per-task figures in a line."""
    rows = ["Grammar test sets and hand-written sentences (accuracy, %):", "",
            "| model | agr. | agr., 2+ attr. | pron. | pron., 2+ attr. | hand-written |",
            "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        rows.append(
            f"| {r['name']} | {_pct(r['agreement']['all']['acc'])} | {_pct(r['agreement']['att2plus']['acc'])} "
            f"| {_pct(r['pronoun']['all']['acc'])} | {_pct(r['pronoun']['att2plus']['acc'])} "
            f"| {_pct(r['handwritten']['all']['acc'])} |")
    rows += ["", "Hand-written, agreement / pronoun: " + "; ".join(
        f"{r['name']} {_pct(r['handwritten_by_task']['agreement']['acc'])} / "
        f"{_pct(r['handwritten_by_task']['pronoun']['acc'])}" for r in results)
        + ". Top-1 over the vocabulary, agreement / pronoun: " + "; ".join(
        f"{r['name']} {_pct(r['agreement']['all']['top1'])} / {_pct(r['pronoun']['all']['top1'])}" for r in results)
        + "."]
    for title, prefix in (("test sets (accuracy, %; 1: the first sets, 2: the second sets, written after training and "
                           "never tuned on)", "real_"),
                          ("dev sets (accuracy, %; 1: the recipe was tuned on them, 2: written later for the last choices)",
                           "real_dev_")):
        rows += ["", f"Real sentences, {title}:", "",
                 "| model | agreement 1 | agreement 2 | pronoun 1 | pronoun 2 |", "|---|---:|---:|---:|---:|"]
        for r in results:
            rows.append(f"| {r['name']} | " + " | ".join(
                _pct(_share(r, f"{prefix}{task}{k}", task))
                for task in ("agreement", "pronoun") for k in ("", "2")) + " |")
    return rows


def real_section(r: dict, level: str = "###") -> list[str]:
    """The real-English sets (attnviz/data/sets/real_*.jsonl) by attractor count and style."""
    if not r.get("real") or not r["real"].get("sets"):
        return []
    body = spec_report(r["real"]).split("\n")
    body = [re.sub(r"^### (real_dev_\w+2) ", lambda m: f"{level} Real sentences, second dev set: "
                   f"{m.group(1)} ", ln)
            .replace("### real_dev_pronoun3 ", f"{level} Real sentences, third dev set (misses not read): "
                     "real_dev_pronoun3 ")
            .replace("### real_dev_", f"{level} Real sentences, dev set (tuned on): real_dev_")
            .replace("### real_", f"{level} Real sentences: real_") for ln in body[4:]]  # drop the model header
    return body



def model_section(r: dict, level: str = "###") -> list[str]:
    out = []
    for task in ("agreement", "pronoun"):
        b = r[task]
        out += [f"{level} {task.capitalize()}: held-out test set "
                f"(attnviz/data/sets/{task}_test.jsonl, {b['all']['n']} items)", "",
                f"Accuracy {_pct(b['all']['acc'])} %, on items with 2+ attractors "
                f"{_pct(b['att2plus']['acc'])} % (n = {b['att2plus']['n']}); top-1 over the "
                f"vocabulary {_pct(b['all']['top1'])} %.", ""]
        out += _table_rows(b["by_construction"], "construction") + [""]
        out += _table_rows({str(k): v for k, v in b["by_attractors"].items()},
                           "attractors") + [""]
    hw = r["handwritten"]["all"]
    out += [f"{level} Hand-written sentences (attnviz/data/sets/handwritten.jsonl)", "",
            f"{hw['n']} sentences written by hand, outside the grammar's templates but in its "
            f"vocabulary: accuracy {_pct(hw['acc'])} % (agreement "
            f"{_pct(r['handwritten_by_task']['agreement']['acc'])} %, pronoun "
            f"{_pct(r['handwritten_by_task']['pronoun']['acc'])} %).", ""]
    wrong = [i for i in r["handwritten_items"] if not i["correct"]]
    if wrong:
        out += ["Missed:", ""] + [f"- `{i['text']}` answer {i['answer']}, model preferred "
                                  f"{i['wrong']} (top-1: {i['pred']})" for i in wrong] + [""]
    return out


def coverage_section(cov: dict, level: str = "##") -> list[str]:
    return [f"{level} Tokenizer coverage of ordinary English", "",
            f"{cov['sentences']} everyday sentences written by hand "
            f"(attnviz/data/sets/ordinary_sentences.txt), {cov['words']} words, "
            f"{cov['tokens']} tokens:", "",
            f"- whole words in the vocabulary: {_pct(cov['whole_word_share'])} %",
            f"- words split into subword pieces: {_pct(cov['split_word_share'])} %",
            f"- words that became [UNK]: {_pct(cov['unk_word_share'])} % "
            f"(share of [UNK] tokens: {_pct(cov['unk_token_share'])} %)"
            + (f"; [UNK] words: {', '.join(cov['unk_examples'])}" if cov["unk_examples"] else ""),
            "- examples: " + "; ".join(f"`{e}`" for e in cov["split_examples"]), "",
            ("Words outside the vocabulary are split into WordPiece pieces, which the model was "
             "trained on (its training text was tokenized the same way); the pieces are visible in "
             "the token axis of every map." if cov.get("pieces_trained") else
             "Words outside the grammar's vocabulary are split into pieces the model never saw "
             "in training; its predictions on such sentences are not meaningful, but the pieces "
             "are visible in the token axis of every map."), ""]


def real_trained(r: dict) -> bool:
    """Trained by train_real.py (real English + styled items + the grammar, WordPiece text)."""
    return bool((r.get("train") or {}).get("n_corpus_sentences"))


def command_note(command: str) -> list[str]:
    """A line under a training command recorded before the training code left the package (it names
    attnviz.builtin and assets/): where those are now."""
    if "attnviz.builtin" not in command:
        return []
    return ["(The command as it was run. The training code is now in `training/` (`python -m training.train_real`, "
            "`python -m training.train`), the corpus in `training/corpus`, the built-in models in "
            "`attnviz/data/models/`.)", ""]


def train_real_section(r: dict) -> list[str]:
    t = r["train"]
    last = (t.get("log") or [{}])[-1]
    init = ([f"- fine-tuned from the weights in `{t['init']}` (the previous built-in model of this seed; "
             f"same tokenizer), learning rate {t.get('lr')}, {t.get('warmup')} warm-up steps"] if t.get("init") else [])
    return ["```", t["command"], "```", ""] + command_note(t["command"]) + init + [
            f"- seed {t['seed']}, {t['steps']} steps of {t['batch_size']} items: {t['n_grammar_items']:,} "
            f"grammar items, {t['n_corpus_items']:,} corpus items ({t['n_corpus_distinct']:,} distinct, from "
            f"{t['n_corpus_sentences']:,} corpus sentences) and {t.get('n_styled_items', 0):,} real-style items; "
            f"vocabulary {t['vocab_size']:,} (lowercase WordPiece learned from the corpus); 1 torch thread",
            f"- time: {t['total_seconds'] / 60:.1f} min in all ({t['train_seconds'] / 60:.1f} min training) "
            f"on 2 CPU cores shared with other jobs; {t['cpu_seconds'] / 60:.1f} min of CPU time",
            f"- final training loss (last 50 steps): vocabulary cross-entropy {last.get('loss', float('nan')):.4f}, "
            f"answer-vs-wrong cross-entropy {last.get('pair', float('nan')):.4f}",
            f"- model.safetensors {r['size_mb']:.1f} MB", ""]


def train_section(r: dict) -> list[str]:
    t = r["train"]
    if not t:
        return ["No train_log.json found.", ""]
    if real_trained(r):
        return train_real_section(r)
    return ["```", t["command"], "```", ""] + command_note(t["command"]) + [
            f"- seed {t['seed']}, {t['steps']} steps of {t['batch_size']} sentences "
            f"({t['n_train_items']} generated training items, half agreement, half pronoun), "
            f"AdamW (lr {t['lr']}, {t['warmup']} warm-up steps, cosine decay, weight decay "
            f"{t['weight_decay']}), {t['threads']} torch thread(s)"
            + (", bfloat16 autocast" if t.get("bf16") else ""),
            f"- in {100 * t.get('unk_prob', 0):.0f} % of training sentences one random word was "
            "replaced by [UNK] (the label unchanged), so that blanking a word out with [UNK] — the "
            "blank-out importance baseline — has a learned, defined effect",
            f"- time: {t['total_seconds'] / 60:.1f} min in all ({t['data_seconds']:.0f} s "
            f"generating data, {t['train_seconds'] / 60:.1f} min training) on {t['cpu_count']} "
            f"CPU cores shared with other jobs"
            + (f"; {t['cpu_seconds'] / 60:.1f} min of CPU time (the process's user+system time, "
               "what the run takes on one idle core)" if t.get("cpu_seconds") else "")
            + f"; torch {t['torch']}",
            f"- final training loss (last 100 steps): vocabulary cross-entropy "
            f"{t['final_loss']:.4f}, answer-vs-wrong cross-entropy {t['final_pair_loss']:.4f}",
            f"- {t['n_parameters']:,} parameters, model.safetensors {r['size_mb']:.1f} MB", ""]


def _data_grammar() -> list[str]:
    return [
        "## Training data", "",
        "Sentences from `training/grammar.py` (lexicon in `lexicon.py`: "
        f"{len(all_word_forms()):,} word forms — nouns with plurals, verbs with 3rd-person singular, plural and "
        "past forms, adjectives, adverbs, male and female first names).", "",
        "- Agreement: the masked word is the main verb — is/are, was/were, has/have or a lexical "
        "verb (runs/run); 0–4 attractors (intervening nouns of the other number) in "
        "prepositional-phrase chains (`pp`), coordinations inside a prepositional phrase "
        "(`coord`), subject relative clauses (`src`), object relative clauses (`orc`, with or "
        "without *that*), coordinated plural subjects (`coord_subj`: `john and the girl [MASK] "
        "happy.` -> are; its singular nouns are the attractors), plus `simple` sentences; singular "
        "subjects are sometimes first names.",
        "- Pronouns: his/her/its/their agreeing with the clause's subject (gendered nouns and "
        "first names: his/her; animals and institutions: its; plurals, coordinated names and "
        "person nouns without grammatical gender such as *the author*: their, singular they), "
        "with 0–3 intervening nouns or names of "
        "another gender or number: `about` (S talked to O about [MASK] N), `ditrans` (S showed O "
        "[MASK] N), `meet` (S met O in [MASK] N), `about_coord`, and subject modifiers `pp` (S "
        "with O ...) and `rc` (S who met O ...), alone or combined.",
        "- Attractor counts are sampled uniformly. About 10 % of (subject, nearest intervening "
        "noun) pairs are held out: the test sets in attnviz/data/sets/ use only those pairs, so no test "
        "sentence occurs in training.",
        "- Loss at the `[MASK]` slot only: cross-entropy over the vocabulary plus a two-way "
        "cross-entropy between the answer and the wrong word.", "",
        "Conventions a user should know: a coordination right after the subject makes a plural "
        "subject (`the key and the door [MASK]` -> are), a coordination inside a prepositional "
        "phrase does not (`the key to the cabinets and the doors [MASK]` -> is); a possessive "
        "always refers to its clause's subject (in `the king talked to mary about [MASK] book`, "
        "his).", "",
        "Limitations: the model was trained only to fill a `[MASK]` at the main verb or at a "
        "possessive in sentences of this grammar, always with the subject first. Elsewhere "
        "(a `[MASK]` on a noun, words before the subject, words outside the vocabulary, which "
        "become subword pieces it never saw) its predictions are not meaningful; the "
        "hand-written set below shows where it already slips.", "",
    ]


def _data_real(t: dict) -> list[str]:
    return [
        "## Training data", "",
        "Three sources, mixed in every batch (`python -m training.train_real`; the corpus is rebuilt with "
        "`python training/scripts/build_corpus.py --out training/corpus`, see its SOURCES.md):", "",
        f"- **real English** ({t['n_corpus_sentences']:,} sentences: the usage examples and glosses of Princeton "
        "WordNet 3.0 and the quotations of Debian's fortunes packages): every sentence with is/are/was/were/"
        "has/have becomes an agreement item (one occurrence masked, the other number wrong), every one with "
        "his/her a pronoun item;",
        "- **real-style items** (`training/real_style.py`): encyclopedia-like sentences with census first "
        "names, surnames, titles and WordNet nouns; pronouns whose antecedent is the main-clause subject with "
        "0-4 people of the other sex in relative, *whose*, appositive or fronted phrases (plural subjects: "
        "their); agreement with 0-4 attractors in stacked prepositional phrases and relative clauses, "
        "auxiliaries and lexical verbs"
        + ("; and agreement in the shapes of news and encyclopedia "
           "prose: comma appositions, *which* / *who* / *whose* clauses, participial phrases (*led by ...*), "
           "numbers, years, hyphenated modifiers, and proper names of people, places, companies and days as "
           "attractors;" if t.get("agreement_share") is not None else ";"),
        "- **the grammar** (`training/grammar.py`), as for the first built-in models: agreement and "
        "pronoun sentences with 0-4 attractors; its held-out (subject, attractor) pairs are the grammar test "
        "sets below.", "",
        "The vocabulary is a lowercase WordPiece learned from the corpus (every answer and wrong word of both "
        "tasks a whole token); words outside it are split into pieces the model was trained on. None of the "
        "real test sentences (attnviz/data/sets/real_agreement.jsonl, real_pronoun.jsonl) is in the training "
        "data" + (", and none of the dev sentences (real_dev_*.jsonl, on which the recipe was tuned and "
                  "which is scored during training)" if t.get("agreement_share") is not None else "") + ".", "",
        "Limitations: trained to fill a `[MASK]` at a verb or a possessive; elsewhere (a `[MASK]` on a noun, "
        "other words) its predictions are not meaningful. Its English comes from 1.8 M words of "
        "dictionary examples and quotations: far less than a pretrained model has read.", "",
    ]


def readme(r: dict, all_results: list[dict], cov: dict) -> str:
    cfg = MODEL_CONFIG
    t = r["train"] or {}
    lines = [
        "---", "language: en", "library_name: transformers", "pipeline_tag: fill-mask",
        "license: mit", "---", "",
        f"# attnviz built-in model `{r['name']}`", "",
        "A small BERT (post-LN `BertForMaskedLM`) trained "
        + ("from scratch and then fine-tuned " if t.get("init") else "from scratch ") + "in this repository on "
        + ("real English sentences, real-style sentences and a synthetic grammar (Abnar & Zuidema (2020) "
           "trained theirs on Wikipedia): " if real_trained(r) else
           "a synthetic English grammar, the setting of Abnar & Zuidema (2020): ")
        + 
        f"{cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads, hidden size "
        f"{cfg['hidden_size']}, intermediate size {cfg['intermediate_size']}, "
        f"{cfg['max_position_embeddings']} positions, lowercase WordPiece vocabulary. "
        "No pretrained weights and no download: it ships with attnviz so the app works offline.",
        "",
        "One joint model for two tasks, both predicted at a single `[MASK]`:", "",
        "- **verb-number agreement**: `the keys to the cabinet [MASK] on the table.` -> are "
        "(not is)",
        "- **possessive pronouns** that refer to the subject of their clause: "
        "`the king talked to mary about [MASK] book.` -> his (not her); "
        "`the author talked to sara about [MASK] book.` -> their (singular they, not her)", "",
        "```python",
        "from transformers import AutoModelForMaskedLM, AutoTokenizer",
        f'model = AutoModelForMaskedLM.from_pretrained("attnviz/data/models/{r["name"]}", '
        'attn_implementation="eager")',
        f'tokenizer = AutoTokenizer.from_pretrained("attnviz/data/models/{r["name"]}")',
        "```", "", "In attnviz: `attnviz.load_model(\"builtin:agreement\")`.", "",
        *(_data_real(t) if real_trained(r) else _data_grammar()),
        "## Training run", "",
    ]
    lines += train_section(r)
    lines += ["Same seed, same machine, same thread count: same weights "
              "(`torch.use_deterministic_algorithms(True)`). "
              + ("Not checked by a second run for the models trained on real English." if real_trained(r)
                 else REPRO_NOTE), ""]
    lines += ["## Evaluation", "", "Produced by `python -m training.evaluate`. Accuracy: "
              "the answer's logit at `[MASK]` is higher than the wrong word's (is vs are, his vs "
              "her). Top-1: the answer is the arg-max over the whole vocabulary (harder: the verb "
              "itself is not predictable from the context).", ""]
    lines += ["### All seeds", ""] + summary_table(all_results) + [""]
    if any(_set_counts(x, "real_pronoun2", "pronoun") for x in all_results):
        lines += ["### How much the real test sets can tell", "", REAL_SETS_NOTE, ""] + real_test_table(all_results) + [""]
    lines += model_section(r)
    lines += real_section(r)
    lines += coverage_section(cov, "###")
    return "\n".join(lines) + "\n"


def eval_md(results: list[dict], cov: dict) -> str:
    lines = ["# Evaluation of the built-in models", "",
             "Written by `python -m training.evaluate`. Accuracy: the answer's logit at "
             "`[MASK]` beats the wrong word's; top-1: the answer is the arg-max over the whole "
             "vocabulary. Test sets: attnviz/data/sets/agreement_test.jsonl and "
             "attnviz/data/sets/pronoun_test.jsonl (held-out subject/attractor pairs); hand-written "
             "set: attnviz/data/sets/handwritten.jsonl.", "", "## Summary", ""]
    lines += summary_table(results) + [""]
    if any(_set_counts(r, "real_pronoun2", "pronoun") for r in results):
        lines += ["### The real test sets and how much they can tell", "", REAL_SETS_NOTE, ""]
        lines += real_test_table(results) + [""]
    for r in results:
        t = r["train"] or {}
        lines += [f"## {r['name']}", ""]
        if t and real_trained(r):
            lines += train_real_section(r)
        elif t:
            cpu = (f", {t['cpu_seconds'] / 60:.1f} min CPU time" if t.get("cpu_seconds")
                   else "")
            lines += [f"Seed {t['seed']}; trained in {t['total_seconds'] / 60:.1f} min wall-clock "
                      f"on {t['cpu_count']} cores shared with other jobs ({t['threads']} "
                      f"thread(s){cpu}); final loss {t['final_loss']:.4f} (answer-vs-wrong "
                      f"{t['final_pair_loss']:.4f}); {r['size_mb']:.1f} MB.", ""]
        lines += model_section(r)
        lines += real_section(r)
    lines += coverage_section(cov)
    pilot = TRAINING_DIR / "PILOT_REAL.md"   # the experiment diary (hand-maintained), appended as it stands
    if pilot.is_file():
        lines += ["", pilot.read_text(encoding="utf-8").rstrip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--model" or a.startswith("--model=") for a in argv):  # any model on any set: the library's scorer
        from attnviz.evaluate import main as evaluate_main

        return evaluate_main(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="*", default=None,
                    help="model folders (default: every agreement* folder of the built-in models)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-write", action="store_true", help="print, don't write README/EVAL.md")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    folders = [Path(m) for m in args.models] if args.models else sorted(
        p for p in MODELS_DIR.glob("agreement*") if (p / "config.json").exists())
    results = [evaluate_model(f) for f in folders]
    _, tok = load(folders[0])
    sentences = [s.strip() for s in ORDINARY.read_text(encoding="utf-8").splitlines() if s.strip()]
    cov = tokenizer_coverage(tok, sentences)
    cov["pieces_trained"] = real_trained(results[0])

    text = eval_md(results, cov)
    print(text)
    if not args.no_write:
        (TRAINING_DIR / "EVAL.md").write_text(text, encoding="utf-8")
        for f, r in zip(folders, results):
            (f / "README.md").write_text(readme(r, results, cov), encoding="utf-8")
        (TRAINING_DIR / "eval_results.json").write_text(json.dumps(
            {"models": [{k: v for k, v in r.items() if k not in ("train",)} for r in results],
             "tokenizer_coverage": cov}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
