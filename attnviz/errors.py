"""Errors with one-line messages meant to be shown to a person as they are."""


class AttnvizError(Exception):
    """Base class: str(e) is a complete, user-facing sentence."""


class ModelLoadError(AttnvizError):
    """The model spec could not be turned into a model (unknown, unreachable, unsupported)."""


class InputError(AttnvizError):
    """The text cannot be analysed (empty, too long, no target ...)."""


class LongInputWarning(UserWarning):
    """A text far longer than usual: the maps may take minutes and gigabytes (said before the work starts)."""
