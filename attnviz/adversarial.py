"""Adversarial attention: how far can attention move before the prediction does?

Jain & Wallace (2019) searched for attention distributions very different from the model's own
that leave the output unchanged; Wiegreffe & Pinter (2019) argued that the trade-off between the
attention distance (JSD) and the output distance (TVD) is what matters. This module measures that
trade-off for one sentence and one intervention site:

- `jsd`, `tvd`: the two distances (natural log; JSD <= ln 2; TVD = half the L1 distance).
- `Site`: which attention rows are replaced: the target row of one head in one layer ("head"),
  of every head of one layer ("layer"), or of every head in every layer ("all").
- `evaluate`: the model's output distribution at the target when the site's rows are replaced by
  given distributions; the rest of the model is recomputed by the functional forward
  (models/forward.run_layers with attention overrides), so the output really follows the new attention.
- `frontier`: for a grid of λ (all λ and all restarts in ONE batch) minimise
  TVD(ŷ', ŷ) - λ·JSD(α', α) over α' = softmax(θ) with Adam; every evaluated point is kept and the
  lower envelope of (JSD, TVD) is the frontier. Baselines on the same axes: random permutations of
  α and the uniform distribution.
- `jain_wallace`: their search: k adversaries maximising JSD (and their mutual JSD) with a hinge
  penalty on TVD above ε; accepted when TVD <= 0.05.
- `seed_baseline`: JSD between the attention of models trained from different seeds on the same
  sentence, and TVD between their outputs (Wiegreffe & Pinter's seed variance).

For multi-row sites (a layer's heads, all layers) the JSD of a candidate is the MEAN of the
per-row JSDs, so it stays in [0, ln 2]. Positions a causal model cannot attend to stay at zero.
Everything is a pure function of (model, text, site, settings): no hooks, nothing written to the model.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .errors import AttnvizError, InputError
from .models.families import Norm
from .models.forward import _rotate_half, apply_norm, rope_for, run_layers
from .trace import DEFAULT_MAX_TOKENS, Encoded, Trace, encode, word_start_ids

LN2 = math.log(2.0)
# λ grid: 0 plus 15 values from 1e-3 to 10^1.5 (the frontier's slope dTVD/dJSD at its optimum is λ)
DEFAULT_LAMBDAS = tuple([0.0] + [float(v) for v in np.logspace(-3, 1.5, 15)])
# Jain & Wallace (2019) settings (their code: Adam(amsgrad) lr 0.01, 500 steps, 5 adversaries
# initialised at log(uniform) + 3·N(0,1), loss -JSD + 500·relu(Δy - 0.01) - mutual JSD, accepted
# when Δy <= 0.05)
JW_EPS = 0.01
JW_ACCEPT = 0.05
JW_STEPS = 500
JW_LR = 0.01
JW_K = 5
JW_PENALTY = 500.0
JW_INIT_NOISE = 3.0
INIT_FLOOR = 1e-4  # restart 0: log(max(α, floor)) + 1e-3·N(0, 1)
# a Frontier keeps every point's α' up to this many values (else only the envelope's and optima's)
ALPHA_KEEP = 4_000_000

Progress = Optional[Callable[[str, float], None]]


# --------------------------------------------------------------------------------------------
# distances


def _safe_kl_terms(p, m, xp):
    """Elementwise p·log(p/m) with 0·log 0 = 0 (finite values and gradients everywhere)."""
    if xp is torch:
        pos = p > 0
        ps = torch.where(pos, p, torch.ones_like(p))
        ms = torch.where(pos, m, torch.ones_like(m))
        return torch.where(pos, p * (torch.log(ps) - torch.log(ms)), torch.zeros_like(p))
    pos = p > 0
    ps = np.where(pos, p, 1.0)
    ms = np.where(pos, m, 1.0)
    return np.where(pos, p * (np.log(ps) - np.log(ms)), 0.0)


def jsd(p, q):
    """p [..., n], q [..., n] (probability vectors, broadcastable) -> JSD [...] in nats (<= ln 2).

    JSD(p, q) = ½ KL(p || m) + ½ KL(q || m), m = (p + q) / 2. Works on numpy arrays and torch
    tensors (differentiable, finite gradients at zeros)."""
    xp = torch if isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor) else np
    if xp is np:
        p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    m = (p + q) / 2
    return 0.5 * _safe_kl_terms(p, m, xp).sum(-1) + 0.5 * _safe_kl_terms(q, m, xp).sum(-1)


def tvd(p, q):
    """p [..., C], q [..., C] -> total variation distance [...] = ½ Σ |p - q| (in [0, 1])."""
    if isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor):
        return 0.5 * (p - q).abs().sum(-1)
    return 0.5 * np.abs(np.asarray(p, dtype=float) - np.asarray(q, dtype=float)).sum(-1)


# --------------------------------------------------------------------------------------------
# sites


@dataclass(frozen=True)
class Site:
    """Which attention rows are replaced (all at the target position; layers/heads 0-based).

    kind "head": head `head` of layer `layer`; "layer": every head of layer `layer`; "all": every
    head of every layer."""

    kind: str = "head"
    layer: int = 0
    head: int = 0

    def __post_init__(self):
        if self.kind not in ("head", "layer", "all"):
            raise InputError(f"unknown intervention site '{self.kind}' (use head, layer or all)")

    def rows(self, n_layers: int, n_heads: int) -> list:
        """-> [(layer, head)] rows replaced, in order; raises InputError when out of range."""
        if self.kind != "all" and not 0 <= self.layer < n_layers:
            raise InputError(f"layer {self.layer + 1} does not exist (the model has {n_layers} layers)")
        if self.kind == "head":
            if not 0 <= self.head < n_heads:
                raise InputError(f"head {self.head + 1} does not exist (the model has {n_heads} heads)")
            return [(self.layer, self.head)]
        if self.kind == "layer":
            return [(self.layer, h) for h in range(n_heads)]
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]

    def start(self) -> int:
        """First layer that must be recomputed."""
        return 0 if self.kind == "all" else self.layer

    def label(self) -> str:
        """Plain words, 1-based: 'layer 6 head 3', 'all heads of layer 6', 'all layers'."""
        if self.kind == "head":
            return f"layer {self.layer + 1} head {self.head + 1}"
        if self.kind == "layer":
            return f"all heads of layer {self.layer + 1}"
        return "all heads of all layers"


# --------------------------------------------------------------------------------------------
# the intervention problem: fixed model, sentence, site


@dataclass
class Problem:
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
    kv_start: Optional[tuple] = None  # unmodified (keys, values) [1, H, n, dh] of the first intervened layer
    out_start: Optional[torch.Tensor] = None  # [1, n, d] unmodified output of the first intervened layer
    fast: bool = True  # outputs(): the row-restricted fused path (run_layers' numbers up to float rounding, less work)
    _fused: Optional[list] = None  # [_Fused] per layer, made on first use
    _qkv_next: Optional[torch.Tensor] = None  # unmodified q/k/v products of the layer after the site
    _causal_rows: Optional[dict] = None  # causal model, target last: layer -> unmodified (input, q/k/v) [1, n, .]

    @property
    def n(self) -> int:
        return self.x.shape[1]

    @property
    def target(self) -> int:
        return self.enc.target

    @property
    def tokens(self) -> list:
        return self.enc.tokens

    def label_of(self, idx: int) -> str:
        if self.output_kind == "sequence":
            return str(self.labels[idx]) if self.labels and idx < len(self.labels) else str(idx)
        return self.lm.tokenizer.convert_ids_to_tokens(int(idx))

    def _by_layer(self, alpha: torch.Tensor) -> dict:
        """alpha [B, R, n] -> {layer: (heads, alpha rows [B, len(heads), n])}."""
        groups: dict = {}
        for r, (l, h) in enumerate(self.rows):
            groups.setdefault(l, ([], []))
            groups[l][0].append(h)
            groups[l][1].append(r)
        return {l: (heads, alpha[:, idx, :]) for l, (heads, idx) in groups.items()}

    def overrides(self, alpha: torch.Tensor) -> dict:
        """alpha [B, R, n] -> {layer: callable override replacing probs[:, heads, target, :]} for
        models/forward.run_layers."""
        t = self.target
        out = {}
        for l, (heads, a_l) in self._by_layer(alpha).items():
            def f(probs, heads=heads, a_l=a_l):
                p = probs.expand(a_l.shape[0], -1, -1, -1).clone()
                p[:, heads, t, :] = a_l.to(p.dtype)
                return p

            out[l] = f
        return out

    def outputs(self, alpha: Optional[torch.Tensor], fast: bool = True) -> torch.Tensor:
        """alpha [B, R, n] (or None: the unmodified forward, B = 1) -> output distribution [B, C]
        (float64). Differentiable in alpha.

        fast=False: run_layers(arch, x expanded to [B, n, d], start, overrides) — every position of
        every layer from the site's first layer. fast=True: the same numbers (up to float rounding:
        fused kernels, _Fused) with less work: the first intervened layer changes only the target
        row (its keys and values are the unmodified ones, computed once), so only that row is
        computed there and spliced into the layer's unmodified output; the next layer reuses the
        other rows' queries, keys and values; for position-wise output heads the last layer is
        computed for the target row only. Layers in between run on the whole batch."""
        if alpha is None or not fast:
            B = 1 if alpha is None else alpha.shape[0]
            x = self.x.expand(B, -1, -1)
            ov = None if alpha is None else self.overrides(alpha)
            final, _ = run_layers(self.lm.arch, x, start=self.site.start(), overrides=ov,
                                  layers=self.lm.layers(self.dtype))
            return _output_probs(self.lm, final, self.target, self.output_kind)
        return self._outputs_fast(alpha)

    def fused(self) -> list:
        """The layers' weights rearranged for fused kernels (_Fused), made once per Problem."""
        if self._fused is None:
            self._fused = [_Fused(w) for w in self.lm.layers(self.dtype)]
        return self._fused

    def _outputs_fast(self, alpha: torch.Tensor) -> torch.Tensor:
        """The row-restricted forward (see outputs) on fused kernels: _Fused layers run the same
        arithmetic as models/forward.layer_forward with fewer, larger operations (one q/k/v
        product, F.layer_norm, scaled_dot_product_attention); the site's rows are written into
        the attention context of the target row (α'·V), which is what replacing the probabilities
        does. The first full layer after the site reuses the unmodified queries, keys and values of
        every row but the target (only the target row of its input differs)."""
        fz = self.fused()
        L, s, t = len(fz), self.site.start(), self.target
        groups = self._by_layer(alpha)
        rope = self.rope
        token = self.output_kind == "token"
        row = fz[s].rows(self.x, t, rope, groups.get(s), kv=self.kv_start)  # [B, 1, d]
        if s == L - 1 and token:
            return self._head_on_row(row)
        is_t = torch.zeros(1, self.n, 1, dtype=torch.bool)
        is_t[0, t, 0] = True
        if token and self.lm.arch.causal and t == self.n - 1:
            # a causal model whose target is the last position: no other row reads row t, so every
            # later layer changes only row t; the other rows' inputs and q/k/v are the unmodified ones
            cache = self._unmodified_rows()
            for li in range(s + 1, L):
                xin, qkv0 = cache[li]
                _, k, v = fz[li]._split(torch.where(is_t, fz[li].qkv(row), qkv0), rope, rows=[t])
                row = fz[li].rows(torch.where(is_t, row, xin), t, rope, groups.get(li), kv=(k, v))
            return self._head_on_row(row)
        x = torch.where(is_t, row, self.out_start)  # [B, n, d]: the unmodified output with row t replaced
        last = L - 1 if token else L
        for li in range(s + 1, last):
            qkv = None
            if li == s + 1:  # only row t of the input differs from the unmodified run
                if self._qkv_next is None:
                    with torch.no_grad():
                        self._qkv_next = fz[li].qkv(self.out_start)
                qkv = torch.where(is_t, fz[li].qkv(row), self._qkv_next)
            x = fz[li].full(x, t, rope, groups.get(li), qkv=qkv)
        if token:
            return self._head_on_row(fz[L - 1].rows(x, t, rope, groups.get(L - 1)))
        return _output_probs(self.lm, _final_norm(self.lm.arch, x), t, self.output_kind)

    def _unmodified_rows(self) -> dict:
        """layer -> (unmodified input [1, n, d], its q/k/v products [1, n, Dq + 2 Dkv]) for the layers
        after the site; computed once per Problem."""
        if self._causal_rows is None:
            fz, s, t = self.fused(), self.site.start(), self.target
            out, x = {}, self.out_start
            with torch.no_grad():
                for li in range(s + 1, len(fz)):
                    qkv = fz[li].qkv(x)
                    out[li] = (x, qkv)
                    x = fz[li].full(x, t, self.rope, None, qkv=qkv)
            self._causal_rows = out
        return self._causal_rows

    def _head_on_row(self, row: torch.Tensor) -> torch.Tensor:
        """row [B, 1, d] (last layer output at the target) -> output distribution [B, C]."""
        row = _final_norm(self.lm.arch, row)
        logits = self.lm.arch.head(row.to(_head_dtype(self.lm)))[:, 0]
        return torch.softmax(logits.double(), dim=-1)

    def distances(self, alpha: torch.Tensor):
        """alpha [B, R, n] -> (jsd [B] mean over rows, tvd [B], probs [B, C]); float64."""
        probs = self.outputs(alpha, fast=self.fast)
        j = jsd(alpha.double(), self.alpha0.unsqueeze(0)).mean(-1)
        return j, tvd(probs, self.y0.unsqueeze(0)), probs

    def softmax_rows(self, theta: torch.Tensor) -> torch.Tensor:
        """theta [B, R, m] (logits over the allowed columns) -> alpha [B, R, n] with zeros elsewhere."""
        a = torch.softmax(theta, dim=-1)
        if bool(self.allowed.all()):
            return a
        full = a.new_zeros(a.shape[:-1] + (self.n,))
        full[..., self.allowed] = a
        return full


