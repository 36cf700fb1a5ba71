"""Real-style training items for the built-in models: sentences shaped like encyclopedia
prose, with real first names, surnames, titles and WordNet nouns, and distractors the grammar's own
sentences do not have (relative clauses set off by commas, "whose" clauses, appositions, stacked
prepositional phrases).

Two tasks, labelled by construction (the label is a rule of the frame, not a model's guess):
- pronoun: one antecedent person (a first name from the census lists, or with `load_lists(...,
  extra_names=True)` now and then one of data/first_names_extra.tsv, with `common_names=True` one of
  the shorter data/first_names_common.tsv, with an optional surname, a
  title and a name, or a gendered noun) is the subject of the main clause; the possessive after the
  main verb refers to it; the distractors (0-4) are people of the other sex inside a relative
  clause, a "whose" clause, an apposition or a fronted phrase, where they cannot be the subject.
  A plural subject (a plural noun, or two people joined by "and") takes "their". With
  `load_lists(..., gendered_appos=p)` a share p of the singular items instead give the
  subject (often a bare surname) an apposition whose head noun tells its sex: "the younger brother of"
  + the distractors, or without distractors a title of a place or a role ("the last queen of egypt").
  With `sexed_contrast=q` a share q of the singular items with distractors put a sexed
  common noun of the other sex right after the subject, in an object relative clause ("the countess ,
  whom the king had met in paris , ..."), where it is not the subject.
- agreement: a subject noun phrase with 0-4 attractors (nouns of the other number in stacked
  prepositional phrases and relative clauses) before the verb; the verb agrees with the head. With
  `load_lists(..., verb_frames=r)` a share r of them end instead in a verb and its tail
  taken from a corpus sentence ("... [MASK] into the Kanawha River ." -> empties / empty): the
  lexical verbs of corpus/verbs.txt (WordNet verbs; 189 with the built-in tokenizer) instead of the
  frames' ~60.
  With `more_sexed=q` a share q of a person's "the (adjective) noun" draws take a noun whose meaning
  gives the sex (MALE_MORE / FEMALE_MORE) instead of lexicon.GENDERED_PAIRS'.

`items(task, n, lists, seed)` -> [{"text", "answer", "wrong", "task", "construction",
"n_attractors", "source": "styled"}]. `lists` comes from `load_lists(corpus_dir)` (the word lists
training/scripts/build_corpus.py writes) and the corpus sentences (for noun frequencies).
"""
from __future__ import annotations

import collections
import random
import re
from dataclasses import dataclass, field
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
    ("opened", ["first shop", "own school", "restaurant", "studio", "first gallery"], ["in {place}", "in {year}", ""]),
    ("kept", ["diary", "promise", "job", "title", "house", "notes"], ["for years", "until {year}", ""]),
    ("changed", ["name", "mind", "plans", "will"], ["in {year}", "after the war", ""]),
    ("raised", ["children", "family"], ["in {place}", "alone", ""]),
    ("visited", ["parents", "home town", "old school", "grandparents"], ["in {year}", "every summer", ""]),
    ("broke", ["arm", "leg", "promise", "record"], ["in {year}", "in {place}", ""]),
    ("dedicated", ["book", "album", "research", "symphony"], ["to the poor", "to a friend", "to the city", ""]),
    ("built", ["house", "reputation", "first boat", "workshop"], ["in {place}", "in {year}", ""]),
    ("gave up", ["job", "seat", "studies", "claim to the throne"], ["in {year}", "after the war", ""]),
    ("inherited", ["fortune", "title", "estate", "land"], ["in {year}", ""]),
    ("earned", ["living", "degree", "first salary"], ["as a {job}", "in {place}", ""]),
    ("led", ["team", "party", "troops", "company"], ["in {year}", "to victory", ""]),
    ("returned to", ["home town", "studies", "old job", "family"], ["in {year}", "after the war", ""]),
    ("devoted", ["time", "fortune", "energy", "last years"], ["to the poor", "to science", "to music", "to the church"]),
    ("defended", ["title", "thesis", "record"], ["in {year}", "in {place}", ""]),
    ("made", ["fortune", "home", "money"], ["in {place}", "in {year}", "abroad"]),
    ("ran", ["own business", "farm", "household", "shop"], ["in {place}", "for years", ""]),
    ("hid", ["money", "letters", "papers"], ["in the attic", "from the police", ""]),
    ("repaired", ["roof", "car", "bicycle", "boat"], ["in {year}", "before winter", ""]),
]
# (past, base) of the VPS verbs: "decided to sell [MASK] house"
BASE = {"spent": "spend", "began": "begin", "wrote": "write", "published": "publish", "lost": "lose", "sold": "sell",
        "announced": "announce", "finished": "finish", "left": "leave", "painted": "paint", "recorded": "record",
        "won": "win", "thanked": "thank", "moved": "move", "gave": "give", "opened": "open", "kept": "keep",
        "changed": "change", "raised": "raise", "visited": "visit", "broke": "break", "dedicated": "dedicate",
        "built": "build", "gave up": "give up", "inherited": "inherit", "earned": "earn", "led": "lead",
        "returned to": "return to", "devoted": "devote", "defended": "defend", "made": "make", "ran": "run",
        "hid": "hide", "repaired": "repair"}
CHAINS = ["decided to", "refused to", "went on to", "hoped to", "tried to", "agreed to", "was forced to",
          "chose to", "later began to", "managed to"]
# fronted subordinate clauses and phrases around the distractors {d}; {o}: the subject's object pronoun
FRONTED_CLAUSES = ["when {d} died", "after {d} died", "although {d} wanted {o} to become a {job}",
                   "despite warnings from {d}", "against the advice of {d}", "without telling {d}",
                   "encouraged by {d}", "trained by {d}", "with the help of {d}", "at the request of {d}",
                   "on the advice of {d}", "whatever {d} said", "though {d} objected", "after the death of {d}",
                   "years after the death of {d}", "when {d} left {place}", "while {d} {be} away",
                   "once {d} had gone", "in a letter to {d}", "to the surprise of {d}", "inspired by {d}",
                   "before {d} arrived", "because {d} disapproved"]
FRONTED_ONE = ["before marrying {d}", "after divorcing {d}", "soon after meeting {d}"]
ADV_FRONT = ["after the war", "in later life", "at the age of {age}", "early in {year}", "by {year}",
             "after years abroad", "in the spring of {year}", "during the war", "as a student in {place}"]
