"""Method registry, built from the method modules: a new method is its file here (INFO + compute,
see info.py) plus one `register` line below. Everything else reads METHODS."""
from __future__ import annotations

from . import alti, atb_ff, atb_ff_res, atb_ff_res_ln, attention, attn_res, attn_res_ln, decompx
from . import flow as _flow
from . import globenc
from . import rollout as _rollout
from . import value_norm, value_zeroing
from .base import Completeness, Map, with_residual
from .flow import flow
from .info import GraphView, MethodInfo, Option, Registry
from .rollout import rollout

METHODS = Registry()
register = METHODS.register
unregister = METHODS.unregister

register(attention)
register(_rollout)
register(_flow)
register(value_norm)
register(attn_res)
register(attn_res_ln)
register(atb_ff)
register(atb_ff_res)
register(atb_ff_res_ln)
register(alti)
register(value_zeroing)
register(globenc)
register(decompx)

__all__ = ["METHODS", "MethodInfo", "Option", "GraphView", "Map", "Completeness", "flow", "rollout", "with_residual", "register", "unregister"]
