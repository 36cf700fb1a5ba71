"""Build training/data/first_names_common.tsv: a short list of common non-English first names
by sex, for the real-style pronoun items (training/real_style.py,
`load_lists(..., common_names=True)`, `train_real --common-names`).

    python training/scripts/build_common_names.py [--out training/data/first_names_common.tsv]

The names are a subset of training/data/first_names_extra.tsv (build_extra_names.py: the
Faker names that the census lists lack, one sex in every locale, no census surname, corpus noun or
common lowercase corpus word), picked by commonness from PyPI `Faker` 40.63.0 (MIT licence; fetched
with `pip download --no-deps` and unpacked, never installed, never imported at run time by attnviz),
for each locale's person provider and each sex:
- a weighted list (an OrderedDict of name -> weight with distinct weights): the names in order of
  falling weight, folded as build_extra_names.py folds them (accents removed, lowercase), the first
  40 that are on first_names_extra.tsv with that sex;
- an unweighted list of at most 100 names (a short list, taken as the locale's common names; such
  lists are not frequency-ordered): all its names on first_names_extra.tsv with that sex;
- a longer unweighted list: not used.
The union over the locales is written sorted by name; lines starting with # are comments. Built from
Faker only, never from the dev or test items.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_extra_names import FAKER, ROOT, fold  # noqa: E402

TOP_WEIGHTED = 40
MAX_SHORT = 100


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "training/data/first_names_common.tsv"))
    ap.add_argument("--extra", default=str(ROOT / "training/data/first_names_extra.tsv"))
    ap.add_argument("--faker-dir", default=None,
                    help="an unpacked Faker 40.63.0 wheel (the folder holding faker/); default: pip download it")
    args = ap.parse_args(argv)
    if args.faker_dir:
        root = Path(args.faker_dir)
    else:
        import subprocess
        work = Path(tempfile.mkdtemp(prefix="attnviz_names_"))
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), FAKER], check=True)
        with zipfile.ZipFile(next(iter(glob.glob(str(work / "faker-*.whl"))))) as z:
            z.extractall(work / "faker")
        root = work / "faker"
    sys.path.insert(0, str(root))
    rows = [ln.split("\t") for ln in Path(args.extra).read_text(encoding="utf-8").splitlines()
            if ln.strip() and not ln.startswith("#")]
    extra = {"m": {n for n, s in rows if s == "m"}, "f": {n for n, s in rows if s == "f"}}
    picked = {"m": set(), "f": set()}
    for d in sorted((root / "faker" / "providers" / "person").iterdir()):
        if not d.is_dir() or d.name.startswith("_"):
            continue
        provider = importlib.import_module(f"faker.providers.person.{d.name}").Provider
        for attr, sex in (("first_names_male", "m"), ("first_names_female", "f")):
            v = getattr(provider, attr, None) or []
            if isinstance(v, dict) and len(set(v.values())) > 1:
                ordered = [n for n, _ in sorted(v.items(), key=lambda kv: -kv[1])]  # stable: ties keep order
                names = [f for f in map(fold, ordered) if f and f in extra[sex]][:TOP_WEIGHTED]
            elif len(v) <= MAX_SHORT:
                names = [f for f in map(fold, v) if f and f in extra[sex]]
            else:
                names = []
            picked[sex] |= set(names)
    rows = sorted([(n, "m") for n in picked["m"]] + [(n, "f") for n in picked["f"]])
    head = (f"# common first names by sex that the census lists lack: {FAKER} (MIT) person providers, the first "
            f"{TOP_WEIGHTED} of each weighted list\n# and every short (<= {MAX_SHORT}) unweighted list, within "
            f"first_names_extra.tsv; built by training/scripts/build_common_names.py ({len(picked['m'])} male, "
            f"{len(picked['f'])} female)\n")
    Path(args.out).write_text(head + "".join(f"{n}\t{s}\n" for n, s in rows), encoding="utf-8")
    print(f"{len(picked['m'])} male, {len(picked['f'])} female -> {args.out}")


if __name__ == "__main__":
    main()
