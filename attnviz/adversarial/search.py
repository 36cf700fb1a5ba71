"""The frontier search: all λ × restarts as one batched Adam optimisation, and its baselines
(random permutations of α, the uniform distribution)."""
from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..trace import DEFAULT_MAX_TOKENS, word_start_ids
from .distances import tvd
from .envelope import best_per_lambda, lower_envelope
from .problem import Problem, prepare
from .results import Frontier
from . import settings
from .settings import DEFAULT_LAMBDAS, INIT_FLOOR, Progress
from .site import Site


def _topk(probs: torch.Tensor, k: int, pb: Optional["Problem"] = None):
    """probs [B, V] -> (ids [B, k], probabilities [B, k]); over word-initial tokens only when pb's
    text had a [MASK] blank on a causal model (as analyze ranks its prediction)."""
    allowed = word_start_ids(pb.lm) if pb is not None and pb.enc.blank and pb.output_kind == "token" else None
    if allowed is not None and len(allowed):
        ids = torch.as_tensor(allowed, device=probs.device)
        k = min(k, len(ids))
        v, i = probs[..., ids].topk(k, dim=-1)
        return ids[i].cpu().numpy(), v.float().cpu().numpy()
    k = min(k, probs.shape[-1])
    v, i = probs.topk(k, dim=-1)
    return i.cpu().numpy(), v.float().cpu().numpy()


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
        for r in range(R):  # the permutation drawn on the CPU (the same on every device)
            out[i, r, cols] = src[r, torch.randperm(len(cols), generator=gen).to(src.device)]
    return out


def step_function(pb: Problem, theta: torch.Tensor):
    """-> (f, note): f(theta) = (α' = softmax_rows(theta), jsd [B], tvd [B], probs [B, C]),
    differentiable in theta. On a CUDA device f is a CUDA graph of that forward and of its backward
    (torch.cuda.make_graphed_callables, captured for theta's shape): one replay instead of thousands
    of kernel launches from Python, which bound a step on a GPU (68 ms at layer 1 of SmolLM2 on an
    H100, for ~10 ms of arithmetic). The same kernels on the same numbers; the outputs are the graph's
    own buffers, overwritten at the next call. ATTNVIZ_CUDA_GRAPHS=0 turns it off; where the capture
    fails, f is the plain function and note says why."""
    def f(th):
        alpha = pb.softmax_rows(th)
        j, t, probs = pb.distances(alpha)
        return alpha, j, t, probs

    if theta.device.type != "cuda" or os.environ.get("ATTNVIZ_CUDA_GRAPHS", "1") == "0":
        return f, None
    try:
        return torch.cuda.make_graphed_callables(f, (theta,)), None
    except Exception as e:  # noqa: BLE001 - any capture failure falls back to the plain steps
        torch.cuda.synchronize()
        return f, (f"the CUDA graph of the search step could not be captured ({type(e).__name__}: "
                   f"{str(e).splitlines()[0][:160]}); the search ran without it (same numbers, slower)")


@contextlib.contextmanager
def _quiet_graph_warning():
    """The graphed backward runs on the stream it was captured on while θ's gradient is accumulated on
    the default stream; torch then warns once that this "may incur unnecessary synchronization" (it
    changes no number). Not shown to the user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The AccumulateGrad node's stream does not match")
        yield


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
    pj = torch.cat(js).cpu().numpy() if js else np.zeros(0)
    pt = torch.cat(ts).cpu().numpy() if ts else np.zeros(0)
    return pj, pt, (float(uj[0]), float(ut[0]))


def _step_seconds(pb: Problem, b: int, dtype: torch.dtype) -> float:
    """Wall-clock seconds of one optimisation step (softmax, the output through the rest of the model,
    both distances, backward) for a batch of b candidate attentions, as frontier's loop runs it."""
    R, m = pb.alpha0.shape[0], int(pb.allowed.sum())
    theta = torch.zeros(b, R, m, dtype=dtype, device=pb.x.device).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.1, eps=1e-20)
    times = []
    with torch.inference_mode(False), torch.enable_grad(), _quiet_graph_warning():
        step, _ = step_function(pb, theta)  # as frontier steps: a CUDA graph on a GPU (captured untimed)
        while len(times) < 2 or (len(times) < 7 and sum(times) < 0.3):
            t0 = time.perf_counter()
            _, j, t, _ = step(theta)
            opt.zero_grad(set_to_none=True)
            (t - j).sum().backward()
            opt.step()
            if theta.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            if b > 1 and times[0] > 0.3:  # a slow step: one is enough (it errs long: the first allocates)
                return times[0]
    return float(np.median(times[1:]))  # the first of a batch size allocates


