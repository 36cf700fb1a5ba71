"""Raw attention: α per head, the head mean ᾱ per layer."""
from __future__ import annotations

from .base import Map


def compute(trace, *, progress=None) -> Map:
    """Trace -> Map(layer ᾱ [L,n,n], heads α [L,H,n,n]); the model's own attention probabilities."""
    heads = trace.attention().astype("float64")
    return Map("attention", heads.mean(1), heads, {"rows_sum_to_one": True})
