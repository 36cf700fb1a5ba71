"""Real-style training items for the built-in models (issue #16): sentences shaped like encyclopedia
prose, with real first names, surnames, titles and WordNet nouns, and distractors the grammar's own
sentences do not have (relative clauses set off by commas, "whose" clauses, appositions, stacked
prepositional phrases).

Two tasks, labelled by construction (the label is a rule of the frame, not a model's guess):
- pronoun: one antecedent person (a first name from the census lists with an optional surname, a
  title and a name, or a gendered noun) is the subject of the main clause; the possessive after the
  main verb refers to it; the distractors (0-4) are people of the other sex inside a relative
  clause, a "whose" clause, an apposition or a fronted phrase, where they cannot be the subject.
  A plural subject (a plural noun, or two people joined by "and") takes "their".
- agreement: a subject noun phrase with 0-4 attractors (nouns of the other number in stacked
  prepositional phrases and relative clauses) before the verb; the verb agrees with the head.

`items(task, n, lists, seed)` -> [{"text", "answer", "wrong", "task", "construction",
"n_attractors", "source": "styled"}]. `lists` comes from `load_lists(corpus_dir)` (the word lists
scripts/build_corpus.py writes) and the corpus sentences (for noun frequencies).
"""
from __future__ import annotations

import collections
import random
import re
from dataclasses import dataclass
from pathlib import Path

from . import lexicon as L

MALE_TITLES = ["sir", "king", "prince", "lord", "mr.", "father", "uncle", "brother", "duke", "emperor"]
FEMALE_TITLES = ["dame", "queen", "princess", "lady", "mrs.", "miss", "ms.", "aunt", "sister", "duchess", "empress"]
KIN = {"m": ["father", "brother", "son", "uncle", "grandfather", "nephew", "husband"],
       "f": ["mother", "sister", "daughter", "aunt", "grandmother", "niece", "wife"]}
# main verb phrases with the possessive: (verb, [possessed nouns], continuation choices)
VPS = [
    ("spent", ["childhood", "early years", "last years", "summers", "youth", "retirement", "holidays"],
     ["in {place}", "abroad", "near the coast", "in the country", ""]),
    ("began", ["career", "studies", "training", "first job", "working life"], ["as a {job}", "in {year}", "in {place}", ""]),
    ("wrote", ["first novel", "memoirs", "diary", "letters", "thesis", "last book", "first poems"], ["in {year}", "in {place}", "while travelling", ""]),
    ("published", ["memoirs", "first book", "research", "collected poems", "autobiography"], ["in {year}", "in {place}", ""]),
    ("lost", ["job", "fortune", "house", "voice", "seat", "title"], ["in {year}", "after the war", "in {place}", ""]),
    ("sold", ["house", "company", "paintings", "farm", "shares"], ["in {year}", "to a collector", "in {place}", ""]),
    ("announced", ["retirement", "engagement", "resignation", "decision"], ["in {year}", "after the final", "on television", ""]),
    ("finished", ["studies", "degree", "training", "last film", "work"], ["in {year}", "in {place}", "early", ""]),
    ("left", ["home", "job", "country", "family", "bags"], ["in {year}", "for {place}", "at the station", ""]),
    ("painted", ["best works", "portraits", "last picture", "landscapes"], ["in {place}", "in {year}", ""]),
    ("recorded", ["first album", "songs", "last record"], ["in {place}", "in {year}", ""]),
    ("won", ["first title", "only award", "seat", "last match", "prize"], ["in {year}", "in {place}", ""]),
    ("thanked", ["parents", "teachers", "friends", "fans", "team"], ["after the ceremony", "in a letter", ""]),
    ("moved", ["family", "office", "business", "studio"], ["to {place}", "in {year}", ""]),
    ("gave", ["money", "library", "collection", "house"], ["to the city", "to a museum", "to charity"]),
    ("never met", ["father", "mother", "cousins", "grandparents", "brother", "sister"], ["", "again"]),
]
JOBS = ["teacher", "lawyer", "nurse", "clerk", "journalist", "soldier", "singer", "painter", "doctor", "farmer",
        "engineer", "printer", "banker", "sailor", "writer"]
PLACES = ["london", "paris", "rome", "vienna", "boston", "dublin", "madrid", "berlin", "kent", "ohio",
          "the north", "the south", "the city", "the capital", "a small town", "the village", "new york",
          "scotland", "wales", "india", "canada", "texas", "cornwall", "bavaria", "lisbon", "prague"]
PROPER_PLACES = [p for p in PLACES if " " not in p or p == "new york"]
WITH_VERBS = ["met", "worked with", "studied under", "trained with", "wrote to", "lived with", "was taught by",
              "was raised by", "sang with", "played against", "was coached by", "toured with", "visited",
              "was married to", "acted beside", "admired", "argued with", "corresponded with"]
