"""Trace: tokenise once, run the model once, keep every per-layer intermediate.

The layer inputs come from the model's own hidden_states; each layer is then recomputed by the one
functional forward (models/forward.py), which returns what the methods need (attention, value
vectors, per-head transformed vectors f^h(x_j), norm statistics, FFN pre-activations). The recomputed
layer outputs and attention are compared with the model's, and the error is kept in the Trace.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from .errors import InputError
from .models.forward import apply_norm, layer_forward, rope_for
from .models.check import hf_forward, rel_err as _rel

if TYPE_CHECKING:  # annotations only
    from .models.load import LoadedModel

DEFAULT_MAX_TOKENS = 128
_MASK = re.compile(r"\[mask\]", re.IGNORECASE)  # [MASK] in any case


@dataclass
class Encoded:
    """A tokenised text: ids [1, n], token strings, special-token mask [n], target position."""

    ids: torch.Tensor
    tokens: list
    special: np.ndarray
    target: int
    text: str
    notes: list = field(default_factory=list)
    after: str = ""  # causal models: the text after [MASK], not part of the input (shown greyed)
    blank: bool = False  # causal models: the text had a [MASK]; the prediction is the word that goes there


def encode(lm: LoadedModel, text: str, max_tokens: int = DEFAULT_MAX_TOKENS, target: Optional[int] = None) -> Encoded:
    """text -> Encoded; raises InputError with a one-line message for unusable text."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"the text is not valid UTF-8 (byte {e.start + 1} cannot be decoded)") from None
    if text is not None and not isinstance(text, str):
        raise InputError(f"the text must be a string, not {type(text).__name__}")
    if text is None or not text.strip():
        raise InputError("the text is empty: type a sentence")
    text = str(text).strip()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates: also how Python passes undecodable argv bytes
        raise InputError(f"the text is not valid UTF-8: character {e.start + 1} is a lone surrogate "
                         "(an undecodable byte or half of a character pair); retype or paste it again") from None
    tok = lm.tokenizer
    notes = []
    mask_tok = getattr(tok, "mask_token", None)
    after = ""
    blank = False
    if lm.task == "causal_lm" and (_MASK.search(text) or (mask_tok and mask_tok in text)):
        # [MASK] on a causal model: "the word that goes here" -- the input is the text before it, the
        # target its last token, the prediction the next token; the words after it are not read
        m = _MASK.search(text)
        cut, end = (m.start(), m.end()) if m else (text.index(mask_tok), text.index(mask_tok) + len(mask_tok))
        after = text[end:].strip()
        text = text[:cut].strip()
        blank = True
        if not text:
            raise InputError("nothing comes before [MASK]: a causal model reads left to right and needs "
                             "the words before the blank")
        notes.append("a causal model predicts the next token: the input ends before [MASK], the prediction "
                     "is the word that goes there" + (f"; the words after it (“{after}”) are not part of the "
                                                      "input" if after else ""))
    elif mask_tok and _MASK.search(text) and lm.task != "causal_lm":
        written = {m.group(0) for m in _MASK.finditer(text)}
        text = _MASK.sub(lambda m: mask_tok, text)
        if written != {mask_tok}:
            notes.append(f"{' / '.join(sorted(written))} was read as this model's mask token {mask_tok}")
    cap = min(int(max_tokens), lm.max_tokens)
    enc = tok(text, return_tensors="pt", truncation=False)
    ids = enc["input_ids"]
    n = ids.shape[1]
    if n > cap:
        raise InputError(f"the text is {n} tokens long; the limit is {cap} tokens "
                         f"(model maximum {lm.max_tokens}, app cap {max_tokens}): shorten it")
    id_list = ids[0].tolist()
    special_ids = set(tok.all_special_ids) - ({tok.mask_token_id} if getattr(tok, "mask_token_id", None) is not None else set())
    special = np.array([i in special_ids for i in id_list], dtype=bool)
    if n == 0 or special.all():
        raise InputError("the text has no tokens the model can read")
    tokens = tok.convert_ids_to_tokens(id_list)
    if target is None:
        mask_id = getattr(tok, "mask_token_id", None)
        masks = [i for i, t in enumerate(id_list) if mask_id is not None and t == mask_id]
        if masks:
            target = masks[0]
            if len(masks) > 1:
                notes.append(f"{len(masks)} [MASK] tokens: the first one is the target")
        elif lm.task == "causal_lm" or getattr(tok, "cls_token_id", None) is None:
            target = n - 1
        else:
            target = 0
    if not 0 <= target < n:
        raise InputError(f"target position {target} is outside the text (0..{n - 1})")
    return Encoded(ids=ids, tokens=tokens, special=special, target=int(target), text=text, notes=notes,
                   after=after, blank=blank)


