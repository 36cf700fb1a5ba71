"""The compiled kernels of flow: the bounds, the second-layer cut bound and Dinic's max-flow, written
as plain functions, each self-contained (no calls between them), turned into numba functions by
_kernels() on first use (compiled once, cached on disk): importing numba costs ~0.5 s, paid only
when flow runs. USE_COMPILED = False here switches flow to the igraph path (tests run both)."""
from __future__ import annotations

import numpy as np

_KERNELS = None
USE_COMPILED = True  # False: the igraph path (tests compare both with the plain formulation)


def _kernels():
    """The numba kernels (bounds, second-layer cut bound, Dinic max-flow), or None without numba."""
    global _KERNELS
    if not USE_COMPILED:
        return None
    if _KERNELS is None:
        try:
            import numba
        except ImportError:
            return None
        jit = numba.njit(cache=True, nogil=True)
        _KERNELS = (jit(_bounds_kernel), jit(_lower_two_kernel), jit(_maxflow_kernel))
    return _KERNELS


def _bounds_kernel(Al, F_prev, in_cap, in_cap_2d, order, lower, upper, only_lower_tri):
    """The bounds of _bounds for every (i, j) (j <= i only, when only_lower_tri), in one pass per
    pair instead of [n, n, n] arrays. order[:, j]: k by decreasing F_prev[k, j] (stable)."""
    n = Al.shape[0]
    for i in range(n):
        out_cap = 0.0
        for k in range(n):
            out_cap += Al[i, k]
        for j in range(n):
            if only_lower_tri and j > i:
                lower[i, j] = 0.0
                upper[i, j] = 0.0
                continue
            c_in = in_cap_2d[i, j] if in_cap.shape[0] == 0 else in_cap[j]
            total = 0.0
            before = 0.0
            knap = 0.0
            above = 0.0
            cut = np.inf
            for r in range(n):
                k = order[r, j]
                f = F_prev[k, j]
                a = Al[i, k]
                c = a if a < f else f
                total += c
                # cut side: the r largest on the source side, the next value as the member bound
                if above + f < cut:
                    cut = above + f
                above += a
                # flow side: fractional knapsack, k by decreasing flow
                if f > 0.0 and c > 0.0:
                    cost = c / f
                    fr = (1.0 - before) / cost
                    if fr > 1.0:
                        fr = 1.0
                    elif fr < 0.0:
                        fr = 0.0
                    knap += c * fr
                    before += cost
            if above < cut:
                cut = above
            up = out_cap if out_cap < c_in else c_in
            upper[i, j] = up if up < total else total
            lower[i, j] = knap if knap > cut else cut


def _lower_two_kernel(Al, AprevT, F_pp, order, count, I, J, need, out):
    """_lower_two for the listed pairs (I[t], J[t]); AprevT = Aprev transposed (contiguous), order[:, j]
    as in _bounds_kernel over F_pp, count[j] how many k' carry flow to j (F_pp[k', j] > 0).
    need[t]: the bound is wanted only if it reaches need[t] (the pair's upper bound, to settle it):
    as soon as one θ gives less, the minimum is below need[t] and out[t] = -inf (np.-inf: never)."""
    n = Al.shape[0]
    acc = np.empty(n)
    for t in range(I.shape[0]):
        i = I[t]
        j = J[t]
        m = count[j]
        for k in range(n):
            acc[k] = 0.0
        best = np.inf
        for r in range(m + 1):
            # K' = the r largest k' (those with F_pp > θ), θ = the next value (0 after the last)
            theta = F_pp[order[r, j], j] if r < m else 0.0
            s = theta
            for k in range(n):
                a = Al[i, k]
                s += a if a < acc[k] else acc[k]
            if s < best:
                best = s
                if best < need[t]:
                    best = -np.inf
                    break
            if r < m:
                kp = order[r, j]
                for k in range(n):
                    acc[k] += AprevT[kp, k]
        out[t] = best


