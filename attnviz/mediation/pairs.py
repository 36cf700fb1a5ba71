"""Minimal pairs for causal mediation, built from the evaluation sets we ship (attnviz/data/sets).

Agreement (Finlayson et al. 2021): the subject's number is changed. The subject is the first word after
the sentence's opening "the" (adjectives skipped) whose other number is a word of the shipped sets:
plural -> singular by dropping "s" / "es" ("ies" -> "y"), singular -> plural the other way. Items whose
subject is a name or a coordination ("the shirts and the path", construction coord_subj) are left out.

Pronoun (Vig et al. 2020, with the antecedent's gender instead of a profession's stereotype): the
antecedent is the sentence's first word when it is a name and the answer is "his" or "her"; it is
replaced by a name of the other gender. A name's gender is read off the built-in grammar's items
themselves: the first word of the items whose answer is "his" or "her" (a name seen with both is left
out).

Contrast: agreement (wrong, answer) of the base item, pronoun (the other gender's pronoun, answer),
so y = p(wrong) / p(right) as in Finlayson et al.: the counterfactual makes the wrong word right, and
the total effect is large and positive for a model that has learnt the task.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Sequence

from ..datasets import SETS, read_jsonl, set_path

_WORD = re.compile(r"[a-z]+")


@dataclass
class Pair:
    """A minimal pair: base text (A), counterfactual text (B), contrast (c1, c2) with y = p(c1)/p(c2)."""

    base: str
    counterfactual: str
    contrast: tuple
    task: str
    construction: str = ""
    n_attractors: Optional[int] = None  # of the base item (agreement: nouns of the other number between subject and verb)
    n_attractors_cf: Optional[int] = None  # after the change
    changed: tuple = ()  # (word in A, word in B)
    source: str = ""  # set file and line
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(base=self.base, counterfactual=self.counterfactual, contrast=list(self.contrast), task=self.task,
                    construction=self.construction, n_attractors=self.n_attractors,
                    n_attractors_cf=self.n_attractors_cf, changed=list(self.changed), source=self.source)


@lru_cache(maxsize=1)
def shipped_words() -> frozenset:
    """Every lower-case word of the shipped sets' texts (the lexicon the number flip checks against)."""
    words = set()
    for f in sorted(set(SETS["all"])):
        for it in read_jsonl(set_path(f)):
            words.update(_WORD.findall(it["text"].lower()))
    return frozenset(words)


# words after which the subject's noun phrase has ended (prepositions, relativisers, conjunctions)
_STOP = frozenset("which that who whom whose with without beside near by under above below on of for from in "
                  "behind to and or at into over across outside inside around like".split())
_IRREGULAR = {"man": "men", "woman": "women", "child": "children", "tooth": "teeth", "foot": "feet",
              "person": "people", "mouse": "mice", "goose": "geese"}


def verb_is_plural(verb: str) -> bool:
    """The number of an agreeing verb form: are / were / have and forms without a final s are plural."""
    v = verb.lower()
    if v in ("are", "were", "have"):
        return True
    if v in ("is", "was", "has"):
        return False
    return not v.endswith("s")


def other_number(word: str, words: frozenset, plural: bool) -> Optional[str]:
    """The word (a noun in number `plural`) in the other number, when that form is one of `words`:
    regular -s / -es / -ies forms and the irregular ones (man/men, also as the end of a compound)."""
    w = word.lower()
    pairs = list(_IRREGULAR.items())
    cands = []
    for sg, pl in pairs:
        if plural and w.endswith(pl):
            cands.append(w[:len(w) - len(pl)] + sg)
        if not plural and w.endswith(sg):
            cands.append(w[:len(w) - len(sg)] + pl)
    if plural:
        if w.endswith("ies"):
            cands.append(w[:-3] + "y")
        if w.endswith("es"):
            cands.append(w[:-2])
        if w.endswith("s") and not w.endswith("ss"):
            cands.append(w[:-1])
    else:
        cands += [w + "s", w + "es"] + ([w[:-1] + "ies"] if w.endswith("y") else [])
    for c in cands:
        if c != w and c in words and len(c) > 1:
            return c
    return None


def _flip_subject(text: str, answer: str, words: frozenset) -> Optional[tuple]:
    """(new text, old word, new word) with the subject's number changed, or None: the subject is the
    first word after the opening "the" (adjectives skipped, at most 4 words, none past a preposition or
    relativiser) that has the other number's form in `words`."""
    toks = text.split(" ")
    if len(toks) < 2 or toks[0].lower() != "the":
        return None
    plural = verb_is_plural(answer)
    for i in range(1, min(5, len(toks))):
        w = toks[i]
        if "[MASK]" in w or not w.isalpha() or w.lower() in _STOP:
            return None
        o = other_number(w, words, plural)
        if o is not None:
            return " ".join(toks[:i] + [o] + toks[i + 1:]), w, o
    return None


