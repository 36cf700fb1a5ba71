"""Built-in models: a synthetic English grammar, training and evaluation scripts, test sets.

`load_eval_set(task, n=None)` reads the held-out test items shipped in assets/data/.
"""

from __future__ import annotations

from .common import DATA_DIR, read_jsonl

__all__ = ["load_eval_set"]


def load_eval_set(task: str, n: int | None = None) -> list[dict]:
    """The first n (default all) held-out items of `task` ("agreement" | "pronoun") from
    assets/data/TASK_test.jsonl; each a dict with text (one "[MASK]"), answer, wrong, task,
    construction, n_attractors, n_intervening."""
    if task not in ("agreement", "pronoun"):
        raise ValueError(f"task must be 'agreement' or 'pronoun', got {task!r}")
    items = read_jsonl(DATA_DIR / f"{task}_test.jsonl")
    return items if n is None else items[:n]
