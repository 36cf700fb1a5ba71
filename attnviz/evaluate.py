"""Accuracy of any masked or causal language model on agreement and pronoun items: `attnviz evaluate`.

    attnviz evaluate                                          # every built-in model on the real sets
    attnviz evaluate --model pkg:smollm2 --set real           # any masked or causal LM
    attnviz evaluate --model builtin:agreement --set real --set grammar --set handwritten
    attnviz evaluate --model pkg:smollm2 --set FILE.jsonl --json out.json
    attnviz evaluate --model builtin:agreement --linzen FOLDER  # Linzen et al. (2016)'s agreement set

Sets (attnviz.datasets.SETS): real, real-dev, real-agreement, real-pronoun, grammar,
grammar-agreement, grammar-pronoun, handwritten, all; or a .jsonl file of
{"text": "... [MASK] ...", "answer", "wrong", ["n_attractors", "construction", "task", "style"]};
or linzen:FOLDER (the same as --linzen FOLDER).

Each item is encoded the way attnviz.analyze encodes it (attnviz.trace.encode): a masked LM reads the
whole sentence and the target is the [MASK] token; a causal LM reads the text before [MASK] and the
target is its last token. Accuracy: the answer's log-probability at the target beats the wrong
word's, each word scored by attnviz.trace.contrast_word (" are" -> 'Ġare' on byte-level BPE); top-1:
the answer is the arg-max (over word-initial tokens on a causal model). An answer or wrong word of
several tokens is scored on a causal model as the sum of its pieces' log-probabilities (each piece
given the text and the pieces before it); on a masked LM such an item, or one whose text is longer
than the model reads, is skipped and counted as not judged (attnviz.trace.MULTI_TOKEN_RULE, the same
rule in the app, faithfulness and the adversarial page; the report counts both). Items are batched (right padding for masked LMs; left
padding with position ids counted over the real tokens for causal LMs, so every row ends at its
target). Also reported per set: the share of words the tokenizer turns into [UNK] or splits into
pieces. Items with a "style" field are also reported by style.

Linzen et al. (2016)'s agreement test set, in the layout of Gulordava et al. (2018)'s repository
(github.com/facebookresearch/colorlessgreenRNNs, data/linzen_testset/): FOLDER holds
subj_agr_filtered.text (one tokenized sentence a line, ending in <eos>) and subj_agr_filtered.gold
(tab-separated: the 0-based word index of the verb, the correct form, the wrong form, the number of
attractors). read_linzen turns each line into an item with [MASK] at the verb (the tokenization's
spaces before punctuation and clitics and around quotes are closed up), scored as above; the report
gives accuracy overall and by number of attractors with 95 % Wilson intervals and the number judged.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .datasets import SETS, read_jsonl, set_files
from .errors import InputError
from .trace import MULTI_TOKEN_RULE  # how a contrast word of several tokens is scored, the same everywhere

__all__ = ["NoOutputHead", "LinzenSet", "read_linzen", "encode_items", "score_items", "target_logits_any",
           "evaluate_file", "evaluate_spec", "spec_report", "word_coverage", "wilson", "main"]


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion k / n (scipy's binomtest)."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


# ---- Linzen et al. (2016) ---------------------------------------------------------------------

LINZEN_STEM = "subj_agr_filtered"
_CLITIC = re.compile(r" (n't|'s|'re|'ve|'m|'ll|'d)(?=[\s,.;:!?)\]\"]|$)")


@dataclass(frozen=True)
class LinzenSet:
    """A Linzen-format set: FOLDER/STEM.text and FOLDER/STEM.gold."""

    folder: Path
    stem: str = LINZEN_STEM

    @classmethod
    def from_arg(cls, arg: str) -> "LinzenSet":
        """FOLDER (holding subj_agr_filtered.{text,gold}, or one other *.gold with its .text), or the path of
        either file (or their common stem)."""
        p = Path(arg)
        if p.is_dir():
            if (p / f"{LINZEN_STEM}.gold").is_file():
                return cls(p)
            golds = sorted(p.glob("*.gold"))
            if len(golds) == 1:
                return cls(p, golds[0].stem)
            raise InputError(f"--linzen {arg}: the folder holds no {LINZEN_STEM}.gold"
                             + (f" and {len(golds)} other .gold files" if golds else ""))
        if p.suffix in (".gold", ".text"):
            p = p.with_suffix("")
        if p.with_suffix(".gold").is_file():
            return cls(p.parent, p.name)
        raise InputError(f"--linzen {arg}: no such folder or .gold file (Linzen et al.'s set: "
                         "data/linzen_testset/ of github.com/facebookresearch/colorlessgreenRNNs)")

    @property
    def files(self) -> tuple[Path, Path]:
        return self.folder / f"{self.stem}.text", self.folder / f"{self.stem}.gold"


def _detokenize(words: list[str]) -> str:
    """Tokenized words -> running text: no space before , . ; : ! ? ) ] and clitics (n't, 's, ...), none
    after ( [; `` and '' become straight double quotes attached to the words they enclose."""
    text = " ".join(words)
    text = re.sub(r"`` ", '"', text)
    text = re.sub(r" ''", '"', text)
    text = re.sub(r" ([,.;:!?)\]])", r"\1", text)
    text = re.sub(r"([(\[]) ", r"\1", text)
    return _CLITIC.sub(r"\1", text)


def read_linzen(source, limit: int | None = None) -> list[dict]:
    """A Linzen-format set (a LinzenSet or a FOLDER / file argument) -> items {text (with [MASK] at the
    verb), answer, wrong, task "agreement", n_attractors, construction "linzen", line}. The verb in the
    sentence must be the gold's correct form (compared lowercase; the few gold lines that capitalise a verb
    the sentence has in lowercase take the sentence's form, and the wrong form is lowercased with it)."""
    src = source if isinstance(source, LinzenSet) else LinzenSet.from_arg(str(source))
    text_file, gold_file = src.files
    for f in (text_file, gold_file):
        if not f.is_file():
            raise InputError(f"{f} is missing (a Linzen-format set is STEM.text and STEM.gold, line by line)")
    texts = text_file.read_text(encoding="utf-8").splitlines()
    golds = gold_file.read_text(encoding="utf-8").splitlines()
    if len(texts) != len(golds):
        raise InputError(f"{text_file.name} has {len(texts)} lines and {gold_file.name} {len(golds)}: "
                         "they must be line-aligned")
    items = []
    for k, (sent, gold) in enumerate(zip(texts, golds), start=1):
        if limit is not None and len(items) >= limit:
            break
        if not sent.strip() and not gold.strip():
            continue
        fields = gold.split("\t")
        if len(fields) != 4:
            raise InputError(f"{gold_file.name} line {k}: expected 4 tab-separated fields "
                             f"(index, correct, wrong, attractors), got {len(fields)}")
        try:
            idx, answer, wrong, n_att = int(fields[0]), fields[1].strip(), fields[2].strip(), int(fields[3])
        except ValueError:
            raise InputError(f"{gold_file.name} line {k}: the index and the attractor count must be "
                             f"integers: {gold!r}") from None
        words = sent.split()
        if words and words[-1] == "<eos>":
            words = words[:-1]
        if not 0 <= idx < len(words):
            raise InputError(f"{gold_file.name} line {k}: verb index {idx} is outside the sentence "
                             f"({len(words)} words)")
        if words[idx].lower() != answer.lower():
            raise InputError(f"{gold_file.name} line {k}: word {idx} of the sentence is '{words[idx]}', "
                             f"not the correct form '{answer}'")
        if words[idx] != answer:
            answer, wrong = words[idx], wrong.lower()
        items.append({"text": _detokenize(words[:idx] + ["[MASK]"] + words[idx + 1:]), "answer": answer,
                      "wrong": wrong, "task": "agreement", "n_attractors": n_att, "construction": "linzen",
                      "line": k})
    return items


# ---- tokenizer coverage -----------------------------------------------------------------------

def _word_pieces(tokenizer, word: str) -> list[str]:
    """The tokens of one word as it stands inside a sentence (after a space), without a bare
    space marker."""
    return [t for t in tokenizer.tokenize(" " + word) if t not in ("Ġ", "▁", " ")]


_WORD = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*")


def word_coverage(tokenizer, texts: list[str]) -> dict:
    """Words of the texts ([MASK] removed) -> share that become [UNK] and share split into pieces."""
    unk = getattr(tokenizer, "unk_token", None)
    n = n_split = n_unk = 0
    unk_words, split_examples = set(), []
    cache: dict = {}
    for t in texts:
        for w in _WORD.findall(t.replace("[MASK]", " ")):
            if w not in cache:
                cache[w] = _word_pieces(tokenizer, w)
            pieces = cache[w]
            n += 1
            if unk is not None and unk in pieces:
                n_unk += 1
                unk_words.add(w)
            elif len(pieces) > 1:
                n_split += 1
                if len(split_examples) < 6 and not any(e.startswith(w + " ") for e in split_examples):
                    split_examples.append(f"{w} -> {' '.join(pieces)}")
    return {"words": n, "unk_word_share": n_unk / max(n, 1), "split_word_share": n_split / max(n, 1),
            "unk_words": sorted(unk_words)[:20], "split_examples": split_examples}


# ---- scoring ----------------------------------------------------------------------------------

class NoOutputHead(InputError):
    """The model has no language-model head (an encoder or a classifier)."""


def encode_items(lm, items: list[dict]) -> tuple[list, list[dict]]:
    """Items -> (rows, skipped): each row (item index, ids list, target, answer, wrong, blank) with
    answer / wrong one vocabulary id, or, on a causal LM, the tuple of a word's pieces when it is several
    tokens (attnviz.trace.contrast_word, MULTI_TOKEN_RULE); an item whose text cannot be encoded, or whose
    answer/wrong word cannot be scored (on a masked LM: not one token), is skipped with the reason."""
    from .trace import contrast_words, encode

    causal = lm.task == "causal_lm"
    rows, skipped = [], []
    for k, it in enumerate(items):
        try:
            enc = encode(lm, it["text"], max_tokens=lm.max_tokens)
        except InputError as e:
            skipped.append({"index": k, "text": it["text"], "why": str(e)})
            continue
        try:
            wa, ww = contrast_words(lm, (it["answer"], it["wrong"]))
        except InputError as e:
            skipped.append({"index": k, "text": it["text"], "why": str(e)})
            continue
        if not causal and "[MASK]" in it["text"].upper() and enc.target == 0:
            skipped.append({"index": k, "text": it["text"], "why": "no mask token after encoding"})
            continue
        a, w = ((x.ids if (wa.multi or ww.multi) else x.ids[0]) for x in (wa, ww))
        rows.append((k, enc.ids[0].tolist(), enc.target, a, w, enc.blank))
    return rows, skipped


@torch.no_grad()
def target_logits_any(lm, rows: list) -> torch.Tensor:
    """[B, V] logits at each row's target: masked LMs right-padded, causal LMs left-padded (with
    position ids over the real tokens) so that the target is the last column."""
    import inspect

    model = lm.model
    causal = lm.task == "causal_lm"
    pad = lm.tokenizer.pad_token_id
    pad = 0 if pad is None else int(pad)
    width = max(len(r[1]) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        n = len(r[1])
        if causal:
            if r[2] != n - 1:
                raise ValueError("causal rows must end at their target")
            ids[b, width - n:] = torch.tensor(r[1])
            att[b, width - n:] = 1
        else:
            ids[b, :n] = torch.tensor(r[1])
            att[b, :n] = 1
    dev = next(model.parameters()).device
    ids, att = ids.to(dev), att.to(dev)
    if causal:
        kw = {}
        if "logits_to_keep" in inspect.signature(model.forward).parameters:
            kw["logits_to_keep"] = 1
        pos = (att.cumsum(-1) - 1).clamp_min(0)
        return model(input_ids=ids, attention_mask=att, position_ids=pos, **kw).logits[:, -1].float()
    logits = model(input_ids=ids, attention_mask=att).logits
    return logits[torch.arange(len(rows), device=dev), torch.tensor([r[2] for r in rows], device=dev)].float()


def score_items(lm, items: list[dict], batch_size: int = 32) -> tuple[list, list[dict]]:
    """Items -> (preds, skipped); preds[k] is None for a skipped item, else {correct (answer logit >
    wrong logit), top1 (answer is the arg-max), pred (arg-max token), margin (answer logit - wrong
    logit)}."""
    if lm.task not in ("masked_lm", "causal_lm"):
        raise NoOutputHead(f"{lm.spec} has no language-model output head (task: {lm.task}); it cannot "
                           "fill a [MASK], so there is no accuracy to report")
    from .trace import Word, word_logprobs, word_start_ids

    rows, skipped = encode_items(lm, items)
    preds: list = [None] * len(items)
    ws = torch.as_tensor(word_start_ids(lm)) if lm.task == "causal_lm" else None
    multi = [r for r in rows if isinstance(r[3], tuple)]
    rows = [r for r in rows if not isinstance(r[3], tuple)]
    for r in multi:  # causal LM, a word of several tokens: the sum of its pieces' log-probabilities
        words = [Word(str(x), tuple(x), tuple(lm.tokenizer.convert_ids_to_tokens(list(x)))) for x in (r[3], r[4])]
        la, lw = (float(v) for v in word_logprobs(lm, r[1], r[2], words))
        lg = target_logits_any(lm, [(r[0], r[1], r[2], 0, 0, r[5])])[0].cpu()
        top = int(ws[torch.argmax(lg[ws])]) if (r[5] and len(ws)) else int(torch.argmax(lg))
        preds[r[0]] = {"correct": la > lw, "top1": top == r[3][0] and len(r[3]) == 1,
                       "pred": lm.tokenizer.convert_ids_to_tokens(top), "margin": la - lw,
                       "pieces": max(len(r[3]), len(r[4])) > 1}
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][1]))
    for s in range(0, len(order), batch_size):
        batch = [rows[i] for i in order[s:s + batch_size]]
        logits = target_logits_any(lm, batch).cpu()
        for b, r in enumerate(batch):
            lg = logits[b]
            top = int(ws[torch.argmax(lg[ws])]) if (r[5] and ws is not None and len(ws)) else int(torch.argmax(lg))
            margin = float(lg[r[3]] - lg[r[4]])
            preds[r[0]] = {"correct": margin > 0, "top1": top == r[3],
                           "pred": lm.tokenizer.convert_ids_to_tokens(top), "margin": margin}
    return preds, skipped


