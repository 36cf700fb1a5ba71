"""Write the held-out test sets of the built-in grammar into the packaged sets (attnviz/data/sets/).

    python -m training.make_data

agreement_test.jsonl (2000 items) and pronoun_test.jsonl (1000 items), from
`grammar.generate(task, n, seed=0, split="test")`: unique sentences whose (subject, attractor) keys
never occur in training data, attractor counts balanced (agreement 0-4, pronoun 0-3).
"""

from __future__ import annotations

import argparse

from . import grammar
from .common import DATA_DIR, write_jsonl

SIZES = {"agreement": 2000, "pronoun": 1000}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for task, n in SIZES.items():
        items = grammar.generate(task, n, seed=args.seed, split="test")
        path = DATA_DIR / f"{task}_test.jsonl"
        write_jsonl(path, items)
        print(f"wrote {len(items)} items to {path}")


if __name__ == "__main__":
    main()