def _maxflow_kernel(Ares, l, I, J, causal, perm, target, eps, out, R, dist, it, itu, dg, nxs, hd, fin, flen, inl,
                    qm, qp, pm, pp, pa, lim, used, ask, un, cnt, st):
    """Max-flow value from (l+1, I[t]) to (0, J[t]) for each t: Dinic's algorithm on the layered
    graph of Ares[:l+1] (positions j..i at levels 1..l when causal, else all; the source alone at
    the top, the sink alone at level 0), stopping as soon as the value reaches target[t] (a proven
    upper bound; np.inf: to the end). R[e, p, q] = Ares[e, p, q] on entry: the residual capacity
    of edge (e+1, p) -> (e, q), whose flow is Ares - R (a saturated edge has R = 0 exactly, an
    emptied one R = Ares exactly); fin[m, p, :flen[m, p]]: the positions r whose edge
    (m+1, r) -> (m, p) this pair has changed (inl marks them), so a reverse arc scan reads that
    list, not the whole level, and restoring R after the pair touches those edges only.

    The first phase runs on the layers themselves (every edge goes one level down, so no search
    is needed, and without causal trimming every level is one class whose chain, the order perm,
    is computed once per call, not per pair); later phases search the residual graph breadth-first, each level keeping a list
    of its unlabelled nodes (un, cnt) so a node scans only those. Blocking flow: depth-first from
    the source, each frame k asking its node for up to lim[k] and pushing it on through several
    arcs in turn: first the node's own column edge (dg: not tried yet), then the nodes of the level
    below at distance d + 1 in the order perm (by decreasing column capacity), reached through a
    chain nxs of the nodes of equal distance with blocked nodes spliced out (path compression), so
    a blocked node is not looked at again; then the reverse arcs from fin. A level-1 node pushes into
    the sink's edge itself (no frame for the sink). Residuals and flows
    <= eps count as 0. st: phases, arc flow updates, pairs stopped at target, search pops, search
    arc checks, push arc checks."""
    n = Ares.shape[1]
    nl = l + 2
    nxs0 = np.empty((nl, n), np.int64)
    for m in range(nl):
        for p in range(n):
            flen[m, p] = 0
    for e in range(1, l + 1):
        for x in range(n - 1):
            nxs0[e, perm[e, x]] = perm[e, x + 1]
        nxs0[e, perm[e, n - 1]] = n
    for t in range(I.shape[0]):
        i = I[t]
        j = J[t]
        lo = j if causal else 0
        hi = i + 1 if causal else n
        val = 0.0
        tgt = target[t]
        phase = 0
        while val < tgt:
            if phase == 0:  # the levels are the layers: no reset, no search
                for p in range(lo, hi):
                    dist[0, p] = -1
                    dist[l + 1, p] = -1
                for m in range(1, l + 1):
                    for p in range(lo, hi):
                        dist[m, p] = l + 1 - m
                dist[l + 1, i] = 0
                dist[0, j] = l + 1
            else:
                for p in range(lo, hi):
                    dist[0, p] = -1
                    dist[l + 1, p] = -1
                for m in range(1, l + 1):
                    c = 0
                    for p in range(lo, hi):
                        dist[m, p] = -1
                        un[m, c] = p
                        c += 1
                    cnt[m] = c
                dist[l + 1, i] = 0
                qm[0] = l + 1
                qp[0] = i
                head = 0
                tail = 1
                dsink = -1
                while head < tail:
                    m = qm[head]
                    p = qp[head]
                    head += 1
                    st[3] += 1
                    d = dist[m, p]
                    if dsink >= 0 and d >= dsink:
                        break
                    if m >= 2:
                        e = m - 1
                        x = 0
                        while x < cnt[e]:
                            q = un[e, x]
                            st[4] += 1
                            if dist[e, q] >= 0:  # labelled through an up arc meanwhile
                                cnt[e] -= 1
                                un[e, x] = un[e, cnt[e]]
                            elif R[e, p, q] > eps:
                                dist[e, q] = d + 1
                                qm[tail] = e
                                qp[tail] = q
                                tail += 1
                                cnt[e] -= 1
                                un[e, x] = un[e, cnt[e]]
                            else:
                                x += 1
                    elif m == 1:
                        if dist[0, j] < 0 and R[0, p, j] > eps:
                            dist[0, j] = d + 1
                            dsink = d + 1
                    if 1 <= m <= l - 1:
                        e = m + 1
                        for x in range(flen[m, p]):
                            r = fin[m, p, x]
                            st[4] += 1
                            if dist[e, r] < 0 and Ares[m, r, p] - R[m, r, p] > eps:
                                dist[e, r] = d + 1
                                qm[tail] = e
                                qp[tail] = r
                                tail += 1
                if dsink < 0:
                    break
            phase += 1
            st[0] += 1
            # class chains: nxs[e, p] = next position after p at level e with the same distance
            if phase == 1 and not causal:  # the first phase: every level is one class, in perm order
                for e in range(1, l + 1):
                    for p in range(n):
                        nxs[e, p] = nxs0[e, p]
                    hd[e, l + 1 - e] = perm[e, 0]
            for e in range(1 if (phase > 1 or causal) else l + 1, l + 1):
                for p in range(lo, hi):
                    dv = dist[e, p]
                    if dv >= 0:
                        hd[e, dv] = hi
                for x in range(n - 1, -1, -1):
                    p = perm[e, x]
                    if p < lo or p >= hi:
                        continue
                    dv = dist[e, p]
                    if dv >= 0:
                        nxs[e, p] = hd[e, dv]
                        hd[e, dv] = p
            for m in range(1, l + 2):
                for p in range(lo, hi):
                    itu[m, p] = 0
                    dg[m, p] = 1
                    d = dist[m, p]
                    if m == 1:
                        it[m, p] = lo
                    elif d >= 0:
                        it[m, p] = hi
                        if d + 1 < hd.shape[1]:
                            q = hd[m - 1, d + 1]  # valid only if set this phase
                            if lo <= q < hi and dist[m - 1, q] == d + 1:
                                it[m, p] = q
                    else:
                        it[m, p] = hi
            k = 0
            pm[0] = l + 1
            pp[0] = i
            lim[0] = tgt - val
            used[0] = 0.0
            ret = -1.0
            while True:
                m = pm[k]
                p = pp[k]
                if ret >= 0.0:
                    b = pa[k]
                    x = ret
                    ret = -1.0
                    if x > 0.0:
                        if b < n:  # down: more flow on edge (m, p) -> (m-1, b)
                            e = m - 1
                            src = p
                            dst = b
                            rr = R[e, src, dst] - x
                            if rr <= eps:
                                rr = 0.0
                            if not inl[e, dst, src]:
                                inl[e, dst, src] = True
                                fin[e, dst, flen[e, dst]] = src
                                flen[e, dst] += 1
                        else:  # up: less flow on edge (m+1, b-n) -> (m, p), already listed
                            e = m
                            src = b - n
                            dst = p
                            rr = R[e, src, dst] + x
                            if Ares[e, src, dst] - rr <= eps:
                                rr = Ares[e, src, dst]
                        R[e, src, dst] = rr
                        used[k] += x
                        st[1] += 1
                    adv = False
                    if x < ask[k + 1]:
                        adv = True
                    elif b < n:
                        adv = R[m - 1, p, b] <= eps
                    else:
                        adv = Ares[m, b - n, p] - R[m, b - n, p] <= eps
                    if adv:
                        if b < n:
                            if m == 1:
                                it[m, p] = hi
                            elif dg[m, p] == 1 and b == p:
                                dg[m, p] = 0
                            else:
                                it[m, p] = nxs[m - 1, b]
                        else:
                            itu[m, p] += 1
                    if used[k] >= lim[k]:
                        if k == 0:
                            break
                        ret = used[k]
                        k -= 1
                        continue
                if m == 0:
                    ret = lim[k]
                    k -= 1
                    continue
                d = dist[m, p]
                moved = False
                # down arcs: the alive members of class d + 1 on the level below
                if m == 1:
                    if it[m, p] < hi:
                        st[5] += 1
                        if dist[0, j] == d + 1 and R[0, p, j] > eps:
                            # the sink's edge: pushed here, without a frame for the sink
                            rr = R[0, p, j]
                            c = lim[k] - used[k]
                            x = rr if rr < c else c
                            rr -= x
                            if rr <= eps:
                                rr = 0.0
                            R[0, p, j] = rr
                            if not inl[0, j, p]:
                                inl[0, j, p] = True
                                fin[0, j, flen[0, j]] = p
                                flen[0, j] += 1
                            used[k] += x
                            st[1] += 1
                            if used[k] >= lim[k]:
                                if rr <= eps:
                                    it[m, p] = hi
                                if k == 0:
                                    break
                                ret = used[k]
                                k -= 1
                                continue
                        it[m, p] = hi
                else:
                    e = m - 1
                    if dg[m, p] == 1:
                        # the own column first: the largest edge of every node
                        if lo <= p < hi and dist[e, p] == d + 1 and R[e, p, p] > eps:
                            rr = R[e, p, p]
                            c = lim[k] - used[k]
                            pa[k] = p
                            pm[k + 1] = e
                            pp[k + 1] = p
                            ask[k + 1] = rr if rr < c else c
                            lim[k + 1] = ask[k + 1]
                            used[k + 1] = 0.0
                            k += 1
                            continue
                        dg[m, p] = 0
                    q = it[m, p]
                    while q < hi:
                        # skip blocked members (path compression on the chain)
                        if dist[e, q] == -2:
                            q0 = q
                            while q < hi and dist[e, q] == -2:
                                q = nxs[e, q]
                            while q0 < hi and dist[e, q0] == -2:
                                q1 = nxs[e, q0]
                                nxs[e, q0] = q
                                q0 = q1
                            if q >= hi:
                                break
                        st[5] += 1
                        rr = R[e, p, q]
                        if rr > eps:
                            c = lim[k] - used[k]
                            pa[k] = q
                            pm[k + 1] = e
                            pp[k + 1] = q
                            ask[k + 1] = rr if rr < c else c
                            lim[k + 1] = ask[k + 1]
                            used[k + 1] = 0.0
                            moved = True
                            break
                        q = nxs[e, q]
                    it[m, p] = q
                    if moved:
                        k += 1
                        continue
                # up arcs: edges into this node that carry flow
                if 1 <= m <= l - 1:
                    e = m + 1
                    x = itu[m, p]
                    while x < flen[m, p]:
                        r = fin[m, p, x]
                        st[5] += 1
                        if dist[e, r] == d + 1:
                            rr = Ares[m, r, p] - R[m, r, p]
                            if rr > eps:
                                c = lim[k] - used[k]
                                pa[k] = n + r
                                pm[k + 1] = e
                                pp[k + 1] = r
                                ask[k + 1] = rr if rr < c else c
                                lim[k + 1] = ask[k + 1]
                                used[k + 1] = 0.0
                                moved = True
                                break
                        x += 1
                    itu[m, p] = x
                    if moved:
                        k += 1
                        continue
                dist[m, p] = -2
                if k == 0:
                    break
                ret = used[k]
                k -= 1
            val += used[0]
            if used[0] <= 0.0 and phase > 1:
                break
        out[t] = val
        if val >= tgt:
            st[2] += 1
        # restore the edges this pair changed (all listed in fin)
        for m in range(l + 1):
            for p in range(lo, hi):
                for x in range(flen[m, p]):
                    r = fin[m, p, x]
                    R[m, r, p] = Ares[m, r, p]
                    inl[m, p, r] = False
                flen[m, p] = 0