def word_start_ids(lm: LoadedModel) -> np.ndarray:
    """Ids of the vocabulary entries that begin a new word (a leading space marker, then a letter or
    digit): what a [MASK] blank on a causal model can be. Cached per model."""
    cache = lm._vocab_cache
    if "word_starts" not in cache:
        tok = lm.tokenizer
        vocab = tok.get_vocab()
        ids = [i for t, i in vocab.items() if len(t) > 1 and t[0] in "Ġ▁" and t[1].isalnum()]
        cache["word_starts"] = np.array(sorted(ids), dtype=np.int64)
    return cache["word_starts"]


def single_token_id(tokenizer, word: str) -> int:
    """A word (a contrast word, a choice at a blank) -> one vocabulary id, preferring the word-initial form (" are" -> 'Ġare' on
    byte-level BPE, '▁are' on SentencePiece; WordPiece gives 'are' either way), then the exact
    vocabulary entry (e.g. '##s'), then the word as written."""
    word = str(word).strip()
    if not word:
        raise InputError("a contrast word is empty")
    unk = getattr(tokenizer, "unk_token_id", None)
    ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
    if len(ids) == 1 and ids[0] != unk:
        return int(ids[0])
    tid = tokenizer.convert_tokens_to_ids(word)
    if tid is not None and tid != unk and not isinstance(tid, list):
        return int(tid)
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) == 1 and ids[0] != unk:
        return int(ids[0])
    pieces = tokenizer.tokenize(" " + word)
    raise InputError(f"'{word}' is not one token of this model's vocabulary (it splits into {pieces})")


# How a contrast word (a word whose probability is read at the target: evaluate's answer and wrong word,
# the app's contrast words, faithfulness's f, the adversarial page's bars) is scored when it is several
# tokens of the vocabulary. Causal LMs: log p(word) = Σ_k log p(piece_k | text up to the target,
# pieces_<k), the word-initial pieces appended after the target (the standard of targeted syntactic
# evaluation); p(word) is the product of the pieces' probabilities. Masked LMs: refused with one line
# naming the word and its pieces (one [MASK] holds one token, and several [MASK]s would change the
# sentence the model reads).
MULTI_TOKEN_RULE = {"causal_lm": "sum of the pieces' log-probabilities",
                    "masked_lm": "refused: one [MASK] holds one token"}
_SPACE_MARKS = ("Ġ", "▁")


@dataclass(frozen=True)
class Word:
    """A contrast word as the model scores it: the word as given, its vocabulary ids (one id, or on a
    causal LM its word-initial pieces) and their token strings."""

    text: str
    ids: tuple
    pieces: tuple

    @property
    def multi(self) -> bool:
        return len(self.ids) > 1

    def shown(self) -> str:
        """'swims' (one token) or 'swims' = Ġswim·s (its pieces)."""
        return f"'{self.text}'" + (f" = {'·'.join(self.pieces)}" if self.multi else "")


def _initial_pieces(tokenizer, word: str) -> list:
    """The ids of the word as it stands after a space inside a text (" swims" -> ['Ġswim', 's']): the
    tokens of "a WORD" after those of "a", so that a SentencePiece tokenizer's extra space marker for a
    leading space is not counted; the tokens of " WORD" where the two do not line up."""
    enc = lambda t: [int(i) for i in tokenizer(t, add_special_tokens=False)["input_ids"]]  # noqa: E731
    head, both = enc("a"), enc("a " + word)
    if head and both[:len(head)] == head and len(both) > len(head):
        return both[len(head):]
    return enc(" " + word)


