"""Causal mediation on a minimal pair (Vig et al. 2020; Finlayson et al. 2021; Meng et al. 2022's
causal tracing), computed on the functional forward (models/forward.py) for every family it reads.

    y(x)       = p(c1 | x) / p(c2 | x) at the target            (the softmax normaliser cancels:
                                                                  y = exp(z_c1 - z_c2), z the logits)
    TE         = y(x') / y(x) - 1
    NIE(z)     = y(x, with mediator z set to its value on x') / y(x) - 1
    NDE(z)     = y(x', with mediator z held at its value on x) / y(x) - 1

Every effect is a relative change of y: 0.41 means y moved by +41 %, -1 is the floor.

Mediators (kind: shape of its map):
    attention    [L, H]    head h's attention weights in layer l, all rows, taken from x' (the values
                           v, and every other head, stay those of the run being patched)
    head_output  [L, H]    head h's slice of the attention output before the output projection,
                           softmax(q k^T) v for that head, all positions, taken from x'
    residual     [L+1, n]  the hidden state after layer l at token t (row 0: the embeddings; row L:
                           the last layer's output, before a pre-LN model's final norm)
    attn_block   [L, n]    the attention block's output at token t in layer l (after the output
                           projection, with b_O; before the residual sum and any norm)
    ffn          [L, n]    the feed-forward block's output at token t in layer l (with its output bias;
                           before the residual sum and any norm)

How it is computed: each text is run once through the functional forward and every layer's states
are kept. A mediator patched in layer l needs layers l..L-1 again, for the patched batch only:
all heads of a layer (all tokens of a layer) are one batch, and the batches of later layers join the
running batch as it passes their layer (one pass from the lowest patched layer up, per kind, in
chunks of at most `max_batch_tokens` token rows). The last layer computes the target row only (the
head reads nothing else). Mediators that cannot change the output are not computed and have effect 0
exactly: a value that is bit for bit the same on both texts (every token before the first change in
a causal model, the embeddings of the tokens that did not change, every head when the texts are the
same), and in the last layer the residual, attention-block and FFN outputs of the tokens other than
the target.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..models.check import hf_forward
from ..models.forward import LayerState, after_attention, apply_norm, apply_rope, final_norm, layer_forward, rope_for
from ..trace import MULTI_TOKEN_RULE, Encoded, Word, contrast_words, encode, score_words, single_token_id

KINDS = ("attention", "head_output", "residual", "attn_block", "ffn")
HEAD_KINDS = ("attention", "head_output")
KIND_LABELS = {
    "attention": "head attention weights from B",
    "head_output": "head output (before the output projection) from B",
    "residual": "hidden state after layer l at token t from B",
    "attn_block": "attention-block output at token t from B",
    "ffn": "feed-forward output at token t from B",
}
DEFAULT_BATCH_TOKENS = 32768


@dataclass
class Mediation:
    """The effects of one minimal pair (base x = A, counterfactual x' = B) on y = p(c1)/p(c2) at the target.

    Units: every effect is a relative change of y, (y_intervened / y(x)) - 1: +0.41 is +41 %, -1 the
    floor; 0 exactly where the mediator was not computed because it cannot change the output (see
    `skipped`). Arrays are float64 numpy, layers counted from 0 (the UI adds 1).

    total_effect: float, y(x')/y(x) - 1.
    nie: kind -> the natural indirect effects, mediator taken from x' into the run of x:
        "attention" [L, H], "head_output" [L, H], "residual" [L+1, n] (row 0 the embeddings),
        "attn_block" [L, n], "ffn" [L, n].
    nde: the same kinds (those asked with `direct`): natural direct effects, the run of x' with the
        mediator held at its value on x, relative to y(x) as well.
    skipped: kind -> bool array of nie's shape, True where nothing was computed because the patch
        cannot change the output (NIE 0 exactly; NDE the total effect exactly).
    y_base, y_cf: y(x), y(x'); p_base, p_cf: (p(c1), p(c2)) at the target of each text.
    tokens_base, tokens_cf: the token strings; changed: the positions where they differ.
    work: per kind, layer passes run (a layer over all tokens of one batch row counts 1; the last
        layer's target-only pass counts 1/n), seconds, mediators computed and skipped.
    """

    base_text: str
    counterfactual_text: str
    contrast: tuple
    contrast_ids: tuple
    target: int
    tokens_base: list
    tokens_cf: list
    changed: list
    y_base: float
    y_cf: float
    p_base: tuple
    p_cf: tuple
    total_effect: float
    n_layers: int
    n_heads: int
    nie: dict = field(default_factory=dict)
    nde: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    # the fields the issue names, as properties over nie
    @property
    def nie_attention(self) -> Optional[np.ndarray]:
        """[L, H] NIE of each head's attention weights taken from x' (relative change of y)."""
        return self.nie.get("attention")

    @property
    def nie_head_output(self) -> Optional[np.ndarray]:
        """[L, H] NIE of each head's output (before the output projection) taken from x'."""
        return self.nie.get("head_output")

    @property
    def residual(self) -> Optional[np.ndarray]:
        """[L+1, n] NIE of the hidden state after layer l (row 0: embeddings) at token t taken from x'."""
        return self.nie.get("residual")

    @property
    def attn_block(self) -> Optional[np.ndarray]:
        """[L, n] NIE of the attention block's output in layer l at token t taken from x'."""
        return self.nie.get("attn_block")

    @property
    def ffn(self) -> Optional[np.ndarray]:
        """[L, n] NIE of the feed-forward block's output in layer l at token t taken from x'."""
        return self.nie.get("ffn")

    @property
    def nde_attention(self) -> Optional[np.ndarray]:
        """[L, H] NDE: x' run with head h's attention weights held at their value on x."""
        return self.nde.get("attention")

    @property
    def nde_head_output(self) -> Optional[np.ndarray]:
        """[L, H] NDE: x' run with head h's output held at its value on x."""
        return self.nde.get("head_output")

    def heads_for_share(self, share: float, kind: str = "attention") -> Optional[int]:
        """The fewest heads whose NIEs, largest first, sum to `share` of the total effect (same sign as
        the TE); None when the heads' NIEs in the TE's direction never reach it."""
        a = self.nie.get(kind)
        if a is None or not math.isfinite(self.total_effect) or self.total_effect == 0:
            return None
        return heads_for_share(a.ravel(), self.total_effect, share)

    def top_heads(self, k: int = 5, kind: str = "attention") -> list:
        """[(layer, head, nie)] for the k heads with the largest |NIE|, largest first (0-based)."""
        a = self.nie[kind]
        order = np.argsort(-np.abs(a.ravel()), kind="stable")[:k]
        return [(int(i // a.shape[1]), int(i % a.shape[1]), float(a.ravel()[i])) for i in order]

    def reading(self, kind: str = "attention") -> str:
        """One line for a student: the strongest head's effect and how many heads carry 80 % of the TE."""
        c1, c2 = self.contrast
        te = f"changing A into B moves p({c1})/p({c2}) by {self.total_effect:+.0%}"
        if kind not in self.nie:
            return te
        l, h, v = self.top_heads(1, kind)[0]
        what = "attention" if kind == "attention" else "output"
        line = f"{te}; patching head {l + 1}.{h + 1}'s {what} from B moves it by {v:+.0%}"
        k80 = self.heads_for_share(0.8, kind)
        if k80 is not None:
            line += f"; {k80} head{'s' if k80 != 1 else ''} carry 80 % of the total effect"
        return line

    def to_dict(self) -> dict:
        """JSON-ready (lists, floats)."""
        return dict(base_text=self.base_text, counterfactual_text=self.counterfactual_text,
                    contrast=list(self.contrast), target=self.target, tokens_base=self.tokens_base,
                    tokens_cf=self.tokens_cf, changed=self.changed, y_base=self.y_base, y_cf=self.y_cf,
                    p_base=list(self.p_base), p_cf=list(self.p_cf), total_effect=self.total_effect,
                    n_layers=self.n_layers, n_heads=self.n_heads,
                    nie={k: v.tolist() for k, v in self.nie.items()}, nde={k: v.tolist() for k, v in self.nde.items()},
                    work=self.work, seconds=self.seconds, notes=self.notes)


def heads_for_share(values: np.ndarray, total: float, share: float) -> Optional[int]:
    """values [m] (NIEs), total (the TE) -> the fewest values, largest in the TE's direction first,
    whose sum reaches share × total; None when they never do."""
    s = np.sign(total)
    v = np.sort(np.asarray(values, dtype=np.float64) * s)[::-1]
    v = v[v > 0]
    if not len(v):
        return None
    k = int(np.searchsorted(np.cumsum(v), share * abs(total) * (1 - 1e-12)) + 1)
    return k if k <= len(v) else None


# ----------------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class _Reader:
    """What y reads from the last layer's output, at the rows t .. t+k-1.

    ids = (c1, c2), one token each: the score is z_c1 - z_c2 at the target (k = 1).
    word: one contrast word, its pieces appended after the target in the run that reads them: the
    score is log p(word) = Σ_i log p(piece_i | text, pieces_<i) at rows t+i (trace.score_words), and
    y = exp(score of c1 - score of c2)."""

    ids: tuple = ()
    word: Optional[Word] = None

    @property
    def pair(self) -> bool:
        return self.word is None

    @property
    def k(self) -> int:
        return 1 if self.pair else len(self.word.ids)

    def logits(self, lm, h: torch.Tensor) -> torch.Tensor:
        """h [B, k, d]: the last layer's output at rows t..t+k-1 (before the final norm) -> logits [B, k, V] (float64)."""
        hp = next(iter(lm.model.parameters()))
        return lm.arch.head(final_norm(lm.arch, h).to(hp.dtype)).double()

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [B, k, V] -> score [B]."""
        if self.pair:
            return logits[:, 0, self.ids[0]] - logits[:, 0, self.ids[1]]
        return score_words(logits.unsqueeze(1), [self.word])[:, 0]

    def __call__(self, lm, h: torch.Tensor) -> torch.Tensor:
        return self.score(self.logits(lm, h))


@dataclass
class _Run:
    """One text through the functional forward: per-layer states (batch dimension 1 kept)."""

    enc: Encoded
    states: list  # [LayerState] batched [1, ...]
    ctx: list  # per layer [1, n, H*dh]: softmax(q k^T) v per head, before the output projection
    z: float  # the reader's score: logit(c1) - logit(c2) at the target, or log p(word)
    p: tuple  # (p(c1), p(c2)) for a pair reader, (p(word),) for a word reader
    reader: _Reader

    def resid(self, row: int) -> torch.Tensor:
        """The hidden state after layer row-1 ([1, n, d]; row 0: embeddings, row L: last layer's output)."""
        return self.states[row].resid_in if row < len(self.states) else self.states[-1].resid_out


def _ctx(w, st: LayerState) -> torch.Tensor:
    """A layer's per-head attention result before the output projection: [B, n, H*dh]."""
    rep = w.n_heads // w.n_kv_heads
    v = st.v.repeat_interleave(rep, dim=1) if rep > 1 else st.v
    B, H, n, _ = st.probs.shape
    return (st.probs @ v).transpose(1, 2).reshape(B, n, H * w.head_dim)


def _run(lm, enc: Encoded, layers: list, reader: _Reader, dtype) -> _Run:
    out = hf_forward(lm, enc.ids)
    x = out.hidden_states[0].to(dtype)
    rope = rope_for(lm.arch, x)
    states, ctx = [], []
    for w in layers:
        st = layer_forward(w, x, rope=rope)
        states.append(st)
        ctx.append(_ctx(w, st))
        x = st.resid_out
    t = enc.target
    logits = reader.logits(lm, x[:, t:t + reader.k])
    z = float(reader.score(logits)[0])
    if reader.pair:
        logp = torch.log_softmax(logits[0, 0], -1)
        return _Run(enc, states, ctx, z, tuple(float(logp[i].exp()) for i in reader.ids), reader)
    return _Run(enc, states, ctx, z, (math.exp(z),), reader)


def _extended(enc: Encoded, word: Word) -> Encoded:
    """The text up to the target with the word's pieces but its last appended after it (a causal model
    reads piece i at row t+i)."""
    t = enc.target
    extra = torch.as_tensor(word.ids[:-1], dtype=enc.ids.dtype).reshape(1, -1)
    return Encoded(ids=torch.cat([enc.ids[:, :t + 1], extra], 1), tokens=list(enc.tokens[:t + 1]) + list(word.pieces[:-1]),
                   special=np.concatenate([np.asarray(enc.special[:t + 1]), np.zeros(len(word.ids) - 1, dtype=bool)]),
                   target=t, text=enc.text, notes=list(enc.notes), after=enc.after, blank=enc.blank)


# ----------------------------------------------------------------------------- layer pieces


# LayerWeights fields of families whose attention has more than q, k, v, a scale and a causal mask
# (QK-norm, sliding windows, logit soft-capping, block output norms, a position bias)
_EXTRAS = ("q_norm", "k_norm", "window", "softcap", "attn_out_norm", "ffn_out_norm", "score_bias")


def _plain(lm, rope) -> bool:
    """Whether every layer's attention is q, k, v, a scale and (maybe) a causal mask: then a layer can be
    computed for a window of positions with the positions before it read from the cached run."""
    return not isinstance(rope, dict) and not any(getattr(w, f, None) is not None
                                                  for w in lm.arch.layers for f in _EXTRAS)


def _layer_window(w, x: torch.Tensor, s: int, st: LayerState, rope, q: slice, plain: bool) -> torch.Tensor:
    """One layer for the positions s..s+m-1 of x [B, m, d], the output at the query rows q (relative to
    s): [B, |q|, d]. Keys and values of the positions before s come from st (the cached run, which the
    patched runs equal there: a causal model's prefix before every patched position). Layers that are
    not plain run layer_forward in full (then s is 0 and x covers every position)."""
    if not plain:
        return layer_forward(w, x, rope=rope).resid_out[:, q]
    B, m, _ = x.shape
    H, Hkv, dh = w.n_heads, w.n_kv_heads, w.head_dim
    h = apply_norm(x, w.norm1) if w.placement == "pre" else x
    hq = h[:, q]
    r = hq.shape[1]
    qq = (hq @ w.wq + (0 if w.bq is None else w.bq)).view(B, r, H, dh).transpose(1, 2)
    k = (h @ w.wk + (0 if w.bk is None else w.bk)).view(B, m, Hkv, dh).transpose(1, 2)
    v = (h @ w.wv + (0 if w.bv is None else w.bv)).view(B, m, Hkv, dh).transpose(1, 2)
    qpos = torch.arange(s, s + m, device=x.device)[q]
    if w.rotary:
        cos, sin = rope
        qq = apply_rope(qq, cos[:, qpos].unsqueeze(1), sin[:, qpos].unsqueeze(1))
        k = apply_rope(k, cos[:, s:s + m].unsqueeze(1), sin[:, s:s + m].unsqueeze(1))
    if s:
        k = torch.cat([st.k[:, :, :s].expand(B, -1, -1, -1), k], 2)
        v = torch.cat([st.v[:, :, :s].expand(B, -1, -1, -1), v], 2)
    rep = H // Hkv
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (qq @ k.transpose(-1, -2)) * w.scale
    if w.causal:
        scores = scores.masked_fill(torch.arange(s + m, device=x.device)[None, :] > qpos[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = (probs @ v).transpose(1, 2).reshape(B, r, H * dh)
    attn_out = ctx @ w.wo + (0 if w.bo is None else w.bo)
    return after_attention(w, x[:, q], attn_out).resid_out


def _from_ctx(w, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    """The rest of a layer from the per-head attention result: ctx [B, r, H*dh], x [1 or B, r, d] -> [B, r, d]."""
    attn_out = ctx @ w.wo + (0 if w.bo is None else w.bo)
    return after_attention(w, x.expand(ctx.shape[0], -1, -1), attn_out).resid_out


def _from_ffn_out(w, st: LayerState, ffn_out: torch.Tensor, rows: slice) -> torch.Tensor:
    """A layer's output with its FFN output replaced: ffn_out [B, r, d] -> [B, r, d]."""
    resid = st.resid_mid[:, rows] + ffn_out
    return apply_norm(resid, w.norm2) if w.placement == "post" else resid


# ----------------------------------------------------------------------------- mediators


def _attn_block(st: LayerState) -> torch.Tensor:
    """What after_attention takes: the output projection's output (before a block output norm, for the
    families that have one; the norm is per token, so patching before it patches after it too)."""
    raw = getattr(st, "attn_raw", None)
    return st.attn_out if raw is None else raw


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a, b))


def _plan(kind: str, base: _Run, src: _Run, L: int, H: int, n: int, t: int, causal: bool) -> list:
    """[(window start s, entry layer e, index tuple)] of the mediators of `kind` that can change the
    output (the rest are skipped: effect 0; in a causal model that includes every position after the
    target). Entry e: the mediator's state is the input of layer e (e = L:
    already the last layer's output). s: the first position the patch can change (a causal model's
    positions before it equal the cached run's; 0 otherwise). n: the positions that are mediators (the
    text's; a word reader's appended pieces after them are not)."""
    out = []
    if kind in HEAD_KINDS:
        dh = base.ctx[0].shape[-1] // H
        first = [j for j in range(n) if not _same(base.resid(0)[0, j], src.resid(0)[0, j])]
        s = (first[0] if first else 0) if causal else 0
        for l in range(L):
            for h in range(H):
                if kind == "attention":
                    same = _same(base.states[l].probs[0, h], src.states[l].probs[0, h])
                else:
                    same = _same(base.ctx[l][0, :, h * dh:(h + 1) * dh], src.ctx[l][0, :, h * dh:(h + 1) * dh])
                if not same and s <= t:
                    out.append((s, l + 1, (l, h)))
    elif kind == "residual":
        for r in range(L + 1):
            for j in range(n):
                if r == L and j != t:
                    continue
                if not (causal and j > t) and not _same(base.resid(r)[0, j], src.resid(r)[0, j]):
                    out.append((j if causal else 0, r, (r, j)))
    else:
        for l in range(L):
            for j in range(n):
                if l == L - 1 and j != t:
                    continue
                a = base.states[l].attn_out if kind == "attn_block" else base.states[l].ffn_out
                b = src.states[l].attn_out if kind == "attn_block" else src.states[l].ffn_out
                if not (causal and j > t) and not _same(a[0, j], b[0, j]):
                    out.append((j if causal else 0, l + 1, (l, j)))
    return out


def _entries(kind: str, idx: list, base: _Run, src: _Run, layers: list, t: int, rows: slice) -> torch.Tensor:
    """The patched states of mediators `idx` (all of one layer) at the positions `rows`: residual row r ->
    the input of layer r (row L: the last layer's output at the rows read, the target's from src); the
    others -> the output of their layer l. [B, |rows|, d]."""
    B = len(idx)
    o = rows.start
    if kind == "residual":
        r = idx[0][0]
        if r == len(layers):
            x = base.resid(r)[:, rows].expand(B, -1, -1).clone()
            x[:, t - o] = src.resid(r)[0, t]
            return x
        x = base.resid(r)[:, rows].expand(B, -1, -1).clone()
        for b, (_, j) in enumerate(idx):
            x[b, j - o] = src.resid(r)[0, j]
        return x
    l = idx[0][0]
    w, st = layers[l], base.states[l]
    if kind in HEAD_KINDS:
        if kind == "attention":
            P = st.probs[:, :, rows].expand(B, -1, -1, -1).clone()
            for b, (_, h) in enumerate(idx):
                P[b, h] = src.states[l].probs[0, h, rows]
            rep = w.n_heads // w.n_kv_heads
            v = st.v.repeat_interleave(rep, dim=1) if rep > 1 else st.v
            ctx = (P @ v).transpose(1, 2).reshape(B, P.shape[2], -1)
        else:
            dh = w.head_dim
            ctx = base.ctx[l][:, rows].expand(B, -1, -1).clone()
            for b, (_, h) in enumerate(idx):
                ctx[b, :, h * dh:(h + 1) * dh] = src.ctx[l][0, rows, h * dh:(h + 1) * dh]
        return _from_ctx(w, st.resid_in[:, rows], ctx)
    if kind == "attn_block":
        A = _attn_block(st)[:, rows].expand(B, -1, -1).clone()
        for b, (_, j) in enumerate(idx):
            A[b, j - o] = _attn_block(src.states[l])[0, j]
        return after_attention(w, st.resid_in[:, rows].expand(B, -1, -1), A).resid_out
    F = st.ffn_out[:, rows].expand(B, -1, -1).clone()
    for b, (_, j) in enumerate(idx):
        F[b, j - o] = src.states[l].ffn_out[0, j]
    return _from_ffn_out(w, st, F, rows)


def _wavefront(lm, kind: str, plan: list, base: _Run, src: _Run, layers: list, max_rows: int,
               counter: dict) -> np.ndarray:
    """The base run's reader score [len(plan)] (z_c1 - z_c2, or log p(word)) for the planned mediators
    (plan sorted by window start, then entry layer): the mediators of one window start go up together,
    in chunks of at most max_rows token rows, each chunk one pass from its lowest entry layer to the top
    over the positions s..hi-1 (hi: the last row read + 1 in a causal model, n otherwise)."""
    reader = base.reader
    nr = reader.k  # rows read at the top: t .. t+nr-1
    L = len(layers)
    n = base.states[0].resid_in.shape[1]
    t = base.enc.target
    rope = rope_for(lm.arch, base.states[0].resid_in)
    plain = _plain(lm, rope)
    causal = lm.arch.causal and plain
    z = np.empty(len(plan))
    c0 = 0
    while c0 < len(plan):
        s = plan[c0][0] if plain else 0
        hi = t + nr if causal else n
        m = hi - s
        per = max(1, max_rows // m)
        chunk = []
        while c0 + len(chunk) < len(plan) and len(chunk) < per and plan[c0 + len(chunk)][0] == plan[c0][0]:
            chunk.append(plan[c0 + len(chunk)])
        by_entry: dict = {}
        for _, e, ix in chunk:
            by_entry.setdefault(e, []).append(ix)
        x = None
        done = []
        win = slice(s, hi)
        for e in range(min(by_entry), L + 1):
            if e in by_entry:
                ix = by_entry[e]
                # entering at e = L (the head and token kinds patched inside the last layer, the
                # residual's row L): only the rows read at the top are needed
                top = e == L
                new = _entries(kind, ix, base, src, layers, t, slice(t, t + nr) if top else win)
                if kind != "residual":
                    counter["layer_passes"] += len(ix) * (nr if top else m) / n
                x = new if x is None else torch.cat([x, new], 0)
                done.extend(ix)
            if e == L:
                break
            if x is None:
                continue
            q = slice(t - s, t - s + nr) if e == L - 1 else slice(None)
            x = _layer_window(layers[e], x, s, base.states[e], rope, q, plain)
            counter["layer_passes"] += x.shape[0] * (nr if e == L - 1 else m) / n
        zz = reader(lm, x[:, :nr]).cpu().numpy()
        pos = {ix: i for i, ix in enumerate(done)}
        for k, (_, _, ix) in enumerate(chunk):
            z[c0 + k] = zz[pos[ix]]
        c0 += len(chunk)
    return z


def _shape(kind: str, L: int, H: int, n: int) -> tuple:
    return {"attention": (L, H), "head_output": (L, H), "residual": (L + 1, n)}.get(kind, (L, n))


def _effects(lm, kind, runs: list, ref_z: float, layers, n: int, max_rows, counter) -> tuple:
    """(effects [shape], skipped mask [shape]) of one kind: expm1(z_intervened - ref_z), z = Σ sign ×
    score over runs = [(sign, base, src)]: `base` the run being patched, `src` the run the mediator's
    value comes from (one pair run, or one run per contrast word of several tokens, c1's +1 and c2's -1).
    n: the text's positions (the maps' columns)."""
    L, H = len(layers), layers[0].n_heads
    first = runs[0][1]
    t = first.enc.target
    rope = rope_for(lm.arch, first.states[0].resid_in)
    causal = lm.arch.causal and _plain(lm, rope)
    cols = n if first.reader.pair else t + 1
    planned: dict = {}
    for _, base, src in runs:
        for p in _plan(kind, base, src, L, H, cols, t, causal):
            planned.setdefault(p[2], p)
    plan = sorted(planned.values(), key=lambda p: (p[0], p[1]))
    shape = _shape(kind, L, H, n)
    z0 = sum(sign * base.z for sign, base, _ in runs)
    eff = np.full(shape, math.expm1(z0 - ref_z))  # not patched: the run's own y (NIE 0, NDE the TE)
    skipped = np.ones(shape, dtype=bool)
    if plan:
        z = sum(sign * _wavefront(lm, kind, plan, base, src, layers, max_rows, counter) for sign, base, src in runs)
        for (_, _, ix), zi in zip(plan, z):
            eff[ix] = math.expm1(zi - ref_z)
            skipped[ix] = False
    counter["computed"] += len(plan)
    counter["skipped"] += int(skipped.sum())
    return eff, skipped


def _contrast_ids(lm, contrast) -> tuple:
    if contrast is None or len(contrast) != 2:
        raise InputError("give the contrast as two words (c1, c2): y = p(c1) / p(c2) at the target")
    ids = tuple(single_token_id(lm.tokenizer, c) for c in contrast)
    if ids[0] == ids[1]:
        raise InputError(f"the contrast words '{contrast[0]}' and '{contrast[1]}' are the same token")
    return ids


def several_tokens_note(words: Sequence[Word]) -> str:
    """The one-line note for contrast words of which some are several tokens."""
    split = [w.shown() for w in words if w.multi]
    return (f"{' and '.join(split)} {'is' if len(split) == 1 else 'are'} several tokens: p(word) is the product of "
            f"its pieces' probabilities, each read after the pieces before it ({MULTI_TOKEN_RULE['causal_lm']})")


def _readers(lm, contrast) -> tuple:
    """(pair reader, None) when both contrast words are one token each; on a causal LM with a word of
    several tokens, (None, (c1's Word, c2's Word)) scored by trace.MULTI_TOKEN_RULE; else InputError."""
    try:
        return _Reader(ids=_contrast_ids(lm, contrast)), None
    except InputError:
        if contrast is None or len(contrast) != 2:
            raise
        words = contrast_words(lm, contrast)  # a masked LM's word of several tokens: its one-line refusal
        if lm.task != "causal_lm" or not any(w.multi for w in words):
            raise
    return None, words


def check_model(lm) -> None:
    """InputError with one line when mediation cannot run on this model."""
    if lm.arch is None or not lm.decompositions_ok:
        raise InputError(f"mediation needs the functional forward: {lm.disabled_reason}")
    if lm.output_kind != "token" or lm.arch.head is None:
        raise InputError("mediation needs a masked or causal language model: y is a ratio of two tokens' "
                         "probabilities at the target")


def align(lm, base_text: str, counterfactual_text: str, max_tokens: int = 128, target: Optional[int] = None) -> tuple:
    """(Encoded A, Encoded B, changed positions); InputError when the two texts cannot be patched
    position by position. The rule: same number of tokens and the same target position."""
    a = encode(lm, base_text, max_tokens, target)
    b = encode(lm, counterfactual_text, max_tokens, target)
    if len(a.tokens) != len(b.tokens):
        raise InputError(f"patching is position by position, so A and B must have the same number of tokens "
                         f"(A has {len(a.tokens)}, B has {len(b.tokens)}): change one word for one word of as "
                         "many tokens")
    if a.target != b.target:
        raise InputError(f"A's target is token {a.target + 1} and B's is token {b.target + 1}: the target must be "
                         "at the same position")
    changed = [i for i in range(len(a.tokens)) if int(a.ids[0, i]) != int(b.ids[0, i])]
    return a, b, changed


def mediate(lm, base_text: str, counterfactual_text: str, contrast: Sequence[str], *,
            kinds: Sequence[str] = KINDS, direct: Sequence[str] = (), target: Optional[int] = None,
            dtype: torch.dtype = torch.float32, max_tokens: int = 128, max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
            progress: Optional[Callable] = None) -> Mediation:
    """Causal mediation of the pair (x = base_text, x' = counterfactual_text) on y = p(c1)/p(c2).

    kinds: the mediators to patch (KINDS; () gives the total effect alone, for texts of any length).
    direct: the kinds whose natural direct effects to compute as well (each doubles that kind's work).
    progress(kind, done_kinds, total_kinds, partial Mediation): called before the first kind and after
    each; the partial result has the finished kinds' maps (the head map first with the default order).
    Raising from it stops the work. dtype: float32 (default) or float64 for the whole computation.
    Raises InputError (one line) for texts that cannot be patched: different numbers of tokens or
    target positions (when kinds is not empty), contrast words that are not one token each on a masked
    LM, a model without an output head or whose self-check failed.

    A contrast word of several tokens on a causal LM is scored by trace.MULTI_TOKEN_RULE: p(word) is the
    product of its pieces' probabilities, each piece read after the pieces before it appended to the
    text up to the target. Each such word gets runs of its own (A and B with its pieces appended) and
    y = p(c1)/p(c2) combines them; the mediators stay the text's positions (0..target).
    """
    t0 = time.perf_counter()
    check_model(lm)
    kinds = list(kinds)
    bad = [k for k in list(kinds) + list(direct) if k not in KINDS]
    if bad:
        raise InputError(f"unknown mediator kind(s) {', '.join(map(repr, bad))}: choose from {', '.join(KINDS)}")
    missing = [k for k in direct if k not in kinds]
    if missing:
        kinds += missing
    pair, words = _readers(lm, contrast)
    if kinds:
        a, b, changed = align(lm, base_text, counterfactual_text, max_tokens, target)
    else:
        a = encode(lm, base_text, max_tokens, target)
        b = encode(lm, counterfactual_text, max_tokens, target)
        changed = ([i for i in range(len(a.tokens)) if int(a.ids[0, i]) != int(b.ids[0, i])]
                   if len(a.tokens) == len(b.tokens) else [])
    layers = lm.layers(dtype)
    with torch.inference_mode():
        if pair is not None:
            A, B = _run(lm, a, layers, pair, dtype), _run(lm, b, layers, pair, dtype)
            runs_a, runs_b = [(1, A, B)], [(1, B, A)]
            za, zb, pa, pb, cids = A.z, B.z, A.p, B.p, pair.ids
        else:
            As, Bs = [], []
            for w in words:
                rd = _Reader(word=w)
                As.append(_run(lm, _extended(a, w), layers, rd, dtype))
                Bs.append(_run(lm, _extended(b, w), layers, rd, dtype))
            runs_a = [(1, As[0], Bs[0]), (-1, As[1], Bs[1])]
            runs_b = [(1, Bs[0], As[0]), (-1, Bs[1], As[1])]
            za, zb = As[0].z - As[1].z, Bs[0].z - Bs[1].z
            pa, pb = (As[0].p[0], As[1].p[0]), (Bs[0].p[0], Bs[1].p[0])
            cids = tuple(tuple(w.ids) for w in words)
        res = Mediation(base_text=a.text, counterfactual_text=b.text, contrast=tuple(contrast), contrast_ids=cids,
                        target=a.target, tokens_base=list(a.tokens), tokens_cf=list(b.tokens), changed=changed,
                        y_base=math.exp(za), y_cf=math.exp(zb), p_base=pa, p_cf=pb,
                        total_effect=math.expm1(zb - za), n_layers=len(layers), n_heads=layers[0].n_heads)
        if a.notes:
            res.notes.extend(a.notes)
        if words is not None:
            res.notes.append(several_tokens_note(words))
        jobs = [(k, False) for k in kinds] + [(k, True) for k in direct]
        if progress is not None:
            progress(None, 0, len(jobs), res)
        for done, (kind, is_direct) in enumerate(jobs, 1):
            ts = time.perf_counter()
            counter = {"layer_passes": 0.0, "computed": 0, "skipped": 0}
            if is_direct:
                eff, skip = _effects(lm, kind, runs_b, za, layers, len(a.tokens), max_batch_tokens, counter)
                res.nde[kind] = eff
            else:
                eff, skip = _effects(lm, kind, runs_a, za, layers, len(a.tokens), max_batch_tokens, counter)
                res.nie[kind] = eff
                res.skipped[kind] = skip
            counter["seconds"] = time.perf_counter() - ts
            res.work[("nde_" if is_direct else "") + kind] = counter
            if progress is not None:
                progress(kind, done, len(jobs), res)
    res.seconds = time.perf_counter() - t0
    return res


def nominal_layer_passes(L: int, H: int, n: int, kinds: Sequence[str] = ("attention", "residual")) -> float:
    """The work of the interventions if every mediator recomputed its layers in full, in layer passes
    over n tokens: a mediator in layer l costs L - l passes (the issue's (L·H + (L+1)·n)·L/2 for the
    head and residual kinds)."""
    w = 0.0
    for k in kinds:
        if k in HEAD_KINDS:
            w += H * sum(L - l for l in range(L))
        elif k == "residual":
            w += n * sum(L - r for r in range(L + 1))
        else:
            w += n * sum(L - l for l in range(L))
    return w