def _acc(sel: list) -> dict | None:
    if not sel:
        return None
    return {"n": len(sel), "acc": float(np.mean([p["correct"] for p in sel])),
            "top1": float(np.mean([p["top1"] for p in sel]))}


def _why(reason: str) -> str:
    """A skip reason -> its kind, for the count of items not judged."""
    if "not one" in reason:
        return "with an answer or wrong word that is not one token of the vocabulary"
    if "tokens long" in reason:
        return "longer than the model reads"
    return reason


def _judged_table(items: list[dict], preds: list, skipped: list[dict]) -> dict:
    """Right / judged, accuracy and 95 % Wilson interval, overall and by attractor count; items not judged
    by reason."""
    def cell(sel):
        n, k = len(sel), sum(p["correct"] for p in sel)
        lo, hi = wilson(k, n) if n else (None, None)
        return {"n": n, "right": k, "acc": k / n if n else None, "low": lo, "high": hi}

    by = defaultdict(list)
    for it, p in zip(items, preds):
        if p is not None:
            by[it.get("n_attractors", "?")].append(p)
    return {"items": len(items), "all": cell([p for p in preds if p is not None]),
            "by_attractors": {str(k): cell(v) for k, v in sorted(by.items(), key=lambda kv: str(kv[0]))},
            "not_judged": len(skipped), "not_judged_why": dict(Counter(_why(s["why"]) for s in skipped))}


