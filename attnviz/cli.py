"""The `attnviz` command.

    attnviz analyze --model builtin:agreement --text "the keys to the cabinet [MASK] here ." --out a.json
    attnviz study --model builtin:agreement --data builtin:agreement --n 500 --out runs/agreement
    attnviz evaluate [ARGS]            # every built-in model's accuracy on the real sets (attnviz.evaluate)
    attnviz evaluate --model pkg:smollm2 --set real   # any masked or causal LM on the agreement/pronoun sets
    attnviz evaluate --model builtin:agreement --linzen FOLDER   # Linzen et al. (2016)'s agreement set
    attnviz app [--port 8501] [--address 127.0.0.1] [STREAMLIT OPTIONS]   # the app, in a browser
    attnviz app --serve --address 0.0.0.0 [--allow-model FOLDER ...]      # the app for a class (docs/guide.md)

analyze writes the maps (JSON, or NPZ when FILE ends in .npz) and, with --faithfulness, the
importance baselines and correlations. study runs the corpus faithfulness study: it is resumable
(Ctrl-C or a crash loses no finished sentence; run the same command again), and writes
summary.csv, summary.json and summary.html (mean ± std per method × layer × baseline) into DIR.
Errors are one line on stderr (exit status 2), said before any work where the arguments show them:
every number is checked against its range, --data must hold sentences, and --out never replaces a file
attnviz did not write unless --force is given. Outputs are written whole or not at all (a temporary file,
then renamed). An interrupted study exits with 130.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

# the largest values the numeric options take, with the reason said when one is refused
MAX_IG_STEPS = 1024
IG_STEPS_WHY = ("each step is one forward and backward pass for every sentence and baseline; the doubling "
                "asked for with --ig-tol stops at 256")
MAX_TOKENS = 4096
MAX_TOKENS_WHY = ("the per-head maps hold layers x heads x n^2 values: 4096 tokens on a 12-layer, 12-head model are "
                  "2.4 billion floats, 9.7 GB")
THREADS_WHY = "4 per core on this machine ({cores} cores); more only slow torch down, and a very large number crashes it"


def max_threads() -> int:
    """The most torch threads (and flow workers) the command takes: this machine's cores x 4."""
    return 4 * (os.cpu_count() or 1)


class UsageError(Exception):
    """A command line argparse cannot read; str(e) is one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with its refusals as one line (the CLI prints them as every other error: exit status 2)."""

    def error(self, message):
        from .errors import shown

        raise UsageError(f"{shown(message, 300)} ({self.prog} -h lists the options)")


def _in_range(flag: str, value, low, high=None, why: str = "") -> None:
    """InputError (one line naming the option, its range and why) unless low <= value <= high (None: not given)."""
    from .errors import InputError, shown

    if value is None:
        return
    rng = f" (the range is {low} to {high}: {why})" if high is not None and why else \
        f" (the range is {low} to {high})" if high is not None else f" ({why})" if why else ""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{flag} must be a finite number, got {value}{rng}")
    if value < low:
        raise InputError(f"{flag} must be at least {low}, got {shown(value, 40)}{rng}")
    if high is not None and value > high:
        raise InputError(f"{flag} must be at most {high}, got {shown(value, 40)}{rng}")


def _tolerance(flag: str, value: Optional[float]) -> None:
    """A relative tolerance: 0 (off: fixed steps) or a share strictly between 0 and 1."""
    from .errors import InputError, shown

    if value is not None and value != 0 and not 0 < value < 1:
        raise InputError(f"{flag} must be 0 (fixed steps) or between 0 and 1, a share (0.01 = 1 %), "
                         f"got {shown(value, 40)}")


def _option_ranges() -> dict:
    """--option NAME -> (low, high, why) for the method options that take a number."""
    return {"steps": (1, MAX_IG_STEPS, "integration steps of the FFN decomposition, one pass through the FFN each"),
            "workers": (1, max_threads(), "processes of the flow pool; more than 4 per core only wait")}


def _csv(s: Optional[str]):
    return None if s is None else [x.strip() for x in s.split(",") if x.strip()]


