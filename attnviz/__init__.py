"""attnviz: where does a transformer's representation of a token come from?

Public API: load_model, analyze, METHODS, mediate.

The names below are imported on first use (PEP 562), so `import attnviz.cli` starts without torch
and transformers: the command's argument checks and Ctrl-C handling are in place within
milliseconds, and `attnviz --help` is quick.
"""
from importlib import import_module

from .errors import AttnvizError, InputError, LongInputWarning, ModelLoadError

__version__ = "0.1.0"
__all__ = ["load_model", "analyze", "METHODS", "Analysis", "LoadedModel", "wrap", "mediate", "AttnvizError",
           "InputError", "ModelLoadError", "LongInputWarning", "__version__"]

_LAZY = {"Analysis": ".analysis", "analyze": ".analysis", "METHODS": ".methods",
         "LoadedModel": ".models.load", "load_model": ".models.load", "wrap": ".models.load",
         "mediate": ".mediation"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return import_module(f".{name}", __name__)  # a submodule: attnviz.export, attnviz.models ...
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