def _source_items(source, limit: int | None) -> tuple[str, str, list[dict], str]:
    """A set file or a LinzenSet -> (name, file(s), items, kind)."""
    if isinstance(source, LinzenSet):
        return ("linzen", " + ".join(str(f) for f in source.files), read_linzen(source, limit), "linzen")
    path = Path(source)
    items = read_jsonl(path)[:limit] if limit else read_jsonl(path)
    return path.stem, str(path), items, "jsonl"


def evaluate_file(lm, path, batch_size: int = 32, limit: int | None = None) -> dict:
    """One set (a .jsonl file or a LinzenSet) on one model: accuracy by task, by attractor count and by
    construction, skipped items, tokenizer coverage, seconds; for a Linzen set also the judged table
    (right / judged with intervals, by attractor count)."""
    name, file, items, kind = _source_items(path, limit)
    t0 = time.perf_counter()
    preds, skipped = score_items(lm, items, batch_size)
    secs = time.perf_counter() - t0
    kept = [(it, p) for it, p in zip(items, preds) if p is not None]
    out = {"set": name, "file": file, "n_items": len(items), "seconds": secs,
           "skipped": skipped, "coverage": word_coverage(lm.tokenizer, [it["text"] for it in items]),
           "multi_token": {"rule": MULTI_TOKEN_RULE.get(lm.task, ""),
                           "scored": sum(1 for p in preds if p is not None and p.get("pieces")),
                           "refused": sum(1 for x in skipped if MULTI_TOKEN_RULE["masked_lm"] in x["why"])},
           "tasks": {}}
    if kind == "linzen":
        out["kind"] = kind
        out["judged"] = _judged_table(items, preds, skipped)
    for task in sorted({it.get("task", "agreement") for it, _ in kept}):
        tk = [(it, p) for it, p in kept if it.get("task", "agreement") == task]
        by_a, by_c = defaultdict(list), defaultdict(list)
        for it, p in tk:
            by_a[it.get("n_attractors", "?")].append(p)
            by_c[it.get("construction", "?")].append(p)
        styles = sorted({it["style"] for it, _ in tk if "style" in it})
        by_s = {}
        for st in styles if len(styles) > 1 else []:
            sel = [(it, p) for it, p in tk if it.get("style") == st]
            a = defaultdict(list)
            for it, p in sel:
                a[it.get("n_attractors", "?")].append(p)
            by_s[st] = {"all": _acc([p for _, p in sel]),
                        "by_attractors": {str(k): _acc(v) for k, v in sorted(a.items(), key=lambda kv: str(kv[0]))}}
        out["tasks"][task] = {
            "all": _acc([p for _, p in tk]),
            "by_style": by_s,
            "by_attractors": {str(k): _acc(v) for k, v in sorted(by_a.items(), key=lambda kv: str(kv[0]))},
            "by_construction": {k: _acc(v) for k, v in sorted(by_c.items())},
            "missed": [{"text": it["text"], "answer": it["answer"], "wrong": it["wrong"],
                        "pred": p["pred"], "margin": round(p["margin"], 3)} for it, p in tk if not p["correct"]],
        }
    return out


