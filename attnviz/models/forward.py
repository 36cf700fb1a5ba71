"""ONE generic transformer layer forward for every family, returning every intermediate.

Shapes: x [B, n, d]; attention probabilities [B, H, n, n]; row i receives, column j is the source.
Post-LN (BERT family) and pre-LN (GPT-2, Llama) placement, LayerNorm and RMSNorm, rotary position
embeddings and grouped-query attention are data in LayerWeights, not separate code paths; so are
Gemma 3's QK-norm, sliding windows, several rotary tables and output norms on both blocks, and
MPNet's relative position bias.
Pure functions: no hooks, nothing written to the model, safe to call from many threads.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F

from .families import Architecture, LayerWeights, Norm

Override = Union[None, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]


def norm_stats(x: torch.Tensor, nrm: Norm):
    """x [..., d] -> (mean [..., 1], scale [..., 1]) with normalised = (x - mean) / scale.

    LayerNorm: population variance, eps inside the root. RMSNorm: mean 0, scale = sqrt(mean(x^2) + eps).
    """
    if nrm.kind == "layernorm":
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return mean, torch.sqrt(var + nrm.eps)
    ms = (x * x).mean(-1, keepdim=True)
    return torch.zeros_like(ms), torch.sqrt(ms + nrm.eps)


def apply_norm(x: torch.Tensor, nrm: Norm) -> torch.Tensor:
    """x [..., d] -> normalised x [..., d] (LayerNorm or RMSNorm with its weight and bias)."""
    mean, scale = norm_stats(x, nrm)
    y = (x - mean) / scale * nrm.weight
    return y if nrm.bias is None else y + nrm.bias


def fused_norm(x: torch.Tensor, nrm: Norm) -> torch.Tensor:
    """apply_norm's formula on torch's fused LayerNorm / RMSNorm kernels (fewer operations, the same
    numbers up to float rounding; models/fused.py uses it in the adversarial search's loop)."""
    d = (x.shape[-1],)
    if nrm.kind == "layernorm":
        return F.layer_norm(x, d, nrm.weight, nrm.bias, nrm.eps)
    y = F.rms_norm(x, d, nrm.weight, nrm.eps)
    return y if nrm.bias is None else y + nrm.bias


def cast_norm(nrm: Norm, dtype: torch.dtype) -> Norm:
    """The one place a Norm's weight and bias are cast to another dtype (itself when already there)."""
    if nrm.weight.dtype == dtype:
        return nrm
    return Norm(nrm.kind, nrm.weight.to(dtype), None if nrm.bias is None else nrm.bias.to(dtype), nrm.eps)


def final_norm(arch: Architecture, x: torch.Tensor) -> torch.Tensor:
    """The final norm of pre-LN models applied to x [..., d] in x's dtype; identity when there is none."""
    if arch.final_norm is None:
        return x
    return apply_norm(x, cast_norm(arch.final_norm, x.dtype))


def _linear(x, w, b):
    y = x @ w
    return y if b is None else y + b


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The one place rotary position embeddings are applied: x [..., r, dh] with cos, sin
    broadcastable to it -> x·cos + rotate_half(x)·sin."""
    return x * cos + _rotate_half(x) * sin


@dataclass
class LayerState:
    """Every intermediate of one transformer layer, named by where it sits in the layer.

    layer_forward returns it with a batch dimension ([B, n, d] etc.); Trace.layers keeps one per layer
    without it (`first()`). The residual stream points, in order:

        resid_in ──(attn_in: resid_in, or norm1(resid_in) pre-LN)── attention ── attn_out
        resid_attn = resid_in + attn_out                      (the sum, before any norm)
        resid_mid  = norm1(resid_attn) post-LN, resid_attn pre-LN   (what the FFN output is added to)
        ffn_in     = resid_mid post-LN, norm2(resid_attn) pre-LN
        ffn_pre / ffn_gate_pre ── activation ── ffn_hidden ── ffn_out
        resid_ffn  = resid_mid + ffn_out                       (the sum, before any norm)
        resid_out  = norm2(resid_ffn) post-LN, resid_ffn pre-LN    (the layer output)

    q, k [H or Hkv, n, dh] after QK-norm and rotary embeddings; v [Hkv, n, dh] with b_V; probs [H, n, n];
    ffn_pre / ffn_gate_pre / ffn_hidden [n, I] (ffn_gate_pre is None without a gate). after_attention
    alone leaves the attention fields (attn_in, q, k, v, probs) None.

    Layers with output norms on their blocks (Gemma 3: attn_out_norm, ffn_out_norm) also keep the
    blocks' outputs before those norms: attn_raw (the output projection's output incl. b_O) with
    attn_out = attn_out_norm(attn_raw), and ffn_raw with ffn_out = ffn_out_norm(ffn_raw); both None
    for the other families (attn_out and ffn_out are then the blocks' outputs themselves).
    """

    resid_in: torch.Tensor
    attn_out: torch.Tensor
    resid_attn: torch.Tensor
    resid_mid: torch.Tensor
    ffn_in: torch.Tensor
    ffn_pre: torch.Tensor
    ffn_gate_pre: Optional[torch.Tensor]
    ffn_hidden: torch.Tensor
    ffn_out: torch.Tensor
    resid_ffn: torch.Tensor
    resid_out: torch.Tensor
    attn_in: Optional[torch.Tensor] = None
    q: Optional[torch.Tensor] = None
    k: Optional[torch.Tensor] = None
    v: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    attn_raw: Optional[torch.Tensor] = None
    ffn_raw: Optional[torch.Tensor] = None

    def first(self) -> "LayerState":
        """The same layer for batch element 0 (the batch dimension removed)."""
        return LayerState(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name)[0])
                             for f in fields(self)})


def layer_rope(rope, w: LayerWeights):
    """The (cos, sin) a layer uses: rope itself, or rope[w.rope_key] when the architecture has several
    tables (Gemma 3: one per layer type, global and sliding-window layers rotate differently)."""
    return rope[w.rope_key] if isinstance(rope, dict) else rope


def rope_slice(rope, sl):
    """rope ((cos, sin) [B, n, dh], or a dict of them) restricted to the positions sl."""
    if rope is None:
        return None
    if isinstance(rope, dict):
        return {k: rope_slice(v, sl) for k, v in rope.items()}
    return rope[0][:, sl], rope[1][:, sl]


def forbidden(w: LayerWeights, rows, n: int, device) -> Optional[torch.Tensor]:
    """[r, n] bool, True where query row i (positions `rows`: a range or 1-D tensor) may not see key j:
    j > i on causal layers, i - j >= window on sliding-window layers; None when nothing is forbidden."""
    if isinstance(rows, range):
        if not ((w.causal and rows.start < n - 1) or (w.window and rows.stop - 1 >= w.window)):
            return None  # e.g. the last row of a causal layer shorter than its window: nothing to hide
        i = torch.arange(rows.start, rows.stop, device=device).reshape(-1, 1)
    elif not w.causal and not w.window:
        return None
    else:
        i = torch.as_tensor(rows, device=device).reshape(-1, 1)
    j = torch.arange(n, device=device).reshape(1, -1)
    bad = torch.zeros(i.shape[0], n, dtype=torch.bool, device=device)
    if w.causal:
        bad = bad | (j > i)
    if w.window:
        bad = bad | (i - j >= w.window)
    return bad


def logits_adjust(w: LayerWeights, scores: torch.Tensor, rows=None) -> torch.Tensor:
    """scaled attention logits [..., r, n] -> with the layer's softcap and position bias (MPNet), before
    any mask; rows: the query positions of the r rows (default all n)."""
    if w.softcap:
        scores = torch.tanh(scores / w.softcap) * w.softcap
    if w.score_bias is not None:
        n = scores.shape[-1]
        b = w.score_bias(n, scores.device).to(scores.dtype)  # [H, n, n]
        if rows is not None:
            b = b[:, rows]
        scores = scores + b
    return scores


def qk_normed(w: LayerWeights, q: torch.Tensor, k: torch.Tensor):
    """q, k [..., dh] -> after the layer's QK-norm (Gemma 3), unchanged without one."""
    if w.q_norm is not None:
        q = apply_norm(q, cast_norm(w.q_norm, q.dtype))
    if w.k_norm is not None:
        k = apply_norm(k, cast_norm(w.k_norm, k.dtype))
    return q, k


def layer_forward(w: LayerWeights, x: torch.Tensor, *, rope=None, attn_override: Override = None,
                  attn_mask: Optional[torch.Tensor] = None) -> LayerState:
    """x [B, n, d] -> LayerState of the layer (batched); resid_out [B, n, d] is the layer output.

    attn_override: a tensor [B or 1, H, n, n] that replaces the attention probabilities, or a
    callable probs -> probs. rope: (cos, sin) [B, n, dh] for rotary models (or rope_for's dict of
    them). attn_mask: additive mask broadcastable to [B, H, n, n] (e.g. -inf for padded keys).
    """
    B, n, d = x.shape
    H, Hkv, dh = w.n_heads, w.n_kv_heads, w.head_dim
    h = apply_norm(x, w.norm1) if w.placement == "pre" else x
    q = _linear(h, w.wq, w.bq).view(B, n, H, dh).transpose(1, 2)
    k = _linear(h, w.wk, w.bk).view(B, n, Hkv, dh).transpose(1, 2)
    v = _linear(h, w.wv, w.bv).view(B, n, Hkv, dh).transpose(1, 2)
    q, k = qk_normed(w, q, k)
    if w.rotary:
        cos, sin = layer_rope(rope, w)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    rep = H // Hkv
    k_full = k.repeat_interleave(rep, dim=1) if rep > 1 else k
    v_full = v.repeat_interleave(rep, dim=1) if rep > 1 else v
    scores = logits_adjust(w, (q @ k_full.transpose(-1, -2)) * w.scale)
    bad = forbidden(w, range(n), n, x.device)
    if bad is not None:
        scores = scores.masked_fill(bad, float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    if attn_override is not None:
        probs = attn_override(probs) if callable(attn_override) else attn_override.to(probs.dtype).expand(B, -1, -1, -1)
    ctx = (probs @ v_full).transpose(1, 2).reshape(B, n, H * dh)
    attn_out = _linear(ctx, w.wo, w.bo)
    return replace(after_attention(w, x, attn_out), attn_in=h, q=q, k=k, v=v, probs=probs)


def after_attention(w: LayerWeights, x: torch.Tensor, attn_out: torch.Tensor) -> LayerState:
    """The rest of the layer from the attention output: x (the layer input), attn_out [B, n, d] (the
    output projection's output incl. b_O; the layer's attn_out_norm, if any, is applied here) ->
    LayerState with the attention fields left None."""
    attn_raw = None
    if w.attn_out_norm is not None:
        attn_raw, attn_out = attn_out, apply_norm(attn_out, cast_norm(w.attn_out_norm, attn_out.dtype))
    resid = x + attn_out
    if w.placement == "post":
        mid = apply_norm(resid, w.norm1)
        ffn_in = mid
    else:
        mid = resid
        ffn_in = apply_norm(resid, w.norm2)
    act = w.activation()
    pre = _linear(ffn_in, w.w1, w.b1)
    if w.w_gate is not None:
        gate_pre = ffn_in @ w.w_gate
        hidden = act(gate_pre) * pre
    else:
        gate_pre = None
        hidden = act(pre)
    ffn_out = _linear(hidden, w.w2, w.b2)
    ffn_raw = None
    if w.ffn_out_norm is not None:
        ffn_raw, ffn_out = ffn_out, apply_norm(ffn_out, cast_norm(w.ffn_out_norm, ffn_out.dtype))
    resid2 = mid + ffn_out
    out = apply_norm(resid2, w.norm2) if w.placement == "post" else resid2
    return LayerState(resid_in=x, attn_out=attn_out, resid_attn=resid, resid_mid=mid, ffn_in=ffn_in, ffn_pre=pre,
                      ffn_gate_pre=gate_pre, ffn_hidden=hidden, ffn_out=ffn_out, resid_ffn=resid2, resid_out=out,
                      attn_raw=attn_raw, ffn_raw=ffn_raw)


def rope_for(arch: Architecture, x: torch.Tensor):
    """(cos, sin) [B, n, dh] for rotary architectures (a dict {rope_key: (cos, sin)} when the layers use
    several tables), else None."""
    if arch.rotary is None:
        return None
    B, n, _ = x.shape
    pos = torch.arange(n, device=x.device).unsqueeze(0).expand(B, n)
    got = arch.rotary(x, pos)
    if isinstance(got, dict):
        return {k: (c.to(x.dtype), s.to(x.dtype)) for k, (c, s) in got.items()}
    cos, sin = got
    return cos.to(x.dtype), sin.to(x.dtype)


def run_layers(arch: Architecture, x: torch.Tensor, start: int = 0, overrides: Optional[dict] = None,
               layers: Optional[list] = None, keep: bool = False):
    """Runs layers start..L-1 from x [B, n, d]; overrides {layer index: Override}.

    Returns (final hidden [B, n, d] with the final norm applied for pre-LN models, list of per-layer
    LayerStates (batched) if keep else []).
    """
    layers = layers if layers is not None else arch.layers
    overrides = overrides or {}
    rope = rope_for(arch, x)
    kept = []
    for li in range(start, len(layers)):
        r = layer_forward(layers[li], x, rope=rope, attn_override=overrides.get(li))
        x = r.resid_out
        if keep:
            kept.append(r)
    return final_norm(arch, x), kept