def contrast_word(lm: LoadedModel, word: str) -> Word:
    """A contrast word -> Word, by MULTI_TOKEN_RULE. One vocabulary id where single_token_id finds one
    (on a causal LM: the word-initial form, or an entry typed with its space marker such as 'Ġare');
    else, on a causal LM, its word-initial pieces; on any other model an InputError of one line naming
    the word, its pieces and the rule."""
    tok = lm.tokenizer
    text = str(word).strip()
    if not text:
        raise InputError("a contrast word is empty")
    unk = getattr(tok, "unk_token_id", None)
    if lm.task == "causal_lm":
        ids = _initial_pieces(tok, text)
        if len(ids) != 1 and text[0] in _SPACE_MARKS:
            tid = tok.convert_tokens_to_ids(text)
            if tid is not None and tid != unk and not isinstance(tid, list):
                ids = [int(tid)]
        if not ids:
            raise InputError(f"'{text}' gives no token of this model's vocabulary")
        if unk is not None and unk in ids:
            raise InputError(f"'{text}' becomes the unknown token {tok.unk_token} on this model "
                             f"(pieces {tok.convert_ids_to_tokens(ids)}): it cannot be scored")
        return Word(text, tuple(ids), tuple(tok.convert_ids_to_tokens(ids)))
    try:
        i = single_token_id(tok, text)
    except InputError as e:
        raise InputError(f"{e}; on a masked LM a contrast word must be one token "
                         f"({MULTI_TOKEN_RULE['masked_lm']})") from None
    return Word(text, (i,), (tok.convert_ids_to_tokens(i),))


def contrast_words(lm: LoadedModel, words) -> tuple:
    """contrast_word for each word; InputError when two of them are the same tokens."""
    got = tuple(contrast_word(lm, w) for w in words)
    for a in range(len(got)):
        for b in range(a):
            if got[a].ids == got[b].ids:
                raise InputError(f"the contrast words '{got[b].text}' and '{got[a].text}' are the same token"
                                 + ("s" if got[a].multi else ""))
    return got


def appended_ids(words) -> torch.Tensor:
    """Words -> [W, m] ids appended after the target for score_words, m = the longest word's pieces - 1:
    word w's first pieces, then its last piece repeated as filler (positions score_words never reads)."""
    m = max(len(w.ids) for w in words) - 1
    return torch.tensor([(list(w.ids[:-1]) + [w.ids[-1]] * m)[:m] for w in words], dtype=torch.long).reshape(len(words), m)


def score_words(logits: torch.Tensor, words) -> torch.Tensor:
    """logits [B, W, m+1, V] (the model's at the target and at the m positions appended after it, word w's
    pieces appended in row w as appended_ids gives them; m may be 0, then one position, the target) ->
    log p(word) [B, W] float64: Σ_k log p(piece_k | text, pieces_<k) (MULTI_TOKEN_RULE). Differentiable."""
    x = logits.double()
    lse = torch.logsumexp(x, dim=-1)  # [B, W, m+1]
    out = []
    for w, word in enumerate(words):
        k = len(word.ids)
        idx = torch.as_tensor(word.ids, device=x.device)
        picked = x[:, w, torch.arange(k, device=x.device), idx]  # [B, k]
        out.append((picked - lse[:, w, :k]).sum(-1))
    return torch.stack(out, dim=-1)


@torch.no_grad()
def word_logprobs(lm: LoadedModel, ids, target: int, words) -> torch.Tensor:
    """Causal or masked LM, one text: ids [n] (or [1, n]) and the target position -> log p(word) [W]
    float64 by MULTI_TOKEN_RULE, from the Hugging Face model's own forward: the text up to the target
    (all of it on a masked LM) with each word's pieces appended, the words in one batch."""
    ids = torch.as_tensor(ids).reshape(-1)
    dev = next(lm.model.parameters()).device
    ext = appended_ids(words)
    m = ext.shape[1]
    if m and lm.task != "causal_lm":
        raise InputError("a contrast word of several tokens is scored on causal LMs only "
                         f"({MULTI_TOKEN_RULE['masked_lm']})")
    if not m:  # every word one token: one forward of the text, the target's logits for each word
        logits = lm.model(input_ids=ids.unsqueeze(0).to(dev)).logits[:, target:target + 1]  # [1, 1, V]
        return score_words(logits.unsqueeze(1).expand(1, len(words), 1, -1), words)[0]
    seq = torch.cat([ids[:target + 1].unsqueeze(0).expand(len(words), -1), ext], 1).to(dev)
    logits = lm.model(input_ids=seq).logits[:, target:target + m + 1]  # [W, m+1, V]
    return score_words(logits.unsqueeze(0), words)[0]