def evaluate_spec(spec: str, files: list, batch_size: int = 32, limit: int | None = None) -> dict:
    """Load the model `spec` and evaluate it on each set of `files` (.jsonl paths or LinzenSets)."""
    from .models.load import load_model

    t0 = time.perf_counter()
    lm = load_model(spec)
    res = {"model": spec, "load_seconds": time.perf_counter() - t0, "task": lm.task,
           "describe": {k: v for k, v in lm.describe().items() if k not in ("self_check", "device")}, "sets": []}
    if lm.task not in ("masked_lm", "causal_lm"):
        res["error"] = (f"{spec} has no language-model output head (task: {lm.task}); it cannot fill a "
                        "[MASK], so there is no accuracy to report")
        res["coverage"] = {}
        for f in files:
            name, _, items, _ = _source_items(f, None)
            res["coverage"][name] = word_coverage(lm.tokenizer, [it["text"] for it in items])
        return res
    for f in files:
        res["sets"].append(evaluate_file(lm, f, batch_size, limit))
    return res


def _judged_report(j: dict) -> list[str]:
    """The judged table of a Linzen-format set as markdown lines."""
    a = j["all"]
    why = "; ".join(f"{n} {w}" for w, n in sorted(j["not_judged_why"].items(), key=lambda kv: -kv[1]))
    lines = [f"Judged {a['n']:,} of {j['items']:,} sentences"
             + (f" (not judged: {why})" if j["not_judged"] else "") + "."]
    if not a["n"]:
        return lines + [""]
    lines += [f"Accuracy {_pct(a['acc'])} % ({a['right']:,} / {a['n']:,}; 95 % interval "
              f"{_pct(a['low'])}–{_pct(a['high'])} %).", "",
              "| attractors | judged | right | accuracy (%) | 95 % interval (%) |", "|---|---:|---:|---:|---|"]
    for k, c in j["by_attractors"].items():
        lines.append(f"| {k} | {c['n']:,} | {c['right']:,} | {_pct(c['acc'])} | {_pct(c['low'])}–{_pct(c['high'])} |")
    return lines + [""]


