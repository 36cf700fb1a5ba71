"""Where the packaged data lives: the built-in models and the evaluation sets.

Both ship inside the package (`attnviz/data/models/NAME/`, `attnviz/data/sets/*.jsonl`) and are found
through importlib.resources, so an installed wheel and a checkout behave alike. Set ATTNVIZ_ASSETS to
a folder holding `models/` and/or `sets/` to use other copies (read at each call, so a test or a
server can point it elsewhere without re-importing). A name given by a user is turned into a folder by
folder_inside(), which refuses links that leave the folder it names; write_whole() writes an output file
whole or not at all.
"""

from __future__ import annotations

import os
import tempfile
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


def folder_inside(root: Path, name: str) -> Path:
    """root/name -> its real path (symlinks resolved), when it is a real folder inside root and nothing under
    it links out of root: ValueError (one line: which path, where it leads) otherwise. Every file that a
    load of the folder reads is then inside root."""
    real_root = Path(os.path.realpath(root))
    path = Path(root) / name
    if path.is_symlink():
        raise ValueError(f"'{path}' is a link (to '{os.readlink(path)}'), not a folder of {root}")
    real = Path(os.path.realpath(path))
    if real == real_root or real_root not in real.parents or not real.is_dir():
        raise ValueError(f"'{path}' is not a folder inside {root}")
    seen, todo = set(), [real]
    while todo:  # every entry, links to folders followed (each real folder once)
        folder = todo.pop()
        if folder in seen:
            continue
        seen.add(folder)
        for entry in os.scandir(folder):
            target = Path(os.path.realpath(entry.path))
            if target != real_root and real_root not in target.parents:
                raise ValueError(f"'{entry.path}' links to '{target}', outside {root}")
            if entry.is_dir():  # follows a link: the folder it names is walked too
                todo.append(target)
    return real


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_whole(path, data) -> None:
    """Write data (str as UTF-8, or bytes) to path whole or not at all: a temporary file beside it, flushed
    to disk, then renamed over it. A failure (disk full, Ctrl-C) leaves the old file, or none, never a part
    of one and never an empty one."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # as a plain open() would have made it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