# post-modifiers of the subject (read like appositions: the subject is the first segment)
PERSON_PARTICIPLES = ["raised by", "trained by", "coached by", "advised by", "accompanied by", "joined by", "led by",
               "cared for by", "taught by", "employed by", "encouraged by", "supported by", "helped by"]
APPOS_MORE = ["the only child of", "the eldest child of", "the youngest child of", "a descendant of",
              "a former aide to", "the heir of", "a {job} trained by", "a {job} hired by", "a distant cousin of",
              "a classmate of", "an admirer of", "a former pupil of"]
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
# a first verb phrase before "and" + the possessive one ("X grew up in Y and began [MASK] career ...")
FIRST_VPS = ["{be} born in {place}", "grew up in {place}", "moved to {place} in {year}", "studied in {place}",
             "returned to {place}", "trained as a {job}", "worked as a {job}", "retired in {year}",
             "{be} elected in {year}", "travelled to {place}", "settled in {place}", "{be} married in {year}"]
PLURAL_PEOPLE = ["sisters", "brothers", "students", "soldiers", "players", "twins", "children", "girls",
                 "boys", "actors", "actresses", "monks", "nuns", "settlers", "farmers", "singers", "pupils",
                 "bachelors", "widows", "cousins", "friends", "nurses", "miners", "villagers", "workers", "neighbours"]
PLURAL_SEX = {"sisters": "f", "brothers": "m", "girls": "f", "boys": "m", "actresses": "f", "actors": "m",
              "monks": "m", "nuns": "f", "bachelors": "m", "widows": "f"}
PLURAL_DET = ["the", "the", "the two", "the three", "the young", "the old", "both", "the four"]


@dataclass
class Lists:
    male: list
    female: list
    surnames: list
    nouns_sg: list  # nouns whose singular and plural both occur in the corpus
    # first names the census lists lack (data/first_names_extra.tsv, or its common subset
    # data/first_names_common.tsv): drawn for a person's first name EXTRA_SHARE of the time when
    # present; empty = the same draws as without these lists
    extra_male: list = field(default_factory=list)
    extra_female: list = field(default_factory=list)
    # the share of singular pronoun items whose subject gets an apposition that tells its sex
    # ("Beethoven , the younger brother of Anna , ..."); 0 = the same draws as without this option
    gendered_appos: float = 0.0
    # the share of singular pronoun items with distractors that instead put a sexed common noun
    # of the other sex right after the subject, where it is not the subject ("the countess , whom the king
    # had met in paris , ..."): the contrast to gendered_appos's cue; 0 = no such item, draw for draw
    sexed_contrast: float = 0.0
    # (base form, [tails]) of lexical verbs seen finite in the corpus, and the share of the
    # agreement items that end in one of them (verb_frames_from_corpus); empty = no such item, draw for draw
    verb_frames: list = field(default_factory=list)
    frame_share: float = 0.0
    # the share of a person's "the (adjective) noun" draws that take MALE_MORE / FEMALE_MORE's nouns
    # ("the widow", "the bridegroom") instead of lexicon.GENDERED_PAIRS'; 0 = no such draw, draw for draw
    more_sexed: float = 0.0


EXTRA_NAMES = Path(__file__).resolve().parent / "data" / "first_names_extra.tsv"
COMMON_NAMES = Path(__file__).resolve().parent / "data" / "first_names_common.tsv"
EXTRA_SHARE = 0.3


def read_extra_names(path: Path = EXTRA_NAMES) -> tuple[list, list]:
    """(male, female) first names of data/first_names_extra.tsv (training/scripts/build_extra_names.py) or of
    another file in its format (data/first_names_common.tsv, training/scripts/build_common_names.py)."""
    rows = [ln.split("\t") for ln in Path(path).read_text(encoding="utf-8").splitlines()
            if ln.strip() and not ln.startswith("#")]
    return [n for n, s in rows if s == "m"], [n for n, s in rows if s == "f"]


def load_lists(corpus: Path, min_sg: int = 3, min_pl: int = 2, extra_names: bool = False,
               common_names: bool = False, gendered_appos: float = 0.0, sexed_contrast: float = 0.0,
               verb_frames: float = 0.0, more_sexed: float = 0.0, vocab=None) -> Lists:
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
    if extra_names and common_names:
        raise ValueError("extra_names and common_names are two lists for the same draw: pick one")
    extra = read_extra_names() if extra_names else read_extra_names(COMMON_NAMES) if common_names else ([], [])
    for name, v in (("gendered_appos", gendered_appos), ("sexed_contrast", sexed_contrast),
                    ("verb_frames", verb_frames), ("more_sexed", more_sexed)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} is a share of the items: 0..1, not {v}")
    frames = []
    if verb_frames:
        sentences = (corpus / "sentences.txt").read_text(encoding="utf-8").splitlines()
        frames = verb_frames_from_corpus(sentences, read("verbs.txt"), nouns, vocab)
    return Lists(read("names_male.txt"), read("names_female.txt"), read("surnames.txt"), nouns, *extra,
                 gendered_appos=gendered_appos, sexed_contrast=sexed_contrast, verb_frames=frames,
                 frame_share=verb_frames, more_sexed=more_sexed)


# Lexical verbs in the corpus. A verb form counts as finite, and its number as known, right
# after he / she / it (3rd singular) or they (plural), or after a determiner and a noun of the same
# number ("the drug produces", "the wheels make"); a next word that is an auxiliary or "of" rules the
# hit out ("the bus stops are"), and so does a next word that is one of the verbs ("the disk drives lie").
# The tail is the rest of the sentence, kept when it has 1-12 words, ends a sentence, has no pronoun of a
# person (so that no item says "his" or "her" about a random subject), no verb form that agrees with a
# subject of its own (is, has, a 3rd-singular form of the list: "... and rejects nothing") and no quotes,
# brackets, colons or semicolons.
_DET_SG = {"the", "a", "an", "this", "that", "each", "every", "its", "no"}
_DET_PL = {"the", "these", "those", "many", "some", "all", "most", "both", "two", "three", "four", "few",
           "several", "no", "other"}
_NOT_AFTER = {"is", "are", "was", "were", "has", "have", "will", "would", "can", "could", "should", "may",
              "might", "must", "of", "'s"}