APPOS = ["a friend of", "a pupil of", "a rival of", "a student of", "a neighbour of", "the partner of",
         "a colleague of", "the assistant of"]
FRONTED = ["after meeting", "unlike", "like", "together with", "along with", "after a quarrel with",
           "years after leaving"]
PLURAL_PEOPLE = ["sisters", "brothers", "students", "soldiers", "players", "twins", "children", "girls",
                 "boys", "actors", "actresses", "monks", "nuns", "settlers", "farmers", "singers", "pupils"]
PLURAL_SEX = {"sisters": "f", "brothers": "m", "girls": "f", "boys": "m", "actresses": "f", "actors": "m",
              "monks": "m", "nuns": "f"}


@dataclass
class Lists:
    male: list
    female: list
    surnames: list
    nouns_sg: list  # nouns whose singular and plural both occur in the corpus


def load_lists(corpus: Path, min_sg: int = 3, min_pl: int = 2) -> Lists:
    corpus = Path(corpus)
    read = lambda name: (corpus / name).read_text(encoding="utf-8").split()  # noqa: E731
    # a noun is a WordNet noun seen after "the" (singular) and its plural seen after "the" too: that
    # keeps out most words that are nouns only in WordNet's rarer senses ("the settle", "the kills")
    counts = collections.Counter(m for s in (corpus / "sentences.txt").read_text(encoding="utf-8").lower().split("\n")
                                 for m in re.findall(r"\bthe ([a-z]+)", s))
    skip = set(L.ALL_VERBS) | set(L.ADJECTIVES) | set(L.ADVERBS) | set(L.FUNCTION_WORDS) | set(L.PREPOSITIONS)
    nouns = [w for w in read("nouns.txt") if counts[w] >= min_sg and not w.endswith("s") and w not in skip
             and counts[L.plural(w)] >= min_pl and L.plural(w) != w]
    nouns = sorted(set(nouns) | {w for w in L.OBJECT_NOUNS + L.INSTITUTION_NOUNS + L.PERSON_NOUNS
                                 if not w.endswith("s")})
    return Lists(read("names_male.txt"), read("names_female.txt"), read("surnames.txt"), nouns)


def _fill(rng, s: str) -> str:
    return s.format(place=rng.choice(PLACES), year=rng.randint(1500, 2020), job=rng.choice(JOBS))


def _person(rng, lists: Lists, sex: str) -> str:
    names = lists.male if sex == "m" else lists.female
    names = names[:600] if rng.random() < 0.7 else names  # common names more often
    r = rng.random()
    if r < 0.45:
        return rng.choice(names) + (" " + rng.choice(lists.surnames) if rng.random() < 0.6 else "")
    if r < 0.65:
        title = rng.choice(MALE_TITLES if sex == "m" else FEMALE_TITLES)
        return title + " " + rng.choice([rng.choice(names), rng.choice(lists.surnames), rng.choice(names) + " " + rng.choice(lists.surnames)])
    pairs = L.GENDERED_PAIRS
    noun = rng.choice(pairs)[0 if sex == "m" else 1]
    adj = rng.choice(L.ADJECTIVES) + " " if rng.random() < 0.3 else ""
    return "the " + adj + noun


def _people(rng, lists: Lists, sex: str, k: int) -> str:
    ps = [_person(rng, lists, sex) for _ in range(k)]
    return ps[0] if k == 1 else " , ".join(ps[:-1]) + " and " + ps[-1]


