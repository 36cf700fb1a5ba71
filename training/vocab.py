"""Vocabulary and tokenizer of the built-in models.

A lowercase BERT WordPiece vocabulary: the five special tokens, punctuation, digits, single letters
and "##" continuation pieces (letters, digits, common suffixes), then every word form of the grammar
as a whole word. A word outside the grammar is split visibly into pieces ("zebras" is a grammar
word; "xylophones" -> x ##y ##l ##o ##p ##h ##o ##n ##es); a character with no piece becomes [UNK].
"""

from __future__ import annotations

import string
from pathlib import Path

from .lexicon import all_word_forms

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PUNCTUATION = list(".,?!'\"-;:()/&%$")
DIGITS = list(string.digits)
LETTERS = list(string.ascii_lowercase)
SUFFIXES = ["s", "es", "ed", "d", "ing", "ly", "er", "ers", "est", "y", "ies", "ied", "ness",
            "ment", "ments", "tion", "tions", "sion", "able", "ible", "ful", "less", "al", "ous",
            "ist", "ists", "ism", "ity", "ive", "ize", "ise", "ic", "en", "ion", "ions", "ish",
            "age", "ance", "ence", "ship", "hood", "ward", "wards", "man", "men", "like", "an",
            "ian", "ant", "ent", "ary", "ory", "ure", "th", "ty", "or", "ors", "ee", "ees", "ette",
            "ling", "let", "ize", "ized", "izing", "ated", "ating", "ate", "ates"]
PREFIXES = ["un", "re", "dis", "pre", "mis", "non", "over", "anti", "auto", "bi", "co", "de",
            "ex", "inter", "micro", "mid", "multi", "post", "semi", "sub", "super", "tele", "tri"]


def build_vocab() -> list[str]:
    """The vocabulary in id order (no duplicates)."""
    tokens: list[str] = []
    seen: set[str] = set()

    def add(tok: str) -> None:
        if tok not in seen:
            seen.add(tok)
            tokens.append(tok)

    for t in SPECIAL_TOKENS + PUNCTUATION + DIGITS + LETTERS:
        add(t)
    for t in LETTERS + DIGITS + SUFFIXES:
        add("##" + t)
    for t in PREFIXES:
        add(t)
    for w in all_word_forms():
        add(w)
    return tokens


def write_tokenizer(folder: str | Path):
    """Write vocab.txt, tokenizer.json, tokenizer_config.json (and special_tokens_map.json) into
    `folder`; return the tokenizer."""
    from transformers import BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True,
                            model_max_length=128)
    tok.save_pretrained(str(folder))
    # save_pretrained writes vocab.txt for this tokenizer class; write it ourselves when it doesn't,
    # in id order, so the folder also works with the slow-tokenizer file layout.
    vocab_file = folder / "vocab.txt"
    if not vocab_file.exists():
        vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return tok
