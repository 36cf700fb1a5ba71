"""The method contract: what a method module declares about itself, and the registry built from it.

A method is one module in attnviz/methods/ with
    INFO = MethodInfo(name=..., label=..., unit=..., ...)   # keyword fields, below
    def compute(trace, *, progress=None, **options) -> Map
    def mixing_ratios(trace, **options) -> {ratio: [L, n]}  # only with INFO.ratios: exactly those
and one line in attnviz/methods/__init__.py (`register(module)`). Everything the app, the CLI, the
study and the exports show about a method (label, unit, explanations, options, mixing ratios, cost)
is read from its MethodInfo; no other file names a method. Work that several methods share (one pass
for several maps or ratios) is kept with the trace through trace.cached.
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
class GraphView:
    """How a method reads the layered attention graph (tokens x layers, an edge (l, i) -> (l-1, j) of
    weight (ᾱ + I) / 2 row-normalised): what the Flow graph page shows for it."""

    label: str  # the page's choice, e.g. "Rollout (all paths)"
    help: str  # one sentence: what the red edges carry
    caption: str  # the total under the figure; {output}, {top}, {source} and {total} are filled in
    # edges(A, output, source=None, top=None) -> (total, F [top, n, n]): the mass the node (top, output)
    # sends down each edge (l, i) -> (l-1, j) as F[l-1][i, j], to input `source` (None: to all inputs)
    edges: Callable


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
    ratios: tuple = ()  # the context-mixing ratios (Kobayashi et al. 2021) this method's vectors give,
    # computed by its mixing_ratios
    options: tuple = ()  # Option(...) for each keyword option of compute()
    cost: str = "cheap"  # "cheap" (attention only), "norms" (one pass of norms), "pairs" (every
    # (receiver, source) pair through the FFN or a rerun: ~n times "norms"), "flow" (max-flow per pair)
    shared: str = ""  # entries with the same non-empty key share one computation (counted once in estimates)
    core: bool = False  # in the default set of the faithfulness study
    default_view: bool = False  # selected on the app's first view
    estimate: Optional[Callable] = None  # estimate(lm, n_tokens) -> seconds, for methods that ask before a long run
    graph: Optional[GraphView] = None  # composes the layered attention graph (rollout, flow): the Flow graph
    # page offers it, and on causal models its rows pile up at the first token
    # "before" / "after": this map is one end of Kobayashi et al.'s (2024) contextualization change, the
    # attention block's map against the whole layer's (context.contextualization_change)
    contextualization_change: str = ""
    compute: Optional[Callable] = None  # set by register(): compute(trace, *, progress=None, **options) -> Map
    # set by register() for a method with ratios: mixing_ratios(trace, **options) -> {ratio: [L, n]}
    mixing_ratios: Optional[Callable] = None

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


def check_info(info: MethodInfo, compute: Callable, mixing_ratios: Optional[Callable] = None) -> None:
    """Raise ValueError when a method's declaration is incomplete, or compute() or mixing_ratios() breaks
    the contract."""
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
    if info.graph is not None:
        g = info.graph
        if not isinstance(g, GraphView) or not all(str(x).strip() for x in (g.label, g.help, g.caption)) \
                or not callable(g.edges):
            raise ValueError(f"method '{info.name}': graph must be a GraphView with a label, help, caption and "
                             "an edges function")
    if info.contextualization_change not in ("", "before", "after"):
        raise ValueError(f"method '{info.name}': contextualization_change must be '', 'before' or 'after', "
                         f"got {info.contextualization_change!r}")
    _check_mixing_ratios(info, mixing_ratios)


def _check_mixing_ratios(info: MethodInfo, fn: Optional[Callable]) -> None:
    """A method that declares ratios computes them: mixing_ratios(trace, **options), its options a subset
    of INFO.options with the same defaults; a method without ratios has no such function."""
    if not info.ratios:
        if fn is not None:
            raise ValueError(f"method '{info.name}': mixing_ratios is given but INFO.ratios declares none")
        return
    if len(set(info.ratios)) != len(info.ratios):
        raise ValueError(f"method '{info.name}': INFO.ratios repeats a name: {info.ratios}")
    if not callable(fn):
        raise ValueError(f"method '{info.name}': declares the ratios {list(info.ratios)} but has no "
                         "mixing_ratios(trace, **options) that computes them")
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ValueError(f"method '{info.name}': mixing_ratios must take the trace as its first argument")
    defaults = info.defaults()
    for q in params[1:]:
        if q.name not in defaults or q.kind != inspect.Parameter.KEYWORD_ONLY:
            raise ValueError(f"method '{info.name}': mixing_ratios takes '{q.name}', which must be a keyword-only "
                             "option declared in INFO.options")
        if q.default != defaults[q.name]:
            raise ValueError(f"method '{info.name}': option '{q.name}' defaults to {q.default!r} in mixing_ratios "
                             f"but {defaults[q.name]!r} in INFO")


class Registry(dict):
    """name -> MethodInfo (with .compute), in registration order."""

    def register(self, module=None, *, info: Optional[MethodInfo] = None, compute: Optional[Callable] = None,
                 mixing_ratios: Optional[Callable] = None, replace: bool = False) -> MethodInfo:
        """Add a method: a module with INFO, compute (and mixing_ratios when INFO declares ratios), or
        info=, compute= (and mixing_ratios=) directly."""
        info = info if info is not None else getattr(module, "INFO", None)
        compute = compute if compute is not None else getattr(module, "compute", None)
        if info is None:
            raise ValueError(f"{getattr(module, '__name__', module)} declares no INFO")
        if mixing_ratios is None:
            mixing_ratios = getattr(module, "mixing_ratios", None) if module is not None else info.mixing_ratios
        check_info(info, compute, mixing_ratios)
        if info.name in self and not replace:
            raise ValueError(f"a method named '{info.name}' is already registered")
        taken = {r: m for m, i in self.items() if m != info.name for r in i.ratios}
        clash = [r for r in info.ratios if r in taken]
        if clash:
            raise ValueError(f"method '{info.name}': the ratio(s) {clash} are already declared by "
                             f"{sorted({taken[r] for r in clash})}")
        entry = dataclasses.replace(info, compute=compute, mixing_ratios=mixing_ratios)
        self[info.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self.pop(name, None)

    def ratio_names(self, costs: Optional[tuple] = None) -> tuple:
        """Every context-mixing ratio the registered methods declare (only those of methods whose
        MethodInfo.cost is in `costs`, if given), in registry order."""
        return tuple(r for info in self.values() if costs is None or info.cost in costs for r in info.ratios)

    def mixing_ratios(self, trace, names=None, options: Optional[dict] = None) -> dict:
        """Trace -> {ratio: [L, n]} for `names` (default: every declared ratio), in that order, each from
        the mixing_ratios of the method that declares it (methods that share a pass share it through
        the trace's cache). options: {option: value} for every ratio function that takes that option,
        and {method: {option: value}} for one method."""
        names = self.ratio_names() if names is None else tuple(names)
        owner = {r: m for m, info in self.items() for r in info.ratios}
        unknown = [r for r in names if r not in owner]
        if unknown:
            raise ValueError(f"unknown ratio(s) {unknown}; declared: {list(owner)}")
        options = dict(options or {})
        got = {}
        for m in dict.fromkeys(owner[r] for r in names):  # each method once
            info = self[m]
            takes = set(inspect.signature(info.mixing_ratios).parameters)
            kw = {k: v for k, v in options.items() if k in takes and k not in self}
            kw.update({k: v for k, v in (options.get(m) or {}).items() if k in takes})
            out = info.mixing_ratios(trace, **kw)
            if set(out) != set(info.ratios):
                raise ValueError(f"method '{m}': mixing_ratios returned {sorted(out)}, INFO.ratios declares "
                                 f"{list(info.ratios)}")
            got.update(out)
        return {r: got[r] for r in names}

    def change_pair(self) -> tuple:
        """-> (before, after): the two methods whose maps Kobayashi et al.'s (2024) contextualization
        change compares (MethodInfo.contextualization_change); ValueError unless exactly one of each."""
        pair = []
        for end in ("before", "after"):
            named = [m for m, i in self.items() if i.contextualization_change == end]
            if len(named) != 1:
                raise ValueError(f"exactly one method must declare contextualization_change={end!r}, got {named}")
            pair.append(named[0])
        return tuple(pair)

    def core(self) -> tuple:
        """The methods of the faithfulness study's default set (MethodInfo.core)."""
        return tuple(n for n, i in self.items() if i.core)

    def default_view(self) -> tuple:
        """The methods selected on the app's first view (MethodInfo.default_view)."""
        return tuple(n for n, i in self.items() if i.default_view)
