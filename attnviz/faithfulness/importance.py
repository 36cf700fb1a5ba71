"""Importance of each input token for the target prediction: blank-out, leave-one-out, gradient norm,
input×gradient and integrated gradients.

The target quantity f (one number per input) is, by the model's output:
  token head (masked / causal LM): p(predicted token) at the target position, the prediction being the
      argmax on the unperturbed text; with a contrast (correct, wrong): p(correct) - p(wrong), where
      a word of several tokens on a causal LM has p(word) = Π_k p(piece_k | text up to the target,
      pieces_<k), its pieces appended after the target (trace.MULTI_TOKEN_RULE; only the sentence's
      positions are attributed); a masked LM refuses such a word with the reason;
  sequence head (classifier): p(predicted class), or p(correct) - p(wrong) for two named labels;
  no head (plain encoder): cos(h_t(x), h_t(x0)), the cosine of the target position's final hidden
      state to its unperturbed value. Its gradient vanishes at the unperturbed input (the cosine is
      maximal there), so the two gradient baselines use the Jacobian J_j = ∂h_t/∂e_j instead:
      gradient norm = ||J_j||_F, input×gradient = ||J_j e_j||.

Baselines (importance [n], NaN outside the attributed positions):
  blank_out     |f(x with token j replaced by the blank) - f(x)|; the blank (BLANKS, blank_choice) is
                [UNK], else [MASK], else pad, unless that token is a document boundary (SmolLM2's
                <|endoftext|>): then the mean word embedding; the one used is reported, and so is how
                degenerate the changes are (median |Δf| / |f0|); all variants in one batched forward.
  leave_one_out |f(x without token j) - f(x)|, the target position shifted when j comes before it;
                one batched forward.
  grad_norm     ||∂f/∂e_j||, e_j the word embedding of token j (position/type embeddings are added
                inside the model).
  input_x_grad  |Σ_d e_jd ∂f/∂e_jd|.
  integrated_gradients  |IG_j|, IG_j = Σ_d (e_jd - e'_jd) ∫_0^1 ∂f/∂e_jd(e' + a(e - e')) da with the
                zero word embedding as e' on the attributed positions (others kept); Gauss-Legendre
                quadrature with `ig_steps` nodes. Completeness: Σ_j IG_j = f(e) - f(e'); the error is
                reported; the steps double until it is within ig_tol (default 1 %) or IG_MAX_STEPS.

Attributed positions: the non-special tokens ([MASK] counts as a token), without the target position
unless include_target=True (the target cannot be left out: its leave-one-out value is then NaN).
Gradients run the Hugging Face model with inputs_embeds under torch.enable_grad(): no hooks, nothing
written to the (shared) model.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..linear import quadrature
from ..text import readable_token
from ..trace import DEFAULT_MAX_TOKENS, Encoded, appended_ids, contrast_words, encode, predicted_id, score_words

DEFAULT_IG_STEPS = 32
IG_MAX_STEPS = 256
DEFAULT_IG_TOL = 0.01  # integrated gradients' relative completeness bound, the default everywhere
DEGENERATE = 0.9  # blank-out whose median |Δf| / |f0| reaches this is flagged as degenerate


def degeneracy(delta, f0: float) -> float:
    """Signed blank-out changes Δf at the attributed positions, f0 -> median |Δf| / |f0| (NaN-free;
    inf when f0 is 0 and something changed)."""
    d = np.abs(np.asarray(delta, dtype=float))
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan")
    m = float(np.median(d))
    return m / abs(f0) if f0 != 0 else (0.0 if m == 0 else float("inf"))
_CHUNK = 64  # rows per batched forward (blank-out / leave-one-out / IG steps / Jacobian rows)


@dataclass(frozen=True)
class Target:
    """What f measures: kind "prob" | "contrast" | "hidden", the position, the output ids involved."""

    kind: str
    position: int
    ids: tuple = ()  # prob: (predicted,); contrast: (correct, wrong), each one id or its pieces' ids; hidden: ()
    label: str = ""  # one line for the screen
    output: str = "token"  # "token" | "sequence" | "hidden"
    words: tuple = ()  # token contrast: the two trace.Word (a word of several tokens: a causal LM's pieces)

    @property
    def appends(self) -> bool:
        """A contrast word is several tokens: f reads the text up to the target with its pieces appended."""
        return self.kind == "contrast" and any(w.multi for w in self.words)


@dataclass
class Importance:
    """Importance vectors [n] per baseline (NaN outside `positions`) for one text and target."""

    tokens: list
    special: np.ndarray
    target: Target
    positions: np.ndarray  # attributed token positions
    values: dict  # baseline -> [n] float64, >= 0 (what is correlated)
    signed: dict  # baseline -> [n] signed version where one exists (blank_out, leave_one_out, input_x_grad, IG)
    f0: float  # f on the unperturbed text
    blank_token: Optional[str] = None
    ig: dict = field(default_factory=dict)  # steps, f_baseline, sum, completeness_abs, completeness_rel, met
    # median over the attributed positions of |Δf| / |f0| for blank-out (None without it): near 1, every
    # blank changes f by about all of f0 and the baseline cannot rank tokens (degenerate)
    blank_degeneracy: Optional[float] = None
    notes: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)


def output_kind(lm) -> str:
    """'token' (masked / causal LM), 'sequence' (classifier) or 'hidden' (no output head): the model's own
    LoadedModel.output_kind, the one place that decides it."""
    return lm.output_kind


def blank_token(tokenizer) -> tuple:
    """-> (id, token string, which) for blank-out: [UNK], else the mask token, else the pad token."""
    for attr, which in (("unk_token", "unk"), ("mask_token", "mask"), ("pad_token", "pad")):
        t = getattr(tokenizer, attr, None)
        tid = getattr(tokenizer, attr + "_id", None)
        if t is not None and tid is not None:
            return int(tid), str(t), which
    raise InputError("this tokenizer has no unknown, mask or pad token to blank tokens out with")


# what blank-out puts in place of token j: "auto" picks per model (blank_choice), "token" the tokenizer's
# unknown / mask / pad token (blank_token), "pad" its pad token, "word" the neutral word NEUTRAL_WORD,
# "mean" the mean word embedding of the vocabulary, "zero" the zero word embedding
BLANKS = ("auto", "token", "pad", "word", "mean", "zero")
NEUTRAL_WORD = "something"


def boundary_ids(tokenizer) -> set:
    """The ids of the tokenizer's document-boundary tokens (beginning / end of text)."""
    return {int(i) for i in (getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None))
            if i is not None}


