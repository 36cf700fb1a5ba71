"""What the model actually reads, and when its prediction may mean nothing.

Pure functions (no Streamlit): tokens in, a TokenReport out. The app draws the report as a strip of
tokens above the maps (unknown tokens and words split into pieces marked) with plain warnings.
"""
from __future__ import annotations

import functools
import html
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from .datasets import load_eval_set
from .models.load import is_builtin
from .resources import models_dir
from .text import group_text, readable_token, word_groups

MASK_RE = re.compile(r"\[mask\]", re.IGNORECASE)

# Unicode name prefixes of characters every English model reads as ordinary text
_OK_SCRIPTS = ("LATIN", "DIGIT", "SPACE", "FULL STOP", "COMMA", "APOSTROPHE", "QUOTATION", "HYPHEN")


@dataclass
class TokenReport:
    """marks[i]: "unk" (the tokenizer's unknown token), "piece" (part of a word split into several
    tokens), "special" ([CLS], [SEP], …), "target" is given separately, "" otherwise.
    warnings: plain sentences, each a reason the prediction may not be meaningful.
    predicted: one sentence saying which position is predicted and why."""

    marks: list
    warnings: list = field(default_factory=list)
    predicted: str = ""
    split_words: list = field(default_factory=list)  # the words split into pieces, as read
    unknown: int = 0
    foreign: list = field(default_factory=list)  # characters of another script or symbols


def foreign_chars(text: str) -> list:
    """Characters that are neither Latin letters, digits, ordinary punctuation nor spaces (another
    script, emoji, symbols), each once, in order of appearance."""
    out = []
    for ch in MASK_RE.sub(" ", str(text)):
        if ch.isspace() or ch in out:
            continue
        cat = unicodedata.category(ch)
        if cat.startswith("P") and ord(ch) < 0x2000:  # ASCII / Latin-1 punctuation and general punctuation
            continue
        name = unicodedata.name(ch, "")
        if ch.isascii() or name.startswith(_OK_SCRIPTS):
            continue
        out.append(ch)
    return out


def word_pieces(tokens: Sequence[str], special: Sequence[bool], word_ids: Optional[Sequence] = None) -> list:
    """tokens -> [[positions]] of the words read as more than one token (special tokens excluded)."""
    return [g for g in word_groups(tokens, special, word_ids) if len(g) > 1]


def check_tokens(tokens: Sequence[str], special: Sequence[bool], target: int, *, text: str, task: str,
                 unk_token: Optional[str] = None, mask_token: Optional[str] = None,
                 word_ids: Optional[Sequence] = None, blank: bool = False, trained_tokens: Optional[int] = None,
                 pieces_unseen: bool = False, has_prediction: bool = True) -> TokenReport:
    """Everything a reader should know before believing the prediction at `target`.

    text: the sentence as typed (the [MASK] spelling and the characters are checked there).
    task: "masked_lm" | "causal_lm" | "classification" | "encoder".
    blank: a causal model read the text before [MASK] (the prediction is the word that goes there).
    trained_tokens: the longest input (in tokens) the model saw in training, when known.
    pieces_unseen: the model was trained on whole words only (the built-in models), so word pieces
    are inputs it never saw."""
    n = len(tokens)
    special = [bool(s) for s in special]
    marks = ["special" if special[i] else "" for i in range(n)]
    unknown = 0
    if unk_token:
        for i, t in enumerate(tokens):
            if t == unk_token:
                marks[i] = "unk"
                unknown += 1
    groups = word_pieces(tokens, special, word_ids)
    split = []
    for g in groups:
        for i in g:
            if marks[i] == "":
                marks[i] = "piece"
        split.append(readable_token(group_text(tokens, g)))
    warnings = []
    if unknown:
        warnings.append(f"{unknown} token{'s' if unknown > 1 else ''} unknown to the model ({unk_token}): "
                        "it does not know what was written there, and the prediction may rest on nothing.")
    foreign = foreign_chars(text)
    if foreign:
        warnings.append("Characters of another script or symbols (" + " ".join(foreign[:8])
                        + (" …" if len(foreign) > 8 else "") + "): the model was trained on English text, "
                        "so it reads these as unknown tokens or byte pieces.")
    if split and pieces_unseen:
        warnings.append(f"{len(split)} word{'s' if len(split) > 1 else ''} outside the model's vocabulary, read as "
                        f"pieces it never saw in training ({', '.join(split[:6])}{' …' if len(split) > 6 else ''}).")
    if trained_tokens and n > trained_tokens:
        warnings.append(f"The sentence is {n} tokens long; the longest the model saw in training had "
                        f"{trained_tokens}. Its behaviour on longer input is untested.")
    tgt = f"{target}·{readable_token(tokens[target])}" if 0 <= target < n else str(target)
    has_mask_typed = bool(MASK_RE.search(text)) or bool(mask_token and mask_token in text)
    if task == "causal_lm":
        if blank:
            predicted = (f"Predicted: the word at the blank (___), read from the words before it; the row "
                         f"explained is the last word before the blank, {tgt}.")
        else:
            predicted = (f"Predicted: the next token after the last one, {tgt} (no [MASK] in the sentence: a "
                         "left-to-right model continues the text).")
    elif task == "masked_lm":
        if mask_token and tokens[target] == mask_token:
            predicted = f"Predicted: the word at {tgt}, the [MASK] position."
        elif not has_mask_typed:
            predicted = f"No [MASK] in the sentence: the position shown is {tgt}."
            if has_prediction:
                warnings.append(f"There is no [MASK] in the sentence, so the 'prediction' is the model's guess for "
                                f"{tgt}, a position it was not asked to fill: it means nothing. Write [MASK] "
                                "where the word to predict should go.")
        else:
            predicted = f"The row explained is {tgt} (chosen by hand; the [MASK] is elsewhere)."
            if has_prediction:
                warnings.append(f"The prediction is shown for {tgt}, not for the [MASK]: a masked LM's guess at a "
                                "position that is not masked mostly copies the word there.")
    elif task == "classification":
        predicted = f"Predicted: the class of the whole sentence, read at {tgt}."
    else:
        predicted = f"No output head: the maps explain the representation at {tgt}."
    return TokenReport(marks=marks, warnings=warnings, predicted=predicted, split_words=split, unknown=unknown,
                       foreign=foreign)