def search_seconds(t1: float, tB: float, B: int, K: int, restarts: int, steps: int, prune: int,
                   jw_steps: int = 0, jw_k: int = 5, permutations: int = 100) -> float:
    """Seconds of a frontier (and Jain & Wallace's search) from a step's time measured at batch 1 (t1)
    and at batch B (tB), a step at batch b costing t1 + (tB - t1)·(b - 1)/(B - 1): `prune` steps of
    all K·restarts members, the rest of K (one restart) or 2K (restart 1 and the best random one);
    jw_steps steps of jw_k adversaries; the baselines, one forward (half a step) per 128 permutations."""
    def at(b):
        return t1 + (tB - t1) * (b - 1) / max(B - 1, 1)
    Rs = max(1, int(restarts))
    after = K * min(Rs, 2)
    total = prune * at(K * Rs) + (steps - prune) * at(after) + jw_steps * at(jw_k)
    total += 0.5 * math.ceil((permutations + 1) / 128) * at(min(permutations + 1, 128))
    return float(total)


def estimate_seconds(lm, text, site: Site, lambdas: Sequence[float] = DEFAULT_LAMBDAS, steps: int = 200,
                     restarts: int = 3, target: Optional[int] = None, jw_steps: int = 0,
                     permutations: int = 100, max_tokens: int = DEFAULT_MAX_TOKENS,
                     dtype: torch.dtype = torch.float32) -> float:
    """About how long frontier(lm, text, site, lambdas, steps, restarts) (plus jain_wallace with jw_steps)
    takes here: the problem is prepared as the search does (one forward pass of the model) and one step
    of the search (Adam's included) is timed at batch 1 and at the search's full batch (the median of 1
    to 6 runs after an untimed one, about 0.3 s of steps; a batch step over 0.3 s is run once); where B
    steps of batch 1 would pass 3 s, a batch b2 < B (b2 steps of one under 3 s) is timed instead and
    the line through batch 1 and b2 followed to B. The rest is search_seconds. Costs about one forward pass and a few steps of the search."""
    pb = prepare(lm, text, site, target, dtype, max_tokens)
    K, Rs = len(list(lambdas)), max(1, int(restarts))
    B = K * Rs
    t1 = _step_seconds(pb, 1, dtype)
    tB = t1
    if B > 1:
        # a full-batch step that could take seconds (all layers of a large model, a long text) is not run:
        # the largest batch b2 whose b2 steps of one member stay under 3 s is, and the line through
        # (1, t1) and (b2, t(b2)) is followed to B
        b2 = B if t1 * B <= 3.0 else max(2, int(3.0 / t1))
        t2 = _step_seconds(pb, b2, dtype)
        tB = t1 + (t2 - t1) * (B - 1) / (b2 - 1)
    prune = steps // 4 if Rs > 2 else steps
    return search_seconds(t1, tB, B, K, Rs, steps, prune, jw_steps, settings.JW_K, permutations)


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
    lams = torch.tensor(list(lambdas), dtype=torch.float64)  # on the CPU; lam_b follows the model
    if lams.numel() == 0 or bool((lams < 0).any()):
        raise InputError("give at least one λ, all >= 0")
    K, Rs = lams.numel(), max(1, int(restarts))
    R, m = pb.alpha0.shape[0], int(pb.allowed.sum())
    B = K * Rs
    gen = torch.Generator().manual_seed(seed)
    # restart 0 starts at the original, with its weights floored at 1e-4: a one-hot row has exact
    # zeros (or 1e-30s) whose logits would get gradients too small for any optimiser to move them
    log_a0 = torch.log(pb.alpha0[:, pb.allowed].clamp_min(INIT_FLOOR)).to(dtype)
    dev = pb.x.device  # the random starts are drawn on the CPU: the same on every device
    theta0 = torch.empty(Rs, K, R, m, dtype=dtype, device=dev)
    theta0[0] = log_a0 + 1e-3 * torch.randn(K, R, m, generator=gen, dtype=dtype).to(dev)
    if Rs > 1:
        theta0[1:] = init_noise * torch.randn(Rs - 1, K, R, m, generator=gen, dtype=dtype).to(dev)
    theta = theta0.reshape(B, R, m).clone().requires_grad_(True)
    lam_b = lams.repeat(Rs).to(dev)  # batch order: restart-major, λ-minor
    restart_b = np.repeat(np.arange(Rs), K)
    every = record_every or max(1, steps // 20)
    prune = (steps // 4 if prune_at is None else int(prune_at)) if Rs > 2 else steps
    rec_alpha, rec_j, rec_t, rec_lam, rec_rs, rec_step, rec_ti, rec_tp = ([] for _ in range(8))

    def record(alpha, j, t, probs, s):
        rec_alpha.append(alpha.detach().float().cpu().numpy())
        jd, td = j.detach(), t.detach()
        rec_j.append(jd.cpu().numpy())
        rec_t.append(td.cpu().numpy())
        rec_lam.append(lam_b.cpu().numpy())
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
    graph_notes = []
    with torch.inference_mode(False), torch.enable_grad(), _quiet_graph_warning():
        step, note = step_function(pb, theta)
        graph_notes += [note] if note else []
        for s in range(steps):
            alpha, j, t, probs = step(theta)
            if s % every == 0:
                record(alpha, j, t, probs, s)
            if s == prune:
                # each λ keeps restart 0 (from the original) and its best random restart so far
                obj = (t - lam_b * j).detach().reshape(Rs, K)
                keep = torch.cat([torch.arange(K, device=dev), (1 + torch.argmin(obj[1:], dim=0)) * K + torch.arange(K, device=dev)])
                state = opt.state[theta]
                theta = theta.detach()[keep].clone().requires_grad_(True)
                opt = torch.optim.Adam([theta], lr=lr_at(s), eps=1e-20)
                opt.state[theta] = {k: (v[keep].clone() if torch.is_tensor(v) and v.dim() > 0 else v)
                                    for k, v in state.items()}
                lam_b, restart_b = lam_b[keep], restart_b[keep.cpu().numpy()]
                step, note = step_function(pb, theta)  # a new batch size: a new graph
                graph_notes += [note] if note and note not in graph_notes else []
                alpha, j, t, probs = step(theta)
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
    alpha_v = np.concatenate([pb.alpha0.float().cpu().numpy()[None]] + rec_alpha)
    lam_v = np.concatenate([[np.nan]] + rec_lam)
    rs_v = np.concatenate([[-1]] + rec_rs)
    st_v = np.concatenate([[-1]] + rec_step)
    ti_v = np.concatenate([ti0] + rec_ti)
    tp_v = np.concatenate([tp0] + rec_tp)
    best = best_per_lambda(jsd_v, tvd_v, lams.numpy())
    env = lower_envelope(jsd_v, tvd_v)
    if alpha_v.size <= settings.ALPHA_KEEP:
        keep = np.arange(len(jsd_v))
    else:
        keep = np.unique(np.concatenate([[0], env, best]))
        alpha_v = alpha_v[keep]
    t0 = time.perf_counter()
    pj, pt, uni = baselines(pb, permutations, seed)
    timings["baselines"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    labels = _labels_for(pb, [ti_v])
    notes = list(pb.enc.notes) + graph_notes
    if pb.model_y0 is not None and pb.model_y0.shape == tuple(pb.y0.shape):
        diff = float(tvd(pb.model_y0, pb.y0.cpu().numpy()))
        if diff > 1e-4:
            notes.append(f"warning: the recomputed output differs from the model's own by TVD {diff:.1e}")
    return Frontier(spec=getattr(lm, "spec", ""), text=pb.enc.text, tokens=list(pb.tokens), target=pb.target,
                    site=site, rows=pb.rows, output_kind=pb.output_kind, alpha0=pb.alpha0.cpu().numpy(),
                    y0_top=[(labels[int(i)], float(p)) for i, p in zip(ti0[0], tp0[0])], lambdas=lams.numpy(),
                    jsd=jsd_v, tvd=tvd_v, alpha=alpha_v, alpha_idx=keep, lam=lam_v, restart=rs_v, step=st_v, top_idx=ti_v,
                    top_p=tp_v, top_labels=labels, best=best, envelope=env, perm_jsd=pj, perm_tvd=pt,
                    uniform=uni, steps=steps, restarts=Rs, lr=lr, timings=timings, notes=notes,
                    prune_at=prune if prune < steps else None)
