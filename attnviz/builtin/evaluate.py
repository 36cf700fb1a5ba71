"""Evaluate the built-in models and write their tables.

    python -m attnviz.builtin.evaluate            # every assets/models/agreement* folder
    python -m attnviz.builtin.evaluate --no-write # print only

For each model: accuracy on the held-out test sets (assets/data/*_test.jsonl) and on the
hand-written set (attnviz/builtin/data/handwritten.jsonl), by construction and by number of
attractors. Accuracy = the answer's logit at [MASK] beats the wrong word's; top-1 = the answer is
the arg-max over the whole vocabulary. Also the tokenizer's coverage of ordinary English sentences
(attnviz/builtin/data/ordinary_sentences.txt): share of [UNK] tokens and of words split into
subwords. Writes assets/models/EVAL.md and each model's README.md (from its train_log.json).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from . import load_eval_set
from .lexicon import all_word_forms
from .common import MODEL_CONFIG, MODELS_DIR, PACKAGE_DATA, Encoded, read_jsonl, target_logits

HANDWRITTEN = PACKAGE_DATA / "handwritten.jsonl"
REPRO_NOTE = ("Checked for seed 0: a second run of the same command wrote a byte-identical "
              "model.safetensors (sha256 ddc3991ab476…).")
ORDINARY = PACKAGE_DATA / "ordinary_sentences.txt"


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
    return res


# ---- markdown ---------------------------------------------------------------------------------

def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _table_rows(groups: dict, label: str) -> list[str]:
    rows = [f"| {label} | n | accuracy (%) | top-1 (%) |", "|---|---:|---:|---:|"]
    for k, v in groups.items():
        rows.append(f"| {k} | {v['n']} | {_pct(v['acc'])} | {_pct(v['top1'])} |")
    return rows


def summary_table(results: list[dict]) -> list[str]:
    rows = ["| model | agreement | agreement, 2+ attractors | pronoun | pronoun, 2+ attractors "
            "| hand-written (agr / pron) | top-1 agreement | top-1 pronoun |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        hw = r["handwritten"]["all"]
        hwt = r["handwritten_by_task"]
        rows.append(
            f"| {r['name']} | {_pct(r['agreement']['all']['acc'])} "
            f"| {_pct(r['agreement']['att2plus']['acc'])} | {_pct(r['pronoun']['all']['acc'])} "
            f"| {_pct(r['pronoun']['att2plus']['acc'])} "
            f"| {_pct(hw['acc'])} ({_pct(hwt['agreement']['acc'])} / {_pct(hwt['pronoun']['acc'])}) "
            f"| {_pct(r['agreement']['all']['top1'])} | {_pct(r['pronoun']['all']['top1'])} |")
    return rows


def model_section(r: dict, level: str = "###") -> list[str]:
    out = []
    for task in ("agreement", "pronoun"):
        b = r[task]
        out += [f"{level} {task.capitalize()}: held-out test set "
                f"(assets/data/{task}_test.jsonl, {b['all']['n']} items)", "",
                f"Accuracy {_pct(b['all']['acc'])} %, on items with 2+ attractors "
                f"{_pct(b['att2plus']['acc'])} % (n = {b['att2plus']['n']}); top-1 over the "
                f"vocabulary {_pct(b['all']['top1'])} %.", ""]
        out += _table_rows(b["by_construction"], "construction") + [""]
        out += _table_rows({str(k): v for k, v in b["by_attractors"].items()},
                           "attractors") + [""]
    hw = r["handwritten"]["all"]
    out += [f"{level} Hand-written sentences (attnviz/builtin/data/handwritten.jsonl)", "",
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
            f"(attnviz/builtin/data/ordinary_sentences.txt), {cov['words']} words, "
            f"{cov['tokens']} tokens:", "",
            f"- whole words in the vocabulary: {_pct(cov['whole_word_share'])} %",
            f"- words split into subword pieces: {_pct(cov['split_word_share'])} %",
            f"- words that became [UNK]: {_pct(cov['unk_word_share'])} % "
            f"(share of [UNK] tokens: {_pct(cov['unk_token_share'])} %)"
            + (f"; [UNK] words: {', '.join(cov['unk_examples'])}" if cov["unk_examples"] else ""),
            "- examples: " + "; ".join(f"`{e}`" for e in cov["split_examples"]), "",
            "Words outside the grammar's vocabulary are split into pieces the model never saw "
            "in training; its predictions on such sentences are not meaningful, but the pieces "
            "are visible in the token axis of every map.", ""]


def train_section(r: dict) -> list[str]:
    t = r["train"]
    if not t:
        return ["No train_log.json found.", ""]
    return ["```", t["command"], "```", "",
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


def readme(r: dict, all_results: list[dict], cov: dict) -> str:
    cfg = MODEL_CONFIG
    t = r["train"] or {}
    lines = [
        "---", "language: en", "library_name: transformers", "pipeline_tag: fill-mask",
        "license: mit", "---", "",
        f"# attnviz built-in model `{r['name']}`", "",
        "A small BERT (post-LN `BertForMaskedLM`) trained from scratch in this repository on a "
        "synthetic English grammar, the setting of Abnar & Zuidema (2020): "
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
        f'model = AutoModelForMaskedLM.from_pretrained("assets/models/{r["name"]}", '
        'attn_implementation="eager")',
        f'tokenizer = AutoTokenizer.from_pretrained("assets/models/{r["name"]}")',
        "```", "", "In attnviz: `attnviz.load_model(\"builtin:agreement\")`.", "",
        "## Training data", "",
        "Sentences from `attnviz/builtin/grammar.py` (lexicon in `lexicon.py`: "
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
        "noun) pairs are held out: the test sets in assets/data/ use only those pairs, so no test "
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
        "## Training run", "",
    ]
    lines += train_section(r)
    lines += ["Same seed, same machine, same thread count: same weights "
              "(`torch.use_deterministic_algorithms(True)`). " + REPRO_NOTE, ""]
    lines += ["## Evaluation", "", "Produced by `python -m attnviz.builtin.evaluate`. Accuracy: "
              "the answer's logit at `[MASK]` is higher than the wrong word's (is vs are, his vs "
              "her). Top-1: the answer is the arg-max over the whole vocabulary (harder: the verb "
              "itself is not predictable from the context).", ""]
    lines += ["### All seeds", ""] + summary_table(all_results) + [""]
    lines += model_section(r)
    lines += coverage_section(cov, "###")
    return "\n".join(lines) + "\n"


def eval_md(results: list[dict], cov: dict) -> str:
    lines = ["# Evaluation of the built-in models", "",
             "Written by `python -m attnviz.builtin.evaluate`. Accuracy: the answer's logit at "
             "`[MASK]` beats the wrong word's; top-1: the answer is the arg-max over the whole "
             "vocabulary. Test sets: assets/data/agreement_test.jsonl and "
             "assets/data/pronoun_test.jsonl (held-out subject/attractor pairs); hand-written "
             "set: attnviz/builtin/data/handwritten.jsonl.", "", "## Summary", ""]
    lines += summary_table(results) + [""]
    for r in results:
        t = r["train"] or {}
        lines += [f"## {r['name']}", ""]
        if t:
            cpu = (f", {t['cpu_seconds'] / 60:.1f} min CPU time" if t.get("cpu_seconds")
                   else "")
            lines += [f"Seed {t['seed']}; trained in {t['total_seconds'] / 60:.1f} min wall-clock "
                      f"on {t['cpu_count']} cores shared with other jobs ({t['threads']} "
                      f"thread(s){cpu}); final loss {t['final_loss']:.4f} (answer-vs-wrong "
                      f"{t['final_pair_loss']:.4f}); {r['size_mb']:.1f} MB.", ""]
        lines += model_section(r)
    lines += coverage_section(cov)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="*", default=None,
                    help="model folders (default: assets/models/agreement*)")
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

    text = eval_md(results, cov)
    print(text)
    if not args.no_write:
        (MODELS_DIR / "EVAL.md").write_text(text, encoding="utf-8")
        for f, r in zip(folders, results):
            (f / "README.md").write_text(readme(r, results, cov), encoding="utf-8")
        (MODELS_DIR / "eval_results.json").write_text(json.dumps(
            {"models": [{k: v for k, v in r.items() if k not in ("train",)} for r in results],
             "tokenizer_coverage": cov}, indent=1) + "\n")


if __name__ == "__main__":
    main()
