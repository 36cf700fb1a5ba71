"""DecompX (Modarressi et al. 2023, "DecompX: Explaining Transformers Decisions by Propagating Token
Decomposition"): every layer's output decomposed into one vector per *input* token, propagated
through attention, residuals, norms and the FFN of every layer, with no mixing between layers.

E^l [n, n, d]: row i is token i's layer-l output split over input tokens k, Σ_k E^l_ik = out^l_i.
Layer 1 starts from the layer input belonging to its own token (E^0_ik = δ_ik x_i). As the authors'
code computes it (vector aggregation, include_biases, bias_decomp_type="absdot", GeLU_ZO):
  attention  layer 1: A_ik = Σ_h α^h_ik f^h(x_k) + δ_ik x_i (f^h with b_V, as in Kobayashi);
             later:   A_ik = Σ_h Σ_j α^h_ij (E_jk W_V^h) W_O^h + E_ik (no b_V in the parts),
             then the bias (b_O, later layers W_O b_V + b_O) is added to the parts with weights
             |<A_ik, b>| / Σ_k |<A_ik, b>| ("absdot");
  norm       γ ⊙ c(P_ik) / s_i with the real statistics s_i of the vector entering the norm
             (c centres over d for LayerNorm, not for RMSNorm), β split by absdot;
  FFN        first linear on the parts, b1 split by absdot, the activation linearised through the
             origin at the real pre-activation z (θ = act(z) / z, the "zero-origin" slope, exact at
             the real point), second linear, b2 split by absdot;
  post-LN:   E = LN2(LN1(A) + FFN(LN1(A))) distributed as above;  pre-LN: E = A + FFN(norm2(A)),
             norm1 distributed over E before the values.
Every bias is split over the parts, and the zero-origin slope is exact at the real point, so
Σ_k E^l_ik equals the model's real layer output (a test); Map.completeness [L] reports
max_i ||Σ_k E^l_ik - real_i|| / ||real_i|| (real: hidden_states[l+1]; the last pre-LN layer: the
recomputed output before the final norm).

Map.layer [L, n, n] = ||E^l_ik|| (norms of the aggregated vectors, the authors' output_aggregated
"norm"); not row-normalised.

Where the paper's definition does not carry over: DecompX is defined for post-LN encoders with a
GeLU FFN (and a classifier head, whose projection is not part of this map). Pre-LN decoders: the
residual stream is not normalised, norm1 is distributed over the parts before the values and
norm2 before the FFN (RMSNorm: no centring, no β). Gated MLPs (Llama: act(x Wg) ⊙ (x W1)) are not
covered by the paper: with g = x Wg, u = x W1 at the real point and θ = act(g)/g, each part gets
½[act(g) ⊙ (u_k) + θ ⊙ u ⊙ (g_k)] (the mean of the two zero-origin linearisations, one per factor),
which sums exactly to act(g) ⊙ u. GQA value heads are repeated to the query heads.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import linear
from .info import MethodInfo
from .base import Completeness, Map

EPS = 1e-12  # the authors' guard in the absdot weights and the zero-origin slope
# the FFN's [pairs, I] products run in chunks of whole receivers of about this many bytes (on a GPU:
# linear.chunk_bytes); at 1024 tokens of a 1B model they are 12 GB each in one piece
_CHUNK_BYTES = 512 * 2 ** 20


class Pairs:
    """The (receiver i, input token k) pairs that can be nonzero: all of them, or k <= i for causal
    models. Parts are stored packed as [P, e] rows; rows[p] = i, cols[p] = k."""

    def __init__(self, n: int, causal: bool, device=None):
        if causal:
            self.rows, self.cols = torch.tril_indices(n, n, device=device)
        else:
            self.rows = torch.arange(n, device=device).repeat_interleave(n)
            self.cols = torch.arange(n, device=device).repeat(n)
        self.n = n

    def dense(self, packed: torch.Tensor) -> torch.Tensor:
        out = packed.new_zeros(self.n, self.n, packed.shape[-1])
        out[self.rows, self.cols] = packed
        return out

    def pack(self, dense: torch.Tensor) -> torch.Tensor:
        return dense[self.rows, self.cols]

    def sum_rows(self, packed: torch.Tensor) -> torch.Tensor:
        """Σ over k of each receiver's parts: [P, ...] -> [n, ...]."""
        return packed.new_zeros(self.n, *packed.shape[1:]).index_add_(0, self.rows, packed)

    def blocks(self, max_pairs: int) -> list:
        """[(r0, r1, p0, p1)]: runs of whole receivers r0..r1-1 whose pairs are p0..p1-1 (the pairs are
        ordered by receiver), each at most max_pairs pairs (or one receiver)."""
        counts = torch.bincount(self.rows, minlength=self.n).tolist()
        out, r0, p0, p = [], 0, 0, 0
        for r, c in enumerate(counts):
            if p + c - p0 > max_pairs and r > r0:
                out.append((r0, r, p0, p))
                r0, p0 = r, p
            p += c
        out.append((r0, self.n, p0, p))
        return out

    def sub(self, r0: int, r1: int, p0: int, p1: int) -> "Pairs":
        """The pairs of receivers r0..r1-1 (pairs p0..p1-1), renumbered from receiver 0."""
        part = Pairs.__new__(Pairs)
        part.rows, part.cols, part.n = self.rows[p0:p1] - r0, self.cols[p0:p1], r1 - r0
        return part


