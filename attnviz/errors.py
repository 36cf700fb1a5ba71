"""Errors with one-line messages meant to be shown to a person as they are."""


class AttnvizError(Exception):
    """Base class: str(e) is a complete, user-facing sentence."""


class ModelLoadError(AttnvizError):
    """The model spec could not be turned into a model (unknown, unreachable, unsupported)."""


class InputError(AttnvizError):
    """The text cannot be analysed (empty, too long, no target ...)."""


class LongInputWarning(UserWarning):
    """A text far longer than usual: the maps may take minutes and gigabytes (said before the work starts)."""


def shown(value, limit: int = 100) -> str:
    """Something a person typed (a model name, a path) as it may appear inside a one-line message: control
    characters written as escapes (a newline as \\n), and cut to `limit` characters, saying how long it was."""
    s = str(value)
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    if len(out) > limit:
        out = f"{out[:limit - 1]}… ({len(s):,} characters)"
    return out