def is_boundary_blank(tokenizer) -> bool:
    """True when the tokenizer's blank token (blank_token) is a document boundary rather than an unknown
    word: its beginning / end of text, or a declared "unknown" token that is not one ([UNK], <unk>) but a
    control token such as SmolLM2's and GPT-2's <|endoftext|>, which byte-level tokenizers never emit
    for unknown text and which separates the documents the model was trained on."""
    try:
        bid, btok, which = blank_token(tokenizer)
    except InputError:
        return True
    return bid in boundary_ids(tokenizer) or (which == "unk" and "unk" not in btok.lower())


def blank_choice(lm) -> str:
    """The blank blank-out uses on this model ("auto"): the tokenizer's unknown / mask token, unless that
    token is a document boundary (is_boundary_blank): blanking with it cuts the text in two, and every
    blanked position then changes f by about all of f0. Such models get the mean word embedding
    instead (docs/faithfulness.md has the measurements)."""
    return "mean" if is_boundary_blank(lm.tokenizer) else "token"


def _neutral_id(tokenizer) -> int:
    ids = tokenizer(" " + NEUTRAL_WORD, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        ids = tokenizer(NEUTRAL_WORD, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise InputError(f"'{NEUTRAL_WORD}' is not one token of this model's vocabulary: use another blank")
    return int(ids[0])


def blank_fill(lm, blank: str = "auto") -> tuple:
    """-> (token id or None, embedding [d] or None, description) of the blank `blank` (BLANKS)."""
    if blank not in BLANKS:
        raise InputError(f"unknown blank '{blank}'; known: {', '.join(BLANKS)}")
    if blank == "auto":
        blank = blank_choice(lm)
    tok = lm.tokenizer
    if blank == "token":
        bid, btok, _ = blank_token(tok)
        return bid, None, btok
    if blank == "pad":
        if getattr(tok, "pad_token_id", None) is None:
            raise InputError("this tokenizer has no pad token")
        return int(tok.pad_token_id), None, str(tok.pad_token)
    if blank == "word":
        i = _neutral_id(tok)
        return i, None, tok.convert_ids_to_tokens(i)
    emb = lm.model.get_input_embeddings()
    with torch.no_grad():
        if blank == "zero":
            return None, torch.zeros(emb.weight.shape[1], dtype=emb.weight.dtype, device=emb.weight.device), "zero embedding"
        # the mean over the vocabulary of what the embedding layer outputs (Gemma scales its rows)
        scale = getattr(emb, "embed_scale", None)
        vec = emb.weight.mean(0) * (scale.to(emb.weight.dtype) if isinstance(scale, torch.Tensor) else 1.0)
        return None, vec.detach(), "mean word embedding"


def _label_id(config, name) -> int:
    labels = {str(v): int(k) for k, v in (getattr(config, "id2label", None) or {}).items()}
    if str(name) in labels:
        return labels[str(name)]
    try:
        i = int(name)
    except (TypeError, ValueError):
        raise InputError(f"'{name}' is not a label of this classifier (labels: {list(labels)})") from None
    if not 0 <= i < config.num_labels:
        raise InputError(f"label index {i} is outside 0..{config.num_labels - 1}")
    return i


def _forward(lm, ids: Optional[torch.Tensor] = None, embeds: Optional[torch.Tensor] = None):
    """The Hugging Face model on ids [B,n] or inputs_embeds [B,n,d] (no padding).

    Token heads: the base model only (final hidden states, final norm included), the output head is
    applied at the target position alone in _value (same numbers, far less work with a large vocabulary).
    """
    B, n = (ids.shape if ids is not None else embeds.shape[:2])
    dev = _device(lm)
    kw = dict(attention_mask=torch.ones(B, n, dtype=torch.long, device=dev))
    kw.update(input_ids=ids.to(dev)) if ids is not None else kw.update(inputs_embeds=embeds.to(dev))
    if _head_at_target(lm):
        return lm.model.base_model(**kw)
    return lm.model(**kw)


def _device(lm) -> torch.device:
    """Where the model's weights are (inputs go there; results come back to the CPU as numpy)."""
    dev = getattr(lm, "device", None)
    if dev is None:
        dev = next(lm.model.parameters()).device
    return torch.device(dev)


def _head_at_target(lm) -> bool:
    return (output_kind(lm) == "token" and lm.arch is not None and lm.arch.head is not None
            and lm.arch.head_kind == "token")


def _gather_pos(x: torch.Tensor, pos) -> torch.Tensor:
    """x [B, n, ...] and pos int or [B] -> x[b, pos_b] as [B, ...]."""
    if isinstance(pos, int):
        return x[:, pos]
    return x[torch.arange(x.shape[0], device=x.device), torch.as_tensor(pos, device=x.device)]


def _value(lm, target: Target, out, pos, ref: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Model output for a batch -> f [B] (float64). pos: target position (int or [B])."""
    if target.output == "hidden":
        h = _gather_pos(out.last_hidden_state, pos).double()
        return torch.nn.functional.cosine_similarity(h, ref.double().expand_as(h), dim=-1)
    logits = _logits_at(lm, out, pos) if target.output == "token" else out.logits
    p = torch.softmax(logits.double(), dim=-1)
    if target.kind == "contrast":
        return p[:, target.ids[0]] - p[:, target.ids[1]]
    return p[:, target.ids[0]]


def _f_of(lm, target: Target, pos, ref=None, ids: Optional[torch.Tensor] = None,
          embeds: Optional[torch.Tensor] = None) -> torch.Tensor:
    """f [B] (float64) for a batch of inputs, ids [B, n] or inputs_embeds [B, n, d]; pos: the target
    position (int or [B]). ref: the unperturbed hidden state for the cosine target (None: row 0's)."""
    if target.appends:
        return _contrast_f(lm, target, pos, ids=ids, embeds=embeds)
    out = _forward(lm, ids, embeds)
    if target.output == "hidden" and ref is None:
        ref = _gather_pos(out.last_hidden_state, pos)[0]
    return _value(lm, target, out, pos, ref)


def _contrast_f(lm, target: Target, pos, ids: Optional[torch.Tensor] = None,
                embeds: Optional[torch.Tensor] = None) -> torch.Tensor:
    """f = p(word 1) - p(word 2) [B] (float64) for a contrast with a word of several tokens (causal LM,
    trace.MULTI_TOKEN_RULE): each row's text up to its target, then each word's pieces appended
    (trace.appended_ids); the two words' continuations of a row share its input (its ids, or its
    embeddings, so that gradients reach the sentence's embeddings; the pieces' own embeddings are fixed);
    p(word) = exp(Σ_k log p(piece_k | text, pieces_<k)) (trace.score_words). Rows with the same target
    position run in one forward."""
    words = target.words
    W = len(words)
    dev = _device(lm)
    ext = appended_ids(words).to(dev)  # [W, m]
    m = ext.shape[1]
    x = ids if ids is not None else embeds
    B = x.shape[0]
    posv = [int(pos)] * B if isinstance(pos, int) else [int(p) for p in torch.as_tensor(pos).tolist()]
    piece_emb = None
    if ids is None:
        with torch.no_grad():
            piece_emb = lm.model.get_input_embeddings()(ext).to(embeds.dtype)  # [W, m, d]
    parts, order = [], []
    for p in sorted(set(posv)):
        rows = [b for b in range(B) if posv[b] == p]
        head = x[rows, :p + 1].to(dev)
        b = len(rows)
        if ids is not None:
            seq = torch.cat([head.unsqueeze(1).expand(b, W, p + 1), ext.unsqueeze(0).expand(b, W, m)], 2)
            out = _forward(lm, ids=seq.reshape(b * W, p + 1 + m))
        else:
            d = head.shape[-1]
            seq = torch.cat([head.unsqueeze(1).expand(b, W, p + 1, d), piece_emb.unsqueeze(0).expand(b, W, m, d)], 2)
            out = _forward(lm, embeds=seq.reshape(b * W, p + 1 + m, d))
        if getattr(out, "logits", None) is not None:
            logits = out.logits[:, p:p + m + 1]
        else:
            logits = lm.arch.head(out.last_hidden_state[:, p:p + m + 1])
        lp = score_words(logits.reshape(b, W, m + 1, -1), words)  # [b, W] log p(word)
        parts.append(lp[:, 0].exp() - lp[:, 1].exp())
        order += rows
    f = torch.cat(parts)
    inv = torch.empty(B, dtype=torch.long, device=f.device)
    inv[torch.as_tensor(order, device=f.device)] = torch.arange(B, device=f.device)
    return f[inv]


def _logits_at(lm, out, pos) -> torch.Tensor:
    """Token-head logits at pos (int or [B]) -> [B, V]."""
    if getattr(out, "logits", None) is not None:
        return _gather_pos(out.logits, pos)
    return lm.arch.head(_gather_pos(out.last_hidden_state, pos))


def _hidden(out, pos) -> torch.Tensor:
    return _gather_pos(out.last_hidden_state, pos)


def make_target(lm, enc: Encoded, contrast: Optional[Sequence] = None, out=None) -> Target:
    """The target quantity for this model and text. contrast: (correct, wrong) tokens or labels."""
    kind = output_kind(lm)
    t = enc.target
    where = f"position {t} ({readable_token(enc.tokens[t])})"
    if kind == "hidden":
        if contrast:
            raise InputError("this model has no output head, so there is nothing to contrast: leave the contrast empty")
        return Target("hidden", t, (), f"cosine of the final hidden state at {where} to its unperturbed value "
                      "(no output head)", "hidden")
    if contrast:
        if len(contrast) != 2:
            raise InputError("a contrast is two words: the correct one and the wrong one (e.g. is / are)")
        words = ()
        if kind == "token":
            words = contrast_words(lm, contrast)  # trace.MULTI_TOKEN_RULE: refuses what it cannot score
            a, b = ((w.ids if any(x.multi for x in words) else w.ids[0]) for w in words)
            names = [w.text if w.multi else readable_token(w.pieces[0]) for w in words]
        else:
            a, b = (_label_id(lm.config, w) for w in contrast)
            names = [str(c) for c in contrast]
        if a == b:
            raise InputError("the two contrast words are the same token")
        label = f"p('{names[0]}') − p('{names[1]}') at {where}"
        multi = [w for w in words if w.multi]
        if multi:
            label += ("; " + "; ".join(f"p('{w.text}') = the product of its pieces' probabilities "
                                       f"({'·'.join(readable_token(x) for x in w.pieces)}), each given the text "
                                       "and the pieces before it" for w in multi))
        return Target("contrast", t, (a, b), label, kind, words)
    if out is None:
        with torch.no_grad():
            out = _forward(lm, enc.ids)
    logits = _logits_at(lm, out, t)[0] if kind == "token" else out.logits[0]
    pred = predicted_id(lm, enc, logits) if kind == "token" else int(torch.argmax(logits))
    if kind == "token":
        name = readable_token(lm.tokenizer.convert_ids_to_tokens(pred))
        return Target("prob", t, (pred,), f"p('{name}') at {where}, the model's prediction", kind)
    labels = getattr(lm.config, "id2label", None) or {}
    return Target("prob", t, (pred,), f"p(class '{labels.get(pred, pred)}'), the classifier's prediction", kind)


def attributed_positions(enc: Encoded, include_target: bool = False) -> np.ndarray:
    """Positions whose importance is measured: non-special tokens, the target only if asked."""
    keep = ~np.asarray(enc.special, dtype=bool)
    if not include_target:
        keep[enc.target] = False
    pos = np.flatnonzero(keep)
    if pos.size == 0:
        raise InputError("the text has no tokens to attribute besides the target: type a longer sentence")
    return pos


def blank_out(lm, enc: Encoded, target: Target, positions: Sequence[int], ref_hidden=None, tick=None,
              blank: str = "auto"):
    """-> (signed Δf [len(positions)], f0, blank description). Variants batched: row 0 is the unperturbed
    text. blank: what replaces token j (BLANKS; "auto": blank_choice). tick(fraction done), if given,
    after every batch."""
    bid, vec, btok = blank_fill(lm, blank)
    positions = list(positions)
    out_vals = []
    f0 = None
    e0 = _embeddings(lm, enc) if vec is not None else None
    for s in range(0, len(positions), _CHUNK):
        part = positions[s:s + _CHUNK]
        with torch.no_grad():
            if vec is None:
                batch = enc.ids.repeat(len(part) + 1, 1)
                for k, j in enumerate(part):
                    batch[k + 1, j] = bid
                v = _f_of(lm, target, target.position, ref_hidden, ids=batch)
            else:
                batch = e0.repeat(len(part) + 1, 1, 1)
                for k, j in enumerate(part):
                    batch[k + 1, j] = vec
                v = _f_of(lm, target, target.position, ref_hidden, embeds=batch)
        if f0 is None:
            f0 = float(v[0])
        out_vals.append((v[1:] - v[0]).cpu().numpy())
        if tick:
            tick(min(1.0, (s + len(part)) / len(positions)))
    return np.concatenate(out_vals), f0, btok


def leave_one_out(lm, enc: Encoded, target: Target, positions: Sequence[int], ref_hidden=None, f0=None, tick=None):
    """-> signed Δf [len(positions)] (NaN at the target position itself); batched forwards, tick(fraction
    done) after each batch if given."""
    ids = enc.ids[0]
    n = ids.shape[0]
    t = target.position
    positions = list(positions)
    res = np.full(len(positions), np.nan)
    todo = [(k, j) for k, j in enumerate(positions) if j != t]
    if not todo:
        return res
    with torch.no_grad():
        if f0 is None or (target.output == "hidden" and ref_hidden is None):
            if target.output == "hidden" and ref_hidden is None:
                ref_hidden = _hidden(_forward(lm, enc.ids), t)[0]
            f0 = float(_f_of(lm, target, t, ref_hidden, ids=enc.ids)[0])
        for s in range(0, len(todo), _CHUNK):
            part = todo[s:s + _CHUNK]
            keep = torch.ones(len(part), n, dtype=torch.bool)
            for r, (_, j) in enumerate(part):
                keep[r, j] = False
            batch = ids.unsqueeze(0).expand(len(part), n)[keep].view(len(part), n - 1)
            tpos = torch.tensor([t - (j < t) for _, j in part])
            v = _f_of(lm, target, tpos, ref_hidden, ids=batch).cpu().numpy()
            for r, (k, _) in enumerate(part):
                res[k] = v[r] - f0
            if tick:
                tick(min(1.0, (s + len(part)) / len(todo)))
    return res


def _embeddings(lm, enc: Encoded) -> torch.Tensor:
    with torch.no_grad():
        return lm.model.get_input_embeddings()(enc.ids.to(_device(lm))).detach()


def gradient(lm, enc: Encoded, target: Target, ref_hidden=None) -> tuple:
    """-> (e [n,d] word embeddings, g [n,d] = ∂f/∂e) for scalar targets (prob / contrast)."""
    if target.output == "hidden":
        raise ValueError("the cosine target has no useful gradient; use jacobian_norms")
    e = _embeddings(lm, enc)
    with torch.enable_grad():
        x = e.clone().requires_grad_(True)
        f = _f_of(lm, target, target.position, embeds=x)[0]
        (g,) = torch.autograd.grad(f, x)
    return e[0], g[0]


def jacobian_norms(lm, enc: Encoded, position: int) -> tuple:
    """Plain encoders: J = ∂h_t/∂e ([d_out, n, d]) -> (||J_j||_F [n], ||J_j e_j|| [n]).

    One forward pass; its graph is then differentiated for a batch of output rows at a time (vmapped
    backward, `is_grads_batched`), so the forward is not repeated per batch of rows."""
    e = _embeddings(lm, enc)  # [1, n, d]
    n = e.shape[1]
    with torch.enable_grad():
        x = e.clone().requires_grad_(True)
        h = _hidden(_forward(lm, embeds=x), position)[0]  # [d_out]
        d_out = h.shape[-1]
        fro2 = torch.zeros(n, dtype=torch.float64, device=e.device)
        jvp = torch.zeros(n, d_out, dtype=torch.float64, device=e.device)
        for s in range(0, d_out, _CHUNK):
            cs = torch.arange(s, min(d_out, s + _CHUNK), device=e.device)
            rows = torch.zeros(len(cs), d_out, dtype=h.dtype, device=h.device)
            rows[torch.arange(len(cs), device=h.device), cs] = 1
            (g,) = torch.autograd.grad(h, x, grad_outputs=rows, is_grads_batched=True,
                                       retain_graph=s + _CHUNK < d_out)  # g[b, 0] = J[cs[b]]  [B, 1, n, d]
            g = g[:, 0].double()
            fro2 += (g * g).sum((0, 2))
            jvp[:, cs] = (g * e.double()).sum(-1).T
    return fro2.sqrt().cpu().numpy(), jvp.norm(dim=-1).cpu().numpy()


def integrated_gradients(lm, enc: Encoded, target: Target, positions: Sequence[int], steps: int = DEFAULT_IG_STEPS,
                         ref_hidden=None, tick=None) -> tuple:
    """-> (IG [n] (0 off `positions`), info dict with f(e), f(e'), Σ IG, completeness errors).
    tick(fraction of the steps done), if given, after every batch of steps.

    Zero word-embedding baseline on `positions`; Gauss-Legendre quadrature with `steps` nodes on [0, 1].
    """
    steps = int(steps)
    if steps < 1:
        raise InputError("integrated gradients needs at least one step")
    e = _embeddings(lm, enc)[0]  # [n, d]
    n = e.shape[0]
    m = torch.zeros(n, 1, dtype=e.dtype, device=e.device)
    m[list(positions)] = 1
    base = e * (1 - m)
    diff = e - base
    t_nodes, w = quadrature(steps, "gauss", device=e.device)  # nodes on [0, 1], weights summing to 1 (float64)
    alphas = t_nodes.to(e.dtype)
    t = target.position
    if target.output == "hidden" and ref_hidden is None:
        with torch.no_grad():
            ref_hidden = _hidden(_forward(lm, enc.ids), t)[0]
    gsum = torch.zeros(n, e.shape[1], dtype=torch.float64, device=e.device)
    for s in range(0, steps, _CHUNK):
        a = alphas[s:s + _CHUNK]
        with torch.enable_grad():
            x = (base + a.view(-1, 1, 1) * diff).requires_grad_(True)
            f = _f_of(lm, target, t, ref_hidden, embeds=x)
            (g,) = torch.autograd.grad((f * w[s:s + _CHUNK]).sum(), x)
        gsum += g.double().sum(0)
        if tick:
            tick(min(1.0, (s + len(a)) / steps))
    ig = (diff.double() * gsum).sum(-1)
    with torch.no_grad():
        ends = _f_of(lm, target, t, ref_hidden, embeds=torch.stack([e, base]))
    f_end, f_base = float(ends[0]), float(ends[1])
    total = float(ig.sum())
    err = abs(total - (f_end - f_base))
    info = dict(steps=steps, baseline="zero word embedding", f_input=f_end, f_baseline=f_base, sum=total,
                completeness_abs=err, completeness_rel=err / max(abs(f_end - f_base), 1e-12))
    return ig.cpu().numpy(), info


@dataclass(frozen=True, kw_only=True)
class BaselineInfo:
    """What an importance baseline declares; compute(ctx) -> (values at ctx.positions, signed?)."""

    name: str
    label: str
    summary: str  # one line: what is measured
    gradient: bool = False  # needs a backward pass
    compute: Optional[Callable] = None


@dataclass
class Context:
    """What every baseline of one importance() call shares: the model, the text, the target quantity,
    the attributed positions, f on the unperturbed text, and a cache for work two baselines share."""

    lm: object
    enc: Encoded
    target: Target
    positions: np.ndarray
    ref: Optional[torch.Tensor]
    f0: float
    ig_steps: int = DEFAULT_IG_STEPS
    ig_tol: Optional[float] = None
    ig_max_steps: int = IG_MAX_STEPS
    notes: list = field(default_factory=list)
    ig: dict = field(default_factory=dict)
    blank: Optional[str] = None
    blank_kind: str = "auto"  # BLANKS
    blank_degeneracy: Optional[float] = None
    cache: dict = field(default_factory=dict)
    tick: Optional[Callable[[float], None]] = None  # progress within the baseline being computed (0..1)


def _blank_out(ctx: Context):
    d, _, btok = blank_out(ctx.lm, ctx.enc, ctx.target, ctx.positions, ctx.ref, tick=ctx.tick, blank=ctx.blank_kind)
    ctx.blank = btok
    kind = blank_choice(ctx.lm) if ctx.blank_kind == "auto" else ctx.blank_kind
    if kind != "token":
        if ctx.blank_kind == "auto":
            try:
                declared = blank_token(ctx.lm.tokenizer)[1]
            except InputError:
                declared = "none"
            ctx.notes.append(f"blank-out uses the {btok}: this tokenizer's unknown token ({declared}) is a document "
                             "boundary, and blanking with it would cut the text in two")
        return d, True
    bid, _, which = blank_token(ctx.lm.tokenizer)
    tk = ctx.lm.tokenizer
    shared = [name for name in ("eos", "bos", "pad") if getattr(tk, name + "_token_id", None) == bid]
    if which != "unk":
        ctx.notes.append(f"this tokenizer has no unknown token: blank-out uses {btok}")
    elif shared or "unk" not in btok.lower():
        roles = {"eos": "end-of-text", "bos": "start-of-text", "pad": "padding"}
        also = f", also its {' and '.join(roles[r] for r in shared)} token" if shared else ""
        ctx.notes.append(f"this tokenizer has no [UNK]-style unknown token: the one it declares is the special "
                         f"token {btok}{also}, and blank-out replaces each token with it")
    return d, True


def position_shift_note(lm, positions, target: int, signed) -> Optional[str]:
    """On a model with absolute position embeddings (every family here without rotary ones: BERT,
    RoBERTa, ELECTRA, DistilBERT, GPT-2), deleting a token before the target moves the target and the
    tokens between one position left, and that shift alone changes the output (MiniLM, 158 tokens: a
    cosine change of 0.014 for every token before the target, 0.0001 with the positions kept): say so,
    with the median |Δf| of the tokens before and after the target. None on rotary models or when no
    token precedes the target."""
    if getattr(getattr(lm, "arch", None), "rotary", None) is not None:
        return None
    pos = np.asarray([int(p) for p in positions])
    v = np.abs(np.asarray(signed, dtype=float))
    before = v[(pos < target) & np.isfinite(v)]
    after = v[(pos > target) & np.isfinite(v)]
    if before.size == 0:
        return None
    tail = (f" against {np.median(after):.3g} for the {after.size} after it" if after.size else "")
    return ("leave-one-out: deleting a token also moves every later token one position left; this model "
            "adds absolute position embeddings, so for a token before the target that shift alone changes "
            f"the output (median change here {np.median(before):.3g} for the {before.size} tokens before the "
            f"target{tail}). Blank-out keeps every position.")


def _leave_one_out(ctx: Context):
    if ctx.target.position in set(int(p) for p in ctx.positions):
        ctx.notes.append("leave-one-out cannot delete the target position itself: it is left out there")
    d = leave_one_out(ctx.lm, ctx.enc, ctx.target, ctx.positions, ctx.ref, ctx.f0, tick=ctx.tick)
    note = position_shift_note(ctx.lm, ctx.positions, ctx.target.position, d)
    if note:
        ctx.notes.append(note)
    return d, True


def _grads(ctx: Context):
    """(||∂f/∂e_j|| [n], e_j·∂f/∂e_j [n]) once per call (both gradient baselines read it); the cosine
    target uses the Jacobian of the hidden state instead."""
    if "grads" not in ctx.cache:
        if ctx.target.output == "hidden":
            ctx.cache["grads"] = jacobian_norms(ctx.lm, ctx.enc, ctx.target.position)
            ctx.notes.append("the cosine target's gradient is zero at the unperturbed input: gradient norm is "
                             "||∂h_t/∂e_j||_F and input×gradient is ||(∂h_t/∂e_j) e_j|| for the hidden state h_t")
        else:
            e, g = gradient(ctx.lm, ctx.enc, ctx.target)
            ctx.cache["grads"] = (g.double().norm(dim=-1).cpu().numpy(), (e.double() * g.double()).sum(-1).cpu().numpy())
    return ctx.cache["grads"]


def _grad_norm(ctx: Context):
    return _grads(ctx)[0][ctx.positions], False


def _input_x_grad(ctx: Context):
    return _grads(ctx)[1][ctx.positions], ctx.target.output != "hidden"


def _integrated_gradients(ctx: Context):
    steps, tried = int(ctx.ig_steps), []
    while True:
        # each doubling is a new pass: the bar goes to the end of each one (its length is not known before)
        ig, info = integrated_gradients(ctx.lm, ctx.enc, ctx.target, ctx.positions, steps, ctx.ref, tick=ctx.tick)
        tried.append(steps)
        if ctx.ig_tol is None or info["completeness_rel"] <= ctx.ig_tol or steps * 2 > ctx.ig_max_steps:
            break
        steps *= 2
    info["tried"] = tried
    info["tol"] = ctx.ig_tol
    info["met"] = bool(ctx.ig_tol is None or info["completeness_rel"] <= ctx.ig_tol)
    if ctx.ig_tol is not None and info["completeness_rel"] > ctx.ig_tol:
        ctx.notes.append(f"integrated gradients: the completeness error is still "
                         f"{100 * info['completeness_rel']:.2g} % after {steps} steps (tolerance "
                         f"{100 * ctx.ig_tol:.2g} %)")
    ctx.ig = info
    return ig[ctx.positions], True


# the baseline registry: name -> BaselineInfo; a new baseline is its compute(ctx) plus one entry
BASELINES = {b.name: b for b in (
    BaselineInfo(name="blank_out", label="Blank-out", compute=_blank_out,
                 summary="|f(x with token j replaced by the blank token) - f(x)|"),
    BaselineInfo(name="leave_one_out", label="Leave-one-out", compute=_leave_one_out,
                 summary="|f(x without token j) - f(x)|"),
    BaselineInfo(name="grad_norm", label="Gradient norm", compute=_grad_norm, gradient=True,
                 summary="||∂f/∂e_j|| (e_j: the word embedding of token j)"),
    BaselineInfo(name="input_x_grad", label="Input×gradient", compute=_input_x_grad, gradient=True,
                 summary="|e_j · ∂f/∂e_j|"),
    BaselineInfo(name="integrated_gradients", label="Integrated gradients", compute=_integrated_gradients,
                 gradient=True, summary="|IG_j| from the zero word embedding, Gauss-Legendre quadrature"),
)}


def estimate_seconds(n_tokens: int, baselines: Sequence[str], forward_seconds: float,
                     ig_steps: int = DEFAULT_IG_STEPS, ig_max_steps: Optional[int] = None) -> float:
    """Rough seconds for importance() on n_tokens, in forward passes of the sentence (forward_seconds
    each, e.g. half the analysis' trace time): blank-out n + 1 rows, leave-one-out n, the gradient
    baselines one forward and backward (~3 forwards, shared), integrated gradients ~3 per step, plus
    the unperturbed forward. ig_max_steps: the worst case of the adaptive steps (ig_tol), every
    doubling from ig_steps up to ig_max_steps run in turn."""
    steps = int(ig_steps)
    total, passes = steps, 1
    while ig_max_steps is not None and steps * 2 <= ig_max_steps:
        steps *= 2
        total, passes = total + steps, passes + 1
    units = 1.0
    b = set(baselines)
    units += (n_tokens + 1) * ("blank_out" in b) + n_tokens * ("leave_one_out" in b)
    units += 3.0 * bool(b & {"grad_norm", "input_x_grad"})
    units += (3.0 * total + 2.0 * passes) * ("integrated_gradients" in b)
    return units * max(float(forward_seconds), 0.0)


def baseline_label(name: str) -> str:
    info = BASELINES.get(name)
    return info.label if info else name


def importance(lm, text_or_enc, baselines: Optional[Sequence[str]] = None, contrast: Optional[Sequence] = None,
               target: Optional[int] = None, ig_steps: int = DEFAULT_IG_STEPS, include_target: bool = False,
               max_tokens: int = DEFAULT_MAX_TOKENS, progress: Optional[Callable[[str, float], None]] = None,
               ig_tol: Optional[float] = None, ig_max_steps: int = IG_MAX_STEPS, blank: str = "auto") -> Importance:
    """Model + text -> Importance: [n] vectors per baseline for the target quantity f (module docstring).

    baselines: names from BASELINES (default all). contrast: (correct, wrong). target: position.
    ig_tol: the integrated-gradient steps are doubled (up to ig_max_steps) until the relative
    completeness error |Σ IG - (f(e) - f(e'))| / |f(e) - f(e')| is at most ig_tol (None: DEFAULT_IG_TOL,
    1 %; 0: ig_steps steps, no bound); a note says when the bound was missed.
    blank: what blank-out puts in place of a token (BLANKS; "auto": blank_choice).
    """
    ig_tol = DEFAULT_IG_TOL if ig_tol is None else (float(ig_tol) if ig_tol > 0 else None)
    baselines = list(BASELINES if baselines is None else baselines)
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; known: {list(BASELINES)}")
    enc = text_or_enc if isinstance(text_or_enc, Encoded) else encode(lm, text_or_enc, max_tokens, target)
    timings = {}
    t0 = time.perf_counter()
    with torch.no_grad():
        out0 = _forward(lm, enc.ids)
    tg = make_target(lm, enc, contrast, out=out0)
    ref = _hidden(out0, tg.position)[0] if tg.output == "hidden" else None
    if tg.appends:
        with torch.no_grad():
            f0 = float(_f_of(lm, tg, tg.position, ids=enc.ids)[0])
    else:
        f0 = float(_value(lm, tg, out0, tg.position, ref)[0])
    timings["forward"] = time.perf_counter() - t0
    pos = attributed_positions(enc, include_target)
    n = enc.ids.shape[1]
    values, signed, notes, ig_info = {}, {}, [], {}
    btok = None

    def put(name, vec_at_pos, sign=True):
        full = np.full(n, np.nan)
        full[pos] = vec_at_pos
        if sign:
            signed[name] = full.copy()
        values[name] = np.abs(full)

    ctx = Context(lm=lm, enc=enc, target=tg, positions=pos, ref=ref, f0=f0, ig_steps=ig_steps, ig_tol=ig_tol,
                  ig_max_steps=ig_max_steps, blank_kind=blank)
    for k, b in enumerate(baselines):
        if progress:
            progress(b, k / len(baselines))
            ctx.tick = (lambda f, b=b, k=k: progress(b, (k + f) / len(baselines)))
        t = time.perf_counter()
        vec, sign = BASELINES[b].compute(ctx)
        put(b, vec, sign)
        timings[b] = time.perf_counter() - t
    if "blank_out" in signed:
        deg = degeneracy(signed["blank_out"][pos], f0)
        ctx.blank_degeneracy = deg
        if deg >= DEGENERATE:
            ctx.notes.append(f"blank-out is degenerate here: blanking a token changes f by a median {deg:.2f} of f0 "
                             "(every change close to all of f0 says little about which token matters)")
    notes.extend(ctx.notes)
    btok, ig_info = ctx.blank, ctx.ig
    if progress:
        progress("done", 1.0)
    return Importance(tokens=list(enc.tokens), special=np.asarray(enc.special), target=tg, positions=pos,
                      values=values, signed=signed, f0=f0, blank_token=btok, ig=ig_info, notes=notes,
                      blank_degeneracy=ctx.blank_degeneracy,
                      timings=timings)