def parse_options(items: Optional[Sequence[str]]) -> dict:
    """["steps=16", "atb_ff.rule=midpoint"] -> analyze's options ({option: value} for every method that
    declares it, {method: {option: value}} with METHOD.OPTION); values take the type of the default."""
    from .errors import shown
    from .methods import METHODS

    out: dict = {}
    for item in items or []:
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"--option {shown(item)}: write NAME=VALUE (or METHOD.NAME=VALUE)")
        method, _, name = key.strip().rpartition(".")
        infos = [METHODS[method]] if method in METHODS else list(METHODS.values()) if not method else []
        if not infos:
            raise ValueError(f"--option {shown(item)}: unknown method '{shown(method)}'")
        opts = [o for i in infos for o in i.options if o.name == name]
        if not opts:
            raise ValueError(f"--option {shown(item)}: no method declares an option '{shown(name)}' "
                             "(attnviz methods lists them)")
        o = opts[0]
        value = raw.strip()
        if o.choices and value not in o.choices:
            raise ValueError(f"--option {shown(item)}: choose one of {', '.join(map(str, o.choices))}")
        ranges = _option_ranges()
        try:
            if isinstance(o.default, bool):
                if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
                    raise ValueError
                value = value.lower() in ("1", "true", "yes")
            elif isinstance(o.default, int) or (o.default is None and name in ranges):
                value = int(value)
            elif isinstance(o.default, float):
                value = float(value)
        except ValueError:
            kind = {bool: "true or false", int: "a whole number", float: "a number"}.get(type(o.default), "a whole number")
            rng = f" from {ranges[name][0]} to {ranges[name][1]}" if name in ranges else ""
            raise ValueError(f"--option {shown(item)}: {name} takes {kind}{rng}") from None
        if name in ranges and not isinstance(value, bool):
            low, high, why = ranges[name]
            _in_range(f"--option {key.strip()}", value, low, high, why)
        if method:
            out.setdefault(method, {})[name] = value
        else:
            out[name] = value
    return out


def cmd_methods(args) -> int:
    """List the registered methods and importance baselines with what they measure and their options."""
    from .faithfulness.importance import BASELINES
    from .methods import METHODS

    for name, i in METHODS.items():
        opts = ", ".join(f"{o.name}={o.default!r}" for o in i.options)
        print(f"{name:15s} {i.label} — {i.unit}; {i.summary}" + (f" [options: {opts}]" if opts else "")
              + (" [core]" if i.core else ""))
    print()
    for name, b in BASELINES.items():
        print(f"{name:22s} {b.label} — {b.summary}")
    return 0