def absdot(parts: torch.Tensor, bias: torch.Tensor, pairs: Pairs = None) -> torch.Tensor:
    """parts + w_ik b_i with w_ik = |<parts_ik, b_i>| / (Σ_k |<parts_ik, b_i>| + 1e-12): the bias b [e] or
    [n, e] split over receiver i's parts. parts: [n, n, e] (dense), or [P, e] packed with `pairs`."""
    if pairs is None:
        b = bias if bias.dim() == 2 else bias.expand(parts.shape[0], -1)
        wts = torch.einsum("ike,ie->ik", parts, b).abs()
        wts = wts / (wts.sum(-1, keepdim=True) + EPS)
        return parts + wts[..., None] * b[:, None, :]
    b = bias[pairs.rows] if bias.dim() == 2 else bias
    wts = (parts * b).sum(-1).abs()
    wts = wts / (pairs.sum_rows(wts)[pairs.rows] + EPS)
    return parts + wts[:, None] * b


def distribute_norm(parts: torch.Tensor, nrm, real: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """A norm applied to packed parts [P, d] with the real statistics of real [n, d]; β split by absdot."""
    out = linear.distribute(parts, nrm, linear.norm_scale(real, nrm), rows=pairs.rows)
    return out if nrm.bias is None else absdot(out, nrm.bias, pairs)


def _zo_slope(act_z: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return act_z / (z + EPS)


def ffn_parts(w, U: torch.Tensor, ffn_in: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """Packed FFN input parts U [P, d] (Σ_k U_ik = ffn_in_i) -> packed FFN output parts [P, d], in
    chunks of whole receivers (every receiver's parts are independent of the others')."""
    per_pair = U.element_size() * w.w1.shape[1] * (3 if w.w_gate is not None else 2)
    max_pairs = max(1, linear.chunk_bytes(U.device, _CHUNK_BYTES) // per_pair)
    if U.shape[0] <= max_pairs:
        return _ffn_parts(w, U, ffn_in, pairs)
    out = torch.empty(U.shape[0], w.w2.shape[1], dtype=U.dtype, device=U.device)
    for r0, r1, p0, p1 in pairs.blocks(max_pairs):
        out[p0:p1] = _ffn_parts(w, U[p0:p1], ffn_in[r0:r1], pairs.sub(r0, r1, p0, p1))
    return out


def _ffn_parts(w, U: torch.Tensor, ffn_in: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    act = w.activation()
    rows = pairs.rows
    F1 = U @ w.w1
    if w.b1 is not None:
        F1 = absdot(F1, w.b1, pairs)
    z = ffn_in @ w.w1 + (0 if w.b1 is None else w.b1)
    if w.w_gate is None:
        H = F1.mul_(_zo_slope(act(z), z)[rows])
    else:  # in place: the [P, I] products are the bulk of the memory traffic
        g = ffn_in @ w.w_gate
        ag = act(g)
        H = F1.mul_((0.5 * ag)[rows]).add_((U @ w.w_gate).mul_((0.5 * _zo_slope(ag, g) * z)[rows]))
    F2 = H @ w.w2
    return F2 if w.b2 is None else absdot(F2, w.b2, pairs)


def _value_bias_out(w) -> torch.Tensor:
    """W_O b_V (+ b_O): the attention output of the value bias (rows of α sum to 1)."""
    H, Hkv, dh = w.n_heads, w.n_kv_heads, w.head_dim
    d = w.wo.shape[1]
    b = w.wo.new_zeros(d) if w.bo is None else w.bo.clone()
    if w.bv is not None:
        bv = w.bv.reshape(Hkv, dh).repeat_interleave(H // Hkv, dim=0).reshape(-1)
        b = b + bv @ w.wo
    return b


def layer_step(trace, l: int, E, pairs: Pairs = None):
    """Layer l (0-based), packed input decomposition E [P, d] (None for layer 1) -> packed output
    decomposition [P, d] over `pairs` (default: every pair, or k <= i for causal models)."""
    w = trace.weights[l]
    r = trace.layers[l]
    x = r.resid_in
    n, d = x.shape
    pairs = pairs or Pairs(n, w.causal, x.device)
    H, Hkv, dh = w.n_heads, w.n_kv_heads, w.head_dim
    probs = r.probs
    if E is None:
        att = pairs.pack(torch.einsum("hik,hkd->ikd", probs, trace.fx[l]))
        res = torch.zeros_like(att)
        res[pairs.rows == pairs.cols] = x
        bias = w.bo
    else:
        src = E if w.placement == "post" else distribute_norm(E, w.norm1, x, pairs)
        V = pairs.dense(src @ w.wv).reshape(n, n, Hkv, dh)  # [j, k, Hkv, dh]
        if H != Hkv:
            V = V.repeat_interleave(H // Hkv, dim=2)
        ctx = pairs.pack(torch.einsum("hij,jkhc->ikhc", probs, V).reshape(n, n, H * dh))
        att, res = ctx @ w.wo, E
        bias = _value_bias_out(w)
    if w.attn_out_norm is None:
        A = att + res
        if bias is not None:
            A = absdot(A, bias, pairs)
    else:  # Gemma 3: the attention parts (bias shared out) through the output norm, then the residual
        if bias is not None:
            att = absdot(att, bias, pairs)
        A = distribute_norm(att, w.attn_out_norm, r.attn_raw, pairs) + res
    if w.placement == "post":
        P = distribute_norm(A, w.norm1, r.resid_attn, pairs)
        R2 = P + ffn_parts(w, P, r.ffn_in, pairs)
        return distribute_norm(R2, w.norm2, r.resid_ffn, pairs)
    U = distribute_norm(A, w.norm2, r.resid_attn, pairs)
    F = ffn_parts(w, U, r.ffn_in, pairs)
    if w.ffn_out_norm is not None:  # Gemma 3: the FFN parts through the FFN's output norm
        F = distribute_norm(F, w.ffn_out_norm, r.ffn_raw, pairs)
    return A + F


def decompose(trace, progress=None):
    """Trace -> (norms [L, n, n] of ||E^l_ik||, completeness [L], last layer's dense E [n, n, d])."""
    L = trace.n_layers
    n = len(trace.tokens)
    pairs = Pairs(n, bool(trace.weights[0].causal), trace.layers[0].resid_in.device) if L else None
    norms, errs = [], []
    E = None
    for l in range(L):
        if progress:
            progress(l / L)
        E = layer_step(trace, l, E, pairs)
        nm = torch.zeros(n, n, dtype=torch.float64, device=E.device)
        nm[pairs.rows, pairs.cols] = E.double().norm(dim=-1)
        norms.append(nm.cpu().numpy())
        last_pre = trace.placement != "post" and l == L - 1
        real = (trace.layers[l].resid_out if last_pre else trace.hidden_states[l + 1]).double()
        tot = pairs.sum_rows(E.double())
        errs.append(float(((tot - real).norm(dim=-1) / real.norm(dim=-1).clamp_min(1e-30)).max()))
    return np.stack(norms), errs, (pairs.dense(E) if E is not None else None)


def compute(trace, *, progress=None) -> Map:
    """Trace -> Map decompx: ||E^l_ik||, layer-l output of token i attributed to input token k."""
    norms, errs, _ = decompose(trace, progress)
    meta = {"rows_sum_to_one": False}
    completeness = Completeness(tuple(errs), "the model's layer output (hidden_states; the last pre-LN layer "
                                             "before the final norm)")
    if trace.placement != "post":
        meta["note"] = ("pre-LN: norm1 and norm2 distributed over the parts with the real statistics; "
                        + ("gated MLP: each part gets the mean of the two zero-origin linearisations "
                           "(not in the paper)" if trace.weights[0].w_gate is not None else "GeLU zero-origin slope"))
    return Map("decompx", norms, None, meta, completeness)


INFO = MethodInfo(
    name="decompx", label="DecompX", unit="‖part of output‖ (norm, hidden units)",
    summary="input-token decomposition propagated through every layer incl. the FFN, norm (Modarressi et al. 2023)",
    explain=("DecompX: token i's output at this layer split into one vector per input token, carried through "
             "every layer; the map shows each part's norm."),
    what=("**What it shows.** Each layer's output of token i split into one vector per *input* token, carried "
          "through attention, residuals, norms and the FFN of every layer, the biases shared out over the "
          "parts (Modarressi et al. 2023). Each cell is the norm of that input token's part; the parts add up "
          "to the real output."),
    caveats=("**Caveats.** The FFN's activation is linearised through the origin at the real point, a choice "
             "of the method. Defined for post-LN encoders with a GeLU FFN; pre-LN decoders and gated MLPs "
             "(Llama) use the extension described in the library's docs. Not normalised: the unit is the size "
             "of hidden vectors."),
    reference="Modarressi et al. 2023",
    rows_sum_to_one=False, decomposition=True, completeness=True, cost="pairs")