def strip_html(tokens: Sequence[str], marks: Sequence[str], target: Optional[int] = None) -> str:
    """The tokens as a row of small labelled boxes (HTML, every token escaped): unknown tokens red,
    pieces of split words underlined in orange, special tokens grey, the target outlined."""
    style = {"unk": "background:#fde0dc;border:1px solid #d62728;color:#a50f15",
             "piece": "background:#fff3e0;border:1px solid #ff7f0e;border-bottom:3px solid #ff7f0e",
             "special": "background:#f0f0f0;border:1px solid #ccc;color:#777",
             "": "background:#f7fbff;border:1px solid #c6dbef"}
    what = {"unk": "unknown to the model", "piece": "part of a word split into pieces", "special": "special token",
            "": "a whole word"}
    out = []
    for i, (t, m) in enumerate(zip(tokens, marks)):
        extra = ";outline:2px solid #d62728;outline-offset:1px" if i == target else ""
        tip = f"{i}: {what[m]}" + (" — the row explained" if i == target else "")
        out.append(f'<span class="tok tok-{m or "word"}" data-pos="{i}" title="{html.escape(tip)}" '
                   f'style="display:inline-block;margin:2px;padding:1px 5px;border-radius:4px;{style[m]}{extra}">'
                   f'<sub style="color:#888">{i}</sub>&nbsp;{html.escape(readable_token(t))}</span>')
    return '<div class="token-strip" style="line-height:2.0;font-size:15px">' + "".join(out) + "</div>"


_LONGEST: dict = {}


@functools.lru_cache(maxsize=32)
def _read_log(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def builtin_training_log(name: str) -> dict:
    """train_log.json of the built-in model `name` ({} when it is missing or unreadable); read once
    per file (the token strip asks on every rerun)."""
    return _read_log(str(models_dir() / name / "train_log.json"))


def training_log(lm) -> dict:
    """A built-in model's train_log.json ({} for other models or when it is missing)."""
    return builtin_training_log(lm.spec.split(":", 1)[1]) if is_builtin(lm) else {}


def pieces_unseen(lm) -> bool:
    """True for a built-in model trained on whole words only (its grammar's), False for one trained on
    WordPiece text (train_log.json says "word_pieces": true) and for every other model."""
    return is_builtin(lm) and not training_log(lm).get("word_pieces")


def longest_training_input(lm) -> Optional[int]:
    """The longest input (tokens) a model saw in training, where attnviz knows it: a built-in model's
    train_log.json ("max_train_tokens"), else the grammar's held-out sets, which have the lengths of
    the grammar's training sentences (the longest of them is taken); None for other models (their
    training data is not at hand)."""
    if not is_builtin(lm):
        return None
    key = lm.spec
    logged = training_log(lm).get("max_train_tokens")
    if key not in _LONGEST and logged:
        _LONGEST[key] = int(logged)
    if key not in _LONGEST:
        try:
            texts = [it["text"] for task in ("agreement", "pronoun") for it in load_eval_set(task)]
            _LONGEST[key] = max(len(lm.tokenizer(t)["input_ids"]) for t in texts) if texts else None
        except (OSError, ValueError, KeyError):
            _LONGEST[key] = None
    return _LONGEST[key]
