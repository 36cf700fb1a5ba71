"""ATBFFRESLN (Kobayashi et al. 2024): the attention block, the feed-forward block, the second
residual and the second norm as a sum over source tokens, with integrated gradients for the FFN.

Per layer l and receiving token i the scopes are (vectors indexed [i, j, d], j the source):
  atb_ff        FFN output      ffn_out_i  = Σ_j F_ij + r^F_i
  atb_ff_res    + residual      resid2_i   = Σ_j (A_ij + F_ij) + (r^A_i + r^F_i)
  atb_ff_res_ln + LN2 (post-LN) out_i      = Σ_j g2_i(A_ij + F_ij) + g2_i(r^A_i + r^F_i) + β2
A_ij, r^A_i are the attention-block parts (attn_res_ln.parts). Maps are the norms ||·_ij||.

The FFN input. Post-LN: the parts of the LN1 output, u_ij = A_ij, u^r_i = r^A_i. Pre-LN: the
residual-stream parts z_ij (remainder b_O) go through norm2 distributed linearly with the real
statistics of resid_i: u_ij = γ2 ⊙ c(z_ij) / s2_i (c centres over d for LayerNorm, not for RMSNorm),
u^r_i = γ2 ⊙ c(b_O) / s2_i + β2. Either way Σ_j u_ij + u^r_i is the real FFN input.

Integrated gradients. The FFN is a function of the n source inputs u_i1..u_in with the remainder
u^r_i held fixed; the baseline puts every source at zero (so the FFN sees only u^r_i), the path is
the straight line t·u_ij, t ∈ [0, 1], and the integral is a Gauss-Legendre quadrature with `steps`
nodes (rule="midpoint": the midpoint Riemann sum). With S_i = Σ_j u_ij W1 and c_i = u^r_i W1 + b1:
  elementwise g:  F_ij = ((u_ij W1) ⊙ ∫ g'(c_i + t S_i) dt) W2,    r^F_i = g(c_i) W2 + b2
  gated (Llama):  h = act(x Wg + cg) ⊙ (x W1 + c); IG of the product over the joint input:
                  F_ij = ((u_ij Wg) ⊙ ∫ act'(a_t) ⊙ b_t dt + (u_ij W1) ⊙ ∫ act(a_t) dt) W2,
                  a_t = cg_i + t Sg_i, b_t = c_i + t S_i,  r^F_i = (act(cg_i) ⊙ c_i) W2 + b2.
Every source of receiver i shares the same per-neuron averages, so the cost is steps × n × I plus
two matrix products. Σ_j F_ij + r^F_i equals the real ffn_out_i up to the quadrature error only
(the remainder is the baseline's exact output, not a plug): that error is the completeness error,
reported per layer. For an affine activation one node is exact.
Pre-LN models have no norm after the second residual: atb_ff_res_ln equals atb_ff_res there.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ..models.forward import norm_stats
from . import attn_res_ln
from .base import Map

DEFAULT_STEPS = 32
RULES = ("gauss", "midpoint")
NAMES = ("atb_ff", "atb_ff_res", "atb_ff_res_ln")
RATIO_NAMES = {"atb_ff": "AtbFf-N", "atb_ff_res": "AtbFfRes-N", "atb_ff_res_ln": "AtbFfResLn-N"}
_CHUNK_BYTES = 64 * 2 ** 20


@lru_cache(maxsize=64)
def _nodes(steps: int, rule: str):
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if rule == "gauss":
        x, w = np.polynomial.legendre.leggauss(int(steps))
        t, w = (x + 1) / 2, w / 2
    elif rule == "midpoint":
        t, w = (np.arange(steps) + 0.5) / steps, np.full(steps, 1.0 / steps)
    else:
        raise ValueError(f"unknown quadrature rule '{rule}'; known: {RULES}")
    return t, w


def ig_nodes(steps: int, rule: str = "gauss"):
    """-> (t [steps], w [steps]) float64 quadrature nodes on [0, 1] whose weights sum to 1."""
    t, w = _nodes(int(steps), rule)
    return torch.from_numpy(t.copy()), torch.from_numpy(w.copy())


def _value_and_grad(act, x: torch.Tensor):
    """x [...] -> (act(x), act'(x)) elementwise, by autograd on a fresh leaf."""
    with torch.inference_mode(False), torch.enable_grad():
        xl = x.detach().clone().requires_grad_(True)
        y = act(xl)
        (g,) = torch.autograd.grad(y.sum(), xl)
    return y.detach(), g.detach()


def ig_average(act, c: torch.Tensor, S: torch.Tensor, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> torch.Tensor:
    """c, S [..., I] -> ∫_0^1 act'(c + t S) dt [..., I] by quadrature (elementwise activation)."""
    t, w = ig_nodes(steps, rule)
    t, w = t.to(S.dtype), w.to(S.dtype)
    pts = c.unsqueeze(0) + t.view(-1, *[1] * S.dim()) * S.unsqueeze(0)
    _, g = _value_and_grad(act, pts)
    return torch.einsum("k,k...->...", w, g)


def ig_gated(act, cg: torch.Tensor, Sg: torch.Tensor, c: torch.Tensor, S: torch.Tensor,
             steps: int = DEFAULT_STEPS, rule: str = "gauss"):
    """[..., I] each -> (∫ act'(a_t) ⊙ b_t dt, ∫ act(a_t) dt) with a_t = cg + t Sg, b_t = c + t S."""
    t, w = ig_nodes(steps, rule)
    t, w = t.to(S.dtype), w.to(S.dtype)
    shape = (-1, *[1] * S.dim())
    a = cg.unsqueeze(0) + t.view(shape) * Sg.unsqueeze(0)
    b = c.unsqueeze(0) + t.view(shape) * S.unsqueeze(0)
    y, g = _value_and_grad(act, a)
    return torch.einsum("k,k...->...", w, g * b), torch.einsum("k,k...->...", w, y)


def _lin(x, W, b=None):
    y = x @ W
    return y if b is None else y + b


def _distribute(parts, rem, nrm, real, beta=True):
    """Norm applied linearly with the real statistics of `real` [n,d]: parts [n,n,d], rem [n,d]."""
    _, scale = norm_stats(real, nrm)
    gamma = nrm.weight.double()
    if nrm.kind == "layernorm":
        parts = parts - parts.mean(-1, keepdim=True)
        rem = rem - rem.mean(-1, keepdim=True)
    n = parts.shape[0]
    parts = parts * gamma / scale.reshape(n, 1, 1)
    rem = rem * gamma / scale.reshape(n, 1)
    if beta and nrm.bias is not None:
        rem = rem + nrm.bias.double()
    return parts, rem


def _rel_err(total: torch.Tensor, real: torch.Tensor) -> float:
    """max_i ||total_i - real_i|| / ||real_i||."""
    return float(((total - real).norm(dim=-1) / real.norm(dim=-1).clamp_min(1e-30)).max())


def layer_parts(trace, l: int, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> dict:
    """Layer l (0-based) -> {scope: (parts [n,n,d], remainder [n,d], real [n,d])} for the three scopes
    ("atb_ff", "atb_ff_res", "atb_ff_res_ln"), float64; Σ_j parts + remainder ≈ real (IG error)."""
    w = trace.weights[l].to(torch.float64)
    r = trace.layers[l]
    A, rA = attn_res_ln.parts(trace, l)  # post-LN: sum to LN1 output; pre-LN: to resid
    n, _, d = A.shape
    if w.placement == "post":
        u, ur = A, rA
    else:
        u, ur = _distribute(A, rA, w.norm2, r["resid"].double())
    act = w.activation()
    usum = u.sum(1)
    I = w.w1.shape[1]
    S, c = usum @ w.w1, _lin(ur, w.w1, w.b1)
    gated = w.w_gate is not None
    if gated:
        Sg, cg = usum @ w.w_gate, ur @ w.w_gate
        Ag, Bu = ig_gated(act, cg, Sg, c, S, steps, rule)
        base = act(cg) * c
    else:
        Au = ig_average(act, c, S, steps, rule)
        base = act(c)
    # u_ij W for the FFN's first matrices without forming u_ij W on [n, n, d] x [d, I]: u_ij is linear in
    # z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i (through the norm with the real statistics of resid_i), so
    # u_ij W = (Σ_h α^h_ij P_hj + δ_ij X_i) / s_i with P_hj = (c(f^h(x_j)) ⊙ γ) W and X_i = (c(x_i) ⊙ γ) W:
    # H n d I + H n² I instead of n² d I operations. The products run in the trace's dtype (float32 by
    # default, as the trace itself); everything else is float64.
    cd = trace.dtype
    W2 = w.w2.to(cd)
    mats = [w.w_gate.to(cd), w.w1.to(cd)] if gated else [w.w1.to(cd)]
    nrm = w.norm1 if w.placement == "post" else w.norm2
    _, scale = norm_stats(r["resid"].double(), nrm)
    gamma = nrm.weight.double()
    cen = (lambda v: v - v.mean(-1, keepdim=True)) if nrm.kind == "layernorm" else (lambda v: v)
    fx = (cen(trace.fx[l].double()) * gamma).to(cd)  # [H, n, d]
    xg = (cen(r["x"].double()) * gamma).to(cd)  # [n, d]
    P = [fx @ M for M in mats]  # [H, n, I] each
    X = [xg @ M for M in mats]  # [n, I]
    alpha = r["probs"].to(cd)
    inv_s = (1.0 / scale.reshape(n)).to(cd)
    coef = [Ag, Bu] if gated else [Au]
    F = torch.empty_like(A)
    rows = max(1, int(_CHUNK_BYTES // (8 * n * I * (2 if gated else 1))))
    for s0 in range(0, n, rows):
        sl = slice(s0, min(n, s0 + rows))
        idx = torch.arange(sl.start, sl.stop)
        h = None
        for Pm, Xm, cm in zip(P, X, coef):
            uw = torch.einsum("hij,hjk->ijk", alpha[:, sl], Pm)  # [rows, n, I]
            uw[idx - sl.start, idx] += Xm[sl]
            term = uw * (inv_s[sl, None, None] * cm[sl, None].to(cd))
            h = term if h is None else h + term
        F[sl] = (h @ W2).double()
    rF = _lin(base, w.w2, w.b2)
    out = {"atb_ff": (F, rF, r["ffn_out"].double())}
    R, rR = A + F, rA + rF
    L = trace.n_layers
    last_pre = w.placement == "pre" and l == L - 1
    real_out = r["out"].double() if last_pre else trace.hidden_states[l + 1].double()
    if w.placement == "post":
        out["atb_ff_res"] = (R, rR, r["resid2"].double())
        P, rP = _distribute(R, rR, w.norm2, r["resid2"].double())
        out["atb_ff_res_ln"] = (P, rP, real_out)
    else:
        out["atb_ff_res"] = (R, rR, real_out)
        out["atb_ff_res_ln"] = out["atb_ff_res"]
    return out


def _ratio(vecs):
    """vecs [n,n,d] -> mixing ratio [n] (Kobayashi 2021: norms of summed vectors)."""
    n = vecs.shape[0]
    idx = torch.arange(n)
    pres = vecs[idx, idx]
    mix = vecs.sum(1) - pres
    m, p = mix.norm(dim=-1), pres.norm(dim=-1)
    return (m / (m + p)).numpy()


def analyse(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss", progress=None) -> dict:
    """Trace -> {"maps": {name: Map [L,n,n]}, "ratios": {"AtbFf-N"|"AtbFfRes-N"|"AtbFfResLn-N": [L,n]}}.

    One pass over the layers for all three scopes; cached on the trace per (steps, rule).
    Map.meta: completeness [L] (max_i ||Σ_j parts_ij + remainder_i - real_i|| / ||real_i||),
    remainder_norm [L,n], steps, rule, target (what "real" is).
    """
    if trace.lm.arch is None or not trace.layers:
        raise ValueError("ATBFFRESLN needs the functional trace, which this model does not have")
    key = (int(steps), rule)
    cache = trace.__dict__.setdefault("_atb_ff_cache", {})
    if key in cache:
        return cache[key]
    ig_nodes(steps, rule)  # validates
    maps = {k: [] for k in NAMES}
    errs = {k: [] for k in NAMES}
    rem_norm = {k: [] for k in NAMES}
    ratios = {k: [] for k in NAMES}
    for l in range(trace.n_layers):
        if progress:
            progress(l / trace.n_layers)
        sc = layer_parts(trace, l, steps, rule)
        for k in NAMES:
            P, rem, real = sc[k]
            maps[k].append(P.norm(dim=-1).numpy())
            errs[k].append(_rel_err(P.sum(1) + rem, real))
            rem_norm[k].append(rem.norm(dim=-1).numpy())
            ratios[k].append(_ratio(P))
    pre = trace.placement != "post"
    targets = {
        "atb_ff": "the recomputed FFN output (ffn_out)",
        "atb_ff_res": ("the model's layer output (hidden_states; the last pre-LN layer: the recomputed output "
                       "before the final norm)") if pre else "the recomputed pre-LN2 vector (resid2)",
        "atb_ff_res_ln": ("the model's layer output (hidden_states; the last pre-LN layer: the recomputed "
                          "output before the final norm)") if pre else "the model's layer output (hidden_states)",
    }
    res = {"maps": {}, "ratios": {}}
    for k in NAMES:
        meta = {"rows_sum_to_one": False, "completeness": errs[k], "remainder_norm": np.stack(rem_norm[k]),
                "steps": int(steps), "rule": rule, "target": targets[k]}
        if k == "atb_ff_res_ln" and pre:
            meta["note"] = "pre-LN: no norm after the second residual, equals atb_ff_res"
        res["maps"][k] = Map(k, np.stack(maps[k]), None, meta)
        res["ratios"][RATIO_NAMES[k]] = np.stack(ratios[k])
    cache[key] = res
    return res


def ratios(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> dict:
    """Trace -> {"AtbFf-N", "AtbFfRes-N", "AtbFfResLn-N": [L, n]} context-mixing ratios (DESIGN §4.7)."""
    return analyse(trace, steps, rule)["ratios"]


def compute_ff(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss", *, progress=None) -> Map:
    """Trace -> Map atb_ff [L, n, n]: ||F_ij||, the FFN output's part from source j."""
    return analyse(trace, steps, rule, progress)["maps"]["atb_ff"]


def compute_ff_res(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss", *, progress=None) -> Map:
    """Trace -> Map atb_ff_res [L, n, n]: ||A_ij + F_ij||, after the second residual."""
    return analyse(trace, steps, rule, progress)["maps"]["atb_ff_res"]


def compute_ff_res_ln(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss", *, progress=None) -> Map:
    """Trace -> Map atb_ff_res_ln [L, n, n]: ||g2_i(A_ij + F_ij)||, the whole layer (ATBFFRESLN)."""
    return analyse(trace, steps, rule, progress)["maps"]["atb_ff_res_ln"]
