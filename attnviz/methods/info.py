"""The method contract: what a method module declares about itself, and the registry built from it.

A method is one module in attnviz/methods/ with
    INFO = MethodInfo(name=..., label=..., unit=..., ...)   # keyword fields, below
    def compute(trace, *, progress=None, **options) -> Map
and one line in attnviz/methods/__init__.py (`register(module)`). Everything the app, the CLI, the
study and the exports show about a method (label, unit, explanations, options, mixing ratios, cost)
is read from its MethodInfo; no other file names a method.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional

COST_CLASSES = ("cheap", "norms", "pairs", "flow")


@dataclass(frozen=True, kw_only=True)
class Option:
    """One keyword option of compute(): its name, default, a line of help, and allowed values."""

    name: str
    default: Any
    help: str
    choices: tuple = ()


@dataclass(frozen=True, kw_only=True)
class MethodInfo:
    """What a method module declares (keyword fields; compute is filled in by register())."""

    name: str  # registry name: the URL, the CLI's --methods, exports
    label: str  # short display name
    unit: str  # what a cell measures, for the colour bar ("... (share of 1)" or "... (norm, hidden units)")
    summary: str  # one line: the formula and the paper
    explain: str  # one or two plain sentences shown under the map
    what: str  # About page: what the map shows (markdown)
    caveats: str  # About page: what it leaves out, when not to trust it (markdown)
    reference: str = ""  # the paper
    per_head: bool = False  # has per-head maps (Map.heads)
    layer_map: str = "layer map"  # what Map.layer is beside the heads (e.g. "head mean")
    rows_sum_to_one: bool  # every row is a share of 1
    decomposition: bool  # needs the functional trace (disabled when the model fails its self-check)
    completeness: bool = False  # fills Map.completeness (its error per layer against the real vectors)
    ratios: tuple = ()  # the context-mixing ratios (Kobayashi et al. 2021) this method's vectors give
    options: tuple = ()  # Option(...) for each keyword option of compute()
    cost: str = "cheap"  # "cheap" (attention only), "norms" (one pass of norms), "pairs" (every
    # (receiver, source) pair through the FFN or a rerun: ~n times "norms"), "flow" (max-flow per pair)
    shared: str = ""  # entries with the same non-empty key share one computation (counted once in estimates)
    core: bool = False  # in the default set of the faithfulness study
    default_view: bool = False  # selected on the app's first view
    estimate: Optional[Callable] = None  # estimate(lm, n_tokens) -> seconds, for methods that ask before a long run
    compute: Optional[Callable] = None  # set by register(): compute(trace, *, progress=None, **options) -> Map

    def defaults(self) -> dict:
        return {o.name: o.default for o in self.options}

    def option_names(self) -> tuple:
        return tuple(o.name for o in self.options)

    def relative_cost(self, n: int) -> float:
        """A rough cost relative to a cheap map, for progress fractions that move evenly in time."""
        return {"cheap": 1.0, "norms": 2.0, "pairs": 2.0 + n / 2, "flow": 1.0}[self.cost]

    @property
    def shares(self) -> bool:
        """Rows are shares of 1: one colour scale can serve all such maps."""
        return bool(self.rows_sum_to_one)


_REQUIRED_TEXT = ("name", "label", "unit", "summary", "explain", "what", "caveats")


def check_info(info: MethodInfo, compute: Callable) -> None:
    """Raise ValueError when a method's declaration is incomplete or compute() breaks the contract."""
    if not isinstance(info, MethodInfo):
        raise ValueError(f"INFO must be a MethodInfo, got {type(info).__name__}")
    empty = [f for f in _REQUIRED_TEXT if not str(getattr(info, f) or "").strip()]
    if empty:
        raise ValueError(f"method '{info.name}': empty field(s) {empty}")
    if info.cost not in COST_CLASSES:
        raise ValueError(f"method '{info.name}': cost must be one of {COST_CLASSES}, got {info.cost!r}")
    if ("share of 1" in info.unit or "of 1)" in info.unit) != bool(info.rows_sum_to_one):
        raise ValueError(f"method '{info.name}': the unit {info.unit!r} must say '(share of 1)' exactly when rows sum to one")
    if not callable(compute):
        raise ValueError(f"method '{info.name}': compute is not callable")
    sig = inspect.signature(compute)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ValueError(f"method '{info.name}': compute must take the trace as its first argument")
    p = sig.parameters.get("progress")
    if p is None or p.kind != inspect.Parameter.KEYWORD_ONLY or p.default is not None:
        raise ValueError(f"method '{info.name}': compute must take a keyword-only progress=None")
    for o in info.options:
        q = sig.parameters.get(o.name)
        if q is None or q.kind != inspect.Parameter.KEYWORD_ONLY:
            raise ValueError(f"method '{info.name}': option '{o.name}' must be a keyword-only argument of compute")
        if q.default != o.default:
            raise ValueError(f"method '{info.name}': option '{o.name}' defaults to {q.default!r} in compute "
                             f"but {o.default!r} in INFO")
    extra = [q.name for q in params[1:] if q.name != "progress" and q.name not in info.option_names()
             and q.kind != inspect.Parameter.VAR_KEYWORD]
    if extra:
        raise ValueError(f"method '{info.name}': compute takes {extra}, not declared in INFO.options")


class Registry(dict):
    """name -> MethodInfo (with .compute), in registration order."""

    def register(self, module=None, *, info: Optional[MethodInfo] = None, compute: Optional[Callable] = None,
                 replace: bool = False) -> MethodInfo:
        """Add a method: a module with INFO and compute, or info= and compute= directly."""
        info = info if info is not None else getattr(module, "INFO", None)
        compute = compute if compute is not None else getattr(module, "compute", None)
        if info is None:
            raise ValueError(f"{getattr(module, '__name__', module)} declares no INFO")
        check_info(info, compute)
        if info.name in self and not replace:
            raise ValueError(f"a method named '{info.name}' is already registered")
        entry = dataclasses.replace(info, compute=compute)
        self[info.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self.pop(name, None)

    def ratio_names(self) -> tuple:
        """Every context-mixing ratio the registered methods declare, in registry order."""
        return tuple(r for info in self.values() for r in info.ratios)

    def core(self) -> tuple:
        """The methods of the faithfulness study's default set (MethodInfo.core)."""
        return tuple(n for n, i in self.items() if i.core)

    def default_view(self) -> tuple:
        """The methods selected on the app's first view (MethodInfo.default_view)."""
        return tuple(n for n, i in self.items() if i.default_view)