def predicted_id(lm: LoadedModel, enc: Encoded, logits: torch.Tensor) -> int:
    """The prediction at the target: the argmax of logits [V], over word-initial tokens when the text
    had a [MASK] blank on a causal model (the blank is a word, not punctuation)."""
    if enc.blank:
        ws = word_start_ids(lm)
        if len(ws):
            ws_t = torch.as_tensor(ws, device=logits.device)
            return int(ws_t[torch.argmax(logits[ws_t])])
    return int(torch.argmax(logits))


class OnEncoded:
    """For records that hold an Encoded as `enc`: its target position and tokens."""

    @property
    def target(self) -> int:
        return self.enc.target

    @property
    def tokens(self) -> list:
        return self.enc.tokens


@dataclass
class Trace(OnEncoded):
    """Per-layer intermediates of one sentence (batch dimension removed).

    layers[l]: a models.forward.LayerState: the residual stream points resid_in -> resid_attn ->
    resid_mid -> resid_ffn -> resid_out [n,d], attn_in, q, k, v, probs [H,n,n], attn_out [n,d]
    (includes b_O) and the FFN's ffn_in, ffn_pre, ffn_gate_pre, ffn_hidden [n,I], ffn_out.
    fx[l]: f^h(x_j) = (h_j W_V^h + b_V^h) W_O^h as [H,n,d] (h = attn_in).

    Work that several methods (or several calls) share is kept with the trace through `cached`; see
    its docstring for the keys in use.
    """

    lm: LoadedModel
    enc: Encoded
    layers: list  # [LayerState] per layer
    fx: list
    weights: list
    hidden_states: list  # the model's own, [n,d] each, L+1 entries
    attentions: list  # the model's own, [H,n,n] each
    logits: Optional[torch.Tensor]  # the model's own at the target: [V] or [C]; None for plain encoders
    final_hidden: torch.Tensor  # [n,d] model's last hidden state
    layer_err: list
    attn_err: float
    dtype: torch.dtype = torch.float32
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def cached(self, key: tuple, fn):
        """fn() computed once per trace and key, then kept with the trace: work that several methods
        share, or that one method would otherwise redo on a second call. The value is returned as
        stored (callers must not change it).

        Keys are tuples whose first item names the owner, the module that computes the value; the
        other items are the parameters the value depends on. In use:
            ("head_mean",)             Trace.head_mean: [L, n, n] float64 tensor on the trace's device
            ("atb_ff", steps, rule)    methods.atb_ff.analyse: the three FFN scopes' maps and ratios
                                       from one pass over the layers
            ("mixing",)                methods.mixing.attention_block: the per-layer parts of the
                                       attention-block mixing ratios (five methods read them)
        """
        if not isinstance(key, tuple) or not key or not isinstance(key[0], str):
            raise ValueError(f"a cache key is a tuple starting with its owner's name, got {key!r}")
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def forget(self, owner: Optional[str] = None) -> None:
        """Drop cached values: those whose key starts with `owner`, or all (a benchmark timing a fresh
        pass, or freeing memory)."""
        if owner is None:
            self._cache.clear()
        else:
            for k in [k for k in self._cache if k[0] == owner]:
                del self._cache[k]

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def placement(self) -> str:
        return self.lm.arch.placement

    @property
    def max_rel_err(self) -> float:
        return max(self.layer_err) if self.layer_err else 0.0

    def attention(self) -> np.ndarray:
        """[L, H, n, n] attention probabilities (the model's own)."""
        return torch.stack(self.attentions).cpu().numpy()

    def attention64(self) -> np.ndarray:
        """[L, H, n, n] float64 attention probabilities (the model's own), filled a layer at a time (no
        stacked copy on the device or in float32 on the host)."""
        H, n, _ = self.attentions[0].shape
        out = np.empty((len(self.attentions), H, n, n))
        for l, a in enumerate(self.attentions):
            torch.from_numpy(out[l]).copy_(a)
        return out

    def head_mean(self, as_numpy: bool = True):
        """[L, n, n] float64 head mean of the model's attention, computed once on the trace's device:
        a numpy copy (callers may change it), or (as_numpy=False) the cached tensor there."""
        t = self.cached(("head_mean",), lambda: torch.stack([a.double().mean(0) for a in self.attentions]))
        return t.cpu().numpy().copy() if as_numpy else t

    def output_probs(self) -> Optional[np.ndarray]:
        if self.logits is None:
            return None
        return torch.softmax(self.logits.double(), -1).cpu().numpy()


