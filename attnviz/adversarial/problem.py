"""The intervention problem for one (model, sentence, site): what is fixed (the start layer's input,
the original rows α and output ŷ), and the output distribution as a function of the replaced rows α'
— by models/forward.run_layers with attention overrides (the plain formulation) or by the fast
path (adversarial/fastpath.py, the same numbers with less work)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..errors import AttnvizError, InputError
from ..models.forward import rope_for, run_layers
from ..models.check import hf_forward
from ..models.fused import index_of
from ..trace import DEFAULT_MAX_TOKENS, Encoded, OnEncoded, Trace, encode
from .distances import jsd, tvd
from .fastpath import outputs_fast
from .outputs import output_probs
from .site import Site


@dataclass
class Problem(OnEncoded):
    """Everything fixed for one (model, sentence, site): the start layer's input x [1, n, d], the
    original rows alpha0 [R, n], the columns a row may use (allowed [n]), the original output
    distribution y0 [C], and the output labels."""

    lm: object
    enc: Encoded
    site: Site
    rows: list  # [(layer, head)]
    x: torch.Tensor  # [1, n, d] input of layer site.start()
    alpha0: torch.Tensor  # [R, n] float64, rows of the recomputed (unmodified) forward
    allowed: torch.Tensor  # [n] bool
    y0: torch.Tensor  # [C] float64 output distribution of the unmodified functional forward
    model_y0: Optional[np.ndarray]  # [C] the model's own output distribution (for the record)
    output_kind: str  # "token" | "sequence"
    dtype: torch.dtype
    labels: Optional[list] = None  # class names for sequence classifiers
    rope: Optional[tuple] = None  # (cos, sin) [1, n, dh] for rotary models
    out_start: Optional[torch.Tensor] = None  # [1, n, d] unmodified output of the first intervened layer
    fast: bool = True  # outputs(): the fast path (run_layers' numbers up to float rounding, less work)
    cache: dict = None  # what the fast path computes once per Problem (adversarial/fastpath.py)

    def __post_init__(self):
        if self.cache is None:
            self.cache = {}

    @property
    def n(self) -> int:
        return self.x.shape[1]

    def label_of(self, idx: int) -> str:
        if self.output_kind == "sequence":
            return str(self.labels[idx]) if self.labels and idx < len(self.labels) else str(idx)
        return self.lm.tokenizer.convert_ids_to_tokens(int(idx))

    def by_layer(self, alpha: torch.Tensor) -> dict:
        """alpha [B, R, n] -> {layer: (heads, alpha rows [B, len(heads), n])}. A layer's rows are
        consecutive (Site.rows), so they are cut out as a slice: no index tensor is copied to the device
        in a loop that runs hundreds of times (nor into a CUDA graph)."""
        if "by_layer" not in self.cache:
            groups: dict = {}
            for r, (l, h) in enumerate(self.rows):
                groups.setdefault(l, ([], []))
                groups[l][0].append(h)
                groups[l][1].append(r)
            self.cache["by_layer"] = {l: (heads, index_of(idx)) for l, (heads, idx) in groups.items()}
        return {l: (heads, alpha[:, idx, :]) for l, (heads, idx) in self.cache["by_layer"].items()}

    def overrides(self, alpha: torch.Tensor) -> dict:
        """alpha [B, R, n] -> {layer: callable override replacing probs[:, heads, target, :]} for
        models/forward.run_layers."""
        t = self.target
        out = {}
        for l, (heads, a_l) in self.by_layer(alpha).items():
            def f(probs, heads=index_of(heads), a_l=a_l):
                p = probs.expand(a_l.shape[0], -1, -1, -1).clone()
                p[:, heads, t, :] = a_l.to(p.dtype)
                return p

            out[l] = f
        return out

    def outputs(self, alpha: Optional[torch.Tensor], fast: bool = True) -> torch.Tensor:
        """alpha [B, R, n] (or None: the unmodified forward, B = 1) -> output distribution [B, C]
        (float64). Differentiable in alpha.

        fast=False: run_layers(arch, x expanded to [B, n, d], start, overrides) — every position of
        every layer from the site's first layer (the plain formulation). fast=True: the same numbers
        up to float rounding with less work (adversarial/fastpath.py)."""
        if alpha is None or not fast:
            B = 1 if alpha is None else alpha.shape[0]
            x = self.x.expand(B, -1, -1)
            ov = None if alpha is None else self.overrides(alpha)
            final, _ = run_layers(self.lm.arch, x, start=self.site.start(), overrides=ov,
                                  layers=self.lm.layers(self.dtype))
            return output_probs(self.lm, final, self.target, self.output_kind)
        return outputs_fast(self, alpha)

    def distances(self, alpha: torch.Tensor):
        """alpha [B, R, n] -> (jsd [B] mean over rows, tvd [B], probs [B, C]); float64."""
        probs = self.outputs(alpha, fast=self.fast)
        j = jsd(alpha.double(), self.alpha0.unsqueeze(0)).mean(-1)
        return j, tvd(probs, self.y0.unsqueeze(0)), probs

    def softmax_rows(self, theta: torch.Tensor) -> torch.Tensor:
        """theta [B, R, m] (logits over the allowed columns) -> alpha [B, R, n] with zeros elsewhere."""
        a = torch.softmax(theta, dim=-1)
        if "allowed" not in self.cache:  # read from the device once, not at every step
            cols = torch.nonzero(self.allowed).flatten().tolist()
            self.cache["allowed"] = (len(cols) == self.n, index_of(cols))
        every, cols = self.cache["allowed"]
        if every:
            return a
        full = a.new_zeros(a.shape[:-1] + (self.n,))
        full[..., cols] = a
        return full


def _as_encoded(lm, text, target, max_tokens) -> Encoded:
    if isinstance(text, Trace):
        return text.enc
    if isinstance(text, Encoded):
        return text
    return encode(lm, text, max_tokens, target)


def check_model(lm) -> str:
    """-> output kind "token" | "sequence"; raises AttnvizError with a one-line reason when the
    model cannot be intervened on (no functional forward, failed self-check, no output head)."""
    if lm.arch is None:
        raise AttnvizError(f"adversarial attention needs the functional forward, which this model lacks: "
                           f"{lm.unsupported_reason}")
    if lm.check is not None and not lm.check.ok:
        raise AttnvizError(f"adversarial attention is disabled for this model: our recomputation does not "
                           f"match it ({lm.check.reason})")
    if lm.arch.head is None or lm.arch.head_kind == "none" or lm.output_kind == "hidden":
        raise InputError(f"{lm.spec} is a plain encoder with no output head: it has no output distribution, "
                         f"so there is no TVD to measure; pick a model with a language-model or classifier head")
    return lm.output_kind  # "token" or "sequence" here: a head exists


def prepare(lm, text, site: Site, target: Optional[int] = None, dtype: torch.dtype = torch.float32,
            max_tokens: int = DEFAULT_MAX_TOKENS) -> Problem:
    """(model, text | Encoded | Trace, site) -> Problem; raises InputError / AttnvizError."""
    kind = check_model(lm)
    enc = _as_encoded(lm, text, target, max_tokens)
    n_layers, n_heads = len(lm.arch.layers), lm.arch.layers[0].n_heads
    rows = site.rows(n_layers, n_heads)
    tr = text if isinstance(text, Trace) else None
    if tr is None:
        out = hf_forward(lm, enc.ids)
        hs = out.hidden_states
        logits = getattr(out, "logits", None)
    else:
        hs = [h.unsqueeze(0) for h in tr.hidden_states]
        logits = None if tr.logits is None else tr.logits.unsqueeze(0).unsqueeze(0)
    model_y0 = None
    if logits is not None:
        lg = logits[0, enc.target] if logits.dim() == 3 else logits[0] if logits.dim() == 2 else logits.reshape(-1)
        model_y0 = torch.softmax(lg.double().reshape(-1), -1).cpu().numpy()
    start = site.start()
    # clone: the model's hidden states were made under inference_mode; autograd needs normal tensors
    x = hs[start].reshape(1, *hs[start].shape[-2:]).to(dtype).clone()
    n = x.shape[1]
    allowed = torch.ones(n, dtype=torch.bool, device=x.device)
    if lm.arch.causal:
        allowed[enc.target + 1:] = False
    with torch.no_grad():
        final, kept = run_layers(lm.arch, x, start=start, layers=lm.layers(dtype), keep=True)
        alpha0 = torch.stack([kept[l - start].probs[0, h, enc.target] for l, h in rows]).double()
        y0 = output_probs(lm, final, enc.target, kind)[0]
        rope = rope_for(lm.arch, x)
        out_start = kept[0].resid_out
    labels = None
    if kind == "sequence":
        id2label = getattr(lm.config, "id2label", {}) or {}
        labels = [str(id2label.get(i, i)) for i in range(y0.shape[0])]
    return Problem(lm=lm, enc=enc, site=site, rows=rows, x=x, alpha0=alpha0, allowed=allowed, y0=y0,
                   model_y0=model_y0, output_kind=kind, dtype=dtype, labels=labels, rope=rope,
                   out_start=out_start)


def evaluate(lm, text, site: Site, alpha, target: Optional[int] = None, dtype: torch.dtype = torch.float32):
    """alpha [B, R, n] (R rows of the site, each a distribution over the n tokens) ->
    (jsd [B], tvd [B], output probabilities [B, C]) as numpy float64 arrays."""
    pb = prepare(lm, text, site, target, dtype)
    a = torch.as_tensor(np.asarray(alpha), dtype=dtype, device=pb.x.device)
    if a.dim() == 2:
        a = a.unsqueeze(1)
    if tuple(a.shape[1:]) != tuple(pb.alpha0.shape):
        raise InputError(f"alpha must have shape [B, {pb.alpha0.shape[0]}, {pb.n}] for {site.label()}")
    with torch.no_grad():
        j, t, p = pb.distances(a)
    return j.cpu().numpy(), t.cpu().numpy(), p.cpu().numpy()
