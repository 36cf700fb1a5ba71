"""Site: which attention rows an intervention replaces."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class Site:
    """Which attention rows are replaced (all at the target position; layers/heads 0-based).

    kind "head": head `head` of layer `layer`; "layer": every head of layer `layer`; "all": every
    head of every layer."""

    kind: str = "head"
    layer: int = 0
    head: int = 0

    def __post_init__(self):
        if self.kind not in ("head", "layer", "all"):
            raise InputError(f"unknown intervention site '{self.kind}' (use head, layer or all)")

    def rows(self, n_layers: int, n_heads: int) -> list:
        """-> [(layer, head)] rows replaced, in order; raises InputError when out of range."""
        if self.kind != "all" and not 0 <= self.layer < n_layers:
            raise InputError(f"layer {self.layer + 1} does not exist (the model has {n_layers} layers)")
        if self.kind == "head":
            if not 0 <= self.head < n_heads:
                raise InputError(f"head {self.head + 1} does not exist (the model has {n_heads} heads)")
            return [(self.layer, self.head)]
        if self.kind == "layer":
            return [(self.layer, h) for h in range(n_heads)]
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]

    def start(self) -> int:
        """First layer that must be recomputed."""
        return 0 if self.kind == "all" else self.layer

    def label(self) -> str:
        """Plain words, 1-based: 'layer 6 head 3', 'all heads of layer 6', 'all layers'."""
        if self.kind == "head":
            return f"layer {self.layer + 1} head {self.head + 1}"
        if self.kind == "layer":
            return f"all heads of layer {self.layer + 1}"
        return "all heads of all layers"