def _output_logits(lm: LoadedModel, out):
    logits = getattr(out, "logits", None)
    return logits


def trace(lm: LoadedModel, text_or_enc, dtype: torch.dtype = torch.float32, max_tokens: int = DEFAULT_MAX_TOKENS,
          target: Optional[int] = None) -> Trace:
    """text -> Trace (the model's own forward once, then our per-layer recomputation)."""
    enc = text_or_enc if isinstance(text_or_enc, Encoded) else encode(lm, text_or_enc, max_tokens, target)
    out = hf_forward(lm, enc.ids)
    hs = [h[0] for h in out.hidden_states]
    atts = [a[0] for a in out.attentions]
    logits = _output_logits(lm, out)
    if logits is not None:
        logits = logits[0, enc.target] if logits.dim() == 3 else logits[0]
    tr_layers, fx, errs = [], [], []
    attn_err = 0.0
    if lm.arch is not None:
        weights = lm.layers(dtype)
        with torch.inference_mode():
            x0 = hs[0].to(dtype).unsqueeze(0)
            rope = rope_for(lm.arch, x0)
            L = len(weights)
            for li, w in enumerate(weights):
                x = hs[li].to(dtype).unsqueeze(0)
                r = layer_forward(w, x, rope=rope)
                r = r.first()
                tr_layers.append(r)
                ref = hs[li + 1]
                mine = r.resid_out
                if li == L - 1 and lm.arch.final_norm is not None:
                    mine = apply_norm(mine, lm.arch.final_norm if dtype == torch.float32 else _cast_norm(lm.arch.final_norm, dtype))
                errs.append(_rel(mine.float(), ref.float()))
                attn_err = max(attn_err, float((r.probs.float() - atts[li].float()).abs().max()))
        fx = HeadVectors(weights, tr_layers)
    else:
        weights = []
    return Trace(lm=lm, enc=enc, layers=tr_layers, fx=fx, weights=weights, hidden_states=hs, attentions=atts,
                 logits=logits, final_hidden=hs[-1], layer_err=errs, attn_err=attn_err, dtype=dtype)


def _cast_norm(nrm, dtype):
    from .models.forward import cast_norm
    return cast_norm(nrm, dtype)


FX_KEEP_BYTES = int(float(os.environ.get("ATTNVIZ_FX_KEEP_MB", "1024")) * 2 ** 20)


class HeadVectors(Sequence):
    """Trace.fx: for each layer the per-head transformed value vectors f^h(x_j) = v^h_j W_O^h, [H, n, d].

    Computed for every layer at once and kept while all of them fit in FX_KEEP_BYTES (1 GiB, or
    ATTNVIZ_FX_KEEP_MB); above that each layer's are computed again when asked and not kept, so a
    long text on a big model never holds L·H·n·d floats (1.2 B-parameter Llama shape at 1024 tokens:
    5.9 GB). Both ways give the same numbers (one function, per_head_vectors, on the same inputs)."""

    def __init__(self, weights: list, layers: list, keep_bytes: Optional[int] = None):
        self._w, self._layers = weights, layers
        keep_bytes = FX_KEEP_BYTES if keep_bytes is None else keep_bytes
        size = sum(w.n_heads * r.v.shape[-2] * w.wo.shape[-1] * r.v.element_size() for w, r in zip(weights, layers))
        self.kept = size <= keep_bytes
        self._fx = [per_head_vectors(w, r.v) for w, r in zip(weights, layers)] if self.kept else None

    def __len__(self) -> int:
        return len(self._layers)

    def __getitem__(self, l):
        if isinstance(l, slice):
            return [self[i] for i in range(*l.indices(len(self)))]
        if self._fx is not None:
            return self._fx[l]
        with torch.inference_mode():
            return per_head_vectors(self._w[l], self._layers[l].v)


def per_head_vectors(w, v: torch.Tensor) -> torch.Tensor:
    """v [Hkv, n, dh] (value vectors incl. b_V) -> f^h(x_j) = v^h_j W_O^h as [H, n, d] (no b_O)."""
    H, dh = w.n_heads, w.head_dim
    rep = H // w.n_kv_heads
    v_full = v.repeat_interleave(rep, dim=0) if rep > 1 else v
    wo = w.wo.reshape(H, dh, -1)
    return torch.einsum("hnk,hkd->hnd", v_full, wo)
