"""attnviz: where does a transformer's representation of a token come from?

Public API: load_model, analyze, METHODS.
"""
from .analysis import Analysis, analyze
from .errors import AttnvizError, InputError, ModelLoadError
from .methods import METHODS
from .models.load import LoadedModel, load_model, wrap

__version__ = "0.1.0"
__all__ = ["load_model", "analyze", "METHODS", "Analysis", "LoadedModel", "wrap", "AttnvizError",
           "InputError", "ModelLoadError", "__version__"]
