"""Where the packaged data lives: the built-in models and the evaluation sets.

Both ship inside the package (`attnviz/data/models/NAME/`, `attnviz/data/sets/*.jsonl`) and are found
through importlib.resources, so an installed wheel and a checkout behave alike. Set ATTNVIZ_ASSETS to
a folder holding `models/` and/or `sets/` to use other copies (read at each call, so a test or a
server can point it elsewhere without re-importing).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def assets_root() -> Path:
    """The folder holding models/ and sets/: $ATTNVIZ_ASSETS if set, else the package's data/."""
    override = os.environ.get("ATTNVIZ_ASSETS")
    if override:
        return Path(override)
    return Path(str(resources.files("attnviz") / "data"))


def models_dir() -> Path:
    """The folder of the built-in models (one Hugging Face folder per model)."""
    return assets_root() / "models"


def sets_dir() -> Path:
    """The folder of the evaluation sets (.jsonl, one item per line)."""
    root = assets_root()
    if (root / "sets").is_dir() or not os.environ.get("ATTNVIZ_ASSETS"):
        return root / "sets"
    return Path(str(resources.files("attnviz") / "data" / "sets"))
