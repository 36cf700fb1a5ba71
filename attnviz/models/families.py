"""One small reader per model family: pulls weights into LayerWeights records (data, not code paths).

Every weight is stored in the x @ W convention ([in, out]); nn.Linear weights ([out, in]) are
transposed, GPT-2's Conv1D weights are already [in, out]. Tensors are views of the model's own
parameters (no copies), detached, so a reader costs no memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import torch
from transformers.activations import ACT2FN


@dataclass(frozen=True)
class Norm:
    """A LayerNorm or RMSNorm: kind, weight [d], bias [d] | None, eps."""

    kind: str  # "layernorm" | "rmsnorm"
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    eps: float


@dataclass(frozen=True)
class LayerWeights:
    """Weights of one transformer layer in the x @ W convention.

    placement "post": attention -> +residual -> norm1 -> FFN -> +residual -> norm2 (BERT family).
    placement "pre":  norm1 -> attention -> +residual -> norm2 -> FFN -> +residual (GPT-2, Llama).
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    wq: torch.Tensor  # [d, H*dh]
    bq: Optional[torch.Tensor]
    wk: torch.Tensor  # [d, Hkv*dh]
    bk: Optional[torch.Tensor]
    wv: torch.Tensor  # [d, Hkv*dh]
    bv: Optional[torch.Tensor]
    wo: torch.Tensor  # [H*dh, d]
    bo: Optional[torch.Tensor]
    norm1: Norm
    norm2: Norm
    w1: torch.Tensor  # [d, I]  (Llama: up_proj)
    b1: Optional[torch.Tensor]
    w2: torch.Tensor  # [I, d]
    b2: Optional[torch.Tensor]
    act: str
    placement: str = "post"
    w_gate: Optional[torch.Tensor] = None  # [d, I] for gated MLPs: act(x Wg) * (x W1)
    scale: float = 1.0
    rotary: bool = False
    causal: bool = False
    # Gemma 3: RMSNorms over head_dim on q and k before the rotary embedding (QK-norm)
    q_norm: Optional[Norm] = None
    k_norm: Optional[Norm] = None
    window: Optional[int] = None  # sliding-window attention: row i sees keys j with i - j < window
    softcap: Optional[float] = None  # attention logits become softcap * tanh(logits / softcap)
    # Gemma 3's "sandwich" norms: applied to the attention block's / FFN's output before it joins the
    # residual stream (post_attention_layernorm, post_feedforward_layernorm); norm1 / norm2 stay the
    # norms before the blocks (input_layernorm, pre_feedforward_layernorm)
    attn_out_norm: Optional[Norm] = None
    ffn_out_norm: Optional[Norm] = None
    rope_key: str = ""  # which of the architecture's rotary tables the layer uses ("" when there is one)
    # MPNet's relative position bias: (n, device) -> [H, n, n] added to the attention logits
    score_bias: Optional[Callable] = None

    def activation(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return ACT2FN[self.act]

    def to(self, dtype: torch.dtype) -> "LayerWeights":
        def cv(v):
            if isinstance(v, torch.Tensor):
                return v.to(dtype)
            if isinstance(v, Norm):
                return replace(v, weight=v.weight.to(dtype), bias=None if v.bias is None else v.bias.to(dtype))
            return v

        return replace(self, **{f: cv(getattr(self, f)) for f in self.__dataclass_fields__})


@dataclass
class Architecture:
    """Model-level facts the functional forward needs besides the layers."""

    family: str
    layers: list
    placement: str
    causal: bool
    final_norm: Optional[Norm] = None  # pre-LN models: applied to the last layer's output
    rotary: Optional[Callable] = None  # (x [B,n,d], position_ids [B,n]) -> (cos, sin)
    head: Optional[Callable] = None  # final hidden [B,n,d] -> logits [B,n,V] or [B,C]
    head_kind: str = "none"  # "token" (per position logits) | "sequence" (classifier) | "none"
    notes: list = field(default_factory=list)


class UnsupportedArchitecture(Exception):
    """The family has no reader: raw attention only."""


def _t(linear) -> torch.Tensor:
    return linear.weight.detach().t()


def _b(linear) -> Optional[torch.Tensor]:
    return None if getattr(linear, "bias", None) is None else linear.bias.detach()


def _ln(mod, kind="layernorm", eps=None) -> Norm:
    eps = eps if eps is not None else getattr(mod, "eps", None)
    if eps is None:
        eps = getattr(mod, "variance_epsilon")
    bias = getattr(mod, "bias", None)
    return Norm(kind, mod.weight.detach(), None if bias is None else bias.detach(), float(eps))


def _bert_like_layer(layer, cfg) -> LayerWeights:
    att = layer.attention
    H = cfg.num_attention_heads
    dh = cfg.hidden_size // H
    return LayerWeights(
        n_heads=H, n_kv_heads=H, head_dim=dh,
        wq=_t(att.self.query), bq=_b(att.self.query),
        wk=_t(att.self.key), bk=_b(att.self.key),
        wv=_t(att.self.value), bv=_b(att.self.value),
        wo=_t(att.output.dense), bo=_b(att.output.dense),
        norm1=_ln(att.output.LayerNorm), norm2=_ln(layer.output.LayerNorm),
        w1=_t(layer.intermediate.dense), b1=_b(layer.intermediate.dense),
        w2=_t(layer.output.dense), b2=_b(layer.output.dense),
        act=cfg.hidden_act, placement="post", scale=dh ** -0.5,
    )


def _distilbert_layer(layer, cfg) -> LayerWeights:
    a = layer.attention
    H = cfg.n_heads
    dh = cfg.dim // H
    return LayerWeights(
        n_heads=H, n_kv_heads=H, head_dim=dh,
        wq=_t(a.q_lin), bq=_b(a.q_lin), wk=_t(a.k_lin), bk=_b(a.k_lin),
        wv=_t(a.v_lin), bv=_b(a.v_lin), wo=_t(a.out_lin), bo=_b(a.out_lin),
        norm1=_ln(layer.sa_layer_norm), norm2=_ln(layer.output_layer_norm),
        w1=_t(layer.ffn.lin1), b1=_b(layer.ffn.lin1), w2=_t(layer.ffn.lin2), b2=_b(layer.ffn.lin2),
        act=cfg.activation, placement="post", scale=dh ** -0.5,
    )


def _gpt2_layer(block, cfg, idx) -> LayerWeights:
    d = cfg.n_embd
    H = cfg.n_head
    dh = d // H
    w = block.attn.c_attn.weight.detach()  # Conv1D: [d, 3d], already x @ W
    b = block.attn.c_attn.bias.detach()
    scale = dh ** -0.5 if getattr(cfg, "scale_attn_weights", True) else 1.0
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale = scale / float(idx + 1)
    return LayerWeights(
        n_heads=H, n_kv_heads=H, head_dim=dh,
        wq=w[:, :d], bq=b[:d], wk=w[:, d:2 * d], bk=b[d:2 * d], wv=w[:, 2 * d:], bv=b[2 * d:],
        wo=block.attn.c_proj.weight.detach(), bo=block.attn.c_proj.bias.detach(),
        norm1=_ln(block.ln_1), norm2=_ln(block.ln_2),
        w1=block.mlp.c_fc.weight.detach(), b1=block.mlp.c_fc.bias.detach(),
        w2=block.mlp.c_proj.weight.detach(), b2=block.mlp.c_proj.bias.detach(),
        act=cfg.activation_function, placement="pre", scale=scale, causal=True,
    )


def _llama_layer(layer, cfg) -> LayerWeights:
    a = layer.self_attn
    H = cfg.num_attention_heads
    Hkv = getattr(cfg, "num_key_value_heads", None) or H
    dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    m = layer.mlp
    return LayerWeights(
        n_heads=H, n_kv_heads=Hkv, head_dim=dh,
        wq=_t(a.q_proj), bq=_b(a.q_proj), wk=_t(a.k_proj), bk=_b(a.k_proj),
        wv=_t(a.v_proj), bv=_b(a.v_proj), wo=_t(a.o_proj), bo=_b(a.o_proj),
        norm1=_ln(layer.input_layernorm, "rmsnorm"), norm2=_ln(layer.post_attention_layernorm, "rmsnorm"),
        w1=_t(m.up_proj), b1=_b(m.up_proj), w2=_t(m.down_proj), b2=_b(m.down_proj), w_gate=_t(m.gate_proj),
        act=cfg.hidden_act, placement="pre", scale=dh ** -0.5, rotary=True, causal=True,
    )


def _gemma_norm(mod) -> Norm:
    """Gemma's RMSNorm multiplies by (1 + weight): the Norm's weight is that sum (a small copy)."""
    return Norm("rmsnorm", mod.weight.detach() + 1.0, None, float(mod.eps))


def _gemma3_layer(layer, cfg, idx) -> LayerWeights:
    a = layer.self_attn
    H = cfg.num_attention_heads
    Hkv = cfg.num_key_value_heads
    dh = cfg.head_dim
    m = layer.mlp
    kind = cfg.layer_types[idx]
    return LayerWeights(
        n_heads=H, n_kv_heads=Hkv, head_dim=dh,
        wq=_t(a.q_proj), bq=_b(a.q_proj), wk=_t(a.k_proj), bk=_b(a.k_proj),
        wv=_t(a.v_proj), bv=_b(a.v_proj), wo=_t(a.o_proj), bo=_b(a.o_proj),
        norm1=_gemma_norm(layer.input_layernorm), norm2=_gemma_norm(layer.pre_feedforward_layernorm),
        w1=_t(m.up_proj), b1=_b(m.up_proj), w2=_t(m.down_proj), b2=_b(m.down_proj), w_gate=_t(m.gate_proj),
        act=cfg.hidden_activation, placement="pre", scale=float(cfg.query_pre_attn_scalar) ** -0.5,
        rotary=True, causal=not getattr(cfg, "use_bidirectional_attention", False),
        q_norm=_gemma_norm(a.q_norm), k_norm=_gemma_norm(a.k_norm),
        window=cfg.sliding_window if kind == "sliding_attention" else None,
        softcap=getattr(cfg, "attn_logit_softcapping", None),
        attn_out_norm=_gemma_norm(layer.post_attention_layernorm),
        ffn_out_norm=_gemma_norm(layer.post_feedforward_layernorm), rope_key=kind,
    )


def _mpnet_bias(encoder):
    """MPNet's relative position bias as (n, device) -> [H, n, n] (the model's own bucketing, shared by
    every layer)."""
    def bias(n: int, device) -> torch.Tensor:
        return encoder.compute_position_bias(torch.empty(1, n, 1, device=device))[0].detach()
    return bias


def _mpnet_layer(layer, cfg, bias) -> LayerWeights:
    att = layer.attention
    H = cfg.num_attention_heads
    dh = cfg.hidden_size // H
    return LayerWeights(
        n_heads=H, n_kv_heads=H, head_dim=dh,
        wq=_t(att.attn.q), bq=_b(att.attn.q), wk=_t(att.attn.k), bk=_b(att.attn.k),
        wv=_t(att.attn.v), bv=_b(att.attn.v), wo=_t(att.attn.o), bo=_b(att.attn.o),
        norm1=_ln(att.LayerNorm), norm2=_ln(layer.output.LayerNorm),
        w1=_t(layer.intermediate.dense), b1=_b(layer.intermediate.dense),
        w2=_t(layer.output.dense), b2=_b(layer.output.dense),
        act=cfg.hidden_act, placement="post", scale=dh ** -0.5, score_bias=bias,
    )


ENCODERS = ("bert", "roberta", "electra", "distilbert", "mpnet")
DECODERS = ("gpt2", "llama", "mistral", "qwen2", "gemma3_text")
SUPPORTED = ENCODERS + DECODERS


def _head(model, family: str):
    """The output head as a function of the final hidden states, or (None, 'none')."""
    name = type(model).__name__
    if name.endswith("ForMaskedLM"):
        if family in ("bert",):
            return model.cls, "token"
        if family == "roberta":
            return model.lm_head, "token"
        if family == "electra":
            return (lambda h: model.generator_lm_head(model.generator_predictions(h))), "token"
        if family == "distilbert":
            return (lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h))))), "token"
        if family == "mpnet":
            return model.lm_head, "token"
    if name.endswith("LMHeadModel") or name.endswith("ForCausalLM"):
        cap = getattr(model.config, "final_logit_softcapping", None)
        if cap:
            return (lambda h: torch.tanh(model.lm_head(h) / cap) * cap), "token"
        return model.lm_head, "token"
    if name.endswith("ForSequenceClassification"):
        if family == "bert":
            return (lambda h: model.classifier(model.bert.pooler(h))), "sequence"
        if family in ("roberta", "electra"):
            return model.classifier, "sequence"
        if family == "distilbert":
            return (lambda h: model.classifier(torch.relu(model.pre_classifier(h[:, 0])))), "sequence"
        if family in DECODERS:
            return (lambda h: model.score(h)[:, -1]), "sequence"
    return None, "none"