def pronoun_item(rng, lists: Lists) -> dict:
    plural = rng.random() < 0.15
    k = rng.choices([0, 1, 2, 3, 4], weights=[2, 3, 3, 2, 1])[0]
    if plural:
        if rng.random() < 0.5:
            noun = rng.choice(PLURAL_PEOPLE)
            subj = "the " + noun
            other = "m" if PLURAL_SEX.get(noun) == "f" else "f" if PLURAL_SEX.get(noun) == "m" else rng.choice("mf")
        else:
            subj = _person(rng, lists, "m") + " and " + _person(rng, lists, "f")
            other = rng.choice("mf")
        answer, wrong = "their", "his" if other == "m" else "her"
    else:
        sex = rng.choice("mf")
        subj = _person(rng, lists, sex)
        other = "f" if sex == "m" else "m"
        answer, wrong = ("his", "her") if sex == "m" else ("her", "his")
    verb, objs, conts = rng.choice(VPS)
    vp = f"{verb} [MASK] {rng.choice(objs)} {_fill(rng, rng.choice(conts))}".strip()
    if k == 0:
        kind = rng.choice(["simple", "year", "adv"])
        head = {"simple": subj, "year": f"in {rng.randint(1500, 2020)} , {subj}",
                "adv": f"{subj} {rng.choice(['later', 'soon', 'finally', 'eventually', 'then', 'reluctantly'])}"}[kind]
        text = f"{head} {vp} ."
    else:
        kind = rng.choice(["rc", "rc", "whose", "appos", "fronted"])
        ds = _people(rng, lists, other, k)
        if kind == "rc":
            text = f"{subj} , who {rng.choice(WITH_VERBS)} {ds} , {vp} ."
        elif kind == "whose":
            kin = rng.choice(KIN[other])
            rest = _people(rng, lists, other, k - 1) if k > 1 else ""
            tail = rng.choice(["was a {job}", "came from {place}", "lived in {place}", "died in {year}"])
            who = f"{kin} {_person(rng, lists, other)}" + (f" and {rest}" if k > 1 else "")
            verb_agree = tail if k == 1 else tail.replace("was a {job}", "were {job}s")
            text = f"{subj} , whose {who} {_fill(rng, verb_agree)} , {vp} ."
        elif kind == "appos" and not plural:
            text = f"{subj} , {rng.choice(APPOS)} {ds} , {vp} ."
        else:
            kind = "fronted"
            text = f"{rng.choice(FRONTED)} {ds} , {subj} {vp} ."
    text = " ".join(text.split())
    text = text[0].upper() + text[1:]
    return {"text": text, "answer": answer, "wrong": wrong, "task": "pronoun", "construction": kind,
            "n_attractors": k, "source": "styled"}


AUX = [("is", "are"), ("was", "were"), ("has", "have")]
LEXICAL = ["remain", "seem", "appear", "stand", "lie", "belong", "need", "look", "come", "stay", "date", "face"]
PREDICATES = {"is": ["{adj}", "located near the {n}", "made of {n2}", "owned by the {n}", "still in use",
                     "described in the {n}", "often {adj}", "the oldest in {place}"],
              "was": ["built in {year}", "{adj}", "destroyed in {year}", "found near the {n}", "sold in {year}",
                      "moved to {place}", "described by the {n}", "rebuilt after the war"],
              "has": ["been {adj} since {year}", "a long history", "been moved to {place}", "never been {adj}",
                      "changed little since {year}"]}
LEX_TAILS = ["in {place}", "near the {n}", "{adj}", "to the {n}", "from {year}", "on the {n}", "unchanged"]
PREPS = ["of", "near", "behind", "in", "with", "for", "on", "from", "beside", "above", "under", "along"]


def _np(rng, noun: str, number: str) -> str:
    w = noun if number == "sg" else L.plural(noun)
    adj = rng.choice(L.ADJECTIVES) + " " if rng.random() < 0.25 else ""
    return f"the {adj}{w}"


def agreement_item(rng, lists: Lists) -> dict:
    number = rng.choice(["sg", "pl"])
    other = "pl" if number == "sg" else "sg"
    k = rng.choices([0, 1, 2, 3, 4], weights=[2, 3, 3, 2, 2])[0]
    nouns = lists.nouns_sg
    subj = _np(rng, rng.choice(nouns), number)
    parts = []
    for a in range(k):
        # every attractor has the other number; an occasional same-number noun in between does not count
        if rng.random() < 0.25 and a > 0:
            parts.append(f"that {_np(rng, rng.choice(nouns), other)} {rng.choice(['built', 'owned', 'described', 'found', 'used', 'made'])}")
        else:
            parts.append(f"{rng.choice(PREPS)} {_np(rng, rng.choice(nouns), other)}")
        if rng.random() < 0.15:  # a proper place name: no noun of either number
            parts.append(f"{rng.choice(PREPS)} {rng.choice(PROPER_PLACES)}")
    subject = " ".join([subj] + parts)
    fill = dict(adj=rng.choice(L.ADJECTIVES), n=rng.choice(nouns), n2=L.plural(rng.choice(nouns)),
                place=rng.choice(PLACES), year=rng.randint(1500, 2020))
    if rng.random() < 0.7:
        sg, pl = rng.choice(AUX)
        pred = rng.choice(PREDICATES[sg]).format(**fill)
        construction = "aux"
    else:
        base = rng.choice(LEXICAL)
        sg, pl = L.third_singular(base), base
        pred = rng.choice(LEX_TAILS).format(**fill)
        construction = "lexical"
    answer, wrong = (sg, pl) if number == "sg" else (pl, sg)
    text = " ".join(f"{subject} [MASK] {pred} .".split())
    text = text[0].upper() + text[1:]
    return {"text": text, "answer": answer, "wrong": wrong, "task": "agreement", "construction": construction,
            "n_attractors": k, "subject_number": number, "source": "styled"}


def items(task: str, n: int, lists: Lists, seed: int) -> list:
    rng = random.Random(f"{task}-{seed}")
    make = pronoun_item if task == "pronoun" else agreement_item
    return [make(rng, lists) for _ in range(n)]
