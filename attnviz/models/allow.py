"""Which model specs this process may load: any, unless ATTNVIZ_SERVE_MODELS is set (the classroom server
mode, `attnviz app --serve`). Then only the built-in models (builtin:NAME), the packaged ones (pkg:NAME) and
the specs that variable lists (a JSON list of the folders, .gguf files and hub ids the teacher named,
written as the app offers them) are loaded; anything else, such as a path typed into the app's URL, is
refused before the file system or the network is asked about it."""
from __future__ import annotations

import json
import os
from typing import Optional

from ..errors import ModelLoadError, shown

ENV = "ATTNVIZ_SERVE_MODELS"
ALWAYS = ("builtin:", "pkg:")  # the models that ship with attnviz (and its optional packages)


def served() -> Optional[list]:
    """The teacher's extra specs when this process serves a class (ATTNVIZ_SERVE_MODELS set), else None.
    A value that is not a JSON list of strings allows no extra spec (the built-in and packaged models only)."""
    raw = os.environ.get(ENV)
    if raw is None:
        return None
    try:
        specs = json.loads(raw)
    except ValueError:
        return []
    return [s for s in specs if isinstance(s, str) and s.strip()] if isinstance(specs, list) else []


def check(spec: str) -> None:
    """ModelLoadError (one line) when this process serves a class and spec is not one it offers."""
    extra = served()
    if extra is None or spec.startswith(ALWAYS) or spec in [s.strip() for s in extra]:
        return
    named = f", and {', '.join(shown(s, 60) for s in extra[:5])}{' ...' if len(extra) > 5 else ''}" if extra else ""
    raise ModelLoadError(f"this server offers only its built-in and packaged models (builtin:..., pkg:...){named}: "
                         f"'{shown(spec)}' is not one of them")