_FINITE = {"is", "are", "was", "were", "has", "have", "does", "do"}  # a tail with a finite verb of its own
_PERSON_PRONOUNS = {"he", "she", "him", "her", "his", "hers", "they", "them", "their", "theirs", "himself",
                    "herself", "themselves", "i", "me", "my", "we", "us", "our", "you", "your"}


def verb_frames_from_corpus(sentences: list[str], verbs: list[str], nouns_sg: list[str], vocab=None) -> list:
    """[(base form, sorted tails)] of the verbs of `verbs` whose base and 3rd-singular forms are both
    single words of `vocab` (any when None), other than be / have, seen finite in `sentences`."""
    keep = [v for v in verbs if v not in ("be", "have") and (vocab is None or (v in vocab and L.third_singular(v) in vocab))]
    sg3 = {L.third_singular(v): v for v in keep}
    every_sg3 = {L.third_singular(v) for v in verbs} | {"itself"}
    base = set(keep)
    nsg = set(nouns_sg)
    npl = {L.plural(n) for n in nsg} - nsg
    tails = collections.defaultdict(set)
    for s in sentences:
        w = s.split()
        lw = [x.lower() for x in w]
        for i in range(1, len(w) - 1):
            if lw[i + 1] in _NOT_AFTER or lw[i + 1] in sg3 or lw[i + 1] in base:  # "the disk drives lie": a noun
                continue
            prev, prev2 = lw[i - 1], (lw[i - 2] if i >= 2 else "")
            verb = None
            if lw[i] in sg3 and (prev in ("he", "she", "it") or (prev in nsg and prev2 in _DET_SG)):
                verb = sg3[lw[i]]
            elif lw[i] in base and (prev == "they" or (prev in npl and prev2 in _DET_PL)):
                verb = lw[i]
            if verb is None:
                continue
            tail = w[i + 1:]
            if 1 <= len(tail) <= 12 and (tail[-1] in (".", "!", "?") or re.search(r"\w[.!?]$", tail[-1])) \
                    and not re.search(r"[\"();:\[\]]", " ".join(tail)) \
                    and not (_PERSON_PRONOUNS | _FINITE | every_sg3) & {re.sub(r"\W", "", t.lower()) for t in tail}:
                t = " ".join(tail)
                t = re.sub(r"(\w)([.!?])$", r"\1 \2", t)
                tails[verb].add(t)
    return [(v, sorted(t)) for v, t in sorted(tails.items())]


def frame_agreement_item(rng, lists: Lists, item: dict) -> dict:
    """An agreement item whose predicate is replaced by a corpus verb and its tail."""
    verb, tails = rng.choice(lists.verb_frames)
    subject = item["text"].split(" [MASK] ")[0]
    sg, pl = L.third_singular(verb), verb
    answer, wrong = (sg, pl) if item["subject_number"] == "sg" else (pl, sg)
    text = " ".join(f"{subject} [MASK] {rng.choice(tails)}".split())
    return dict(item, text=text, answer=answer, wrong=wrong, construction=item["construction"] + "_frame",
                verb="frame")


# Object relative clauses whose own subject is a sexed common noun of the other sex
WHOM_VERBS = ["had met", "had known", "had married", "admired", "had trained", "had hired", "visited", "had taught",
              "had followed", "had painted", "had nursed", "had courted", "distrusted", "had raised"]
WHOM_TAILS = ["in {place}", "in {year}", "as a child", "years before", "at school", "during the war", "at court", ""]


def _sexed_contrast(rng, lists: Lists, subj: str, other: str, k: int, vp: str) -> str:
    """SUBJECT , whom the <sexed noun of the other sex> [and k - 1 more people of that sex] <verb> , vp ."""
    noun = rng.choice(L.GENDERED_PAIRS)[0 if other == "m" else 1]
    first = ("the " + (rng.choice(L.ADJECTIVES) + " " if rng.random() < 0.3 else "") + noun)
    rest = _people(rng, lists, other, k - 1) if k > 1 else ""
    who = first + (" and " + rest if rest else "")
    return f"{subj} , whom {who} {rng.choice(WHOM_VERBS)} {_fill(rng, rng.choice(WHOM_TAILS))} , {vp} ."


# Appositions whose head noun gives the subject's sex, followed by the distractors of the
# other sex ("the younger brother of {d}") or, without distractors, a title or a role ("the last queen
# of egypt", "an actress from vienna"); (male, female)
SEXED_OF = [("son", "daughter"), ("younger brother", "younger sister"), ("elder brother", "elder sister"),
            ("husband", "wife"), ("widower", "widow"), ("father", "mother"), ("nephew", "niece"),
            ("grandson", "granddaughter"), ("uncle", "aunt"), ("stepson", "stepdaughter"), ("fiance", "fiancee")]
# More nouns whose meaning gives the sex, beside lexicon.GENDERED_PAIRS' 36 pairs (not repeated
# here), for a real-style person's "the (adjective) noun": only words whose ordinary senses are all of one
# sex ("widow", "bridegroom"), not words for a role that people of either sex have ("priest", "heir",
# "chairman", "poet", "nurse"): that would teach a stereotype, not a meaning
MALE_MORE = """widower bridegroom fiance bachelor count earl viscount marquis archduke sultan tsar maharaja
    friar patriarch godfather godson stepson stepbrother sportsman horseman salesman nobleman kinsman
    congressman sorcerer manservant masseur schoolmaster postman househusband cowboy father-in-law son-in-law
    brother-in-law great-uncle grandnephew sheikh emir""".split()
FEMALE_MORE = """widow fiancee spinster countess viscountess marchioness archduchess sultana tsarina
    maharani priestess prioress matriarch godmother goddaughter stepdaughter stepsister sportswoman
    chairwoman spokeswoman horsewoman saleswoman noblewoman kinswoman congresswoman sorceress heiress maidservant
    masseuse schoolmistress postmistress housewife cowgirl mother-in-law daughter-in-law sister-in-law
    great-aunt grandniece poetess seamstress sheikha begum gentlewoman maiden damsel matron dowager debutante
    ballerina""".split()
