"""The layer forward of models/forward.py in fewer, larger operations, for loops that run it hundreds
of times (the adversarial search): FusedLayer and the causal target-row path CausalRow.

Same arithmetic as forward.layer_forward (same helpers: apply_rope for rotary embeddings, the norm
formula of apply_norm on torch's fused kernels, cast_norm for dtypes); what differs is the layout (q,
k and v stacked in one [out, in] matrix for F.linear), grouped-query attention without repeating
keys and values, and which rows are computed. tests/test_adversarial.py pins both against
run_layers and against the Hugging Face model with a hook replacing the attention.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .families import LayerWeights
from .forward import apply_rope, cast_norm, forbidden, fused_norm, layer_rope, logits_adjust, rope_slice


def _t(w: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if w is None else w.t().contiguous()


def index_of(idx):
    """A list of ints -> slice(first, last + 1) when consecutive, else the list (a slice passes through).
    Indexing a device tensor with a list copies the list to the device at every call, which a loop of
    hundreds of steps pays each time and a CUDA graph cannot hold; a slice copies nothing."""
    if isinstance(idx, list) and idx and idx == list(range(idx[0], idx[0] + len(idx))):
        return slice(idx[0], idx[0] + len(idx))
    return idx


class FusedLayer:
    """One layer (LayerWeights) in F.linear's [out, in] layout with q, k and v stacked in one matrix.

    Override convention (`override`): (heads [h], α [B, h, n]) replaces those heads' attention
    probabilities in row t of the layer (their context there becomes α·V)."""

    def __init__(self, w: LayerWeights):
        self.w = w
        self.H, self.Hkv, self.dh = w.n_heads, w.n_kv_heads, w.head_dim
        self.rep = self.H // self.Hkv
        self.Dq, self.Dkv = self.H * self.dh, self.Hkv * self.dh
        self.wqkv = torch.cat([w.wq, w.wk, w.wv], 1).t().contiguous()  # [Dq + 2 Dkv, d]
        bs = (w.bq, w.bk, w.bv)
        if all(b is None for b in bs):
            self.bqkv = None
        else:
            sizes = (self.Dq, self.Dkv, self.Dkv)
            self.bqkv = torch.cat([b if b is not None else w.wq.new_zeros(m) for b, m in zip(bs, sizes)])
        self.wo, self.w1, self.w2, self.wg = _t(w.wo), _t(w.w1), _t(w.w2), _t(w.w_gate)
        self.act = w.activation()

    # ---- pieces

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, r, d] (layer input rows) -> stacked q/k/v products [B, r, Dq + 2 Dkv]."""
        h = fused_norm(x, self.w.norm1) if self.w.placement == "pre" else x
        return F.linear(h, self.wqkv, self.bqkv)

    def split(self, qkv: torch.Tensor, cos_sin=None):
        """qkv [B, r, .] -> q [B, H, r, dh], k, v [B, Hkv, r, dh] with rotary embeddings applied
        (cos_sin: (cos, sin) [B or 1, r, dh] of these rows' positions)."""
        B, r, _ = qkv.shape
        q = qkv[..., :self.Dq].reshape(B, r, self.H, self.dh).transpose(1, 2)
        k = qkv[..., self.Dq:self.Dq + self.Dkv].reshape(B, r, self.Hkv, self.dh).transpose(1, 2)
        v = qkv[..., self.Dq + self.Dkv:].reshape(B, r, self.Hkv, self.dh).transpose(1, 2)
        if self.w.q_norm is not None:
            q = fused_norm(q, cast_norm(self.w.q_norm, q.dtype))
        if self.w.k_norm is not None:
            k = fused_norm(k, cast_norm(self.w.k_norm, k.dtype))
        if self.w.rotary:
            cos_sin = layer_rope(cos_sin, self.w)
            cos, sin = cos_sin[0].unsqueeze(1), cos_sin[1].unsqueeze(1)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def probs(self, q: torch.Tensor, k: torch.Tensor, rows=None) -> torch.Tensor:
        """q [B, H, r, dh] of the query positions `rows` (a range, default 0..r-1), k [B, Hkv, n, dh] ->
        attention probabilities [B, H, r, n] with the layer's causal / sliding-window mask, softcap and
        position bias; grouped-query heads share their key head without copying it."""
        B, _, r, dh = q.shape
        n = k.shape[-2]
        rows = range(r) if rows is None else rows
        qg = q.reshape(B, self.Hkv, self.rep * r, dh)
        scores = (qg @ k.transpose(-1, -2)).reshape(B, self.H, r, -1) * self.w.scale
        scores = logits_adjust(self.w, scores, None if r == n else slice(rows.start, rows.stop))
        mask = forbidden(self.w, rows, n, q.device)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def context(self, probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """probs [B, H, r, n], v [B, Hkv, n, dh] -> context [B, r, H·dh] (heads concatenated)."""
        B, _, r, n = probs.shape
        ctx = (probs.reshape(B, self.Hkv, self.rep * r, n) @ v).reshape(B, self.H, r, self.dh)
        return ctx.transpose(1, 2).reshape(B, r, self.Dq)

    def after(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """forward.after_attention's "out" from the layer input x [B, r, d] and the attention
        context ctx [B, r, H·dh] (the output projection applied here)."""
        w = self.w
        a = F.linear(ctx, self.wo, w.bo)
        if w.attn_out_norm is not None:
            a = fused_norm(a, cast_norm(w.attn_out_norm, a.dtype))
        resid = x + a
        if w.placement == "post":
            mid = ffn_in = fused_norm(resid, w.norm1)
        else:
            mid, ffn_in = resid, fused_norm(resid, w.norm2)
        pre = F.linear(ffn_in, self.w1, w.b1)
        hidden = self.act(F.linear(ffn_in, self.wg)) * pre if self.wg is not None else self.act(pre)
        f = F.linear(hidden, self.w2, w.b2)
        if w.ffn_out_norm is not None:
            f = fused_norm(f, cast_norm(w.ffn_out_norm, f.dtype))
        out = mid + f
        return fused_norm(out, w.norm2) if w.placement == "post" else out

    @staticmethod
    def _override(probs: torch.Tensor, row: int, override) -> torch.Tensor:
        if override is None:
            return probs
        heads, a = override
        p = probs.expand(max(a.shape[0], probs.shape[0]), -1, -1, -1).clone()
        p[:, index_of(heads), row, :] = a.to(p.dtype)
        return p

    # ---- whole layers

    def full(self, x: torch.Tensor, t: int, rope=None, override=None, qkv=None) -> torch.Tensor:
        """x [B, n, d] -> layer output [B, n, d] (every row); override replaces row t of its heads;
        qkv: precomputed self.qkv(x)."""
        q, k, v = self.split(self.qkv(x) if qkv is None else qkv, rope)
        p = self._override(self.probs(q, k), t, override)
        return self.after(x, self.context(p, v))

    def rows(self, x: torch.Tensor, t: int, rope=None, override=None, kv=None) -> torch.Tensor:
        """x [B, n, d] -> layer output [B', 1, d] at row t only (B' = the override's batch when
        larger); keys and values of every row from x, or kv = (k, v) [B, Hkv, n, dh] given."""
        B, n, _ = x.shape
        xr = x[:, t:t + 1]
        rt = rope_slice(rope, slice(t, t + 1))
        if kv is None:
            _, k, v = self.split(self.qkv(x), rope)
            q = self.split(self.qkv(xr), rt)[0]
        else:
            k, v = kv
            q = self.split(self.qkv(xr), rt)[0]
        p = self._override(self.probs(q, k, range(t, t + 1)), 0, override)
        return self.after(xr, self.context(p, v))


class CausalRow:
    """A causal model whose target t is the LAST position, with attention rows of the target replaced
    from layer `start` on: no other position attends to t, so every other row of every layer keeps its
    unmodified value and only row t is recomputed. What is fixed is computed once (no autograd):
    the other rows' rotated keys and values of every layer after `start`, and at layer `start` the
    target row's input and unmodified attention context (its queries, keys and values do not change;
    only the replaced heads' context α'·V does). A call then costs, per batch member, one row through
    layers start..L-1: the replaced heads' α'·V, the output projection and FFN of layer `start`, and
    q/k/v, one attention row, output projection and FFN of every later layer.

    x: [1, n, d] unmodified input of layer `start`; layers: [FusedLayer]; rope: (cos, sin) [1, n, dh]."""

    def __init__(self, layers: list, x: torch.Tensor, start: int, rope=None):
        self.layers, self.start, self.rope = layers, start, rope
        self._vh = {}
        n = x.shape[1]
        self.t = t = n - 1
        self.rope_t = rope_slice(rope, slice(t, None))
        self.rope_o = rope_slice(rope, slice(None, t))
        with torch.no_grad():
            fz = layers[start]
            q, k, v = fz.split(fz.qkv(x), rope)
            p = fz.probs(q, k)
            self.v_start = v  # [1, Hkv, n, dh]
            self.ctx_start = (p[:, :, t:].reshape(1, fz.Hkv, fz.rep, n) @ v).reshape(1, fz.H, fz.dh)
            self.x_start = x[:, t:]  # [1, 1, d]
            out = fz.after(x, fz.context(p, v))
            self.kv_other = {}  # layer -> (k, v) [1, Hkv, t, dh] of rows 0..t-1
            for li in range(start + 1, len(layers)):
                fl = layers[li]
                q, k, v = fl.split(fl.qkv(out), rope)
                self.kv_other[li] = (k[:, :, :t], v[:, :, :t])
                out = fl.after(out, fl.context(fl.probs(q, k), v))
            self.out_unmodified = out[:, t:]  # [1, 1, d] last layer's output at t (before any final norm)

    def __call__(self, groups: dict, batch: int) -> torch.Tensor:
        """groups {layer: (heads, α [B, h, n])} -> last layer's output at t [B, 1, d]."""
        fz, s, t = self.layers[self.start], self.start, self.t
        heads, a = groups[s]
        ctx = self.ctx_start.expand(batch, -1, -1).clone()  # [B, H, dh]
        key = tuple(heads)
        if key not in self._vh:  # the replaced heads' values, gathered once (no index copy per call)
            self._vh[key] = self.v_start[0, [h // fz.rep for h in heads]]  # [h, n, dh]
        ctx[:, index_of(heads)] = torch.einsum("bhn,hnd->bhd", a.to(ctx.dtype), self._vh[key])
        row = fz.after(self.x_start, ctx.reshape(batch, 1, fz.Dq))
        for li in range(s + 1, len(self.layers)):
            fl = self.layers[li]
            q, k_t, v_t = fl.split(fl.qkv(row), self.rope_t)
            k_o, v_o = self.kv_other[li]
            B = q.shape[0]
            k = torch.cat([k_o.expand(B, -1, -1, -1), k_t], dim=2)
            v = torch.cat([v_o.expand(B, -1, -1, -1), v_t], dim=2)
            p = FusedLayer._override(fl.probs(q, k, range(t, t + 1)), 0, groups.get(li))
            row = fl.after(row, fl.context(p, v))
        return row
