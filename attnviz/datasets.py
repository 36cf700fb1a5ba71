"""The evaluation sets that ship with attnviz (files under attnviz.resources.sets_dir()).

    load_eval_set("agreement", 500)   # the first 500 held-out items of the built-in grammar
    set_files("real")                 # the files of a named set (SETS), or [Path] of a .jsonl file
    read_jsonl(path)                  # one item (a dict) per non-empty line

Every item is a dict with "text" (one "[MASK]"), "answer", "wrong" and, in most sets, "task"
("agreement" | "pronoun"), "construction" and "n_attractors".

Named sets (SETS):
- real: hand-written sentences in the style of encyclopedia and news prose, not produced by the
  built-in grammar (real_agreement, real_agreement2, real_pronoun, real_pronoun2); written for this
  project, not a public benchmark. The sets numbered 2 were written after the built-in models were
  trained, by other hands, and never trained or tuned on.
- real-dev: a second hand-written set in the same style (real_dev_*), the one the built-in models'
  training recipe was chosen on.
- real-agreement, real-pronoun: the agreement or pronoun half of real.
- grammar (grammar-agreement, grammar-pronoun): held-out items of the built-in grammar
  (agreement_test: 2000 items, 0-4 attractors; pronoun_test: 1000 items, 0-3 attractors).
- handwritten: short sentences written by hand in the built-in grammar's vocabulary.
- all: real + grammar + handwritten.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InputError
from .resources import sets_dir

__all__ = ["SETS", "load_eval_set", "read_jsonl", "set_files", "set_path"]

SETS: dict[str, tuple[str, ...]] = {
    "real": ("real_agreement.jsonl", "real_agreement2.jsonl", "real_pronoun.jsonl", "real_pronoun2.jsonl"),
    "real-dev": ("real_dev_agreement.jsonl", "real_dev_agreement2.jsonl", "real_dev_pronoun.jsonl",
                 "real_dev_pronoun2.jsonl", "real_dev_pronoun3.jsonl"),
    "real-agreement": ("real_agreement.jsonl", "real_agreement2.jsonl"),
    "real-pronoun": ("real_pronoun.jsonl", "real_pronoun2.jsonl"),
    "grammar": ("agreement_test.jsonl", "pronoun_test.jsonl"),
    "grammar-agreement": ("agreement_test.jsonl",),
    "grammar-pronoun": ("pronoun_test.jsonl",),
    "handwritten": ("handwritten.jsonl",),
}
SETS["all"] = SETS["real"] + SETS["grammar"] + SETS["handwritten"]

TASKS = ("agreement", "pronoun")


def set_path(filename: str) -> Path:
    """The path of one file of the packaged sets (e.g. "real_agreement.jsonl")."""
    return sets_dir() / filename


def set_files(name: str) -> list[Path]:
    """A set name (see SETS) or a .jsonl path -> the files to evaluate."""
    if name in SETS:
        return [set_path(f) for f in SETS[name]]
    p = Path(name)
    if p.suffix == ".jsonl" and p.is_file():
        return [p]
    raise InputError(f"unknown set '{name}': use one of {', '.join(SETS)} or a .jsonl file")


def read_jsonl(path) -> list[dict]:
    """The items of a .jsonl file, one JSON object per non-empty line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_eval_set(task: str, n: int | None = None) -> list[dict]:
    """The first n (default all) held-out items of the built-in grammar's `task` ("agreement" |
    "pronoun"), from TASK_test.jsonl; each a dict with text (one "[MASK]"), answer, wrong, task,
    construction, n_attractors, n_intervening."""
    if task not in TASKS:
        raise ValueError(f"task must be 'agreement' or 'pronoun', got {task!r}")
    items = read_jsonl(set_path(f"{task}_test.jsonl"))
    return items if n is None else items[:n]