SEXED_TITLES = [("king", "queen"), ("prince", "princess"), ("duke", "duchess"), ("emperor", "empress")]
SEXED_ROLES = [("actor", "actress"), ("monk", "nun"), ("businessman", "businesswoman"), ("policeman", "policewoman"),
               ("schoolboy", "schoolgirl"), ("waiter", "waitress"), ("headmaster", "headmistress"),
               ("landlord", "landlady"), ("chairman", "chairwoman"), ("sportsman", "sportswoman")]


def _sexed_appos(rng, lists: Lists, sex: str, k: int) -> str:
    """An apposition that gives a subject of `sex` away: k distractors of the other sex after "of",
    or (k = 0) a title of a place or a role."""
    x = 0 if sex == "m" else 1
    if k:
        other = "f" if sex == "m" else "m"
        rel = rng.choice(SEXED_OF)[x]
        one_of_many = rel.split()[-1] in ("son", "daughter", "nephew", "niece", "grandson", "granddaughter", "uncle", "aunt")
        det = ("an" if rel[0] in "aeiou" else "a") if one_of_many and rng.random() < 0.3 else "the"
        return f"{det} {rel} of {_people(rng, lists, other, k)}"
    if rng.random() < 0.5:
        when = rng.choice(["the last", "the first", "the young", "the future", "the", "a former"])
        return f"{when} {rng.choice(SEXED_TITLES)[x]} of {rng.choice(PLACES)}"
    role = rng.choice(SEXED_ROLES)[x]
    det = "an" if role[0] in "aeiou" else "a"
    return f"{det} {role} from {rng.choice(PLACES)}"


def _fill(rng, s: str) -> str:
    return s.format(place=rng.choice(PLACES), year=rng.randint(1500, 2020), job=rng.choice(JOBS))


def _person(rng, lists: Lists, sex: str) -> str:
    names = lists.male if sex == "m" else lists.female
    names = names[:600] if rng.random() < 0.5 else names  # common names more often
    extra = lists.extra_male if sex == "m" else lists.extra_female
    if extra and rng.random() < EXTRA_SHARE:  # no draw without extras: the same items as without the lists
        names = extra
    r = rng.random()
    if r < 0.45:
        return rng.choice(names) + (" " + rng.choice(lists.surnames) if rng.random() < 0.6 else "")
    if r < 0.65:
        title = rng.choice(MALE_TITLES if sex == "m" else FEMALE_TITLES)
        return title + " " + rng.choice([rng.choice(names), rng.choice(lists.surnames), rng.choice(names) + " " + rng.choice(lists.surnames)])
    if lists.more_sexed and rng.random() < lists.more_sexed:  # no draw at 0: the same items as without the option
        noun = rng.choice(MALE_MORE if sex == "m" else FEMALE_MORE)
    else:
        noun = rng.choice(L.GENDERED_PAIRS)[0 if sex == "m" else 1]
    adj = rng.choice(L.ADJECTIVES) + " " if rng.random() < 0.3 else ""
    return "the " + adj + noun


def _people(rng, lists: Lists, sex: str, k: int, poss: str = "") -> str:
    # a distractor is now and then named by a surname alone ("after meeting picasso"): whoever it is,
    # it is not the subject; with `poss` (the subject's possessive), now and then a relative of the
    # subject's ("her father", "his sisters")
    def one():
        r = rng.random()
        if poss and r < 0.3:
            kin = rng.choice(KIN[sex])
            return f"{poss} {kin if rng.random() < 0.8 else L.plural(kin)}"
        return rng.choice(lists.surnames) if r < 0.4 else _person(rng, lists, sex)
    ps = [one() for _ in range(k)]
    return ps[0] if k == 1 else " , ".join(ps[:-1]) + " and " + ps[-1]


def _vp(rng, plural: bool) -> str:
    verb, objs, conts = rng.choice(VPS)
    obj = rng.choice(objs)
    quant = ""
    if rng.random() < 0.2 and obj.endswith("s"):
        quant = rng.choice(["most of ", "many of ", "some of ", "all of "])
    elif rng.random() < 0.2 and obj in ("childhood", "youth", "career", "fortune", "money", "work", "collection",
                                         "retirement", "training", "working life", "time", "energy", "land"):
        quant = rng.choice(["most of ", "much of ", "part of "])
    elif rng.random() < 0.1 and " " not in obj:
        obj = "own " + obj
    if verb in BASE and rng.random() < 0.2:
        chain = rng.choice(CHAINS)
        if plural:
            chain = chain.replace("was forced", "were forced")
        verb = f"{chain} {BASE[verb]}"
    return f"{verb} {quant}[MASK] {obj} {_fill(rng, rng.choice(conts))}".strip()