def spec_report(res: dict, missed: bool = False) -> str:
    """One model's results as markdown tables."""
    d = res["describe"]
    lines = [f"## {res['model']}", "",
             f"{d['family']} {res['task']}, {d['layers']} layers, {d['heads']} heads, hidden {d['hidden']}, "
             f"{d['parameters']:,} parameters; loaded in {res['load_seconds']:.1f} s", ""]
    if res.get("error"):
        lines += [f"**{res['error']}.**", ""]
        for name, cov in res["coverage"].items():
            lines.append(f"- {name}: tokenizer: {_pct(cov['unk_word_share'])} % of {cov['words']} words "
                         f"[UNK], {_pct(cov['split_word_share'])} % split into pieces")
        return "\n".join(lines) + "\n"
    for s in res["sets"]:
        cov = s["coverage"]
        lines += [f"### {s['set']} ({s['n_items']} items, {s['seconds']:.1f} s)", "",
                  f"Tokenizer: {_pct(cov['unk_word_share'])} % of {cov['words']} words become [UNK]"
                  + (f" ({', '.join(cov['unk_words'][:8])})" if cov["unk_words"] else "")
                  + f", {_pct(cov['split_word_share'])} % are split into pieces"
                  + (f" (e.g. {'; '.join(cov['split_examples'][:3])})" if cov["split_examples"] else "") + "."]
        if s["skipped"]:
            lines.append(f"Skipped {len(s['skipped'])} items, e.g. {s['skipped'][0]['why']}.")
        mt = s.get("multi_token") or {}
        if mt.get("scored") or mt.get("refused"):
            lines.append(f"Contrast words of several tokens ({mt['rule']}): {mt['scored']} items scored, "
                         f"{mt['refused']} refused.")
        lines.append("")
        if s.get("judged"):
            lines += _judged_report(s["judged"])
        keys = sorted({k for t in s["tasks"].values() for k in t["by_attractors"]})
        lines += ["| task | n | accuracy (%) | top-1 (%) | " + " | ".join(f"{k} attr." for k in keys) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(keys)]
        for task, t in s["tasks"].items():
            for label, g in [(task, t)] + [(f"{task}, {st} style", v) for st, v in t.get("by_style", {}).items()]:
                cells = []
                for k in keys:
                    v = g["by_attractors"].get(k)
                    cells.append("–" if v is None else f"{_pct(v['acc'])} ({v['n']})")
                lines.append(f"| {label} | {g['all']['n']} | {_pct(g['all']['acc'])} | {_pct(g['all']['top1'])} | "
                             + " | ".join(cells) + " |")
        lines.append("")
        if missed:
            for task, t in s["tasks"].items():
                for m in t["missed"]:
                    lines.append(f"- missed ({task}): `{m['text']}` {m['answer']} vs {m['wrong']} "
                                 f"(top-1 {m['pred']}, margin {m['margin']})")
            lines.append("")
    return "\n".join(lines) + "\n"