def read_data(spec: str, n: Optional[int] = None) -> list:
    """FILE (.jsonl / .json list of {"text", ["answer", "wrong"]} / .txt one sentence a line) or
    builtin:TASK (the held-out evaluation set) -> list of items (first n)."""
    from .errors import InputError, shown

    if spec.startswith("builtin:"):
        from .datasets import load_eval_set

        try:
            return load_eval_set(spec.split(":", 1)[1], n)
        except (ValueError, FileNotFoundError) as e:
            raise InputError(f"cannot read the built-in evaluation set '{shown(spec)}': {e}") from None
    p = Path(spec)
    try:
        is_file = p.is_file()
    except (OSError, ValueError):  # a name too long for the file system
        is_file = False
    if not is_file:
        raise InputError(f"no such data file: {shown(spec)}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"--data {shown(spec)} is not UTF-8 text (byte {e.start + 1} is not UTF-8): give a .jsonl, "
                         ".json or .txt file of sentences") from None
    except OSError as e:
        raise InputError(f"cannot read --data {shown(spec)}: {e.strerror or e}") from None
    spec = shown(spec)
    try:
        if p.suffix == ".jsonl":
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif p.suffix == ".json":
            items = json.loads(text)
            if not isinstance(items, list):
                raise InputError(f"{spec}: a .json data file must hold a list of items")
        else:
            items = [line.strip() for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise InputError(f"{spec} is not valid JSON: {e}") from None
    if not items:
        raise InputError(f"{spec} holds no sentences")
    items = items if n is None else items[:n]
    if not any(_is_sentence(x) for x in items):
        raise InputError(f"--data {spec} holds no sentences: each item must be a sentence (a string) or an object "
                         f"with a \"text\" string, and item 1 is {_kind(items[0])}")
    return items


def _is_sentence(x) -> bool:
    return isinstance(x, str) and bool(x.strip()) or isinstance(x, dict) and isinstance(x.get("text"), str)


def _kind(x) -> str:
    if isinstance(x, dict):
        return "an object without a \"text\" string"
    return {bool: "true/false", int: "a number", float: "a number", list: "a list", str: "an empty string",
            type(None): "null"}.get(type(x), type(x).__name__)


def _at_least(flag: str, value: Optional[int], low: int = 1) -> None:
    _in_range(flag, value, low)


def _threads(n: Optional[int]) -> None:
    """--threads, checked (1 .. cores x 4), then given to torch."""
    _in_range("--threads", n, 1, max_threads(), THREADS_WHY.format(cores=os.cpu_count() or 1))
    if n:
        import torch

        torch.set_num_threads(n)


def _quiet_loading() -> None:
    """No "Loading weights" progress bar from transformers on the command line (downloads keep theirs)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


OUR_JSON = b'{"format": "attnviz-'  # how every JSON file attnviz writes begins (export.FORMAT first)


def is_ours(path: Path) -> bool:
    """Whether an existing file is one attnviz wrote: an analysis as JSON (it begins with our format's
    name) or NPZ (a zip whose meta names our format). Reads a few bytes, never the whole file."""
    import zipfile

    try:
        with open(path, "rb") as f:
            head = f.read(len(OUR_JSON))
        if head == OUR_JSON:
            return True
        if head[:2] != b"PK" or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as z:
            meta = z.open("meta.npy").read(4096)
        return b"attnviz-analysis/" in meta or "attnviz-analysis/".encode("utf-32-le") in meta
    except (OSError, KeyError, zipfile.BadZipFile, RuntimeError, ValueError):
        return False


def check_out_file(out: str, flag: str = "--out", force: bool = False) -> Path:
    """--out FILE -> Path, refused with one line (before any work) when it cannot be written: empty,
    a directory, under a file, in a folder this process cannot create files in, or an existing file
    that attnviz did not write (unless force)."""
    import tempfile

    from .errors import InputError, shown

    if not out or not out.strip():
        raise InputError(f"{flag} is empty: give a file name such as analysis.json")
    if not out.isprintable() or len(out) > 4096:
        raise InputError(f"{flag} '{shown(out)}' is not a usable file name (it holds control characters or bytes that "
                         "are not UTF-8, or is longer than 4096 characters)")
    p = Path(out).expanduser()
    try:
        p.exists()
    except OSError as e:  # a name too long for the file system
        raise InputError(f"{flag} '{shown(out)}' cannot be used: {e.strerror or e}") from None
    if p.is_dir():
        raise InputError(f"{flag} '{out}' is a directory: give a file name, such as {p / 'analysis.json'}")
    if out.endswith(("/", os.sep)):
        raise InputError(f"{flag} '{out}' names a folder: give a file name")
    anc = p.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise InputError(f"{flag} '{out}' is under '{anc}', which is a file, not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{flag} '{out}' exists and cannot be written")
    if p.exists() and not force and not is_ours(p):
        raise InputError(f"{flag} '{out}' exists and is not a file attnviz wrote: give another name, or --force "
                         "to replace it")
    try:  # the real test: can a file be created there (also catches read-only file systems, even as root)
        with tempfile.NamedTemporaryFile(dir=anc, prefix=".attnviz-write-check-"):
            pass
    except OSError as e:
        raise InputError(f"{flag} '{out}' cannot be written: no new files can be created in '{anc}' "
                         f"({e.strerror or e})") from None
    return p


def cmd_analyze(args) -> int:
    import attnviz
    from . import export
    from .resources import write_whole

    _threads(args.threads)
    _in_range("--ig-steps", args.ig_steps, 1, MAX_IG_STEPS, IG_STEPS_WHY)
    _tolerance("--ig-tol", args.ig_tol)
    _in_range("--max-tokens", args.max_tokens, 1, MAX_TOKENS, MAX_TOKENS_WHY)
    _in_range("--target", args.target, 0, args.max_tokens - 1, "a token position, counted from 0, below --max-tokens")
    out = check_out_file(args.out, force=args.force)
    if out.suffix == ".npz" and args.faithfulness:
        raise attnviz.InputError("--faithfulness results are written as JSON: give an --out FILE.json")
    try:  # bytes that are not UTF-8 reach us as lone surrogates (surrogateescape): say so before the load
        args.text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise attnviz.InputError(f"--text is not valid UTF-8 (character {e.start + 1} is an undecodable byte); "
                                 "check the terminal's encoding or pass the text as UTF-8") from None
    options = parse_options(args.option)  # a wrong --option is said before the model loads
    _quiet_loading()
    lm = attnviz.load_model(args.model, device=args.device)  # a missing GPU is said before the load
    methods = _csv(args.methods)
    if args.faithfulness:
        from .faithfulness import available_methods, score_sentence

        methods, _ = available_methods(lm, methods)
    a = attnviz.analyze(lm, args.text, methods=methods, target=args.target, max_tokens=args.max_tokens,
                        options=options)
    out.parent.mkdir(parents=True, exist_ok=True)
    bad, count = export.nonfinite(a)
    if out.suffix == ".npz":
        write_whole(out, export.to_npz(a))
        kept = "kept as they are and listed in its 'nonfinite' array"
    else:
        d = export.to_dict(a)
        if not args.heads:
            for m in d["maps"].values():
                m["heads"] = None
        if args.faithfulness:
            r = score_sentence(lm, a.text, methods=list(a.maps), baselines=_csv(args.baselines),
                               contrast=_csv(args.contrast), ig_steps=args.ig_steps, analysis=a, ig_tol=args.ig_tol,
                               max_tokens=args.max_tokens)
            d["faithfulness"], fbad = export.finite_json(r.to_dict(), "faithfulness")
            if fbad:
                bad, count = bad + fbad, count + len(fbad)
                d["nonfinite"] = d["nonfinite"] + fbad
                d["notes"].append(export.nonfinite_note(fbad, len(fbad)))
        write_whole(out, json.dumps(d, ensure_ascii=False, allow_nan=False))
        kept = "written as null and listed under 'nonfinite'"
    from .text import readable_token  # 'Ġare' (byte-level BPE) printed as a reader writes it: 'are'

    pred = ", ".join(f"'{readable_token(t)}' {p:.3f}" for t, p in a.prediction[:3])
    print(f"{len(a.tokens)} tokens, target {a.target} ('{readable_token(a.tokens[a.target])}')"
          + (f", prediction: {pred}" if pred else "") + f" -> {out}")
    for note in list(a.notes) + (list(r.notes) if args.faithfulness else []):
        print(f"note: {note}")
    if bad:
        why = next((n for n in a.notes if n.startswith("values are not finite")), "")
        why = why.split(": ", 1)[1] if ": " in why else "see the notes"
        print(f"warning: {count} values are not finite (NaN or inf), {kept} in {out}: {why}", file=sys.stderr)
    return 0


def cmd_study(args) -> int:
    import attnviz
    from .errors import InputError
    from .faithfulness import study

    if args.mediation:  # the corpus mediation study (attnviz.mediation.study)
        from .mediation.study import run_cli

        _threads(args.threads)
        _quiet_loading()
        return run_cli(args, read_data(args.data, None))

    _threads(args.threads)
    for flag, v in (("--n", args.n), ("--workers", args.workers), ("--batch-size", args.batch_size)):
        _at_least(flag, v)
    _in_range("--ig-steps", args.ig_steps, 1, MAX_IG_STEPS, IG_STEPS_WHY)
    _tolerance("--ig-tol", args.ig_tol)
    _in_range("--max-tokens", args.max_tokens, 1, MAX_TOKENS, MAX_TOKENS_WHY)
    _in_range("--gpus-per-worker", args.gpus_per_worker, 0, 1024, "a share of a GPU, or whole GPUs")
    if args.engine != "ray":
        given = [f for f, v in (("--address", args.address), ("--workers", args.workers),
                                ("--gpus-per-worker", args.gpus_per_worker), ("--batch-size", args.batch_size))
                 if v is not None]
        if given:
            raise InputError(f"{', '.join(given)} only apply with --engine ray")
    if not args.out or not args.out.strip():
        raise InputError("--out is empty: give a folder for the study (it is created if missing)")
    check_study_folder(args.out, args.force)
    if args.address:  # an unreachable cluster is said within seconds, before the model loads
        from .faithfulness.ray_engine import check_address

        check_address(args.address)
    if args.engine == "ray" and args.device != "cpu":
        raise InputError(f"--device {args.device} applies to --engine local; with --engine ray give --gpus-per-worker "
                         "(each actor then runs on its GPU)")
    items = read_data(args.data, args.n)
    _quiet_loading()
    lm = attnviz.load_model(args.model, device=args.device)  # a missing GPU: one line, before the study starts
    bar = None

    def progress(done, total):
        nonlocal bar
        if args.quiet:
            return
        if bar is None:  # started at what an earlier run finished, so the rate and ETA count new work only
            from tqdm import tqdm

            bar = tqdm(total=total, initial=done, unit="sentence", file=sys.stderr, smoothing=0.1)
        else:
            bar.update(done - bar.n)

    try:
        res = study(lm, items, methods=_csv(args.methods), baselines=_csv(args.baselines), ig_steps=args.ig_steps,
                    ig_tol=args.ig_tol,
                    include_target=args.include_target, use_contrast=not args.no_contrast, out_dir=args.out,
                    resume=not args.fresh, max_tokens=args.max_tokens, progress=progress, engine=args.engine,
                    address=args.address, workers=args.workers, gpus_per_worker=args.gpus_per_worker or 0,
                    threads=args.threads, batch_size=args.batch_size)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print(f"\ninterrupted: the finished sentences are saved in {args.out}; run the same command again "
              "to resume", file=sys.stderr)
        return 130
    finally:
        if bar is not None:
            bar.close()
    from .figures.faithfulness import study_figure  # plotly: loaded by the commands that draw only

    paths = res.write(args.out, png=args.png, figure=study_figure(res))
    print(f"{res.n_sentences} sentences ({res.resumed} from an earlier run, {len(res.skipped)} skipped) "
          f"in {res.seconds:.1f} s; model {lm.spec}")
    for i, why in res.skipped[:10]:
        print(f"skipped item {i}: {why}")
    if len(res.skipped) > 10:
        print(f"... and {len(res.skipped) - 10} more skipped items (listed in summary.json)")
    acc = res.accuracy()
    if acc is not None:
        print(f"model accuracy on these items (p(answer) > p(wrong)): {acc:.3f}")
    for m, why in res.left_out.items():
        print(f"left out {m}: {why}")
    for note in res.notes:
        print(f"note: {note}")
    for line in res.check_lines():
        print(f"baseline check: {line}")
    if res.multi_token_line():
        print(res.multi_token_line())
    for b in [b for b in ("blank_out", "grad_norm") if b in res.baselines] or res.baselines[:1]:
        print(f"\nmean Spearman (± std) vs {b}:\n{res.markdown(b)}")
    print("\nwritten: " + ", ".join(paths.values()))
    return 0


STUDY_FILES = ("config.json", "records.jsonl", "data.sha1", "summary.csv", "summary.json", "summary.html",
               "summary.png", "ranking.csv", "ranking.md")


def check_study_folder(out: str, force: bool = False) -> None:
    """--out DIR of a study, refused with one line (before any work) when it is a file, or holds files of the
    names a study writes while it is not a study's folder (no study's config.json), unless force."""
    from .errors import InputError, shown

    d = Path(out).expanduser()
    try:
        exists, is_dir = d.exists(), d.is_dir()
    except OSError as e:  # a name too long for the file system
        raise InputError(f"--out '{shown(out)}' cannot be used: {e.strerror or e}") from None
    if exists and not is_dir:
        raise InputError(f"--out '{shown(out)}' is a file: give a folder for the study (it is created if missing)")
    if not exists or force:
        return
    theirs = [n for n in STUDY_FILES if (d / n).exists()]
    if not theirs:
        return
    try:
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
        ours = isinstance(cfg, dict) and isinstance(cfg.get("methods"), list) and isinstance(cfg.get("baselines"), list)
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise InputError(f"--out '{shown(out)}' holds {', '.join(theirs[:4])} but no study of attnviz (no study's "
                         "config.json): give another folder, or --force to write over them")


def cmd_evaluate(args) -> int:
    from .evaluate import main as evaluate_main

    return evaluate_main(list(args.rest))


def cmd_app(args) -> int:
    """Start Streamlit on the packaged app (attnviz/app/main.py), headless, on ADDRESS:PORT; the options
    that follow go to `streamlit run` (e.g. --server.maxUploadSize 50). On POSIX the command becomes the
    Streamlit server (exec: one process, signals go straight to it); elsewhere it waits for it."""
    import importlib.util

    _in_range("--port", args.port, 1, 65535, "a TCP port")
    served = serve_settings(args)
    if importlib.util.find_spec("streamlit") is None:
        print("error: the app needs streamlit, which is not installed in this Python "
              f"({sys.executable}): pip install streamlit", file=sys.stderr)
        return 2
    from .app import MAIN

    cmd = [sys.executable, "-m", "streamlit", "run", str(MAIN), "--server.address", args.address or "127.0.0.1",
           "--server.port", str(args.port), "--server.headless", "true"]
    if not any(a.split("=")[0] == "--server.fileWatcherType" for a in args.streamlit_args):
        # the installed app's files do not change while it runs; Streamlit's watcher would walk every
        # imported module (torch, transformers) for each new session: 4.4 s of server CPU a tab against 0.6 s
        cmd += ["--server.fileWatcherType", "none"]
    if served is not None:
        from .models.allow import ENV

        os.environ[ENV] = json.dumps(served)  # the app's loader reads it (attnviz.models.allow)
        cmd += [x for k, v in zip(SERVE_OPTIONS[::2], SERVE_OPTIONS[1::2]) if k not in cmd for x in (k, v)]
        print(f"serving a class at http://{args.address}:{args.port}: the built-in and packaged models"
              + (f", and {', '.join(served)}" if served else "") + "; nothing typed into the URL is loaded")
    cmd += list(args.streamlit_args)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(sys.executable, cmd)
    import subprocess

    return subprocess.call(cmd)


# Streamlit settings of a served app: no developer menu, no file watching or rerun on save, no usage statistics
SERVE_OPTIONS = ("--client.toolbarMode", "viewer", "--server.fileWatcherType", "none", "--server.runOnSave", "false",
                 "--browser.gatherUsageStats", "false", "--server.enableXsrfProtection", "true")


def serve_settings(args) -> Optional[list]:
    """`attnviz app --serve`: the specs the class may load besides the built-in and packaged models (local
    paths as their absolute real paths, each checked now), or None without --serve. One line for every
    refusal: --serve without --address, --allow-model without --serve, a model that does not resolve."""
    from .errors import InputError, ModelLoadError, shown

    if not args.serve:
        if args.allow_model:
            raise InputError("--allow-model applies with --serve (the app serves any model otherwise)")
        return None
    if not args.address:
        raise InputError("--serve needs --address: this machine's address on the class network, or 0.0.0.0 for every "
                         "interface (127.0.0.1 serves this machine only)")
    from .models.load import resolve

    out = []
    for spec in args.allow_model:
        spec = spec.strip()
        try:
            kind, source = resolve(spec)
        except ModelLoadError as e:
            raise InputError(f"--allow-model {shown(spec)}: {e}") from None
        if kind in ("folder", "gguf"):
            spec = os.path.realpath(os.path.expanduser(spec))
        if spec not in out:
            out.append(spec)
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="attnviz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="maps (and optionally faithfulness) for one text, written as JSON/NPZ")
    a.add_argument("--model", required=True, help="builtin:NAME | pkg:minilm | model folder | hub id")
    a.add_argument("--text", required=True)
    a.add_argument("--out", required=True, help="FILE.json or FILE.npz")
    a.add_argument("--force", action="store_true", help="replace --out even when it is not a file attnviz wrote")
    a.add_argument("--methods", help="comma-separated method names (default all; `attnviz methods` lists them)")
    a.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE",
                   help="a method option, e.g. steps=16 or flow.workers=2 (repeatable; `attnviz methods` lists them)")
    a.add_argument("--target", type=int, help="target position (default: [MASK], else [CLS] / the last token)")
    a.add_argument("--heads", action="store_true", help="include per-head maps in the JSON")
    a.add_argument("--faithfulness", action="store_true", help="add importance baselines and correlations")
    a.add_argument("--baselines", help="comma-separated importance baselines (default all)")
    a.add_argument("--contrast", help="correct,wrong (e.g. is,are): target p(correct) - p(wrong)")
    a.add_argument("--ig-steps", type=int, default=32, help=f"integrated-gradient steps (the first try; 1 to {MAX_IG_STEPS})")
    a.add_argument("--ig-tol", type=float, default=0.01,
                   help="double the steps (up to 256) until the relative completeness error is at most this; 0: fixed steps")
    a.add_argument("--max-tokens", type=int, default=128, help=f"the longest text, in tokens (1 to {MAX_TOKENS})")
    a.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's; at most 4 per core)")
    a.add_argument("--device", default="cpu",
                   help="where the model runs: cpu (default) | cuda | cuda:N; the maps come back to the CPU")
    a.set_defaults(func=cmd_analyze)

    s = sub.add_parser("study", help="corpus faithfulness study (resumable)")
    s.add_argument("--model", required=True)
    s.add_argument("--data", required=True, help="FILE (.jsonl/.json/.txt) or builtin:agreement | builtin:pronoun")
    s.add_argument("--out", required=True, help="output folder (records.jsonl, summary.csv/json/html)")
    s.add_argument("--force", action="store_true",
                   help="write into --out even when it holds files of a study's names that no study wrote")
    s.add_argument("--n", type=int, default=None, help="first N items only")
    s.add_argument("--methods", help="comma-separated (default: the core methods; `attnviz methods` lists them)")
    s.add_argument("--baselines", help="comma-separated (default all; `attnviz methods` lists them)")
    s.add_argument("--ig-steps", type=int, default=32, help=f"integrated-gradient steps (the first try; 1 to {MAX_IG_STEPS})")
    s.add_argument("--ig-tol", type=float, default=0.01,
                   help="double the steps (up to 256) until the relative completeness error is at most this; 0: fixed steps")
    s.add_argument("--include-target", action="store_true", help="also attribute the target position itself")
    s.add_argument("--no-contrast", action="store_true", help="target p(prediction) even when items name answer/wrong")
    s.add_argument("--fresh", action="store_true", help="discard earlier results in --out instead of resuming")
    s.add_argument("--png", action="store_true", help="also write summary.png (needs kaleido + chromium)")
    s.add_argument("--max-tokens", type=int, default=128, help=f"the longest text, in tokens (1 to {MAX_TOKENS})")
    s.add_argument("--threads", type=int, default=None, help="torch threads (per worker with --engine ray; default 1 there)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--device", default="cpu",
                   help="with --engine local: where the model runs, cpu (default) | cuda | cuda:N")
    s.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this process (default); ray: actors on a Ray cluster (pip install 'attnviz[ray]')")
    s.add_argument("--address", default=None,
                   help="with --engine ray: HOST:PORT of a running cluster's head (default: start a local one)")
    s.add_argument("--workers", type=int, default=None,
                   help="with --engine ray: actors, each loading the model once (default: the cluster's CPUs / threads)")
    s.add_argument("--gpus-per-worker", type=float, default=None, help="with --engine ray: GPUs per actor (default 0)")
    s.add_argument("--batch-size", type=int, default=None, help="with --engine ray: sentences (pairs with --mediation) per task (default: automatic)")
    s.add_argument("--mediation", action="store_true",
                   help="causal mediation instead: minimal pairs from the data (subject's number / antecedent's "
                        "gender changed), NIE per head, its concentration, head scores against it (--engine local or ray)")
    s.add_argument("--kinds", default=None, help="with --mediation: attention,head_output (default both)")
    s.set_defaults(func=cmd_study)

    m = sub.add_parser("methods", help="list the methods and importance baselines (names, units, options)")
    m.set_defaults(func=cmd_methods)

    # every argument after 'evaluate' (options included) goes to attnviz.evaluate's own parser
    e = sub.add_parser("evaluate", help="accuracy of the built-in models, or of any masked or causal LM with --model SPEC, "
                       "on --set real|grammar|handwritten|FILE or --linzen FOLDER (attnviz evaluate -h)",
                       prefix_chars="+", add_help=False)
    e.add_argument("rest", nargs=argparse.REMAINDER)
    e.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("app", help="start the app (Streamlit, headless) at http://ADDRESS:PORT; "
                       "other options go to `streamlit run`")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501; 1 to 65535)")
    p.add_argument("--address", default=None,
                   help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--serve", action="store_true",
                   help="serve a class: needs --address; the app offers only the built-in and packaged models and "
                        "those named with --allow-model, and loads nothing typed into its URL or Model page")
    p.add_argument("--allow-model", action="append", default=[], metavar="SPEC",
                   help="with --serve: a model folder, .gguf file or hub id the class may use (repeatable)")
    p.set_defaults(func=cmd_app, streamlit_args=[])
    return ap


def _interrupt_in_finaliser(unraisable) -> None:
    """A Ctrl-C that lands inside an object's __del__ (a library's finaliser during an import, say) cannot
    propagate: Python prints "Exception ignored in ... KeyboardInterrupt" and carries on as if nothing
    happened. Treat it as the interrupt it is: one quiet line and exit 130 (results already written stay)."""
    if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
        import os

        try:
            print("interrupted", file=sys.stderr, flush=True)
        finally:
            os._exit(130)
    sys.__unraisablehook__(unraisable)


def _quit_now(signum, frame) -> None:  # pragma: no cover - runs in a killed child process
    import os

    try:
        print("interrupted", file=sys.stderr, flush=True)
    finally:
        os._exit(130)


def _import_quietly() -> None:
    """Import the heavy libraries while a Ctrl-C ends the process at once: an interrupt inside a C extension's
    import comes out as an ImportError with a traceback (numpy turns it into "PyCapsule_Import could not import
    module datetime"), which no except-clause could tell from a broken install."""
    import signal

    try:
        old = signal.signal(signal.SIGINT, _quit_now)
    except ValueError:  # not the main thread: nothing to guard
        return
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: F401  (the lazy module's real imports)
    except ImportError:
        pass  # the command reports what is missing in its own words
    finally:
        signal.signal(signal.SIGINT, old)


def main(argv: Optional[Sequence[str]] = None) -> int:
    hook, sys.unraisablehook = sys.unraisablehook, _interrupt_in_finaliser
    try:
        return _main(argv)
    finally:
        sys.unraisablehook = hook


def _main(argv: Optional[Sequence[str]]) -> int:
    from .errors import AttnvizError

    try:
        ap = build_parser()
        args, extra = ap.parse_known_args(argv)
        if args.command == "app":  # what attnviz does not know goes to `streamlit run`
            args.streamlit_args = extra
        else:
            if extra:
                ap.error(f"unrecognized arguments: {' '.join(extra)}")
            _import_quietly()
        return args.func(args)
    except (AttnvizError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # unknown method / baseline names
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a write that fails after the checks (disk full, folder removed ...)
        print(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C anywhere: no traceback (the study says more itself)
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while exiting stays quiet too
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
