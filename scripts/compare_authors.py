"""Our alti / value_zeroing / globenc / decompx beside the AUTHORS' released code, same model, same sentence.

    python scripts/compare_authors.py AUTHORS_DIR [--models builtin:agreement pkg:minilm pkg:smollm2]

AUTHORS_DIR must hold git checkouts of the four public repositories, under these folder names:
    transformer-contributions  (github mt-upc/transformer-contributions, ALTI)
    ValueZeroing               (github hmohebbi/ValueZeroing)
    GlobEnc                    (github mohsenfayyaz/GlobEnc)
    DecompX                    (github mohsenfayyaz/DecompX)
The authors' code is imported from there and run as released; nothing of it is in this project.
ValueZeroing's scoring loop lives in its demo.py, which cannot be imported (it downloads a fine-tuned
checkpoint at import): its function `compute_joint_attention`, `DISTANCE_FUNC` and the lines between
"## Cpmpute" and "# Plot" are read from that file and executed on our model and sentence.
scikit-learn (ValueZeroing's cosine_distances) must be importable (PYTHONPATH).

Shims, for packages their modules import but the compared code never calls (captum, datasets,
ipywidgets, matplotlib, pyaml_env: stub modules), and for transformers 5 (helpers that moved:
apply_chunking_to_forward, prune_linear_layer, find_pruneable_heads_and_indices, and the
get_extended_attention_mask / get_head_mask methods the old BertModel code calls). Their model
classes are built from our model's config and loaded with its state dict (a check prints how far
their hidden states are from the model's own). For SmolLM2 (Llama, pre-LN, grouped-query attention)
only ALTI applies: its code has a pre-LN branch; the shims there give its wrapper the module names,
a zero o_proj bias, `eps`/`bias` names on RMSNorm and value heads repeated to the query heads.
Value zeroing, GlobEnc and DecompX are BERT-only modified modeling files.

Not a test (CI has no network and no copies of those repositories). Prints one line per method and
model: the max abs difference of the per-layer and the aggregated maps.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import os
import re
import sys
import types
from pathlib import Path
from unittest import mock

import numpy as np
import torch

REPOS = {"alti": "transformer-contributions", "value_zeroing": "ValueZeroing", "globenc": "GlobEnc",
         "decompx": "DecompX"}
TEXTS = {"causal": "The keys to the cabinet are on the table.",
         "masked": "the keys to the cabinet [MASK] on the table ."}


# ----------------------------------------------------------------------------------------- shims
class _Stub(types.ModuleType):
    """A module whose every attribute is a MagicMock (for imports the compared code never calls)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=f"{self.__name__}.{name}")


def _install_shims():
    for name in ("captum", "captum.attr", "datasets", "ipywidgets", "matplotlib", "matplotlib.pyplot",
                 "seaborn", "IPython", "IPython.core", "IPython.core.display"):
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError:
                sys.modules[name] = _Stub(name)
    if "pyaml_env" not in sys.modules:
        import yaml

        m = types.ModuleType("pyaml_env")
        m.parse_config = lambda path: yaml.safe_load(open(path))
        sys.modules["pyaml_env"] = m
    import transformers.modeling_utils as mu
    import transformers.pytorch_utils as pu

    for n in ("apply_chunking_to_forward", "prune_linear_layer"):
        if not hasattr(mu, n):
            setattr(mu, n, getattr(pu, n))
    if not hasattr(mu, "find_pruneable_heads_and_indices"):
        mu.find_pruneable_heads_and_indices = getattr(pu, "find_pruneable_heads_and_indices", None) or (
            lambda *a, **k: (_ for _ in ()).throw(NotImplementedError("head pruning")))


def _old_model_methods(cls):
    """transformers 4 ModuleUtilsMixin methods the authors' BertModel/BertForMaskedLM call."""
    def get_extended_attention_mask(self, attention_mask, input_shape, device=None, dtype=None):
        ext = attention_mask[:, None, None, :].to(torch.float32)
        return (1.0 - ext) * -10000.0

    def get_head_mask(self, head_mask, num_hidden_layers, is_attention_chunked=False):
        return [None] * num_hidden_layers if head_mask is None else head_mask

    for k, f in (("get_extended_attention_mask", get_extended_attention_mask), ("get_head_mask", get_head_mask)):
        if not hasattr(cls, k):
            setattr(cls, k, f)


def _package(name: str, folder: Path):
    """Import the files of `folder` as the package `name` (their relative imports then work)."""
    pkg = types.ModuleType(name)
    pkg.__path__ = [str(folder)]
    sys.modules[name] = pkg
    return pkg