def _sources(name: str) -> list:
    """A --set argument -> its sets: linzen:FOLDER -> [LinzenSet], else attnviz.datasets.set_files."""
    if name.startswith("linzen:"):
        return [LinzenSet.from_arg(name.split(":", 1)[1])]
    return set_files(name)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="attnviz evaluate", description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", action="append", metavar="SPEC",
                    help="builtin:NAME, pkg:smollm2, a folder, a .gguf file or a hub id; repeatable "
                         "(default: every built-in model)")
    ap.add_argument("--set", action="append", metavar="NAME",
                    help=f"{' | '.join(SETS)} | FILE.jsonl | linzen:FOLDER (repeatable; default real)")
    ap.add_argument("--linzen", action="append", metavar="FOLDER",
                    help="Linzen et al. (2016)'s agreement set: FOLDER with subj_agr_filtered.text and .gold "
                         "(the same as --set linzen:FOLDER; repeatable)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--limit", type=int, default=None, help="first N items of each set")
    ap.add_argument("--missed", action="store_true", help="list the items each model got wrong")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    names = list(args.set or []) + [f"linzen:{f}" for f in args.linzen or []]
    files = [f for name in (names or ["real"]) for f in _sources(name)]
    specs = args.model
    if not specs:
        from .models.load import builtin_names

        specs = [f"builtin:{n}" for n in builtin_names()]
        if not specs:
            raise InputError("no built-in model found: give --model SPEC")
    results = []
    for spec in specs:
        res = evaluate_spec(spec, files, args.batch_size, args.limit)
        results.append(res)
        print(spec_report(res, missed=args.missed), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"written: {args.json}")
    return 0 if any(not r.get("error") for r in results) else 2


if __name__ == "__main__":
    raise SystemExit(main())