def read_architecture(model) -> Architecture:
    """Reads an eager Hugging Face model into an Architecture; raises UnsupportedArchitecture."""
    cfg = model.config
    family = cfg.model_type
    if family not in SUPPORTED:
        raise UnsupportedArchitecture(
            f"model type '{family}' has no reader (supported: {', '.join(SUPPORTED)})")
    base = model.base_model
    head, head_kind = _head(model, family)
    notes = []
    if family in ("bert", "roberta", "electra"):
        pe = getattr(cfg, "position_embedding_type", "absolute")
        if pe not in (None, "absolute"):
            raise UnsupportedArchitecture(f"{family} with position_embedding_type='{pe}' is not supported")
        layers = [_bert_like_layer(l, cfg) for l in base.encoder.layer]
        if family == "electra" and getattr(base, "embeddings_project", None) is not None:
            notes.append("ELECTRA embeddings are projected before layer 1; the trace starts after the projection")
        return Architecture(family, layers, "post", False, head=head, head_kind=head_kind, notes=notes)
    if family == "distilbert":
        layers = [_distilbert_layer(l, cfg) for l in base.transformer.layer]
        return Architecture(family, layers, "post", False, head=head, head_kind=head_kind)
    if family == "mpnet":
        bias = _mpnet_bias(base.encoder)
        layers = [_mpnet_layer(l, cfg, bias) for l in base.encoder.layer]
        notes.append("MPNet adds a relative position bias (shared by all layers) to the attention logits; "
                     "the maps start from the attention it gives")
        return Architecture(family, layers, "post", False, head=head, head_kind=head_kind, notes=notes)
    if family == "gemma3_text":
        layers = [_gemma3_layer(l, cfg, i) for i, l in enumerate(base.layers)]
        rot = base.rotary_emb
        kinds = sorted(set(cfg.layer_types))
        windows = sorted({w.window for w in layers if w.window})
        if windows:
            notes.append(f"{sum(1 for w in layers if w.window)} of {len(layers)} layers attend within a sliding window "
                         f"of {windows[0]} tokens (applied)")
        return Architecture(family, layers, "pre", not getattr(cfg, "use_bidirectional_attention", False),
                            final_norm=_gemma_norm(base.norm),
                            rotary=lambda x, pos: {k: rot(x, pos, k) for k in kinds},
                            head=head, head_kind=head_kind, notes=notes)
    if family == "gpt2":
        layers = [_gpt2_layer(b, cfg, i) for i, b in enumerate(base.h)]
        return Architecture(family, layers, "pre", True, final_norm=_ln(base.ln_f), head=head, head_kind=head_kind)
    # llama, mistral, qwen2
    if getattr(cfg, "sliding_window", None) and (family == "mistral" or getattr(cfg, "use_sliding_window", False)):
        notes.append(f"sliding-window attention ({cfg.sliding_window} tokens) is ignored; texts are shorter")
    layers = [_llama_layer(l, cfg) for l in base.layers]
    rot = base.rotary_emb
    return Architecture(family, layers, "pre", True, final_norm=_ln(base.norm, "rmsnorm"),
                        rotary=lambda x, pos: rot(x, pos), head=head, head_kind=head_kind, notes=notes)