def pronoun_item(rng, lists: Lists) -> dict:
    plural = rng.random() < 0.25
    k = rng.choices([0, 1, 2, 3, 4], weights=[2, 3, 3, 2, 1])[0]
    if plural:
        if rng.random() < 0.6:
            noun = rng.choice(PLURAL_PEOPLE)
            subj = rng.choice(PLURAL_DET) + " " + noun
            other = "m" if PLURAL_SEX.get(noun) == "f" else "f" if PLURAL_SEX.get(noun) == "m" else rng.choice("mf")
        else:
            subj = _person(rng, lists, "m") + " and " + _person(rng, lists, "f")
            other = rng.choice("mf")
        answer, wrong = "their", "his" if other == "m" else "her"
        poss, obj_pron = "their", "them"
    else:
        sex = rng.choice("mf")
        subj = _person(rng, lists, sex)
        other = "f" if sex == "m" else "m"
        answer, wrong = ("his", "her") if sex == "m" else ("her", "his")
        poss, obj_pron = answer, ("him" if sex == "m" else "her")
    vp = _vp(rng, plural)
    if not plural and lists.gendered_appos and rng.random() < lists.gendered_appos:
        # the subject's sex is told by the apposition: the subject is often a bare surname
        if rng.random() < 0.5:
            subj = _cap(rng.choice(lists.surnames))
        return _pronoun(f"{subj} , {_sexed_appos(rng, lists, sex, k)} , {vp} .", answer, wrong, "sexed_appos", k)
    if not plural and k and lists.sexed_contrast and rng.random() < lists.sexed_contrast:
        return _pronoun(_sexed_contrast(rng, lists, subj, other, k, vp), answer, wrong, "sexed_contrast", k)
    if k == 0:
        kind = rng.choice(["simple", "year", "adv", "adv", "coord"])
        first = _fill(rng, rng.choice(FIRST_VPS).replace("{be}", "were" if plural else "was"))
        front = rng.choice(ADV_FRONT).replace("{age}", str(rng.randint(12, 80)))
        head = {"simple": subj, "year": f"in {rng.randint(1500, 2020)} , {subj}",
                "adv": rng.choice([f"{subj} {rng.choice(['later', 'soon', 'finally', 'eventually', 'then', 'reluctantly'])}",
                                   f"{_fill(rng, front)} , {subj}"]),
                "coord": f"{subj} {first} and"}[kind]
        text = f"{head} {vp} ."
    else:
        kind = rng.choice(["rc", "rc", "whose", "appos", "appos", "fronted", "clause", "clause", "participle"])
        ds = _people(rng, lists, other, k, poss if kind in ("clause", "participle", "fronted") else "")
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
            text = f"{subj} , {_fill(rng, rng.choice(APPOS + APPOS_MORE))} {ds} , {vp} ."
        elif kind == "participle":
            kind = "appos"  # a post-modifier of the subject, read like an apposition
            text = f"{subj} , {rng.choice(PERSON_PARTICIPLES)} {ds} , {vp} ."
        elif kind == "clause":
            kind = "fronted"
            frames = FRONTED_CLAUSES + (FRONTED_ONE if k == 1 else [])
            frame = rng.choice(frames).replace("{be}", "was" if k == 1 else "were")
            frame = frame.replace("{o}", obj_pron).replace("{d}", ds)
            text = f"{_fill(rng, frame)} , {subj} {vp} ."
        else:
            kind = "fronted"
            where = f" {rng.choice(['in', 'at', 'near'])} {rng.choice(PLACES)}" if rng.random() < 0.3 else ""
            text = f"{rng.choice(FRONTED)} {ds}{where} , {subj} {vp} ."
    return _pronoun(text, answer, wrong, kind, k)


def _pronoun(text: str, answer: str, wrong: str, kind: str, k: int) -> dict:
    """A pronoun item: the text's spaces normalised and its first letter capitalised."""
    text = " ".join(text.split())
    return {"text": text[0].upper() + text[1:], "answer": answer, "wrong": wrong, "task": "pronoun",
            "construction": kind, "n_attractors": k, "source": "styled"}


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


def stacked_agreement_item(rng, lists: Lists) -> dict:
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
            "n_attractors": k, "subject_number": number, "source": "styled", "style": "plain"}



# --- news / encyclopedia prose ------------------------------------------------------------------
# Subjects and distractors in the shapes of news and Wikipedia sentences: comma appositions, comma
# relative clauses ("which" / "who" / "whose"), participial phrases ("led by ...", "based in ..."),
# coordinated lists, numbers and years, proper names of people, places, companies and days, and
# hyphenated modifiers. Every noun between the subject's head and the verb comes from the lists
# below, from `Lists.nouns_sg` (or their plurals), or is a capitalised proper name (singular); the
# attractors are those of the other number than the head. Words that are also verbs in a frame
# (supplies, runs ...) never come from these lists.
ROLES = ["minister", "senator", "mayor", "director", "chairman", "spokesman", "judge", "coach", "striker",
         "defender", "manager", "president", "governor", "professor", "lawyer", "officer", "chief",
         "inspector", "adviser", "official", "economist", "scientist", "historian", "architect", "bishop",
         "general", "commander", "candidate", "leader", "player", "founder", "editor", "author", "banker"]
ORGS = ["company", "bank", "agency", "council", "party", "union", "court", "committee", "airline",
        "club", "team", "museum", "firm", "group", "charity", "university", "hospital", "school",
        "newspaper", "government", "ministry", "commission", "board", "orchestra", "festival", "station"]
THINGS = ["bill", "report", "plan", "deal", "project", "law", "decision", "study", "film", "album",
          "novel", "book", "bridge", "road", "building", "tower", "church", "castle", "village", "town",
          "river", "island", "lake", "mountain", "factory", "mine", "port", "market", "house", "garden",
          "painting", "statue", "station", "stadium", "contract", "scheme", "policy", "budget", "proposal"]
GROUP_SUBJECTS = ["workers", "residents", "passengers", "farmers", "officials", "investors", "doctors",
                  "teachers", "students", "fans", "voters", "protesters", "lawyers", "researchers",
                  "scientists", "engineers", "soldiers", "police officers", "firefighters", "nurses",
                  "shareholders", "prices", "shares", "sales", "exports", "profits", "costs", "talks",
                  "flights", "tickets", "rents", "wages", "members", "villagers", "visitors", "miners"]