class _src_package:
    """Two of the repositories name their package `src`: import one of them at a time."""

    def __init__(self, repo: Path):
        self.repo = str(repo)

    def __enter__(self):
        self.saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "src" or k.startswith("src.")}
        sys.path.insert(0, self.repo)

    def __exit__(self, *exc):
        sys.path.remove(self.repo)
        for k in [k for k in sys.modules if k == "src" or k.startswith("src.")]:
            sys.modules.pop(k)
        sys.modules.update(self.saved)


def _authors_bert(module, cls_name, lm):
    """The authors' model class built from our config, loaded with our model's weights, eval mode."""
    _old_model_methods(module.BertPreTrainedModel)
    cfg = lm.model.config
    for k, v in (("chunk_size_feed_forward", 0), ("is_decoder", False), ("add_cross_attention", False),
                 ("position_embedding_type", "absolute"), ("use_return_dict", True),
                 ("output_attentions", False), ("output_hidden_states", False), ("gradient_checkpointing", False)):
        if not hasattr(cfg, k):
            setattr(cfg, k, v)
    with torch.device("cpu"):
        model = getattr(module, cls_name)(cfg)
    target = model.bert if hasattr(model, "bert") else model
    missing, unexpected = target.load_state_dict(lm.model.base_model.state_dict(), strict=False)
    bad = [k for k in missing if "position_ids" not in k and "pooler" not in k]
    if bad:
        raise RuntimeError(f"weights missing in the authors' model: {bad[:5]}")
    return model.eval()


def _hidden_gap(lm, ids, hidden):
    with torch.no_grad():
        own = lm.model(input_ids=ids, output_hidden_states=True).hidden_states
    return max(float((a[0] - b.reshape(a[0].shape)).abs().max()) for a, b in zip(own, hidden))


