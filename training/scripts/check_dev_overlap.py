"""How much a hand-written dev set overlaps the real test sets.

    python training/scripts/check_dev_overlap.py [DEV.jsonl ...]   # default: both real_dev_*.jsonl

For every dev item: the largest share of its words (lowercased, punctuation and [MASK] dropped) that
one test item (real_agreement.jsonl, real_pronoun.jsonl or real_pronoun2.jsonl) also has. Prints, per dev file, how many
items share more than half of their words with some test item and the line numbers of those dev
items; never a test item (the test sets are not to be read item by item).
"""
import json
import re
import sys
from pathlib import Path

from attnviz.resources import sets_dir

DATA = sets_dir()


def words(text: str) -> set:
    return {w for w in text.lower().split() if re.search(r"[a-z0-9]", w) and w != "[mask]"}


def main(argv=None) -> int:
    files = [Path(f) for f in (argv or [])] or [DATA / "real_dev_agreement.jsonl", DATA / "real_dev_pronoun.jsonl"]
    tests = [words(json.loads(ln)["text"]) for name in ("real_agreement.jsonl", "real_pronoun.jsonl", "real_pronoun2.jsonl")
             for ln in (DATA / name).read_text(encoding="utf-8").splitlines() if ln.strip()]
    for f in files:
        items = [json.loads(ln) for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        over = [n for n, it in enumerate(items, 1)
                if max(len(words(it["text"]) & t) / len(words(it["text"])) for t in tests) > 0.5]
        print(f"{f.name}: {len(items)} items, {len(over)} share more than half their words with a test item"
              + (f" (dev lines {over})" if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
