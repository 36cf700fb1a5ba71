"""Minimal pairs: two sentences that differ in one word, analysed with the same maps, and their
difference. Pure functions (no Streamlit)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .text import SEP, clean_token

# (sentence A, sentence B) per preset: pairs that differ in exactly one word, each sentence answered right
# by the models they are offered for; masked LMs and causal LMs (which read only the words before [MASK])
PAIRS = {
    "Agreement: singular vs plural attractor": ("the key to the cabinet [MASK] red .", "the key to the cabinets [MASK] red ."),
    "Agreement: singular vs plural subject": ("the key to the cabinets [MASK] red .", "the keys to the cabinets [MASK] red ."),
    "Pronoun: woman vs man": ("the woman who met the boys lost [MASK] keys .", "the man who met the boys lost [MASK] keys ."),
}
CAUSAL_PAIRS = {
    "Agreement: singular vs plural subject": ("The key to the cabinets [MASK] on the table .",
                                              "The keys to the cabinets [MASK] on the table ."),
    "Agreement: no attractor": ("The cat [MASK] sleeping on the sofa .", "The cats [MASK] sleeping on the sofa ."),
    "Pronoun: woman vs man": ("The woman who talked to the boys lost [MASK] phone .",
                              "The man who talked to the boys lost [MASK] phone ."),
}


@dataclass
class PairDiff:
    """B − A cell by cell when both sentences have the same number of tokens (aligned position by
    position), else None with the reason; `changed` lists the positions whose tokens differ."""

    diff: Optional[np.ndarray]
    changed: list
    reason: str = ""


def changed_positions(tokens_a: Sequence[str], tokens_b: Sequence[str]) -> list:
    """Positions (of equal-length token lists) where the tokens differ."""
    return [i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y]


def difference(M_a: np.ndarray, M_b: np.ndarray, tokens_a: Sequence[str], tokens_b: Sequence[str]) -> PairDiff:
    """Maps [n, n] of the two sentences -> PairDiff (B − A). Sentences of different token counts have
    no cell-by-cell correspondence: diff None."""
    M_a, M_b = np.asarray(M_a, dtype=np.float64), np.asarray(M_b, dtype=np.float64)
    if len(tokens_a) != len(tokens_b) or M_a.shape != M_b.shape:
        return PairDiff(None, [], f"the sentences have {len(tokens_a)} and {len(tokens_b)} tokens: there is no "
                                  "cell-by-cell difference (make them differ in one word of one token)")
    return PairDiff(M_b - M_a, changed_positions(tokens_a, tokens_b))


def pair_labels(tokens_a: Sequence[str], tokens_b: Sequence[str]) -> list:
    """Axis labels of the difference map: "3·cabinet/cabinets" (A/B) where the tokens differ, else "3·the"."""
    return [f"{i}{SEP}{clean_token(x)}" if x == y else f"{i}{SEP}{clean_token(x)}/{clean_token(y)}"
            for i, (x, y) in enumerate(zip(tokens_a, tokens_b))]