GROUP_SUBJECTS = [w for w in GROUP_SUBJECTS if " " not in w]
PLURAL_QUANT = ["hundreds of", "thousands of", "dozens of", "millions of", "many of the", "most of the",
                "two of the", "three of the", "several of the", "both of the", "some of the"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
CITIES = ["London", "Paris", "Rome", "Vienna", "Boston", "Dublin", "Madrid", "Berlin", "Lagos", "Lisbon",
          "Prague", "Chicago", "Toronto", "Sydney", "Mumbai", "Cairo", "Oslo", "Geneva", "Milan", "Leeds",
          "Glasgow", "Munich", "Warsaw", "Athens", "Seoul", "Nairobi", "Lima", "Denver", "Bristol", "Lyon"]
COUNTRIES = ["France", "Germany", "Italy", "Spain", "Brazil", "Canada", "India", "Japan", "Kenya", "Mexico",
             "Norway", "Poland", "Egypt", "Chile", "Ireland", "Scotland", "Wales", "Texas", "Ohio", "Bavaria"]
COMPANY_SUFFIX = ["", "", " Motors", " Airways", " Bank", " Group", " Energy", " Foods", " Media", " Steel"]
HYPHEN_ADJ = ["{age}-year-old", "{city}-based", "state-owned", "family-run", "long-running",
              "well-known", "newly-elected", "{small}-million-dollar", "{small}-page", "{small}-metre",
              "long-term", "right-wing", "left-wing", "so-called", "world-famous", "cross-border"]
# verbs inside a relative clause about the head: (3rd singular, plural) agree with the HEAD
REL_VERBS = [("supplies", "supply"), ("makes", "make"), ("builds", "build"), ("sells", "sell"),
             ("runs", "run"), ("serves", "serve"), ("owns", "own"), ("employs", "employ"),
             ("represents", "represent"), ("faces", "face"), ("opposes", "oppose"), ("funds", "fund"),
             ("produces", "produce"), ("operates", "operate"), ("has", "have"), ("includes", "include"),
             ("was", "were"), ("is", "are")]
REL_TAIL = {"was": ["founded by", "built by", "criticised by", "praised by", "sold to", "owned by", "set up by"],
            "is": ["backed by", "owned by", "run by", "known for", "popular with", "close to", "part of"]}
PARTICIPLES = ["led by", "founded by", "backed by", "owned by", "run by", "built by", "designed by",
               "hit by", "criticised by", "supported by", "chaired by", "funded by", "advised by",
               "praised by", "attacked by", "opposed by", "watched by", "joined by", "speaking to",
               "working with", "writing to", "including", "angered by", "worried about", "based on",
               "known for", "faced with", "surrounded by", "released by", "published by", "sold to"]
PREPS_NEWS = ["of", "in", "at", "from", "for", "near", "with", "on", "against", "between", "to", "behind",
              "under", "across", "beside", "around"]
APPOS_HEAD = ["a former", "a close", "the new", "the current", "a senior", "the first", "a leading", "the", "a"]
APPOS_ROLE_OF = ["adviser to", "friend of", "critic of", "member of", "partner at", "head of", "owner of",
                 "rival of", "supporter of", "director of", "student of", "founder of", "chief of"]
AUX_TAILS = {
    "is": ["expected to {vb} on {day}", "due to {vb} in {year}", "likely to {vb} the {n}", "now {adj}",
           "still {adj}", "under investigation", "in talks with {company}", "set to {vb} in {month}",
           "{adj}", "located in {city}", "up {num} % this year", "among the {adj} in {country}",
           "not {adj}", "expected to {vb}", "one of the {adj} {ns} in {country}"],
    "was": ["founded in {year}", "arrested in {city} on {day}", "cancelled because of the {n}",
            "built in {year}", "sold to {company} in {year}", "released on {day}", "named after {name}",
            "destroyed by fire in {year}", "elected in {year}", "found near {city}", "closed in {month}",
            "opened in {year}", "{adj}", "not {adj}", "later {adj}"],
    "has": ["been {adj} since {year}", "announced {num} new {ns}", "signed a deal with {company}",
            "denied the {ns}", "called for a new {n}", "rejected the {n}", "not yet {pp} the {n}",
            "risen by {num} %", "won {num} {ns}", "been closed since {year}", "already {pp} the {n}",
            "been {pp} by {company}", "grown since {year}", "{pp} the {ns}"],
}
LEX_NEWS = ["remain", "face", "need", "hold", "plan", "want", "run", "serve", "cover", "include", "contain",
            "support", "say", "lie", "stand", "belong", "come", "date", "supply", "make", "build", "sell",
            "use", "control", "produce", "operate", "represent", "show", "find", "call", "grow", "share",
            "lead", "carry", "provide", "receive", "seem", "appear", "look", "stay", "keep", "meet", "form",
            "reach", "follow", "host", "fund", "claim", "believe", "describe", "list"]
LEX_NEWS_TAILS = {"remain": "{adj}", "face": "a {adj} {n}", "need": "{num} new {ns}", "hold": "{num} {ns}",
                  "plan": "to {vb} in {year}", "want": "to {vb} the {n}", "run": "{num} {ns} in {country}",
                  "serve": "the {n} of {city}", "cover": "{num} square miles", "include": "a {adj} {n}",
                  "contain": "{num} {ns}", "support": "the {n}", "say": "the {n} is {adj}",
                  "lie": "near {city}", "stand": "on the {n}", "belong": "to {company}", "come": "from {country}",
                  "date": "from {year}", "supply": "{ns} to {company}", "make": "{ns} for {company}",
                  "build": "{ns} in {country}", "sell": "{ns} in {city}", "use": "{ns} from {country}",
                  "control": "the {n}", "produce": "{num} {ns} a year", "operate": "in {country}",
                  "represent": "the {n}", "show": "a {adj} {n}", "find": "that the {n} is {adj}",
                  "call": "for a new {n}", "grow": "{adj} every year", "share": "a {n} with {company}",
                  "lead": "to the {n}", "carry": "{num} {ns}", "provide": "{ns} for {city}",
                  "receive": "{num} {ns} a year", "seem": "{adj}", "appear": "{adj}", "look": "{adj}",
                  "stay": "in {city}", "keep": "a {n} in {city}", "meet": "on {day}", "form": "part of the {n}",
                  "reach": "{city} on {day}", "follow": "the {n}", "host": "the {n} in {year}",
                  "fund": "the {n}", "claim": "that the {n} is {adj}", "believe": "the {n} is {adj}",
                  "describe": "the {n} as {adj}", "list": "{num} {ns}"}
BASE_VERBS = ["open", "close", "resign", "return", "start", "win", "lose", "vote", "sign", "leave", "grow",
              "visit", "meet", "appear", "speak", "decide", "begin", "finish", "expand", "recover"]
PAST_PARTS = ["approved", "criticised", "rejected", "accepted", "signed", "announced", "cancelled",
              "bought", "sold", "built", "closed", "opened", "published", "won", "lost", "reviewed"]


def _cap(w: str) -> str:
    return " ".join(x[:1].upper() + x[1:] for x in w.split())


def _proper(rng, lists: Lists) -> str:
    """A singular proper name: a person, a titled person, a city, a country, a company or a day."""
    r = rng.random()
    if r < 0.3:
        names = (lists.male if rng.random() < 0.5 else lists.female)[:800]
        return _cap(rng.choice(names) + (" " + rng.choice(lists.surnames) if rng.random() < 0.6 else ""))
    if r < 0.4:
        return _cap(rng.choice(["senator", "president", "judge", "professor", "general", "dr", "mayor"])
                    + " " + rng.choice(lists.surnames))
    if r < 0.6:
        return rng.choice(CITIES)
    if r < 0.75:
        return rng.choice(COUNTRIES)
    if r < 0.9:
        return _company(rng, lists)
    return rng.choice(DAYS + MONTHS)


def _company(rng, lists: Lists) -> str:
    s = _cap(rng.choice(lists.surnames))
    if rng.random() < 0.2:
        return s + "-" + _cap(rng.choice(lists.surnames))
    return s + rng.choice(COMPANY_SUFFIX)


def _fill_news(rng, lists: Lists, s: str) -> str:
    nouns = lists.nouns_sg
    return s.format(
        adj=rng.choice(L.ADJECTIVES), n=rng.choice(nouns), ns=L.plural(rng.choice(nouns)),
        year=rng.randint(1850, 2025), day=rng.choice(DAYS), month=rng.choice(MONTHS), city=rng.choice(CITIES),
        country=rng.choice(COUNTRIES), company=_company(rng, lists), num=_number(rng),
        vb=rng.choice(BASE_VERBS), small=rng.randint(2, 99), pp=rng.choice(PAST_PARTS), age=rng.randint(18, 90),
        name=_cap(rng.choice(lists.male + lists.female) + " " + rng.choice(lists.surnames)))


def _number(rng) -> str:
    return rng.choice([str(rng.randint(2, 99)), str(rng.randint(100, 999)), f"{rng.randint(1, 99)},{rng.randint(0, 999):03d}",
                       f"{rng.randint(1, 9)}.{rng.randint(1, 9)}", str(rng.randint(1900, 2025))])


def _noun_phrase(rng, lists: Lists, number: str, pool=None, proper_ok=True) -> str:
    """A noun phrase of one number: counts as one noun (one attractor when it has the other number)."""
    if number == "sg" and proper_ok and rng.random() < 0.3:
        return _proper(rng, lists)
    noun = rng.choice(pool or lists.nouns_sg)
    w = noun if number == "sg" else L.plural(noun)
    r = rng.random()
    if number == "pl" and r < 0.25:
        return f"{rng.choice(['two', 'three', 'four', 'six', 'ten', _number(rng), 'several', 'many', 'other'])} {w}"
    if number == "pl" and r < 0.4:
        return w
    det = "the" if number == "pl" or r < 0.7 else rng.choice(["a", "its", "their", "this", "one"])
    det = "an" if det == "a" and noun[0] in "aeiou" else det
    adj = rng.choice(L.ADJECTIVES + ["local", "former", "national", "new", "main", "foreign"]) + " " \
        if rng.random() < 0.3 else ""
    return f"{det} {adj}{w}"


def _np_list(rng, lists: Lists, number: str, k: int, pool=None) -> str:
    """k noun phrases of one number joined as a list ("A , B and C")."""
    ps = [_noun_phrase(rng, lists, number, pool) for _ in range(k)]
    return ps[0] if k == 1 else " , ".join(ps[:-1]) + " and " + ps[-1]


def _split(rng, k: int) -> list:
    """k attractors over one or two modifiers."""
    if k <= 1 or rng.random() < 0.5:
        return [k]
    a = rng.randint(1, k - 1)
    return [a, k - a]


def _modifier(rng, lists: Lists, number: str, k: int, person: bool) -> tuple[str, str]:
    """One modifier of the head holding k (0-4) nouns of the other number; (text, construction)."""
    other = "pl" if number == "sg" else "sg"
    kinds = ["pp", "pp", "part", "part", "src", "appos", "whose", "orc", "paren", "with_num"]
    kind = rng.choice(kinds)
    if k == 0:
        kind = rng.choice(["part0", "src0", "appos0", "pp0"])
    if kind == "whose" and k < 1:
        kind = "src"
    if kind == "orc" and k > 2:
        kind = "pp"
    if kind == "with_num" and other != "pl":
        kind = "pp"
    if kind == "pp":
        pieces = []
        left = k
        while left > 0:
            m = rng.choice([1, 1, 2]) if left >= 2 else 1
            pieces.append(f"{rng.choice(PREPS_NEWS)} {_np_list(rng, lists, other, m)}")
            left -= m
        return " ".join(pieces), "pp"
    if kind == "part":
        return f", {rng.choice(PARTICIPLES)} {_np_list(rng, lists, other, k)} ,", "part"
    if kind == "src":
        rel = "who" if person else "which"
        sg, pl = rng.choice(REL_VERBS)
        v = sg if number == "sg" else pl
        if sg in ("was", "is"):
            return f", {rel} {v} {rng.choice(REL_TAIL[sg])} {_np_list(rng, lists, other, k)} ,", "src"
        return f", {rel} {v} {_np_list(rng, lists, other, k)} ,", "src"
    if kind == "appos":
        if number == "sg":
            role = rng.choice(ROLES if person else THINGS + ORGS)
            head = rng.choice(APPOS_HEAD)
            if head.startswith("a ") and role[0] in "aeiou":
                head = "an " + head[2:]
            if not person:
                rel = rng.choice(["part of", "home to", "one of", "owned by", "a gift to", "a partner of"])
                return f", {rel} {_np_list(rng, lists, other, k)} ,", "appos"
            if rng.random() < 0.3:
                return f", the {role} of {_np_list(rng, lists, other, k)} ,", "appos"
            rel = rng.choice(APPOS_ROLE_OF)
            if head.startswith("a ") and head == "a " + head[2:] and rel[0] in "aeiou" and " " not in head[2:]:
                head = "an"
            return f", {head} {rel} {_np_list(rng, lists, other, k)} ,", "appos"
        role = L.plural(rng.choice(ROLES if person else THINGS))
        return f", all {role} {rng.choice(['of', 'from', 'at', 'for'])} {_np_list(rng, lists, other, k)} ,", "appos"
    if kind == "whose":
        # "whose N V ...": the whose-noun has the other number and its own verb agrees with it
        noun = rng.choice(lists.nouns_sg)
        wn = noun if other == "sg" else L.plural(noun)
        if k == 1:
            sg, pl = rng.choice([("was", "were"), ("is", "are")])
            rest = f" {rng.choice(['now', 'also', 'often', 'once', 'still'])} {rng.choice(L.ADJECTIVES)}"
        else:
            sg, pl = rng.choice([("has", "have"), ("includes", "include"), ("faces", "face"), ("supplies", "supply"),
                                 ("visits", "visit"), ("supports", "support")])
            rest = f" {_np_list(rng, lists, other, k - 1)}"
            if sg == "has":
                rest = f" {rng.choice(PAST_PARTS)}" + rest
        v = sg if other == "sg" else pl
        return f", whose {wn} {v}{rest} ,", "whose"
    if kind == "orc":
        np = _np_list(rng, lists, other, k)
        return f"that {np} {rng.choice(['built', 'bought', 'owned', 'described', 'found', 'made', 'sold', 'designed', 'visited'])}", "orc"
    if kind == "paren":
        if other == "pl":  # "the palace , with its towers and gardens ,"
            ws = [L.plural(rng.choice(lists.nouns_sg)) for _ in range(k)]
            return f", with its {ws[0] if k == 1 else ' , '.join(ws[:-1]) + ' and ' + ws[-1]} ,", "paren"
        return f", {rng.choice(PARTICIPLES)} {_np_list(rng, lists, other, k)} ,", "part"
    if kind == "with_num":
        pieces = [f"with {_number(rng)} {L.plural(rng.choice(lists.nouns_sg))}"]
        if k > 1:
            pieces.append(f"{rng.choice(PREPS_NEWS)} {_np_list(rng, lists, other, k - 1)}")
        return " ".join(pieces), "pp"
    # k == 0: a modifier with nouns of the head's own number only, or none
    if kind == "part0":
        return rng.choice([f", {rng.choice(['announced', 'published', 'released', 'founded', 'built', 'opened'])} in {rng.randint(1850, 2025)} ,",
                           f", {rng.choice(['announced', 'published', 'released'])} last {rng.choice(['week', 'year', 'month'])} ,"
                           if number == "sg" else ", announced in " + str(rng.randint(1900, 2025)) + " ,"]), "part"
    if kind == "src0":
        rel = "who" if person else "which"
        v = rng.choice(["has", "was"]) if number == "sg" else rng.choice(["have", "were"])
        return f", {rel} {v} {rng.choice(['long', 'often', 'also', 'once'])} {rng.choice(PAST_PARTS)} ,", "src"
    if kind == "appos0" and number == "sg":
        return f", {_proper(rng, lists)} ,", "appos"
    if number == "pl":
        return f"{rng.choice(PREPS_NEWS)} {_np_list(rng, lists, 'pl', rng.choice([1, 2]))}", "pp"
    return "", "simple"


def _head(rng, lists: Lists, number: str) -> tuple[str, bool]:
    """The subject without modifiers; (text, is a person)."""
    r = rng.random()
    pool_kind = rng.random()
    pool = ROLES if pool_kind < 0.3 else ORGS if pool_kind < 0.5 else THINGS if pool_kind < 0.7 else lists.nouns_sg
    person = pool is ROLES or (pool is lists.nouns_sg and False)
    noun = rng.choice(pool)
    if number == "sg":
        if r < 0.15:
            return _proper(rng, lists) if rng.random() < 0.5 else _cap(rng.choice(lists.male + lists.female)) + " " + _cap(rng.choice(lists.surnames)), rng.random() < 0.5
        pre = ""
        if rng.random() < 0.3:
            pre = _fill_news(rng, lists, rng.choice(HYPHEN_ADJ[0 if person else 1:])).replace(" ", "-").lower() + " "
        elif rng.random() < 0.3:
            pre = rng.choice(L.ADJECTIVES + ["new", "former", "local", "national", "main"]) + " "
        return f"the {pre}{noun}", person
    if r < 0.2:
        g = rng.choice(GROUP_SUBJECTS)
        return g, g in ("workers", "residents", "passengers", "farmers", "officials", "investors", "doctors", "teachers",
                        "students", "fans", "voters", "protesters", "lawyers", "researchers", "scientists", "engineers",
                        "soldiers", "firefighters", "nurses", "shareholders", "members", "villagers", "visitors", "miners")
    if r < 0.3:
        return f"{rng.choice(PLURAL_QUANT)} {L.plural(noun)}", person
    if r < 0.4:
        return f"{rng.choice(L.ADJECTIVES + ['senior', 'local', 'foreign'])} {L.plural(noun)}", person
    pre = ""
    if rng.random() < 0.25:
        pre = _fill_news(rng, lists, rng.choice(HYPHEN_ADJ[0 if person else 1:])).replace(" ", "-").lower() + " "
    return f"the {pre}{L.plural(noun)}", person


def news_agreement_item(rng, lists: Lists) -> dict:
    number = rng.choice(["sg", "pl"])
    k = rng.choices([0, 1, 2, 3, 4], weights=[2, 3, 3, 2, 2])[0]
    head, person = _head(rng, lists, number)
    mods, kinds = [], []
    for part in _split(rng, k) if k else [0]:
        text, kind = _modifier(rng, lists, number, part, person)
        mods.append(text)
        kinds.append(kind)
    subject = " ".join([head] + mods)
    subject = re.sub(r", ,", ",", subject)
    if rng.random() < 0.6:
        sg, pl = rng.choice(AUX)
        pred = _fill_news(rng, lists, rng.choice(AUX_TAILS[sg]))
        verb_kind = "aux"
    else:
        base = rng.choice(LEX_NEWS)
        sg, pl = L.third_singular(base), base
        pred = _fill_news(rng, lists, LEX_NEWS_TAILS[base])
        verb_kind = "lexical"
    answer, wrong = (sg, pl) if number == "sg" else (pl, sg)
    text = " ".join(f"{subject} [MASK] {pred} .".split())
    text = text[0].upper() + text[1:]
    construction = next((c for c in kinds if c != "simple"), "simple")
    return {"text": text, "answer": answer, "wrong": wrong, "task": "agreement", "construction": construction,
            "verb": verb_kind, "n_attractors": k, "subject_number": number, "source": "styled", "style": "news"}


NEWS_SHARE = 0.65  # share of the agreement items made by news_agreement_item (the rest: stacked phrases)


def agreement_item(rng, lists: Lists) -> dict:
    if rng.random() < NEWS_SHARE:
        item = news_agreement_item(rng, lists)
    else:
        item = stacked_agreement_item(rng, lists)
    if lists.verb_frames and rng.random() < lists.frame_share:  # no random draw at all when there are no frames
        item = frame_agreement_item(rng, lists, item)
    return item


def items(task: str, n: int, lists: Lists, seed: int) -> list:
    rng = random.Random(f"{task}-{seed}")
    make = pronoun_item if task == "pronoun" else agreement_item
    return [make(rng, lists) for _ in range(n)]
