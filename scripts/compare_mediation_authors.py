"""attnviz.mediate's attention intervention against Finlayson et al. (2021)'s released code
(github.com/mattf1n/lm-intervention, attention_intervention_model.AttentionOverride, used by their
attention_intervention_structural.py through Model.attention_intervention's forward hook) on a tiny
random GPT-2.

    python scripts/compare_mediation_authors.py --repo DIR [--layers 3] [--seed 0]

DIR: a checkout of mattf1n/lm-intervention, or its bare git directory (the file is then read with
`git show HEAD:attention_intervention_model.py` into a temporary folder; nothing of it is copied into
attnviz). Their Model class imports transformers internals of 2020 that transformers 5 no longer has,
so the script runs their AttentionOverride module itself the way their hook does: on a forward hook of
layer l's attention module it builds AttentionOverride(module, override, mask) and returns its output
for the module's input. Their module reads attributes of the 2020 GPT-2 attention (n_head, split_size,
scale, the causal "bias" buffer, output_attentions); a namespace gives it those of today's module
(the same weights). The override is head h's attention weights from x' for every row (Vig et al.'s
"attention intervention"); y = p(c1)/p(c2) at the target from the model's logits; NIE = y/y(x) - 1.
Prints the largest relative difference of 1 + NIE over every layer and head.
"""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_authors(repo: str):
    """attention_intervention_model from a checkout or a bare git directory."""
    p = Path(repo)
    if (p / "attention_intervention_model.py").is_file():
        sys.path.insert(0, str(p))
    else:
        tmp = Path(tempfile.mkdtemp(prefix="lm_intervention_"))
        src = subprocess.run(["git", "--git-dir", str(p), "show", "HEAD:attention_intervention_model.py"],
                             check=True, capture_output=True, text=True).stdout
        (tmp / "attention_intervention_model.py").write_text(src)
        sys.path.insert(0, str(tmp))
    return importlib.import_module("attention_intervention_model")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default="/work/.mirror/mattf1n+lm-intervention/repo")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    import transformers as T

    import attnviz
    from attnviz.mediation import mediate
    from attnviz.resources import models_dir
    from attnviz.trace import encode, single_token_id

    aim = load_authors(args.repo)
    tok = T.AutoTokenizer.from_pretrained(models_dir() / "agreement")
    cfg = T.GPT2Config(vocab_size=tok.vocab_size, n_embd=64, n_layer=args.layers, n_head=4, n_positions=64,
                       bos_token_id=None, eos_token_id=None)
    torch.manual_seed(args.seed)
    model = T.GPT2LMHeadModel._from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)  # larger than the initialiser's 0.02: interventions move y visibly
    lm = attnviz.wrap(model, tok, spec="tiny:gpt2")
    a, b, contrast = "the key to the cabinets [MASK]", "the keys to the cabinets [MASK]", ("are", "is")
    m = mediate(lm, a, b, contrast, kinds=("attention",))
    ea, eb = encode(lm, a), encode(lm, b)
    t = ea.target
    c = [single_token_id(tok, w) for w in contrast]

    def z(ids):
        with torch.no_grad():
            lg = model(input_ids=ids).logits[0, t].double()
        return float(lg[c[0]] - lg[c[1]])

    with torch.no_grad():
        att_b = model(input_ids=eb.ids, output_attentions=True).attentions
    n = ea.ids.shape[1]
    causal = torch.tril(torch.ones(n, n)).view(1, 1, n, n)

    def hook(module, inputs, outputs, attn_override, attn_override_mask):
        # their Model.attention_intervention's hook, with a namespace of the 2020 attributes
        old = SimpleNamespace(output_attentions=False, _buffers={"bias": causal}, n_head=module.num_heads,
                              split_size=module.split_size, scale=module.scale_attn_weights, c_attn=module.c_attn,
                              c_proj=module.c_proj, attn_dropout=module.attn_dropout, resid_dropout=module.resid_dropout)
        out = aim.AttentionOverride(old, attn_override, attn_override_mask)(*inputs)
        return out[0], None

    z0 = z(ea.ids)
    worst = 0.0
    H = cfg.n_head
    for l in range(cfg.n_layer):
        for h in range(H):
            mask = torch.zeros(1, H, n, n, dtype=torch.bool)
            mask[:, h] = True
            hk = model.transformer.h[l].attn.register_forward_hook(
                partial(hook, attn_override=att_b[l], attn_override_mask=mask))
            try:
                ref = torch.exp(torch.tensor(z(ea.ids) - z0)).item()
            finally:
                hk.remove()
            ours = 1 + m.nie_attention[l, h]
            worst = max(worst, abs(ours - ref) / abs(ref))
            print(f"layer {l + 1} head {h + 1}: theirs 1+NIE {ref:.8f}  ours {ours:.8f}")
    print(f"TE {m.total_effect:+.6f}; largest relative difference of 1 + NIE over {cfg.n_layer * H} heads: {worst:.2e}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
