"""Average the weights of model folders of one architecture and tokenizer ("model soup", Wortsman et
al. 2022): every tensor of model.safetensors, uniform weights, in float32.

    python training/scripts/average_weights.py --out FOLDER RUN1 RUN2 [RUN3 ...]

OUT gets the averaged model.safetensors, the first run's config.json and tokenizer files, and a
soup.json naming the runs (with each run's train_log.json command when present).
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

COPY = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def average(runs: list[Path]) -> dict:
    states = [load_file(str(Path(r) / "model.safetensors")) for r in runs]
    keys = list(states[0])
    if any(list(s) != keys or any(s[k].shape != states[0][k].shape for k in keys) for s in states):
        raise SystemExit("the runs' tensors differ in names or shapes")
    return {k: (sum(s[k].float() for s in states) / len(states)).to(states[0][k].dtype).contiguous() for k in keys}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args(argv)
    runs = [Path(r) for r in args.runs]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(average(runs), str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in COPY:
        if (runs[0] / f).exists():
            shutil.copy(runs[0] / f, out / f)
    cmds = []
    for r in runs:
        log = r / "train_log.json"
        cmds.append({"run": str(r), "command": json.loads(log.read_text())["command"] if log.exists() else None})
    (out / "soup.json").write_text(json.dumps({"average_of": cmds}, indent=1) + "\n")
    print(f"averaged {len(runs)} runs -> {out}")


if __name__ == "__main__":
    main()