# ------------------------------------------------------------------------------------ authors' runs
def alti_authors(root: Path, lm, batch):
    """-> (per-layer normalised contributions [L,n,n], rollout [L,n,n]) from transformer-contributions."""
    repo = root / REPOS["alti"]
    cwd = os.getcwd()
    os.chdir(repo)  # contributions.py reads ./src/config.yaml at import
    try:
        with _src_package(repo):
            contributions = importlib.import_module("src.contributions")
            utils = importlib.import_module("src.utils_contributions")
    finally:
        os.chdir(cwd)
    model = lm.model
    if model.config.model_type == "bert" and not hasattr(model, "bert"):
        model = _BertHolder(model)
    if model.config.model_type == "llama":
        contributions.config["models"]["llama"] = dict(
            layer="model.layers", ln1="input_layernorm", ln2="post_attention_layernorm",
            values="self_attn.v_proj", dense="self_attn.o_proj", pre_layer_norm="True")
        _llama_shims(model)
    wrapper = contributions.ModelWrapper(model)
    if model.config.model_type == "llama":
        H = model.config.num_attention_heads
        Hkv = model.config.num_key_value_heads
        save = wrapper.save_activation

        def save_repeated(name, mod, inp, out):  # GQA: value heads repeated to the query heads
            if name.endswith("self_attn.v_proj") and H != Hkv:
                B, n, _ = out.shape
                out = out.view(B, n, Hkv, -1).repeat_interleave(H // Hkv, dim=2).reshape(B, n, -1)
            return save(name, mod, inp, out)

        wrapper.save_activation = save_repeated
    _, _, _, data = wrapper(batch)
    resultant_norm = torch.norm(torch.squeeze(data["resultants"]), p=1, dim=-1)
    per = utils.normalize_contributions(data["contributions"], scaling="min_sum", resultant_norm=resultant_norm)
    return per.numpy(), utils.compute_joint_attention(per).numpy()


class _BertHolder(torch.nn.Module):
    """A BertModel presented as the authors' wrapper expects it: .bert, .config, output['logits']."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert
        self.config = bert.config

    def forward(self, **kw):
        out = self.bert(**kw)
        return {"logits": out.last_hidden_state, "hidden_states": out.hidden_states, "attentions": out.attentions}


def _llama_shims(model):
    for lay in model.model.layers:
        for nrm in (lay.input_layernorm, lay.post_attention_layernorm):
            nrm.eps = nrm.variance_epsilon
            nrm.bias = None
        o = lay.self_attn.o_proj
        if o.bias is None:
            o.bias = torch.nn.Parameter(torch.zeros(o.out_features, dtype=o.weight.dtype), requires_grad=False)


def value_zeroing_authors(root: Path, lm, batch, dtype=torch.float32):
    """-> (per-layer scores [L,n,n], rollout [L,n,n]) from ValueZeroing's modified BERT and demo loop
    (dtype=torch.float64: their model cast to float64, so their sklearn cosine distances are float64)."""
    repo = root / REPOS["value_zeroing"]
    _package("vz_authors", repo / "modeling")
    vzm = importlib.import_module("vz_authors.customized_modeling_bert")
    model = _authors_bert(vzm, "BertForMaskedLM", lm).to(dtype)
    src = (repo / "demo.py").read_text()
    fn = re.search(r"^def compute_joint_attention.*?(?=^\S)", src, re.S | re.M).group(0)
    dist = re.search(r"^DISTANCE_FUNC = \{.*?\}\n", src, re.S | re.M).group(0)
    metric = re.search(r"^METRIC = .*\n", src, re.M).group(0)
    loop = re.search(r"^inputs = \{k: v\.to\(device\).*?(?=^# Plot)", src, re.S | re.M).group(0)
    from sklearn.metrics.pairwise import cosine_distances

    ns = {"np": np, "torch": torch, "cosine_distances": cosine_distances, "model": model,
          "inputs": dict(batch), "device": torch.device("cpu"), "config": model.config}
    exec(metric + fn + dist + loop, ns)  # noqa: S102 -- the authors' own lines, read from their checkout
    gap = _hidden_gap(lm, batch["input_ids"], ns["org_hidden_states"])
    return ns["valuezeroing_scores"], ns["rollout_valuezeroing_scores"], gap


def globenc_authors(root: Path, lm, batch):
    """-> (per-layer N_Enc norms [L,n,n], raw aggregated product [L,n,n]) from GlobEnc's modified BERT."""
    repo = root / REPOS["globenc"]
    _package("globenc_authors", repo / "src" / "modeling")
    ge = importlib.import_module("globenc_authors.modeling_bert")
    model = _authors_bert(ge, "BertModel", lm)
    with torch.no_grad():
        out = model(**batch, output_norms=True, output_hidden_states=True, return_dict=False)
    norms = out[-1]  # all_norms: per layer the tuple whose [4] is N_Enc (as in GlobEnc_Demo.ipynb)
    per = torch.stack([norms[i][4] for i in range(len(norms))]).squeeze(1).numpy()
    with _src_package(repo):
        AttentionRollout = importlib.import_module("src.attention_rollout").AttentionRollout
    agg = np.array(AttentionRollout().compute_flows([per], output_hidden_states=True, disable_tqdm=True)[0])
    with torch.no_grad():
        out2 = model(**batch, output_globenc=True, return_dict=False)
    enc_loop = out2[2][0].numpy()  # the encoder loop's own product (output_globenc): the last layer
    return per, agg, float(np.abs(enc_loop - agg[-1]).max() / np.abs(agg[-1]).max()), _hidden_gap(lm, batch["input_ids"], out[2])


def decompx_authors(root: Path, lm, batch):
    """-> per-layer norms of the aggregated decomposition [L,n,n] from DecompX's modified BERT."""
    repo = root / REPOS["decompx"]
    _package("decompx_authors", repo / "src")
    dx = importlib.import_module("decompx_authors.modeling_bert")
    cfgmod = importlib.import_module("decompx_authors.decompx_utils")
    model = _authors_bert(dx, "BertModel", lm)
    conf = cfgmod.DecompXConfig(include_biases=True, bias_decomp_type="absdot", include_LN1=True,
                                include_FFN=True, FFN_approx_type="GeLU_ZO", FFN_fast_mode=False,
                                include_LN2=True, aggregation="vector", include_classifier_w_pooler=False,
                                output_all_layers=True, output_aggregated="norm")
    with torch.no_grad():
        out = model(**batch, decompx_config=conf, output_hidden_states=True, return_dict=False)
    all_layers = out[-1]
    per = torch.stack([a[0] for a in all_layers.aggregated]).numpy()
    return per, _hidden_gap(lm, batch["input_ids"], out[2])


def _alti_with_eps(tr):
    """Our per-layer ALTI with the one thing the authors' code adds: F.pairwise_distance(x1, x2, p=1)
    computes ||x1 - x2 + 1e-6||_1 (its default eps), here with x1 = T_i(x_j), x2 = y_i."""
    from attnviz.methods import alti

    out = []
    for l in range(tr.n_layers):
        _, _, T, y = alti.layer_contributions(tr, l)
        c = (y.abs().sum(-1, keepdim=True) - (T - y[:, None, :] + 1e-6).abs().sum(-1)).clamp_min(0).numpy()
        out.append(c / c.sum(-1, keepdims=True))
    return np.stack(out)


# ----------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("authors_dir", help="folder with the four repositories (see the module docstring)")
    ap.add_argument("--models", nargs="+", default=["builtin:agreement", "pkg:minilm", "pkg:smollm2"])
    ap.add_argument("--methods", nargs="+", default=list(REPOS))
    args = ap.parse_args(argv)
    root = Path(args.authors_dir)
    absent = [f"{root / REPOS[m]}" for m in args.methods if not (root / REPOS[m]).is_dir()]
    if absent:
        print("the authors' repositories are not there: " + ", ".join(absent) + "\nclone them first "
              "(mt-upc/transformer-contributions, hmohebbi/ValueZeroing, mohsenfayyaz/GlobEnc, "
              "mohsenfayyaz/DecompX) into that folder; this script never downloads anything", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    _install_shims()
    import attnviz
    from attnviz.methods import METHODS
    from attnviz.trace import trace

    rows = []
    for spec in args.models:
        lm = attnviz.load_model(spec)
        causal = lm.task == "causal_lm"
        text = TEXTS["causal" if causal else "masked"]
        tr = trace(lm, text)
        batch = dict(lm.tokenizer(text, return_tensors="pt"))
        assert batch["input_ids"].shape[1] == len(tr.tokens)
        tag = f"{spec} ({len(tr.tokens)} tokens: {text!r})"
        for m in args.methods:
            ours = METHODS[m].compute(tr)
            if causal and m != "alti":
                rows.append((tag, m, "not applicable: the authors' code is a modified BERT"))
                continue
            try:
                if m == "alti":
                    per, agg = alti_authors(root, lm, batch)
                    lm64 = copy.copy(lm)
                    lm64.model = copy.deepcopy(lm.model).double()
                    per64, agg64 = alti_authors(root, lm64, batch)
                    del lm64
                    tr64 = trace(lm, text, dtype=torch.float64)
                    ours64 = METHODS[m].compute(tr64)
                    msg = (f"per-layer {np.abs(ours.meta['per_layer'] - per).max():.1e}, "
                           f"rollout {np.abs(ours.layer - agg).max():.1e}; both in float64: per-layer "
                           f"{np.abs(ours64.meta['per_layer'] - per64).max():.1e}, rollout "
                           f"{np.abs(ours64.layer - agg64).max():.1e}; ours with F.pairwise_distance's "
                           f"eps=1e-6 added to T - y, float64: {np.abs(_alti_with_eps(tr64) - per64).max():.1e}")
                elif m == "value_zeroing":
                    per, agg, gap = value_zeroing_authors(root, lm, batch)
                    per64, agg64, _ = value_zeroing_authors(root, lm, batch, torch.float64)
                    ours64 = METHODS[m].compute(trace(lm, text, dtype=torch.float64))
                    msg = (f"per-layer {np.abs(ours.meta['per_layer'] - per).max():.1e}, "
                           f"rollout {np.abs(ours.layer - agg).max():.1e} (their hidden states vs the model's: {gap:.1e}); "
                           f"both in float64: per-layer {np.abs(ours64.meta['per_layer'] - per64).max():.1e}, "
                           f"rollout {np.abs(ours64.layer - agg64).max():.1e}; ours float32 vs theirs float64: "
                           f"per-layer {np.abs(ours.meta['per_layer'] - per64).max():.1e}")
                elif m == "globenc":
                    per, agg, loop_gap, gap = globenc_authors(root, lm, batch)
                    shares = agg / agg.sum(-1, keepdims=True)
                    raw = np.exp(ours.meta["log_row_sum"])[..., None] * ours.layer
                    msg = (f"per-layer N_Enc {np.abs(ours.meta['per_layer'] - per).max():.1e} "
                           f"(max {per.max():.1f}), aggregated row shares {np.abs(ours.layer - shares).max():.1e}, "
                           f"aggregated raw product relative {np.abs(raw - agg).max() / np.abs(agg).max():.1e} "
                           f"(their encoder loop vs their rollout: {loop_gap:.1e}; hidden states {gap:.1e})")
                else:
                    per, gap = decompx_authors(root, lm, batch)
                    msg = (f"norms ||E^l_ik|| {np.abs(ours.layer - per).max():.1e} (max {per.max():.1f}; "
                           f"relative {np.abs(ours.layer - per).max() / per.max():.1e}; hidden states {gap:.1e})")
            except Exception as e:  # noqa: BLE001 -- report and go on with the next method
                msg = f"failed: {type(e).__name__}: {e}"
            rows.append((tag, m, msg))
            print(f"{tag}  {m}: {msg}", flush=True)
    print("\n| model | method | max abs difference to the authors' code |\n|---|---|---|")
    for tag, m, msg in rows:
        print(f"| {tag} | {m} | {msg} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