def agreement_pairs(items: Sequence[dict], words: Optional[frozenset] = None, source: str = "") -> list:
    """Agreement items (text with [MASK], answer, wrong) -> [Pair] with the subject's number changed."""
    words = words if words is not None else shipped_words()
    out = []
    for k, it in enumerate(items):
        if it.get("task", "agreement") != "agreement" or it.get("construction") == "coord_subj":
            continue
        if "answer" not in it or "wrong" not in it:
            continue
        f = _flip_subject(it["text"], it["answer"], words)
        if f is None:
            continue
        text, old, new = f
        na, ni = it.get("n_attractors"), it.get("n_intervening")
        out.append(Pair(base=it["text"], counterfactual=text, contrast=(it["wrong"], it["answer"]), task="agreement",
                        construction=it.get("construction", ""), n_attractors=na,
                        n_attractors_cf=(ni - na) if isinstance(na, int) and isinstance(ni, int) else None,
                        changed=(old, new), source=f"{source}:{k + 1}" if source else str(k + 1)))
    return out


@lru_cache(maxsize=1)
def name_genders() -> dict:
    """name -> "m" | "f" from the built-in grammar's pronoun items (pronoun_test, handwritten) whose first
    word is a name and whose answer is his / her (names seen with both are left out)."""
    seen: dict = {}
    for f in ("pronoun_test.jsonl", "handwritten.jsonl"):
        for it in read_jsonl(set_path(f)):
            if it.get("task") != "pronoun" or it.get("answer") not in ("his", "her"):
                continue
            first = it["text"].split(" ")[0]
            if not first.isalpha() or first.lower() in ("the", "a", "an", "today", "yesterday"):
                continue
            g = "m" if it["answer"] == "his" else "f"
            seen.setdefault(first.lower(), set()).add(g)
    return {n: next(iter(g)) for n, g in seen.items() if len(g) == 1}


def _choices(name: str, gender: str, genders: dict) -> list:
    """The names of the other gender in a fixed order that depends on `name` (so pairs differ)."""
    other = sorted(n for n, g in genders.items() if g != gender)
    h = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
    k = h % len(other) if other else 0
    return other[k:] + other[:k]


def pronoun_pairs(items: Sequence[dict], tokenizer=None, source: str = "", tries: int = 20) -> list:
    """Pronoun items -> [Pair] with the antecedent (the first word, a name) replaced by a name of the other
    gender. With a tokenizer, the first of up to `tries` candidate names that keeps the number of
    tokens is taken (patching is position by position); without one, the first candidate."""
    genders = name_genders()
    out = []
    for k, it in enumerate(items):
        if it.get("task", "pronoun") != "pronoun" or it.get("answer") not in ("his", "her"):
            continue
        toks = it["text"].split(" ")
        first = toks[0]
        g = genders.get(first.lower())
        if g is None:
            continue
        contrast = ("her" if it["answer"] == "his" else "his", it["answer"])
        present = {w.lower() for w in toks}
        for cand in [c for c in _choices(first.lower(), g, genders) if c not in present][:tries]:
            new = cand.capitalize() if first[0].isupper() else cand
            text = " ".join([new] + toks[1:])
            if tokenizer is not None and _n_tokens(tokenizer, text) != _n_tokens(tokenizer, it["text"]):
                continue
            out.append(Pair(base=it["text"], counterfactual=text, contrast=contrast, task="pronoun",
                            construction=it.get("construction", ""), n_attractors=it.get("n_attractors"),
                            changed=(first, new), source=f"{source}:{k + 1}" if source else str(k + 1)))
            break
    return out


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text.replace("[MASK]", "x"), add_special_tokens=True)["input_ids"])


def shipped_pairs(task: str, n: Optional[int] = None, tokenizer=None) -> list:
    """The first n minimal pairs of a task ("agreement" | "pronoun") from the built-in grammar's held-out
    set (agreement_test.jsonl: pp, orc, src, coord, simple; pronoun_test.jsonl)."""
    if task == "agreement":
        pairs = agreement_pairs(read_jsonl(set_path("agreement_test.jsonl")), source="agreement_test.jsonl")
    elif task == "pronoun":
        pairs = pronoun_pairs(read_jsonl(set_path("pronoun_test.jsonl")), tokenizer=tokenizer, source="pronoun_test.jsonl")
    else:
        raise ValueError(f"task must be 'agreement' or 'pronoun', got {task!r}")
    return pairs if n is None else pairs[:n]


def pairs_from_items(items: Sequence, tokenizer=None) -> list:
    """Study items (dicts with text, answer, wrong, task) -> [Pair]: agreement items get the subject's
    number changed, pronoun items the antecedent's gender; items already given as pairs
    ({"base", "counterfactual", "contrast"}) are taken as they are."""
    out = []
    for k, it in enumerate(items):
        if not isinstance(it, dict):
            continue
        if "base" in it and "counterfactual" in it and "contrast" in it:
            out.append(Pair(base=it["base"], counterfactual=it["counterfactual"], contrast=tuple(it["contrast"]),
                            task=it.get("task", ""), construction=it.get("construction", ""),
                            n_attractors=it.get("n_attractors"), source=str(k + 1)))
        elif it.get("task") == "pronoun":
            out += [p for p in pronoun_pairs([it], tokenizer=tokenizer) if not setattr(p, "source", str(k + 1))]
        else:
            out += [p for p in agreement_pairs([it]) if not setattr(p, "source", str(k + 1))]
    return out
