"""ATBFFRESLN (Kobayashi et al. 2024): the attention block, the feed-forward block, the second
residual and the second norm as a sum over source tokens, with integrated gradients for the FFN.

Per layer l and receiving token i the scopes are (vectors indexed [i, j, d], j the source):
  atb_ff        FFN output      ffn_out_i  = Σ_j F_ij + r^F_i
  atb_ff_res    + residual      resid_ffn_i = Σ_j (A_ij + F_ij) + (r^A_i + r^F_i)
  atb_ff_res_ln + LN2 (post-LN) resid_out_i = Σ_j g2_i(A_ij + F_ij) + g2_i(r^A_i + r^F_i) + β2
A_ij, r^A_i are the attention-block parts (attn_res_ln.parts). Maps are the norms ||·_ij||.

The FFN input. Post-LN: the parts of the LN1 output, u_ij = A_ij, u^r_i = r^A_i. Pre-LN: the
residual-stream parts z_ij (remainder b_O) go through norm2 distributed linearly with the real
statistics of resid_attn_i: u_ij = γ2 ⊙ c(z_ij) / s2_i (c centres over d for LayerNorm, not for RMSNorm),
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

import numpy as np
import torch

from .. import linear
from ..linear import RULES  # noqa: F401 - re-exported
from . import attn_res_ln
from .base import Completeness, Map, attn_vectors
from .info import MethodInfo, Option

DEFAULT_STEPS = 32
NAMES = ("atb_ff", "atb_ff_res", "atb_ff_res_ln")
RATIO_NAMES = {"atb_ff": "AtbFf-N", "atb_ff_res": "AtbFfRes-N", "atb_ff_res_ln": "AtbFfResLn-N"}
_CHUNK_BYTES = 64 * 2 ** 20


def ig_nodes(steps: int, rule: str = "gauss"):
    """-> (t [steps], w [steps]) float64 quadrature nodes on [0, 1] whose weights sum to 1."""
    return linear.quadrature(int(steps), rule)


def _value_and_grad(act, x: torch.Tensor):
    """x [...] -> (act(x), act'(x)) elementwise, by autograd on a fresh leaf."""
    with torch.inference_mode(False), torch.enable_grad():
        xl = x.detach().clone().requires_grad_(True)
        y = act(xl)
        (g,) = torch.autograd.grad(y.sum(), xl)
    return y.detach(), g.detach()


_IG_BLOCK = 2 ** 18  # elements per block of quadrature nodes on the CPU: a block's tensors stay in the cache


def _node_blocks(steps: int, rule: str, like: torch.Tensor):
    """Quadrature nodes in blocks of about _IG_BLOCK elements: -> [(t [k, 1, ...], w [k, 1, ...])]."""
    t, w = linear.quadrature(steps, rule, dtype=like.dtype, device=like.device)
    # on a GPU a block holds every node (linear.chunk_bytes): one batched call instead of `steps`
    k = max(1, linear.chunk_bytes(like.device, 8 * _IG_BLOCK) // 8 // max(1, like.numel()))
    shape = (-1, *[1] * like.dim())
    return [(t[i:i + k].view(shape), w[i:i + k].view(shape)) for i in range(0, len(t), k)]


def ig_average(act, c: torch.Tensor, S: torch.Tensor, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> torch.Tensor:
    """c, S [..., I] -> ∫_0^1 act'(c + t S) dt [..., I] by quadrature (elementwise activation); the
    nodes run in cache-sized blocks, each block one batched autograd call."""
    out = torch.zeros_like(S)
    for t, w in _node_blocks(steps, rule, S):
        _, g = _value_and_grad(act, c + t * S)
        out += (w * g).sum(0)
    return out


def ig_gated(act, cg: torch.Tensor, Sg: torch.Tensor, c: torch.Tensor, S: torch.Tensor,
             steps: int = DEFAULT_STEPS, rule: str = "gauss"):
    """[..., I] each -> (∫ act'(a_t) ⊙ b_t dt, ∫ act(a_t) dt) with a_t = cg + t Sg, b_t = c + t S
    (nodes in cache-sized blocks)."""
    A, B = torch.zeros_like(S), torch.zeros_like(S)
    for t, w in _node_blocks(steps, rule, S):
        y, g = _value_and_grad(act, cg + t * Sg)
        A += (w * g * (c + t * S)).sum(0)
        B += (w * y).sum(0)
    return A, B


def _lin(x, W, b=None):
    y = x @ W
    return y if b is None else y + b


def _rel_err(total: torch.Tensor, real: torch.Tensor) -> float:
    """max_i ||total_i - real_i|| / ||real_i||."""
    return float(((total - real).norm(dim=-1) / real.norm(dim=-1).clamp_min(1e-30)).max())


def _setup(trace, l: int, steps: int, rule: str) -> dict:
    """What both the explicit parts and the fused per-layer pass need for layer l: the integrated-
    gradients coefficients, the FFN's first matrices applied to the per-head source vectors, the
    remainder's FFN output.

    u_ij is linear in z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i (through `nrm` with the real statistics
    s_i of resid_i: post-LN norm1, whose output is the FFN input; pre-LN norm2), so for the FFN's
    first matrices W: u_ij W = (Σ_h α^h_ij P_hj + δ_ij X_i) / s_i with P_hj = (γ ⊙ c(f^h(x_j))) W and
    X_i = (γ ⊙ c(x_i)) W: H n d I + H n² I operations instead of n² d I. The products run in the
    trace's dtype (float32 by default, as the trace itself), as do the FFN's matrices on the summed
    input and the remainder (the weights are used as the trace holds them, never copied); the parts'
    vectors, norms and sums are float64."""
    w = trace.weights[l]
    cd = trace.dtype
    r = trace.layers[l]
    nrm = w.norm1 if w.placement == "post" else w.norm2
    s = linear.norm_scale(r.resid_attn.double(), nrm)  # [n]
    x = r.resid_in.double()
    # α and f(x), or (Gemma 3) with the attention output's norm applied linearly: α / s_i, γ ⊙ f(x)
    a64, fx64, bo = attn_vectors(trace, l)
    zsum = torch.einsum("hij,hjd->id", a64, fx64) + x  # Σ_j z_ij
    usum = linear.distribute(zsum, nrm, s).to(cd)
    ur = linear.distribute(bo, nrm, s)
    if nrm.bias is not None:
        ur = ur + nrm.bias.double()
    ur = ur.to(cd)
    act = w.activation()
    S, c = usum @ w.w1, _lin(ur, w.w1, w.b1)
    gated = w.w_gate is not None
    if gated:
        Sg, cg = usum @ w.w_gate, ur @ w.w_gate
        coef = list(ig_gated(act, cg, Sg, c, S, steps, rule))
        base = act(cg) * c
    else:
        coef = [ig_average(act, c, S, steps, rule)]
        base = act(c)
    mats = [w.w_gate, w.w1] if gated else [w.w1]
    P = _first_products(w, r, fx64, nrm, mats, cd)
    xg = linear.transform(x, nrm).to(cd)  # [n, d]
    # the receiver's factor 1/s_i ⊙ ∫... folded into one [n, I] coefficient per first matrix
    coef = [(cm.double() / s.reshape(-1, 1)).to(cd) for cm in coef]
    rF = _lin(base, w.w2, w.b2).double()
    sF = None
    if w.ffn_out_norm is not None:  # Gemma 3: the FFN's parts through its output norm, real statistics
        sF = linear.norm_scale(r.ffn_raw.double(), w.ffn_out_norm)
        rF = linear.distribute(rF, w.ffn_out_norm, sF)
    return dict(w=w, r=r, nrm=nrm, s=s, a64=a64, fx64=fx64, x=x, cd=cd, alpha=a64.to(cd),
                P=P, X=[xg @ M for M in mats], coef=coef, W2=w.w2, sF=sF,
                rF=rF, bo=bo, I=w.w1.shape[1], gated=gated)


_FACTOR_VALUES = None  # None: choose by cost; True / False: force (tests run both)


def _first_products(w, r, fx64, nrm, mats, cd) -> list:
    """P_hj = (γ ⊙ c(f^h(x_j))) W [H, n, I] for each first matrix W. f^h(x_j) = v^h_j W_O^h and the
    norm's linear part acts on each row, so P_hj = v^h_j K_h with K_h = (γ ⊙ c(W_O^h)) W: H·dh·d·I +
    n·d·I operations instead of H·n·d·I, used when that is cheaper (H·n > d + n: about 70 tokens on
    SmolLM2 and BERT-base)."""
    H, n, d = fx64.shape
    factor = _FACTOR_VALUES if _FACTOR_VALUES is not None else H * n > d + n
    if not factor:
        fxg = linear.transform(fx64, nrm).to(cd)  # [H, n, d]
        return [fxg @ M for M in mats]
    v = r.v.to(cd)  # [Hkv, n, dh] (value bias included)
    if H != w.n_kv_heads:
        v = v.repeat_interleave(H // w.n_kv_heads, dim=0)
    wo = w.wo.double()
    if w.attn_out_norm is not None:  # f' = γ ⊙ f(x): the attention output norm's γ on W_O's columns
        wo = linear.transform(wo, w.attn_out_norm)
    wo = linear.transform(wo, nrm).to(cd).reshape(H, w.head_dim, d)
    return [torch.bmm(v, wo @ M) for M in mats]


def _rows(n: int, I: int, gated: bool, device="cpu") -> int:
    return max(1, int(linear.chunk_bytes(device, _CHUNK_BYTES) // (8 * n * I * (2 if gated else 1))))


def _ffn_chunk(st: dict, sl: slice, cols: int) -> torch.Tensor:
    """F_ij [rows, cols, d] (float64) for receivers sl and sources j < cols."""
    alpha = st["alpha"]
    idx = torch.arange(sl.start, sl.stop, device=alpha.device)
    h = None
    for Pm, Xm, cm in zip(st["P"], st["X"], st["coef"]):
        uw = torch.einsum("hij,hjk->ijk", alpha[:, sl, :cols], Pm[:, :cols])  # [rows, cols, I]
        uw[idx - sl.start, idx] += Xm[sl]
        uw.mul_(cm[sl, None])
        h = uw if h is None else h.add_(uw)
    F = (h @ st["W2"]).double()
    if st["sF"] is not None:
        F = linear.distribute(F, st["w"].ffn_out_norm, st["sF"][sl])
    return F


def _real_out(trace, l: int, w) -> torch.Tensor:
    last_pre = w.placement == "pre" and l == trace.n_layers - 1
    return (trace.layers[l].resid_out if last_pre else trace.hidden_states[l + 1]).double()


def layer_parts(trace, l: int, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> dict:
    """Layer l (0-based) -> {scope: (parts [n,n,d], remainder [n,d], real [n,d])} for the three scopes
    ("atb_ff", "atb_ff_res", "atb_ff_res_ln"), float64; Σ_j parts + remainder ≈ real (IG error).
    The explicit vectors ([n, n, d] each); `analyse` computes the same maps in one fused pass."""
    st = _setup(trace, l, steps, rule)
    w, r = st["w"], st["r"]
    A, rA = attn_res_ln.parts(trace, l)  # post-LN: sum to LN1 output; pre-LN: to resid
    n = A.shape[0]
    F = torch.empty_like(A)
    rows = _rows(n, st["I"], st["gated"], A.device)
    for s0 in range(0, n, rows):
        sl = slice(s0, min(n, s0 + rows))
        F[sl] = _ffn_chunk(st, sl, n)
    rF = st["rF"]
    out = {"atb_ff": (F, rF, r.ffn_out.double())}
    R, rR = A + F, rA + rF
    real_out = _real_out(trace, l, w)
    if w.placement == "post":
        out["atb_ff_res"] = (R, rR, r.resid_ffn.double())
        P, rP = linear.distribute_norm(R, rR, w.norm2, r.resid_ffn.double())
        out["atb_ff_res_ln"] = (P, rP, real_out)
    else:
        out["atb_ff_res"] = (R, rR, real_out)
        out["atb_ff_res_ln"] = out["atb_ff_res"]
    return out


def layer_summary(trace, l: int, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> dict:
    """Layer l -> {scope: (norms [n,n], Σ_j parts [n,d], parts_ii [n,d], remainder [n,d], real [n,d])}:
    the same numbers as `layer_parts`, computed in receiver chunks without keeping any [n, n, d]
    tensor; causal models skip the sources j > i of each chunk (their parts are exactly 0)."""
    st = _setup(trace, l, steps, rule)
    w, r = st["w"], st["r"]
    n, d = st["x"].shape
    dev = st["x"].device
    post = w.placement == "post"
    scopes = NAMES if post else NAMES[:2]
    norms = {k: torch.zeros(n, n, dtype=torch.float64, device=dev) for k in scopes}
    sums = {k: torch.zeros(n, d, dtype=torch.float64, device=dev) for k in scopes}
    diag = {k: torch.zeros(n, d, dtype=torch.float64, device=dev) for k in scopes}
    if post:
        s1, s2 = attn_res_ln.ln_scale(trace, l), linear.norm_scale(r.resid_ffn.double(), w.norm2)
    rows = _rows(n, st["I"], st["gated"], dev)
    for s0 in range(0, n, rows):
        sl = slice(s0, min(n, s0 + rows))
        cols = sl.stop if w.causal else n
        idx = torch.arange(sl.start, sl.stop, device=dev)
        F = _ffn_chunk(st, sl, cols)
        z = torch.einsum("hij,hjd->ijd", st["a64"][:, sl, :cols], st["fx64"][:, :cols])
        z[idx - sl.start, idx] += st["x"][sl]
        A = linear.distribute(z, w.norm1, s1[sl]) if post else z
        vecs = {"atb_ff": F, "atb_ff_res": A.add_(F)}
        if post:
            vecs["atb_ff_res_ln"] = linear.distribute(vecs["atb_ff_res"], w.norm2, s2[sl])
        for k, v in vecs.items():
            norms[k][sl, :cols] = v.norm(dim=-1)
            sums[k][sl] = v.sum(1)
            diag[k][sl] = v[idx - sl.start, idx]
    rA = st["bo"].expand(n, -1)
    if post:
        rA = linear.distribute(rA, w.norm1, s1)
        if w.norm1.bias is not None:
            rA = rA + w.norm1.bias
    rF = st["rF"]
    real_out = _real_out(trace, l, w)
    out = {"atb_ff": (rF, r.ffn_out.double()),
           "atb_ff_res": (rA + rF, r.resid_ffn.double() if post else real_out)}
    if post:
        rP = linear.distribute(rA + rF, w.norm2, s2) + (0 if w.norm2.bias is None else w.norm2.bias)
        out["atb_ff_res_ln"] = (rP, real_out)
    res = {k: (norms[k], sums[k], diag[k]) + out[k] for k in scopes}
    if not post:
        res["atb_ff_res_ln"] = res["atb_ff_res"]
    return res


def analyse(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss", progress=None) -> dict:
    """Trace -> {"maps": {name: Map [L,n,n]}, "ratios": {"AtbFf-N"|"AtbFfRes-N"|"AtbFfResLn-N": [L,n]}}.

    One pass over the layers for all three scopes, kept with the trace (trace.cached, key
    ("atb_ff", steps, rule)): the three registry entries read the same pass.
    Map.completeness: [L] max_i ||Σ_j parts_ij + remainder_i - real_i|| / ||real_i|| and what "real"
    is; Map.meta: remainder_norm [L,n], steps, rule.
    """
    if trace.lm.arch is None or not trace.layers:
        raise ValueError("ATBFFRESLN needs the functional trace, which this model does not have")
    return trace.cached(("atb_ff", int(steps), rule), lambda: _analyse(trace, steps, rule, progress))


def _analyse(trace, steps: int, rule: str, progress=None) -> dict:
    """analyse() without the cache."""
    linear.quadrature(steps, rule)  # validates
    maps = {k: [] for k in NAMES}
    errs = {k: [] for k in NAMES}
    rem_norm = {k: [] for k in NAMES}
    ratios = {k: [] for k in NAMES}
    for l in range(trace.n_layers):
        if progress:
            progress(l / trace.n_layers)
        sc = layer_summary(trace, l, steps, rule)
        for k in NAMES:
            norms, total, pres, rem, real = sc[k]
            maps[k].append(norms.cpu().numpy())
            errs[k].append(_rel_err(total + rem, real))
            rem_norm[k].append(rem.norm(dim=-1).cpu().numpy())
            ratios[k].append(linear.mixing_ratio(total - pres, pres))
    pre = trace.placement != "post"
    targets = {
        "atb_ff": "the recomputed FFN output (ffn_out)",
        "atb_ff_res": ("the model's layer output (hidden_states; the last pre-LN layer: the recomputed output "
                       "before the final norm)") if pre else "the recomputed pre-LN2 vector (resid_ffn)",
        "atb_ff_res_ln": ("the model's layer output (hidden_states; the last pre-LN layer: the recomputed "
                          "output before the final norm)") if pre else "the model's layer output (hidden_states)",
    }
    res = {"maps": {}, "ratios": {}}
    for k in NAMES:
        meta = {"rows_sum_to_one": False, "remainder_norm": np.stack(rem_norm[k]), "steps": int(steps), "rule": rule}
        if k == "atb_ff_res_ln" and pre:
            meta["note"] = "pre-LN: no norm after the second residual, equals atb_ff_res"
        res["maps"][k] = Map(k, np.stack(maps[k]), None, meta, Completeness(tuple(errs[k]), targets[k]))
        res["ratios"][RATIO_NAMES[k]] = np.stack(ratios[k])
    return res


def ratios(trace, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> dict:
    """Trace -> {"AtbFf-N", "AtbFfRes-N", "AtbFfResLn-N": [L, n]} context-mixing ratios (DESIGN §4.7)."""
    return analyse(trace, steps, rule)["ratios"]


def scope_compute(scope: str):
    """The registry `compute` of one ATBFF scope: all three read the same cached pass (`analyse`)."""
    def compute(trace, *, progress=None, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> Map:
        return analyse(trace, steps, rule, progress)["maps"][scope]
    compute.__doc__ = f"Trace -> Map {scope} [L, n, n] (one pass for the three ATBFF scopes, cached on the trace)."
    return compute


def scope_mixing_ratios(scope: str):
    """The `mixing_ratios` of one ATBFF scope: its ratio from the same cached pass (`analyse`)."""
    def mixing_ratios(trace, *, steps: int = DEFAULT_STEPS, rule: str = "gauss") -> dict:
        return {RATIO_NAMES[scope]: analyse(trace, steps, rule)["ratios"][RATIO_NAMES[scope]]}
    mixing_ratios.__doc__ = f"Trace -> {{{RATIO_NAMES[scope]!r}: [L, n]}} (the pass the three ATBFF scopes share)."
    return mixing_ratios


compute = scope_compute("atb_ff")  # ||F_ij||, the FFN output's part from source j
mixing_ratios = scope_mixing_ratios("atb_ff")

# the options every ATBFF scope takes
OPTIONS = (Option(name="steps", default=DEFAULT_STEPS, help="quadrature nodes of the integrated gradients through the FFN"),
           Option(name="rule", default="gauss", help="quadrature rule", choices=tuple(RULES)))


def scope_info(name: str, **texts) -> MethodInfo:
    """The MethodInfo of one ATBFF scope: its own label, unit and texts, the rest shared."""
    return MethodInfo(name=name, reference="Kobayashi et al. 2024", rows_sum_to_one=False, decomposition=True,
                      completeness=True, ratios=(RATIO_NAMES[name],), cost="pairs",
                      shared="atb_ff",  # one pass over the layers gives all three scopes
                      options=OPTIONS, **texts)


INFO = scope_info(
    "atb_ff", label="ATBFF", unit="‖FFN share‖ (norm, hidden units)",
    summary="attention block, then the FFN split by integrated gradients, norm (Kobayashi et al. 2024)",
    explain="ATBFF: the feed-forward block's output split back onto the source tokens (integrated gradients).",
    what=("**What it shows.** How much each source token contributes to the output of the layer's "
          "feed-forward block (FFN) alone: the attention block's per-source shares are pushed through the "
          "FFN, whose non-linearity is split between sources with integrated gradients (ATBFF, Kobayashi et "
          "al. 2024). Each cell is the norm of that source's share."),
    caveats=("**Caveats.** The split of a non-linear block is a choice (integrated gradients from a zero "
             "baseline); the shares add up to the real FFN output only up to a small completeness error, "
             "reported with the map. The residual and the LayerNorm around the FFN are not included (see "
             "ATBFFRES, ATBFFRESLN)."))
