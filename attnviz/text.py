"""Token text: vocabulary entries as a reader writes them, position labels, word groups; no plotly.

The engine (analysis, faithfulness, adversarial, pair, tokencheck) and the figures both take token
text from here. Every label carries its position ("3·the"), because plotly merges duplicate category
labels, and is HTML-escaped, because plotly interprets a small HTML subset in labels: tokens are
always shown as text.
"""
from __future__ import annotations

import html
from typing import Optional, Sequence

import numpy as np

SEP = "·"


# ----------------------------------------------------------------------------------------- labels

# the characters GPT-2's byte-to-unicode table maps bytes to themselves (printable Latin-1)
_BYTE_CHARS = frozenset(chr(b) for b in [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)])


def readable_token(tok: str) -> str:
    """A vocabulary entry as a person reads it: byte-level BPE entries ('Ġare', 'Ċ') decoded by the
    tokenizers library's ByteLevel decoder, SentencePiece's word mark '▁' dropped, the leading space
    of a word-initial token removed, newline and tab shown as ↵ and ⇥, a bare space as ␣. WordPiece
    entries ('##s', '[CLS]') are kept as they are."""
    t = str(tok)
    if any(256 <= ord(c) <= 323 for c in t):  # GPT-2's byte-to-unicode table maps bytes there
        from tokenizers.decoders import ByteLevel  # only for byte-level entries: text.py stays light
        t = ByteLevel().decode([t])
    elif any(ord(c) >= 0x80 for c in t) and all(c in _BYTE_CHARS for c in t):
        # 'Ã©' is 'é' in GPT-2's table (bytes C3 A9 map to themselves): decode it when the bytes are
        # valid UTF-8; a WordPiece entry such as 'café' (E9 alone is no UTF-8) stays as it is
        try:
            t = bytes(ord(c) for c in t).decode("utf-8")
        except UnicodeDecodeError:
            pass
    elif "▁" in t:
        t = t.replace("▁", " ")
    t = t.replace("\n", "↵").replace("\t", "⇥").strip(" ")
    return t if t else ("␣" if str(tok) else "")


def clean_token(tok: str) -> str:
    """A token as plain, escaped, readable text: plotly shows '<b>' literally, never as markup."""
    return html.escape(readable_token(tok), quote=False)


def token_labels(tokens: Sequence[str], positions: Optional[Sequence[int]] = None) -> list:
    """tokens [n] -> ["0·[CLS]", "1·the", ...] (position first, token escaped)."""
    positions = range(len(tokens)) if positions is None else positions
    return [f"{p}{SEP}{clean_token(t)}" for p, t in zip(positions, tokens)]


# ------------------------------------------------------------------------------------ word groups

_CONT_PREFIX = "##"
_START_MARKS = ("Ġ", "▁")


def word_groups(tokens: Sequence[str], special: Sequence[bool], word_ids: Optional[Sequence] = None) -> list:
    """tokens [n] -> groups of positions, one per word: [[0], [1], [2, 3], ...].

    word_ids (from a fast tokenizer, None for special tokens) decide when given and consistent;
    otherwise WordPiece continuations ("##x") join the previous token, and for byte-level /
    SentencePiece vocabularies a token without a word-start mark ("Ġ", "▁") joins the previous one.
    Special tokens are always alone.
    """
    n = len(tokens)
    special = [bool(s) for s in special]
    groups: list = []
    if word_ids is not None and len(word_ids) == n:
        last = None
        for i, w in enumerate(word_ids):
            if special[i] or w is None:
                groups.append([i])
                last = None
            elif w == last:
                groups[-1].append(i)
            else:
                groups.append([i])
                last = w
        return groups
    byte_level = any(str(t).startswith(_START_MARKS) for t in tokens)
    for i, t in enumerate(tokens):
        t = str(t)
        joins = False
        if i > 0 and not special[i] and not special[i - 1]:
            if t.startswith(_CONT_PREFIX):
                joins = True
            elif byte_level and not t.startswith(_START_MARKS):
                joins = True
        if joins:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def group_text(tokens: Sequence[str], group: Sequence[int]) -> str:
    """Pieces of one word -> the word ("cab", "##inet" -> "cabinet"; "Ġcab", "inet" -> "cabinet")."""
    out = []
    for k, i in enumerate(group):
        t = str(tokens[i])
        if k > 0 and t.startswith(_CONT_PREFIX):
            t = t[len(_CONT_PREFIX):]
        if k == 0 and t.startswith(_START_MARKS) and len(t) > 1:
            t = t[1:]
        out.append(t)
    return "".join(out)


# ------------------------------------------------------------------------------------ maps
# (the engine flags a row whose total sits on one position; the Explore page names a sink column)

def dominant_column(M: np.ndarray) -> tuple:
    """(j, share): the column holding the largest part of a non-negative map's total, and that part
    (0..1); (None, 0.0) for an empty, all-zero or signed map. A share near 1 is a sink column (e.g. the
    first token of a causal LM) that washes every other cell out on a linear colour scale."""
    M = np.asarray(M, dtype=np.float64)
    finite = np.where(np.isfinite(M), M, 0.0)
    total = float(finite.sum())
    if finite.size == 0 or total <= 0 or (finite < 0).any():
        return None, 0.0
    col = finite.sum(0)
    j = int(col.argmax())
    return j, float(col[j] / total)