def _final_norm(arch, x: torch.Tensor) -> torch.Tensor:
    """Applies the final norm of pre-LN models (as run_layers does); identity for post-LN."""
    fn = arch.final_norm
    if fn is None:
        return x
    if fn.weight.dtype != x.dtype:
        fn = Norm(fn.kind, fn.weight.to(x.dtype), None if fn.bias is None else fn.bias.to(x.dtype), fn.eps)
    return apply_norm(x, fn)


def _norm_fused(x: torch.Tensor, nrm: Norm) -> torch.Tensor:
    """apply_norm with torch's fused LayerNorm / RMSNorm kernels (the same formula)."""
    d = (x.shape[-1],)
    if nrm.kind == "layernorm":
        return F.layer_norm(x, d, nrm.weight, nrm.bias, nrm.eps)
    y = F.rms_norm(x, d, nrm.weight, nrm.eps)
    return y if nrm.bias is None else y + nrm.bias


def _t(w: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if w is None else w.t().contiguous()


class _Fused:
    """One layer (LayerWeights) in F.linear's [out, in] layout with q, k and v stacked in one
    matrix: the arithmetic of models/forward.layer_forward in fewer, larger operations, for the
    optimisation loop of the frontier (hundreds of batched forward and backward passes). Checked
    against run_layers in tests (fast=True vs fast=False)."""

    def __init__(self, w):
        self.w = w
        self.H, self.Hkv, self.dh = w.n_heads, w.n_kv_heads, w.head_dim
        self.Dq, self.Dkv = self.H * self.dh, self.Hkv * self.dh
        self.wqkv = torch.cat([w.wq, w.wk, w.wv], 1).t().contiguous()  # [Dq + 2 Dkv, d]
        bs = (w.bq, w.bk, w.bv)
        if all(b is None for b in bs):
            self.bqkv = None
        else:
            sizes = (self.Dq, self.Dkv, self.Dkv)
            self.bqkv = torch.cat([b if b is not None else w.wq.new_zeros(m) for b, m in zip(bs, sizes)])
        self.wo, self.w1, self.w2, self.wg = _t(w.wo), _t(w.w1), _t(w.w2), _t(w.w_gate)
        self.wq = self.wqkv[:self.Dq]
        self.bq = None if self.bqkv is None else self.bqkv[:self.Dq]
        self.act = w.activation()

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, r, d] (layer input rows) -> stacked q/k/v products [B, r, Dq + 2 Dkv]."""
        h = _norm_fused(x, self.w.norm1) if self.w.placement == "pre" else x
        return F.linear(h, self.wqkv, self.bqkv)

    def _split(self, qkv: torch.Tensor, rope, rows=None):
        """-> q [B, H, r, dh], k, v [B, H, n, dh] (rotary applied, key/value heads repeated)."""
        B, n, _ = qkv.shape
        q = qkv[..., :self.Dq]
        if rows is not None:
            q = q[:, rows]
        q = q.reshape(B, q.shape[1], self.H, self.dh).transpose(1, 2)
        k = qkv[..., self.Dq:self.Dq + self.Dkv].reshape(B, n, self.Hkv, self.dh).transpose(1, 2)
        v = qkv[..., self.Dq + self.Dkv:].reshape(B, n, self.Hkv, self.dh).transpose(1, 2)
        if self.w.rotary:
            cos, sin = rope
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            k = k * cos + _rotate_half(k) * sin
            if rows is not None:
                cos, sin = cos[:, :, rows], sin[:, :, rows]
            q = q * cos + _rotate_half(q) * sin
        rep = self.H // self.Hkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return q, k, v

    def _after(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """forward.after_attention's output with fused kernels."""
        w = self.w
        resid = x + attn_out
        if w.placement == "post":
            mid = ffn_in = _norm_fused(resid, w.norm1)
        else:
            mid, ffn_in = resid, _norm_fused(resid, w.norm2)
        pre = F.linear(ffn_in, self.w1, w.b1)
        hidden = self.act(F.linear(ffn_in, self.wg)) * pre if self.wg is not None else self.act(pre)
        out = mid + F.linear(hidden, self.w2, w.b2)
        return _norm_fused(out, w.norm2) if w.placement == "post" else out

    def full(self, x: torch.Tensor, t: int, rope=None, override=None, qkv=None) -> torch.Tensor:
        """x [B, n, d] -> layer output [B, n, d]; override (heads, α [B, h, n]) replaces those heads'
        attention at row t (their context there becomes α·V); qkv: precomputed self.qkv(x)."""
        B, n, _ = x.shape
        q, k, v = self._split(self.qkv(x) if qkv is None else qkv, rope)
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=self.w.causal, scale=self.w.scale)
        if override is not None:
            heads, a = override
            ctx = ctx.clone()
            ctx[:, heads, t] = torch.einsum("bhn,bhnd->bhd", a.to(ctx.dtype), v[:, heads])
        ctx = ctx.transpose(1, 2).reshape(B, n, self.Dq)
        return self._after(x, F.linear(ctx, self.wo, self.w.bo))

    def rows(self, x: torch.Tensor, t: int, rope=None, override=None, kv=None) -> torch.Tensor:
        """x [B, n, d] -> layer output [B', 1, d] at row t only (B' = the override's batch when
        larger); keys and values from every row, or kv = (k, v) [B, H, n, dh] precomputed."""
        B, n, _ = x.shape
        xr = x[:, t:t + 1]
        if kv is None:
            q, k, v = self._split(self.qkv(x), rope, rows=[t])
        else:
            k, v = kv
            h = _norm_fused(xr, self.w.norm1) if self.w.placement == "pre" else xr
            q = F.linear(h, self.wq, self.bq).reshape(B, 1, self.H, self.dh).transpose(1, 2)
            if self.w.rotary:
                cos, sin = rope
                cos, sin = cos[:, t:t + 1].unsqueeze(1), sin[:, t:t + 1].unsqueeze(1)
                q = q * cos + _rotate_half(q) * sin
        scores = (q @ k.transpose(-1, -2)) * self.w.scale  # [B, H, 1, n]
        if self.w.causal and t + 1 < n:
            scores = scores.masked_fill(torch.arange(n) > t, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if override is not None:
            heads, a = override
            probs = probs.expand(max(a.shape[0], probs.shape[0]), -1, -1, -1).clone()
            probs[:, heads, 0, :] = a.to(probs.dtype)
        Bo = probs.shape[0]
        ctx = (probs @ v).transpose(1, 2).reshape(Bo, 1, self.Dq)
        return self._after(xr, F.linear(ctx, self.wo, self.w.bo))


def _head_dtype(lm) -> torch.dtype:
    for p in lm.model.parameters():
        return p.dtype
    return torch.float32


def _output_probs(lm, final: torch.Tensor, target: int, kind: str) -> torch.Tensor:
    """final hidden [B, n, d] -> output distribution [B, C] (float64) at the target."""
    head = lm.arch.head
    hd = _head_dtype(lm)
    if kind == "token":
        logits = head(final[:, target:target + 1].to(hd))[:, 0]  # position-wise head: only the target row
    else:
        logits = head(final.to(hd))
    return torch.softmax(logits.double(), dim=-1)


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
    if lm.arch.head is None or lm.arch.head_kind == "none":
        raise InputError(f"{lm.spec} is a plain encoder with no output head: it has no output distribution, "
                         f"so there is no TVD to measure; pick a model with a language-model or classifier head")
    return "sequence" if lm.arch.head_kind == "sequence" else "token"


def prepare(lm, text, site: Site, target: Optional[int] = None, dtype: torch.dtype = torch.float32,
            max_tokens: int = DEFAULT_MAX_TOKENS) -> Problem:
    """(model, text | Encoded | Trace, site) -> Problem; raises InputError / AttnvizError."""
    kind = check_model(lm)
    enc = _as_encoded(lm, text, target, max_tokens)
    n_layers, n_heads = len(lm.arch.layers), lm.arch.layers[0].n_heads
    rows = site.rows(n_layers, n_heads)
    tr = text if isinstance(text, Trace) else None
    if tr is None:
        from .trace import hf_forward
        out = hf_forward(lm, enc.ids)
        hs = out.hidden_states
        logits = getattr(out, "logits", None)
    else:
        hs = [h.unsqueeze(0) for h in tr.hidden_states]
        logits = None if tr.logits is None else tr.logits.unsqueeze(0).unsqueeze(0)
    model_y0 = None
    if logits is not None:
        lg = logits[0, enc.target] if logits.dim() == 3 else logits[0] if logits.dim() == 2 else logits.reshape(-1)
        model_y0 = torch.softmax(lg.double().reshape(-1), -1).numpy()
    start = site.start()
    # clone: the model's hidden states were made under inference_mode; autograd needs normal tensors
    x = hs[start].reshape(1, *hs[start].shape[-2:]).to(dtype).clone()
    n = x.shape[1]
    allowed = torch.ones(n, dtype=torch.bool)
    if lm.arch.causal:
        allowed[enc.target + 1:] = False
    layers = lm.layers(dtype)
    with torch.no_grad():
        final, kept = run_layers(lm.arch, x, start=start, layers=layers, keep=True)
        alpha0 = torch.stack([kept[l - start]["probs"][0, h, enc.target] for l, h in rows]).double()
        y0 = _output_probs(lm, final, enc.target, kind)[0]
        rope = rope_for(lm.arch, x)
        fused = [_Fused(w) for w in layers]
        _, k, v = fused[start]._split(fused[start].qkv(x), rope)
        out_start = kept[0]["out"]
    labels = None
    if kind == "sequence":
        id2label = getattr(lm.config, "id2label", {}) or {}
        labels = [str(id2label.get(i, i)) for i in range(y0.shape[0])]
    return Problem(lm=lm, enc=enc, site=site, rows=rows, x=x, alpha0=alpha0, allowed=allowed, y0=y0,
                   model_y0=model_y0, output_kind=kind, dtype=dtype, labels=labels, rope=rope, kv_start=(k, v),
                   out_start=out_start, _fused=fused)


def evaluate(lm, text, site: Site, alpha, target: Optional[int] = None, dtype: torch.dtype = torch.float32):
    """alpha [B, R, n] (R rows of the site, each a distribution over the n tokens) ->
    (jsd [B], tvd [B], output probabilities [B, C]) as numpy float64 arrays."""
    pb = prepare(lm, text, site, target, dtype)
    a = torch.as_tensor(np.asarray(alpha), dtype=dtype)
    if a.dim() == 2:
        a = a.unsqueeze(1)
    if tuple(a.shape[1:]) != tuple(pb.alpha0.shape):
        raise InputError(f"alpha must have shape [B, {pb.alpha0.shape[0]}, {pb.n}] for {site.label()}")
    with torch.no_grad():
        j, t, p = pb.distances(a)
    return j.numpy(), t.numpy(), p.numpy()


# --------------------------------------------------------------------------------------------
# results


@dataclass
class Frontier:
    """All points of a frontier search plus its baselines for one (model, sentence, site).

    Points are indexed [P]; point 0 is the original attention (JSD 0, TVD 0). alpha [P, R, n] holds
    each point's rows; top_idx/top_p [P, k] its top-k output. envelope: indices of the lower
    envelope sorted by JSD (TVD strictly increasing with JSD: for every other point some envelope
    point has at least its JSD and at most its TVD)."""

    spec: str
    text: str
    tokens: list
    target: int
    site: Site
    rows: list
    output_kind: str
    alpha0: np.ndarray  # [R, n]
    y0_top: list  # [(label, p)]
    lambdas: np.ndarray  # [K]
    jsd: np.ndarray  # [P]
    tvd: np.ndarray  # [P]
    alpha: np.ndarray  # [K', R, n] float32: α' of the points alpha_idx (see alpha_of)
    alpha_idx: np.ndarray  # [K'] sorted point indices whose α' is kept: all points, unless that
    #                        would exceed ALPHA_KEEP values; then the envelope, the per-λ optima and 0
    lam: np.ndarray  # [P] λ of the run that produced the point (nan for the original)
    restart: np.ndarray  # [P] restart index (-1 original)
    step: np.ndarray  # [P] optimisation step (-1 original)
    top_idx: np.ndarray  # [P, k]
    top_p: np.ndarray  # [P, k]
    top_labels: dict  # output index -> label, for every index in top_idx
    best: np.ndarray  # [K] index of the point with the lowest TVD - λ·JSD among all points, per λ
    envelope: np.ndarray  # [E] indices, JSD ascending
    perm_jsd: np.ndarray  # [M]
    perm_tvd: np.ndarray  # [M]
    uniform: tuple  # (jsd, tvd)
    steps: int
    restarts: int
    lr: float
    timings: dict = field(default_factory=dict)
    prune_at: Optional[int] = None  # step from which each λ ran its best restart only (None: never pruned)
    seeds: list = field(default_factory=list)  # [SeedPoint]
    notes: list = field(default_factory=list)

    def alpha_of(self, i: int) -> np.ndarray:
        """-> α' [R, n] of point i (every envelope point and per-λ optimum has one)."""
        k = int(np.searchsorted(self.alpha_idx, i))
        if k >= len(self.alpha_idx) or self.alpha_idx[k] != i:
            raise KeyError(f"the attention of point {i} was not kept (only {len(self.alpha_idx)} of {len(self.jsd)})")
        return self.alpha[k]

    def prediction(self, i: int) -> list:
        """-> [(label, probability)] top-k output of point i."""
        return [(self.top_labels[int(j)], float(p)) for j, p in zip(self.top_idx[i], self.top_p[i])]

    def envelope_xy(self):
        """-> (jsd [E], tvd [E]) of the lower envelope, JSD ascending."""
        return self.jsd[self.envelope], self.tvd[self.envelope]

    def at_jsd(self, target: float) -> int:
        """Index of the point with the lowest TVD among points with JSD >= target (the frontier at
        that JSD); the point of largest JSD when none reaches it."""
        ok = self.jsd[self.envelope] >= target - 1e-12
        if not ok.any():
            return int(self.envelope[-1])
        return int(self.envelope[np.argmax(ok)])

    def within(self, eps: float) -> int:
        """Index of the point with the largest JSD among points with TVD <= eps (the original when
        none other qualifies)."""
        ok = self.tvd[self.envelope] <= eps + 1e-15
        return int(self.envelope[np.nonzero(ok)[0][-1]]) if ok.any() else 0

    def perm_summary(self) -> dict:
        return dict(jsd_median=float(np.median(self.perm_jsd)), tvd_median=float(np.median(self.perm_tvd)),
                    tvd_max=float(self.perm_tvd.max()), tvd_min=float(self.perm_tvd.min()))

    def caption(self, eps: float = JW_EPS) -> str:
        """Plain words: how far attention at this site can move while the output moves by < eps."""
        i = self.within(eps)
        where = f"attention at {self.site.label()}" + ("" if self.site.kind == "head" else " (mean JSD over the rows)")
        pm = self.perm_summary()
        tail = (f" Random permutations of the original attention move it by JSD {pm['jsd_median']:.2f} "
                f"(median) and the output by TVD {pm['tvd_median']:.3f} (median).")
        if i == 0:
            s = (f"{where} cannot move at all without the output moving by TVD ≥ {eps:g}: "
                 f"the smallest change found already costs TVD {self.tvd[self.envelope[1]] if len(self.envelope) > 1 else float('nan'):.3f}.")
        else:
            s = (f"{where[0].upper() + where[1:]} can move to JSD {self.jsd[i]:.2f} (of at most ln 2 = 0.69) "
                 f"while the output moves by TVD {self.tvd[i]:.4f} (< {eps:g}).")
        top = self.prediction(i)[0] if i else None
        if top is not None:
            s += f" The prediction there is still '{top[0]}' at {top[1]:.2f}" if top[0] == self.y0_top[0][0] \
                else f" The top prediction there changes to '{top[0]}'"
            s += f" (originally '{self.y0_top[0][0]}' at {self.y0_top[0][1]:.2f})."
        return s + tail


@dataclass
class JWResult:
    """Jain & Wallace's search: k adversaries maximising JSD with a hinge on TVD above eps."""

    site: Site
    eps: float
    accept: float
    alpha: np.ndarray  # [k, R, n]
    jsd: np.ndarray  # [k]
    tvd: np.ndarray  # [k]
    accepted: np.ndarray  # [k] bool: tvd <= accept
    best: int  # index of the accepted adversary with the largest JSD; -1: the original (none accepted)
    best_jsd: float  # "max JSD within ε" (0 when only the original qualifies)
    top_idx: np.ndarray  # [k, top]
    top_p: np.ndarray
    top_labels: dict
    steps: int
    lr: float
    seconds: float

    def prediction(self, i: int) -> list:
        return [(self.top_labels[int(j)], float(p)) for j, p in zip(self.top_idx[i], self.top_p[i])]


@dataclass
class SeedPoint:
    """Another seed's model on the same sentence: JSD of its attention rows at the site to the
    reference model's (mean over rows) and TVD of its output distribution to the reference's."""

    spec: str
    jsd: float
    tvd: float
    top: list  # [(label, p)] of the other model


# --------------------------------------------------------------------------------------------
# search


def lower_envelope(jsd_v: np.ndarray, tvd_v: np.ndarray) -> np.ndarray:
    """jsd [P], tvd [P] -> indices [E] of the lower envelope, JSD ascending: the points with a TVD
    strictly below that of every point of larger JSD (ties in JSD: the lowest TVD). TVD strictly
    increases along it, and envelope TVD at JSD >= x is the least TVD any point reaches there."""
    order = np.lexsort((tvd_v, -jsd_v))  # JSD descending, ties: lower TVD first
    keep, best = [], np.inf
    for i in order:
        if tvd_v[i] < best:
            keep.append(i)
            best = tvd_v[i]
    return np.array(keep[::-1], dtype=int)


def best_per_lambda(jsd_v: np.ndarray, tvd_v: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """-> [K] index of the point minimising TVD - λ·JSD over ALL points (ties: the smaller JSD).

    Choosing over one common set of points makes JSD and TVD of the chosen points non-decreasing
    in λ (for λ1 < λ2: (λ2 - λ1)(J2 - J1) >= 0 and T2 >= T1 + λ1 (J2 - J1))."""
    out = np.zeros(len(lambdas), dtype=int)
    for k, lam in enumerate(lambdas):
        obj = tvd_v - lam * jsd_v
        cand = np.nonzero(obj <= obj.min())[0]
        out[k] = cand[np.argmin(jsd_v[cand])]
    return out


def _topk(probs: torch.Tensor, k: int, pb: Optional["Problem"] = None):
    """probs [B, V] -> (ids [B, k], probabilities [B, k]); over word-initial tokens only when pb's
    text had a [MASK] blank on a causal model (as analyze ranks its prediction)."""
    allowed = word_start_ids(pb.lm) if pb is not None and pb.enc.blank and pb.output_kind == "token" else None
    if allowed is not None and len(allowed):
        ids = torch.as_tensor(allowed)
        k = min(k, len(ids))
        v, i = probs[..., ids].topk(k, dim=-1)
        return ids[i].numpy(), v.float().numpy()
    k = min(k, probs.shape[-1])
    v, i = probs.topk(k, dim=-1)
    return i.numpy(), v.float().numpy()


def _labels_for(pb: Problem, idx_arrays) -> dict:
    ids = np.unique(np.concatenate([a.reshape(-1) for a in idx_arrays]))
    return {int(i): pb.label_of(int(i)) for i in ids}


def _permutations(pb: Problem, m: int, gen: torch.Generator) -> torch.Tensor:
    """-> [m, R, n]: each row of alpha0 permuted independently over its allowed columns."""
    R = pb.alpha0.shape[0]
    cols = torch.nonzero(pb.allowed).flatten()
    out = pb.alpha0.new_zeros(m, R, pb.n)
    src = pb.alpha0[:, cols]  # [R, a]
    for i in range(m):
        for r in range(R):
            out[i, r, cols] = src[r, torch.randperm(len(cols), generator=gen)]
    return out


def baselines(pb: Problem, permutations: int = 100, seed: int = 0, batch: int = 128):
    """-> (perm_jsd [M], perm_tvd [M], (uniform_jsd, uniform_tvd)). One forward per `batch` alphas."""
    gen = torch.Generator().manual_seed(seed + 7919)
    perms = _permutations(pb, permutations, gen).to(pb.dtype)
    js, ts = [], []
    with torch.no_grad():
        for s in range(0, permutations, batch):
            j, t, _ = pb.distances(perms[s:s + batch])
            js.append(j)
            ts.append(t)
        uni = pb.allowed.to(pb.dtype) / pb.allowed.sum()
        uj, ut, _ = pb.distances(uni.expand(1, pb.alpha0.shape[0], pb.n))
    pj = torch.cat(js).numpy() if js else np.zeros(0)
    pt = torch.cat(ts).numpy() if ts else np.zeros(0)
    return pj, pt, (float(uj[0]), float(ut[0]))


def frontier(lm, text, site: Site, lambdas: Sequence[float] = DEFAULT_LAMBDAS, steps: int = 200,
             restarts: int = 3, lr: float = 0.1, seed: int = 0, target: Optional[int] = None,
             dtype: torch.dtype = torch.float32, permutations: int = 100, top_k: int = 5,
             record_every: Optional[int] = None, init_noise: float = 2.0, progress: Progress = None,
             max_tokens: int = DEFAULT_MAX_TOKENS, prune_at: Optional[int] = None) -> Frontier:
    """(model, text, site) -> Frontier of (JSD, TVD) for α' = softmax(θ) minimising
    TVD(ŷ', ŷ) - λ·JSD(α', α), all λ × restarts in one batch [K·restarts, R, n].

    Restart 0 starts at the original attention (log max(α, 1e-4) + 1e-3 noise, so the JSD gradient
    is not 0 and one-hot rows can move);
    the others at log(uniform) + init_noise·N(0, 1). Every `record_every` steps (default steps // 20)
    and at the end every batch member's (JSD, TVD, α', top-k) is recorded; the original is point 0.

    prune_at (default steps // 4; >= steps: never; only with restarts > 2): all restarts run
    together for the first prune_at steps; then each λ keeps restart 0 and, of the random restarts,
    the one with the lowest TVD − λ·JSD (each with its Adam state); only those run the remaining
    steps. Every kept run gets its full number of steps; restart 0's runs are exactly those of
    restarts=1, so the result is never worse than one restart. Points recorded before pruning are
    kept."""
    t_all = time.perf_counter()
    timings = {}
    t0 = time.perf_counter()
    pb = prepare(lm, text, site, target, dtype, max_tokens)
    timings["prepare"] = time.perf_counter() - t0
    lams = torch.tensor(list(lambdas), dtype=torch.float64)
    if lams.numel() == 0 or bool((lams < 0).any()):
        raise InputError("give at least one λ, all >= 0")
    K, Rs = lams.numel(), max(1, int(restarts))
    R, m = pb.alpha0.shape[0], int(pb.allowed.sum())
    B = K * Rs
    gen = torch.Generator().manual_seed(seed)
    # restart 0 starts at the original, with its weights floored at 1e-4: a one-hot row has exact
    # zeros (or 1e-30s) whose logits would get gradients too small for any optimiser to move them
    log_a0 = torch.log(pb.alpha0[:, pb.allowed].clamp_min(INIT_FLOOR)).to(dtype)
    theta0 = torch.empty(Rs, K, R, m, dtype=dtype)
    theta0[0] = log_a0 + 1e-3 * torch.randn(K, R, m, generator=gen, dtype=dtype)
    if Rs > 1:
        theta0[1:] = init_noise * torch.randn(Rs - 1, K, R, m, generator=gen, dtype=dtype)
    theta = theta0.reshape(B, R, m).clone().requires_grad_(True)
    lam_b = lams.repeat(Rs)  # batch order: restart-major, λ-minor
    restart_b = np.repeat(np.arange(Rs), K)
    every = record_every or max(1, steps // 20)
    prune = (steps // 4 if prune_at is None else int(prune_at)) if Rs > 2 else steps
    rec_alpha, rec_j, rec_t, rec_lam, rec_rs, rec_step, rec_ti, rec_tp = ([] for _ in range(8))

    def record(alpha, j, t, probs, s):
        rec_alpha.append(alpha.detach().float().numpy())
        jd, td = j.detach(), t.detach()
        rec_j.append(jd.numpy())
        rec_t.append(td.numpy())
        rec_lam.append(lam_b.numpy())
        rec_rs.append(restart_b)
        rec_step.append(np.full(len(restart_b), s))
        ti, tp = _topk(probs.detach(), top_k, pb)
        rec_ti.append(ti)
        rec_tp.append(tp)

    # eps far below the default 1e-8: a (nearly) one-hot original row has gradients ~1e-12 on its
    # small logits, which the default eps would turn into no step at all
    opt = torch.optim.Adam([theta], lr=lr, eps=1e-20)

    def lr_at(s):
        # cosine decay to lr/10: Adam's steps do not shrink by themselves, so without it the runs
        # keep jittering by ~lr around their optimum (λ = 0 would not settle at TVD ≈ 0)
        return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, steps) / max(steps, 1))))

    t0 = time.perf_counter()
    with torch.inference_mode(False), torch.enable_grad():
        for s in range(steps):
            alpha = pb.softmax_rows(theta)
            j, t, probs = pb.distances(alpha)
            if s % every == 0:
                record(alpha, j, t, probs, s)
            if s == prune:
                # each λ keeps restart 0 (from the original) and its best random restart so far
                obj = (t - lam_b * j).detach().reshape(Rs, K)
                keep = torch.cat([torch.arange(K), (1 + torch.argmin(obj[1:], dim=0)) * K + torch.arange(K)])
                state = opt.state[theta]
                theta = theta.detach()[keep].clone().requires_grad_(True)
                opt = torch.optim.Adam([theta], lr=lr_at(s), eps=1e-20)
                opt.state[theta] = {k: (v[keep].clone() if torch.is_tensor(v) and v.dim() > 0 else v)
                                    for k, v in state.items()}
                lam_b, restart_b = lam_b[keep], restart_b[keep.numpy()]
                alpha = pb.softmax_rows(theta)
                j, t, probs = pb.distances(alpha)
            loss = (t - lam_b * j).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for g in opt.param_groups:
                g["lr"] = lr_at(s)
            opt.step()
            if progress and (s % 10 == 0):
                progress("frontier", (s + 1) / (steps + 1))
        with torch.no_grad():
            alpha = pb.softmax_rows(theta)
            j, t, probs = pb.distances(alpha)
            record(alpha, j, t, probs, steps)
    timings["optimise"] = time.perf_counter() - t0
    if progress:
        progress("baselines", 1.0)
    # point 0: the original
    with torch.no_grad():
        ti0, tp0 = _topk(pb.y0.unsqueeze(0), top_k, pb)
    jsd_v = np.concatenate([[0.0]] + rec_j)
    tvd_v = np.concatenate([[0.0]] + rec_t)
    alpha_v = np.concatenate([pb.alpha0.float().numpy()[None]] + rec_alpha)
    lam_v = np.concatenate([[np.nan]] + rec_lam)
    rs_v = np.concatenate([[-1]] + rec_rs)
    st_v = np.concatenate([[-1]] + rec_step)
    ti_v = np.concatenate([ti0] + rec_ti)
    tp_v = np.concatenate([tp0] + rec_tp)
    best = best_per_lambda(jsd_v, tvd_v, lams.numpy())
    env = lower_envelope(jsd_v, tvd_v)
    if alpha_v.size <= ALPHA_KEEP:
        keep = np.arange(len(jsd_v))
    else:
        keep = np.unique(np.concatenate([[0], env, best]))
        alpha_v = alpha_v[keep]
    t0 = time.perf_counter()
    pj, pt, uni = baselines(pb, permutations, seed)
    timings["baselines"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    labels = _labels_for(pb, [ti_v])
    notes = list(pb.enc.notes)
    if pb.model_y0 is not None and pb.model_y0.shape == tuple(pb.y0.shape):
        diff = float(tvd(pb.model_y0, pb.y0.numpy()))
        if diff > 1e-4:
            notes.append(f"warning: the recomputed output differs from the model's own by TVD {diff:.1e}")
    return Frontier(spec=getattr(lm, "spec", ""), text=pb.enc.text, tokens=list(pb.tokens), target=pb.target,
                    site=site, rows=pb.rows, output_kind=pb.output_kind, alpha0=pb.alpha0.numpy(),
                    y0_top=[(labels[int(i)], float(p)) for i, p in zip(ti0[0], tp0[0])], lambdas=lams.numpy(),
                    jsd=jsd_v, tvd=tvd_v, alpha=alpha_v, alpha_idx=keep, lam=lam_v, restart=rs_v, step=st_v, top_idx=ti_v,
                    top_p=tp_v, top_labels=labels, best=best, envelope=env, perm_jsd=pj, perm_tvd=pt,
                    uniform=uni, steps=steps, restarts=Rs, lr=lr, timings=timings, notes=notes,
                    prune_at=prune if prune < steps else None)


def jain_wallace(lm, text, site: Site, eps: float = JW_EPS, accept: float = JW_ACCEPT, k: int = JW_K,
                 steps: int = JW_STEPS, lr: float = JW_LR, penalty: float = JW_PENALTY,
                 init_noise: float = JW_INIT_NOISE, seed: int = 0, target: Optional[int] = None,
                 dtype: torch.dtype = torch.float32, top_k: int = 5, progress: Progress = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS) -> JWResult:
    """Jain & Wallace (2019): k adversaries α'_i = softmax(θ_i), θ_i = log(uniform) + 3·N(0,1),
    Adam(amsgrad, lr 0.01), 500 steps on Σ_i [-JSD(α'_i, α) + 500·relu(TVD_i - eps)] - Σ_ij JSD(α'_i, α'_j)/k;
    an adversary is accepted when TVD <= accept; the result is the accepted one with the largest JSD
    (the original, JSD 0, when none is accepted). Returns JWResult with [k] arrays."""
    t0 = time.perf_counter()
    pb = prepare(lm, text, site, target, dtype, max_tokens)
    R, m = pb.alpha0.shape[0], int(pb.allowed.sum())
    gen = torch.Generator().manual_seed(seed)
    theta = (math.log(1.0 / m) + init_noise * torch.randn(k, R, m, generator=gen, dtype=dtype)).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr, amsgrad=True)
    with torch.inference_mode(False), torch.enable_grad():
        for s in range(steps):
            alpha = pb.softmax_rows(theta)
            j, t, _ = pb.distances(alpha)
            a = alpha.double()
            cross = jsd(a.unsqueeze(0), a.unsqueeze(1)).mean(-1)  # [k, k] mean over rows
            loss = (-j + penalty * torch.relu(t - eps)).sum() - cross.sum() / k
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if progress and s % 25 == 0:
                progress("jain_wallace", (s + 1) / steps)
        with torch.no_grad():
            alpha = pb.softmax_rows(theta)
            j, t, probs = pb.distances(alpha)
    jv, tv = j.numpy(), t.numpy()
    acc = tv <= accept
    best = int(np.argmax(np.where(acc, jv, -1.0))) if acc.any() else -1
    ti, tp = _topk(probs, top_k, pb)
    return JWResult(site=site, eps=eps, accept=accept, alpha=alpha.float().numpy(), jsd=jv, tvd=tv,
                    accepted=acc, best=best, best_jsd=float(jv[best]) if best >= 0 else 0.0,
                    top_idx=ti, top_p=tp, top_labels=_labels_for(pb, [ti]), steps=steps, lr=lr,
                    seconds=time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------
# seed variance (Wiegreffe & Pinter)


def seed_specs(spec: str, available: Optional[Sequence[str]] = None) -> list:
    """'builtin:NAME' -> ['builtin:NAME-seed1', 'builtin:NAME-seed2', ...] that exist (sorted)."""
    if not isinstance(spec, str) or not spec.startswith("builtin:"):
        return []
    name = spec.split(":", 1)[1]
    if available is None:
        from .models.load import builtin_names
        available = builtin_names()
    base = name.split("-seed")[0]
    out = [f"builtin:{a}" for a in available if a.startswith(base + "-seed") and a != name]
    if name != base and base in available:
        out.insert(0, f"builtin:{base}")
    return sorted(set(out))


def seed_baseline(lm, others: Sequence, text, site: Site, target: Optional[int] = None,
                  dtype: torch.dtype = torch.float32, top_k: int = 5) -> list:
    """Reference model lm and models trained from other seeds -> [SeedPoint]: JSD between their
    attention rows at the site (same layer and head indices; mean over rows) and TVD between their
    output distributions on the same sentence. The tokenizers must agree on the sentence."""
    ref = prepare(lm, text, site, target, dtype)
    out = []
    for other in others:
        pb = prepare(other, ref.enc.text, site, ref.target, dtype)
        if pb.enc.ids.shape != ref.enc.ids.shape or not torch.equal(pb.enc.ids, ref.enc.ids):
            raise InputError(f"{other.spec} tokenises the sentence differently from {lm.spec}: "
                             f"their attention cannot be compared")
        if pb.y0.shape != ref.y0.shape:
            raise InputError(f"{other.spec} has a different output space from {lm.spec}")
        j = float(jsd(pb.alpha0.numpy(), ref.alpha0.numpy()).mean())
        t = float(tvd(pb.y0.numpy(), ref.y0.numpy()))
        ti, tp = _topk(pb.y0.unsqueeze(0), top_k, pb)
        out.append(SeedPoint(spec=other.spec, jsd=j, tvd=t,
                             top=[(pb.label_of(int(i)), float(p)) for i, p in zip(ti[0], tp[0])]))
    return out


__all__ = ["jsd", "tvd", "Site", "Problem", "prepare", "evaluate", "check_model", "frontier", "Frontier",
           "jain_wallace", "JWResult", "seed_baseline", "seed_specs", "SeedPoint", "baselines",
           "lower_envelope", "best_per_lambda", "DEFAULT_LAMBDAS", "JW_EPS", "JW_ACCEPT", "JW_STEPS", "JW_LR", "LN2"]
