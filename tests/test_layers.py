"""The package's layers (pyproject.toml, [tool.importlinter]) hold, and the checks can fail.

`lint-imports` (import-linter) checks the contracts: the layers app/cli > figures > studies >
analysis > methods > trace > models > text/data, the engine without plotly/streamlit/figures/app,
nothing importing the training code. A second config that the code breaks on purpose shows the
checker reports broken layers and forbidden external imports. A separate check finds import circles
in grimp's graph of every `import` statement in the package (inside functions and TYPE_CHECKING
blocks too, where the old circles were hidden), module by module and package by package.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import networkx as nx
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter's own TOML reader
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"  # the venv's own, beside this Python


def _lint(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.skip(f"lint-imports is not installed beside {sys.executable} (pip install import-linter)")
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _contracts() -> list:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def test_the_contracts_are_declared():
    """The checks below mean something only while the contracts are there: the layers from app/cli
    down to text/data, and the forbidden imports."""
    by_id = {c["id"]: c for c in _contracts()}
    layers = [[m.strip() for m in l.replace(":", "|").split("|")] for l in by_id["layers"]["layers"]]
    assert by_id["layers"]["type"] == "layers"
    assert layers[0] == ["attnviz.cli", "attnviz.app"] and layers[1] == ["attnviz.figures"]
    order = [m for l in layers for m in l]
    for upper, lower in [("attnviz.figures", "attnviz.faithfulness"), ("attnviz.faithfulness", "attnviz.analysis"),
                         ("attnviz.adversarial", "attnviz.trace"), ("attnviz.analysis", "attnviz.methods"),
                         ("attnviz.methods", "attnviz.trace"), ("attnviz.trace", "attnviz.models"),
                         ("attnviz.models", "attnviz.text"), ("attnviz.models", "attnviz.errors")]:
        assert order.index(upper) < order.index(lower), (upper, lower)
    ui = by_id["engine-no-ui"]
    assert {"plotly", "streamlit", "attnviz.figures", "attnviz.app"} <= set(ui["forbidden_modules"])
    assert {"attnviz.models", "attnviz.trace", "attnviz.methods", "attnviz.analysis", "attnviz.faithfulness",
            "attnviz.adversarial", "attnviz.context", "attnviz.pair", "attnviz.tokencheck"} <= set(ui["source_modules"])
    assert by_id["no-training"]["forbidden_modules"] == ["training"]
    assert by_id["no-training"]["source_modules"] == ["attnviz"]


def test_every_package_module_is_in_a_layer():
    """A new top-level module of attnviz gets a place in the layers (or it would be checked by nothing)."""
    layers = {m.strip() for l in next(c for c in _contracts() if c["id"] == "layers")["layers"]
              for m in l.replace(":", "|").split("|")}
    pkg = ROOT / "attnviz"
    found = {f"attnviz.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"}
    found |= {f"attnviz.{p.parent.name}" for p in pkg.glob("*/__init__.py")}
    assert found - layers == set()


def test_lint_imports_passes():
    r = _lint()
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"{len(_contracts())} kept, 0 broken" in out


def test_lint_imports_catches_a_broken_layer_and_a_forbidden_import(tmp_path):
    """The same checker on contracts the code breaks: models put above trace (trace imports models),
    and plotly forbidden to the figures (an external package, seen through include_external_packages)."""
    cfg = tmp_path / "broken.toml"
    cfg.write_text(textwrap.dedent("""
        [tool.importlinter]
        root_package = "attnviz"
        include_external_packages = true

        [[tool.importlinter.contracts]]
        id = "upside-down"
        name = "models above trace"
        type = "layers"
        layers = ["attnviz.models", "attnviz.trace"]

        [[tool.importlinter.contracts]]
        id = "figures-no-plotly"
        name = "figures without plotly"
        type = "forbidden"
        source_modules = ["attnviz.figures"]
        forbidden_modules = ["plotly"]
        """), encoding="utf-8")
    r = _lint(cfg)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "0 kept, 2 broken" in out
    assert "attnviz.trace -> attnviz.models" in out  # trace.py imports the functional forward
    assert "attnviz.figures.maps -> plotly" in out


def _module_graph(package: str, path=None) -> nx.DiGraph:
    """Every import between modules of `package` (grimp reads each import statement, also those inside
    functions and under `if TYPE_CHECKING:`) as a networkx graph."""
    if path is not None:
        sys.path.insert(0, str(path))
    try:
        g = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    finally:
        if path is not None:
            sys.path.remove(str(path))
    D = nx.DiGraph()
    D.add_nodes_from(g.modules)
    for m in g.modules:
        D.add_edges_from((m, t) for t in g.find_modules_directly_imported_by(m))
    return D


def _circles(D: nx.DiGraph) -> list:
    """Each import circle as a list of modules (one per strongly connected part, longest first)."""
    return sorted((sorted(c) for c in nx.strongly_connected_components(D) if len(c) > 1), key=len, reverse=True)


def _packages(D: nx.DiGraph, depth: int = 2) -> nx.DiGraph:
    """The graph of attnviz's top-level modules and subpackages (attnviz.faithfulness, attnviz.trace ...):
    an edge where any module of one imports any module of the other."""
    unit = lambda m: ".".join(m.split(".")[:depth])  # noqa: E731
    P = nx.DiGraph()
    P.add_nodes_from({unit(m) for m in D if m.count(".") >= depth - 1})
    P.add_edges_from((unit(a), unit(b)) for a, b in D.edges() if unit(a) != unit(b) and a.count(".") >= depth - 1
                     and b.count(".") >= depth - 1)
    return P


def test_the_circle_check_sees_a_circle_hidden_in_a_function(tmp_path):
    """The check below on a package with the shape of the old study <-> ray_engine circle: one side
    imports the other at the top, the other imports back inside a function."""
    pkg = tmp_path / "circlepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "study.py").write_text("from .engine import run\n")
    (pkg / "sub" / "engine.py").write_text("def run():\n    from .study import score\n    return score\n")
    (pkg / "plain.py").write_text("from .sub import study\n")
    D = _module_graph("circlepkg", tmp_path)
    assert _circles(D) == [["circlepkg.sub.engine", "circlepkg.sub.study"]]
    assert list(nx.simple_cycles(_packages(D))) == []  # a circle inside one package is not one between packages


def test_no_import_circles_in_attnviz():
    D = _module_graph("attnviz")
    assert len(D) > 50 and D.has_edge("attnviz.trace", "attnviz.models.forward")  # the real package was read
    assert _circles(D) == []
    cycles = list(nx.simple_cycles(_packages(D)))
    assert cycles == []
