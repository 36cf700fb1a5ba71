"""The `attnviz` command.

    attnviz analyze --model builtin:agreement --text "the keys to the cabinet [MASK] here ." --out a.json
    attnviz study --model builtin:agreement --data builtin:agreement --n 500 --out runs/agreement
    attnviz evaluate [ARGS]            # every built-in model's accuracy on the real sets (attnviz.evaluate)
    attnviz evaluate --model pkg:smollm2 --set real   # any masked or causal LM on the agreement/pronoun sets
    attnviz evaluate --model builtin:agreement --linzen FOLDER   # Linzen et al. (2016)'s agreement set
    attnviz app [--port 8501] [--address 127.0.0.1] [STREAMLIT OPTIONS]   # the app, in a browser

analyze writes the maps (JSON, or NPZ when FILE ends in .npz) and, with --faithfulness, the
importance baselines and correlations. study runs the corpus faithfulness study: it is resumable
(Ctrl-C or a crash loses no finished sentence; run the same command again), and writes
summary.csv, summary.json and summary.html (mean ± std per method × layer × baseline) into DIR.
Errors are one line on stderr (exit status 2); an interrupted study exits with 130.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence


def _csv(s: Optional[str]):
    return None if s is None else [x.strip() for x in s.split(",") if x.strip()]


def parse_options(items: Optional[Sequence[str]]) -> dict:
    """["steps=16", "atb_ff.rule=midpoint"] -> analyze's options ({option: value} for every method that
    declares it, {method: {option: value}} with METHOD.OPTION); values take the type of the default."""
    from .methods import METHODS

    out: dict = {}
    for item in items or []:
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"--option {item!r}: write NAME=VALUE (or METHOD.NAME=VALUE)")
        method, _, name = key.strip().rpartition(".")
        infos = [METHODS[method]] if method in METHODS else list(METHODS.values()) if not method else []
        if not infos:
            raise ValueError(f"--option {item!r}: unknown method '{method}'")
        opts = [o for i in infos for o in i.options if o.name == name]
        if not opts:
            raise ValueError(f"--option {item!r}: no method declares an option '{name}' (attnviz methods lists them)")
        o = opts[0]
        value = raw.strip()
        if o.choices and value not in o.choices:
            raise ValueError(f"--option {item!r}: choose one of {', '.join(map(str, o.choices))}")
        if isinstance(o.default, bool):
            value = value.lower() in ("1", "true", "yes")
        elif isinstance(o.default, int) or (o.default is None and value.isdigit()):
            value = int(value)
        elif isinstance(o.default, float):
            value = float(value)
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
    from .errors import InputError

    if spec.startswith("builtin:"):
        from .datasets import load_eval_set

        try:
            return load_eval_set(spec.split(":", 1)[1], n)
        except (ValueError, FileNotFoundError) as e:
            raise InputError(f"cannot read the built-in evaluation set '{spec}': {e}") from None
    p = Path(spec)
    if not p.is_file():
        raise InputError(f"no such data file: {spec}")
    text = p.read_text(encoding="utf-8")
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
    return items if n is None else items[:n]


def _at_least(flag: str, value: Optional[int], low: int = 1) -> None:
    from .errors import InputError

    if value is not None and value < low:
        raise InputError(f"{flag} must be at least {low}, got {value}")


def _threads(n: Optional[int]) -> None:
    _at_least("--threads", n)
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


def check_out_file(out: str, flag: str = "--out") -> Path:
    """--out FILE -> Path, refused with one line (before any work) when it cannot be written: empty,
    a directory, under a file, or in a folder this process cannot create files in."""
    import os
    import tempfile

    from .errors import InputError

    if not out or not out.strip():
        raise InputError(f"{flag} is empty: give a file name such as analysis.json")
    p = Path(out).expanduser()
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

    _threads(args.threads)
    _at_least("--ig-steps", args.ig_steps)
    _at_least("--max-tokens", args.max_tokens)
    out = check_out_file(args.out)
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
        out.write_bytes(export.to_npz(a))
        kept = "kept as they are and listed in its 'nonfinite' array"
    else:
        d = export.to_dict(a)
        if not args.heads:
            for m in d["maps"].values():
                m["heads"] = None
        if args.faithfulness:
            r = score_sentence(lm, a.text, methods=list(a.maps), baselines=_csv(args.baselines),
                               contrast=_csv(args.contrast), ig_steps=args.ig_steps, analysis=a, ig_tol=args.ig_tol or None,
                               max_tokens=args.max_tokens)
            d["faithfulness"], fbad = export.finite_json(r.to_dict(), "faithfulness")
            if fbad:
                bad, count = bad + fbad, count + len(fbad)
                d["nonfinite"] = d["nonfinite"] + fbad
                d["notes"].append(export.nonfinite_note(fbad, len(fbad)))
        out.write_text(json.dumps(d, ensure_ascii=False, allow_nan=False), encoding="utf-8")
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

    _threads(args.threads)
    for flag, v in (("--n", args.n), ("--ig-steps", args.ig_steps), ("--max-tokens", args.max_tokens),
                    ("--workers", args.workers), ("--batch-size", args.batch_size)):
        _at_least(flag, v)
    if args.gpus_per_worker is not None and not args.gpus_per_worker >= 0:
        raise InputError(f"--gpus-per-worker must be at least 0, got {args.gpus_per_worker}")
    if args.engine != "ray":
        given = [f for f, v in (("--address", args.address), ("--workers", args.workers),
                                ("--gpus-per-worker", args.gpus_per_worker), ("--batch-size", args.batch_size))
                 if v is not None]
        if given:
            raise InputError(f"{', '.join(given)} only apply with --engine ray")
    if not args.out or not args.out.strip():
        raise InputError("--out is empty: give a folder for the study (it is created if missing)")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(f"--out '{args.out}' is a file: give a folder for the study (it is created if missing)")
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
                    ig_tol=args.ig_tol or None,
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
    for b in [b for b in ("blank_out", "grad_norm") if b in res.baselines] or res.baselines[:1]:
        print(f"\nmean Spearman (± std) vs {b}:\n{res.markdown(b)}")
    print("\nwritten: " + ", ".join(paths.values()))
    return 0


def cmd_evaluate(args) -> int:
    from .evaluate import main as evaluate_main

    return evaluate_main(list(args.rest))


def cmd_app(args) -> int:
    """Start Streamlit on the packaged app (attnviz/app/main.py), headless, on ADDRESS:PORT; the options
    that follow go to `streamlit run` (e.g. --server.maxUploadSize 50). On POSIX the command becomes the
    Streamlit server (exec: one process, signals go straight to it); elsewhere it waits for it."""
    import importlib.util
    import os

    if importlib.util.find_spec("streamlit") is None:
        print("error: the app needs streamlit, which is not installed in this Python "
              f"({sys.executable}): pip install streamlit", file=sys.stderr)
        return 2
    from .app import MAIN

    cmd = [sys.executable, "-m", "streamlit", "run", str(MAIN), "--server.address", args.address,
           "--server.port", str(args.port), "--server.headless", "true", *args.streamlit_args]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(sys.executable, cmd)
    import subprocess

    return subprocess.call(cmd)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="attnviz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="maps (and optionally faithfulness) for one text, written as JSON/NPZ")
    a.add_argument("--model", required=True, help="builtin:NAME | pkg:minilm | model folder | hub id")
    a.add_argument("--text", required=True)
    a.add_argument("--out", required=True, help="FILE.json or FILE.npz")
    a.add_argument("--methods", help="comma-separated method names (default all; `attnviz methods` lists them)")
    a.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE",
                   help="a method option, e.g. steps=16 or flow.workers=2 (repeatable; `attnviz methods` lists them)")
    a.add_argument("--target", type=int, help="target position (default: [MASK], else [CLS] / the last token)")
    a.add_argument("--heads", action="store_true", help="include per-head maps in the JSON")
    a.add_argument("--faithfulness", action="store_true", help="add importance baselines and correlations")
    a.add_argument("--baselines", help="comma-separated importance baselines (default all)")
    a.add_argument("--contrast", help="correct,wrong (e.g. is,are): target p(correct) - p(wrong)")
    a.add_argument("--ig-steps", type=int, default=32, help="integrated-gradient steps (the first try)")
    a.add_argument("--ig-tol", type=float, default=0.01,
                   help="double the steps (up to 256) until the relative completeness error is at most this; 0: fixed steps")
    a.add_argument("--max-tokens", type=int, default=128)
    a.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    a.add_argument("--device", default="cpu",
                   help="where the model runs: cpu (default) | cuda | cuda:N; the maps come back to the CPU")
    a.set_defaults(func=cmd_analyze)

    s = sub.add_parser("study", help="corpus faithfulness study (resumable)")
    s.add_argument("--model", required=True)
    s.add_argument("--data", required=True, help="FILE (.jsonl/.json/.txt) or builtin:agreement | builtin:pronoun")
    s.add_argument("--out", required=True, help="output folder (records.jsonl, summary.csv/json/html)")
    s.add_argument("--n", type=int, default=None, help="first N items only")
    s.add_argument("--methods", help="comma-separated (default: the core methods; `attnviz methods` lists them)")
    s.add_argument("--baselines", help="comma-separated (default all; `attnviz methods` lists them)")
    s.add_argument("--ig-steps", type=int, default=32, help="integrated-gradient steps (the first try)")
    s.add_argument("--ig-tol", type=float, default=0.01,
                   help="double the steps (up to 256) until the relative completeness error is at most this; 0: fixed steps")
    s.add_argument("--include-target", action="store_true", help="also attribute the target position itself")
    s.add_argument("--no-contrast", action="store_true", help="target p(prediction) even when items name answer/wrong")
    s.add_argument("--fresh", action="store_true", help="discard earlier results in --out instead of resuming")
    s.add_argument("--png", action="store_true", help="also write summary.png (needs kaleido + chromium)")
    s.add_argument("--max-tokens", type=int, default=128)
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
    s.add_argument("--batch-size", type=int, default=None, help="with --engine ray: sentences per task (default: automatic)")
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
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for every interface)")
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
    except AttnvizError as e:
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
