"""Build training/data/first_names_extra.tsv: first names by sex that the census lists of
build_corpus.py do not have, for the real-style pronoun items (training/real_style.py,
`load_lists(..., extra_names=True)`).

    python training/scripts/build_extra_names.py [--out training/data/first_names_extra.tsv]

Sources, fetched with `pip download --no-deps` and unpacked, never installed, never imported at run
time by attnviz:
- PyPI `Faker` 40.63.0 (MIT licence, LICENSE.txt in the wheel): the `first_names_male` and
  `first_names_female` lists of every locale's person provider (faker/providers/person/*).
- PyPI `names` 0.3.0 (MIT licence): the 1990 US census first-name lists by sex (the same lists
  build_corpus.py uses), only to leave out what the generator already knows or what the census
  gives to both sexes.

A name is kept for sex S iff: accents removed (NFKD) it is 3+ letters a-z (names with letters that
do not reduce to a-z, such as ð, þ, ł, ø, or in other scripts, are left out); some locale lists it
for S and no locale lists it for the other sex; neither census first-name list has it (so it is new
and the census does not give it to the other sex); it is not one of the 3,000 census surnames (the
generator names distractors by surname alone) nor a WordNet noun of the corpus (training/corpus/
nouns.txt, when present), nor a word the corpus sentences (training/corpus/sentences.txt, when
present) have in lowercase, not first in its sentence, at least 3 times (English words such as
said, made, ran, less, among, which some locales list as names). The file is sorted by name; lines
starting with # are comments.

The experiment diary's round 4 (training/PILOT_REAL.md) trained with the list of commit afd96b7 (12,433
names), built before the last rule was added; it held 43 such English words.
"""
from __future__ import annotations

import argparse
import collections
import glob
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
from pathlib import Path

FAKER = "faker==40.63.0"
NAMES = "names==0.3.0"
ROOT = Path(__file__).resolve().parents[2]  # the checkout


def fold(name: str) -> str | None:
    s = unicodedata.normalize("NFKD", name)
    s = "".join(c for c in s if not unicodedata.combining(c)).lower()
    return s if re.fullmatch(r"[a-z]{3,}", s) else None


def faker_names(work: Path) -> tuple[dict, dict]:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), FAKER], check=True)
    whl = next(iter(glob.glob(str(work / "faker-*.whl"))))
    with zipfile.ZipFile(whl) as z:
        z.extractall(work / "faker")
    sys.path.insert(0, str(work / "faker"))
    import importlib
    male, female = {}, {}
    for d in sorted((work / "faker" / "faker" / "providers" / "person").iterdir()):
        if not d.is_dir() or d.name.startswith("_"):
            continue
        provider = importlib.import_module(f"faker.providers.person.{d.name}").Provider
        for attr, out in (("first_names_male", male), ("first_names_female", female)):
            for n in getattr(provider, attr, None) or []:
                f = fold(n) if isinstance(n, str) else None
                if f:
                    out.setdefault(f, set()).add(d.name)
    return male, female


def census(work: Path) -> tuple[set, set, set]:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d",
                    str(work), NAMES], check=True)
    with tarfile.open(next(iter(glob.glob(str(work / "names-*.tar.gz"))))) as t:
        t.extractall(work / "names", filter="data")
    d = Path(next(iter(glob.glob(str(work / "names" / "names-*" / "names")))))
    read = lambda f, top=None: [l.split()[0].lower() for l in (d / f).read_text().splitlines() if l.strip()][:top]  # noqa: E731
    return set(read("dist.male.first")), set(read("dist.female.first")), set(read("dist.all.last", 3000))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "training/data/first_names_extra.tsv"))
    ap.add_argument("--nouns", default=str(ROOT / "training/corpus/nouns.txt"))
    ap.add_argument("--sentences", default=str(ROOT / "training/corpus/sentences.txt"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="attnviz_names_"))
    fm, ff = faker_names(work)
    cm, cf, surnames = census(work)
    nouns = set(Path(args.nouns).read_text().split()) if Path(args.nouns).is_file() else set()
    lower = collections.Counter()  # lowercase words of the corpus, the first word of a sentence left out
    if Path(args.sentences).is_file():
        for line in Path(args.sentences).read_text(encoding="utf-8").splitlines():
            lower.update(w for w in line.split()[1:] if w in fm or w in ff)
    skip = cm | cf | surnames | nouns | {w for w, c in lower.items() if c >= 3}
    male = sorted(n for n in fm if n not in ff and n not in skip)
    female = sorted(n for n in ff if n not in fm and n not in skip)
    rows = sorted([(n, "m") for n in male] + [(n, "f") for n in female])
    head = (f"# first names by sex that the census lists lack: {FAKER} (MIT) person providers, every locale;\n"
            f"# built by training/scripts/build_extra_names.py ({len(male)} male, {len(female)} female)\n")
    Path(args.out).write_text(head + "".join(f"{n}\t{s}\n" for n, s in rows), encoding="utf-8")
    print(f"{len(male)} male, {len(female)} female -> {args.out}")


if __name__ == "__main__":
    main()
