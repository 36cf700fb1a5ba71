"""Synthetic English grammar for the built-in models: verb-number agreement and possessive pronouns.

`generate(task, n, seed, split)` returns items

    {"text": "... [MASK] ...", "answer": "are", "wrong": "is", "task": "agreement",
     "construction": "pp", "n_attractors": 2, "n_intervening": 3}

Agreement: the masked word is the main verb (is/are, was/were, has/have or a lexical verb in the
present, e.g. runs/run); `wrong` is the same verb in the other number. Intervening nouns sit between
the subject and the verb; `n_attractors` counts those whose number differs from the subject's.
Constructions: simple, pp (chain of prepositional phrases), coord (coordinated nouns inside a
prepositional phrase: "the key to the cabinets and the doors [MASK]" has a singular subject), src
(subject relative clause), orc (object relative clause, with or without "that"), coord_subj (a
coordinated, hence plural, subject: "john and the girl [MASK]"; here the singular nouns of the
subject phrase are the attractors). Singular subjects are sometimes first names.

Pronoun: the masked word is a possessive (his/her/its/their) that refers to the subject of its clause
(male nouns and names: his; female: her; animals and institutions: its; plurals, coordinated names
and person nouns without grammatical gender, e.g. "the author", singular they: their);
`n_attractors` counts intervening nouns or names whose possessive differs from the subject's, and
`wrong` is the possessive of the nearest such attractor (with no attractor: his<->her, its<->their,
and his or her for a singular "their" subject).
Constructions: simple, about ("S talked to O about [MASK] N"), ditrans ("S showed O [MASK] N"),
meet ("S met O in [MASK] N"), about_coord ("S talked to O1 and O2 about ..."), and the subject
modifiers pp ("S with O ...") and rc ("S who met O ..."), alone or combined ("rc_about", ...).

Train/test split: each item has a key (the subject's head word and the nearest intervening noun's
head word; with nothing intervening, the subject and the verb or possessed noun). About 10 % of keys,
chosen by a CRC32 hash, belong to the test split; an item is generated for one split only if its key
belongs there, so test sentences never occur in training and every test item pairs a subject with an
attractor (or verb) that never co-occurred in training.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

from . import lexicon as L

MASK = "[MASK]"
TASKS = ("agreement", "pronoun")
TEST_SHARE = 10  # percent of split keys held out for the test split

AGREEMENT_CONSTRUCTIONS = ("simple", "pp", "coord", "src", "orc", "coord_subj")
PRONOUN_CONSTRUCTIONS_MAX_ATTRACTORS = 3

# Nouns by role.
_ANIMATE = L.MALE_NOUNS + L.FEMALE_NOUNS + L.PERSON_NOUNS + L.ANIMAL_NOUNS
_PEOPLE = L.MALE_NOUNS + L.FEMALE_NOUNS + L.PERSON_NOUNS
_INANIMATE = L.OBJECT_NOUNS + L.INSTITUTION_NOUNS
_NEUTER_SUBJECTS = L.INSTITUTION_NOUNS + L.ANIMAL_NOUNS
_PLURAL_SUBJECTS = _PEOPLE + L.ANIMAL_NOUNS + L.INSTITUTION_NOUNS
_PLACES = L._words("""
    house garden office kitchen room car shop apartment cabin tent yard garage cottage studio
    hotel restaurant boat classroom hall castle palace barn farm library museum church
""")
_PLACES = [p for p in _PLACES if p in L.ALL_COMMON_NOUNS]
_ALL_NAMES = L.MALE_NAMES + L.FEMALE_NAMES
_NAME_SET = frozenset(_ALL_NAMES)
# (subject modifier, predicate) frames with room for at least n intervening nouns, by n
_PRONOUN_FRAMES = {n: [(m, p) for m in ("none", "pp", "rc")
                       for p in ("simple", "about", "ditrans", "meet", "about_coord")
                       if (m != "none") + {"simple": 0, "about_coord": 2}.get(p, 1) >= n]
                   for n in range(4)}
_OTHER_POSSESSIVE = {"his": "her", "her": "his", "its": "their", "their": "its"}


@dataclass
class NP:
    """A noun phrase: its words, number ("sg"/"pl"), possessive class and head word (lemma)."""

    words: list[str]
    number: str
    pclass: str | None = None
    head: str = ""
    extra_nouns: list["NP"] = field(default_factory=list)


def _key_in_test(key: str) -> bool:
    return zlib.crc32(key.encode("utf-8")) % 100 < TEST_SHARE


def _article(word: str) -> str:
    if word[0] in "aeio" or (word[0] == "u" and not word.startswith(("uni", "use", "usu"))):
        return "an"
    return "a"


def _flip(number: str) -> str:
    return "pl" if number == "sg" else "sg"


class _Gen:
    """One random stream; the methods build phrases from it."""

    def __init__(self, rng: random.Random):
        self.r = rng

    # ---- small pieces ------------------------------------------------------------------
    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def det(self) -> str:
        return "the" if self.r.random() < 0.85 else self.choice(("my", "your", "our"))

    def adj(self, p: float = 0.2) -> list[str]:
        """No adjective, or one (probability p), or now and then two."""
        if self.r.random() >= p:
            return []
        if self.r.random() < 0.1:
            return [self.choice(L.ADJECTIVES), self.choice(L.ADJECTIVES)]
        return [self.choice(L.ADJECTIVES)]

    def noun_np(self, pool, number: str, p_adj: float = 0.2, det: str | None = None) -> NP:
        lemma = self.choice(pool)
        form = lemma if number == "sg" else L.plural(lemma)
        return NP([det or self.det()] + self.adj(p_adj) + [form], number, head=lemma)

    def intervener(self, number: str, pool=None, p_name: float = 0.15) -> NP:
        """A noun phrase between subject and verb; singular ones are sometimes names."""
        if number == "sg" and pool is None and self.r.random() < p_name:
            name = self.choice(_ALL_NAMES)
            return NP([name], "sg", head=name)
        return self.noun_np(pool or (_ANIMATE + _INANIMATE), number)

    # ---- agreement ---------------------------------------------------------------------
    def agreement(self, n_att: int, construction: str) -> tuple[dict, str]:
        r = self.r
        subj_number = "pl" if construction == "coord_subj" else self.choice(("sg", "pl"))
        animate = r.random() < 0.55
        if construction == "coord_subj":
            subj = NP([], "pl")
        elif subj_number == "sg" and animate and r.random() < 0.15:
            name = self.choice(_ALL_NAMES)
            subj = NP([name], "sg", head=name)
        else:
            subj = self.noun_np(_ANIMATE if animate else _INANIMATE, subj_number)

        words = list(subj.words)
        interveners: list[NP] = []

        def numbers(k: int) -> list[str]:
            opp = set(r.sample(range(k), n_att))
            return [_flip(subj_number) if i in opp else subj_number for i in range(k)]

        if construction == "simple":
            pass
        elif construction == "pp":
            k = r.randint(max(1, n_att), 4)
            for num in numbers(k):
                np_ = self.intervener(num)
                words += [self.choice(L.PP_PREPOSITIONS)] + np_.words
                interveners.append(np_)
        elif construction == "coord":
            n_conj, pre = r.randint(2, 3), int(r.random() < 0.3)
            while n_conj + pre < n_att:
                if n_conj < 3:
                    n_conj += 1
                else:
                    pre = 1
            k = n_conj + pre
            nums = numbers(k)
            if pre:
                np_ = self.intervener(nums[0])
                words += [self.choice(L.PP_PREPOSITIONS)] + np_.words
                interveners.append(np_)
            words.append(self.choice(L.PP_PREPOSITIONS))
            for i, num in enumerate(nums[pre:]):
                np_ = self.intervener(num)
                if i > 0:
                    words.append("and")
                words += np_.words
                interveners.append(np_)
        elif construction == "src":
            k = r.randint(max(1, n_att), 3)
            nums = numbers(k)
            words.append(("who" if animate and r.random() < 0.5 else "that") if animate
                         else self.choice(("that", "which")))
            verb = self.choice(L.VERBS_TRANS_ANIMATE if animate else L.VERBS_TRANS_INANIMATE)
            if r.random() < 0.7:
                words.append(L.third_singular(verb) if subj_number == "sg" else verb)
            else:
                words.append(L.past(verb))
            for i, num in enumerate(nums):
                np_ = self.intervener(num)
                if i > 0:
                    words.append(self.choice(L.PP_PREPOSITIONS))
                words += np_.words
                interveners.append(np_)
        elif construction == "orc":
            k = r.randint(max(1, n_att), 3)
            nums = numbers(k)
            rel = r.random()
            if rel < 0.3:
                pass  # reduced relative: "the book the students like"
            else:
                words.append("that" if rel < 0.8 else ("who" if animate else "which"))
            for i, num in enumerate(nums):
                if i == 0:  # the relative clause's subject: a person, an animal or a name
                    np_ = self.intervener(num, pool=_ANIMATE) if r.random() < 0.85 or num == "pl" \
                        else NP([self.choice(_ALL_NAMES)], "sg", head="")
                    np_.head = np_.head or np_.words[0]
                else:
                    np_ = self.intervener(num)
                if i > 0:
                    words.append(self.choice(L.PP_PREPOSITIONS))
                words += np_.words
                interveners.append(np_)
            verb = self.choice(L.VERBS_TRANS_ANIMATE)
            rc_number = interveners[0].number
            if r.random() < 0.7:
                words.append(L.third_singular(verb) if rc_number == "sg" else verb)
            else:
                words.append(L.past(verb))
        elif construction == "coord_subj":
            # a plural subject coordinating 2-3 noun phrases, then 0-2 prepositional phrases;
            # every singular noun in it is an attractor, every noun counts as intervening
            n_conj, n_pp = r.randint(2, 3), r.randint(0, 2)
            while n_conj + n_pp < n_att:
                if n_pp < 2:
                    n_pp += 1
                else:
                    n_conj += 1
            k = n_conj + n_pp
            sing = set(r.sample(range(k), n_att))
            for i in range(k):
                num = "sg" if i in sing else "pl"
                if i >= n_conj:
                    np_ = self.intervener(num)
                elif animate and num == "sg" and r.random() < 0.3:
                    name = self.choice(_ALL_NAMES)
                    np_ = NP([name], "sg", head=name)
                else:
                    np_ = self.noun_np(_ANIMATE if animate else _INANIMATE, num)
                if i >= n_conj:
                    words.append(self.choice(L.PP_PREPOSITIONS))
                elif i > 0:
                    words.append("and")
                words += np_.words
                interveners.append(np_)
            subj.head = interveners[0].head
        else:
            raise ValueError(f"unknown agreement construction {construction!r}")

        # The verb at the mask and what follows it.
        vt = r.random()
        if vt < 0.35:
            lemma, answer_sg, answer_pl = "be", "is", "are"
            tail = self.be_complement()
        elif vt < 0.45:
            lemma, answer_sg, answer_pl = "was", "was", "were"
            tail = self.be_complement()
        elif vt < 0.65:
            lemma, answer_sg, answer_pl = "have", "has", "have"
            tail = self.have_complement()
        else:
            lemma, tail = self.lexical_verb(animate)
            answer_sg, answer_pl = L.third_singular(lemma), lemma
        answer, wrong = (answer_sg, answer_pl) if subj_number == "sg" else (answer_pl, answer_sg)

        text = " ".join(words + [MASK] + tail) + "."
        n_attr = sum(np_.number != subj_number for np_ in interveners)
        assert n_attr == n_att, (construction, n_att, n_attr, text)
        key_other = interveners[-1].head if interveners else lemma + ":" + tail[0]
        item = {"text": text, "answer": answer, "wrong": wrong, "task": "agreement",
                "construction": construction, "n_attractors": n_attr,
                "n_intervening": len(interveners)}
        return item, f"agreement|{subj.head}|{key_other}"

    def be_complement(self) -> list[str]:
        x = self.r.random()
        if x < 0.45:
            return [self.choice(L.ADJECTIVES)]
        if x < 0.6:
            return [self.choice(("very", "quite", "not", "really", "so", "too")),
                    self.choice(L.ADJECTIVES)]
        return [self.choice(L.LOCATIVE_PREPOSITIONS)] + self.noun_np(
            L.OBJECT_NOUNS, self.choice(("sg", "pl")), det="the").words

    def have_complement(self) -> list[str]:
        x = self.r.random()
        noun = self.choice(L.OBJECT_NOUNS + L.ANIMAL_NOUNS)
        if x < 0.45:
            a = self.adj(0.7)
            first = (a or [noun])[0]
            return [_article(first)] + a + [noun]
        return [self.choice(("many", "no", "two", "three", "several", "some", "few"))] + \
            self.adj(0.3) + [L.plural(noun)]

    def lexical_verb(self, animate: bool) -> tuple[str, list[str]]:
        r = self.r
        trans = r.random() < 0.6
        if animate and trans:
            verb = self.choice(L.VERBS_TRANS_ANIMATE)
        elif animate:
            verb = self.choice(L.VERBS_INTRANS_ANIMATE)
        elif trans:
            verb = self.choice(L.VERBS_TRANS_INANIMATE)
        else:
            verb = self.choice(L.VERBS_INTRANS_INANIMATE)
        if trans:
            if r.random() < 0.2:
                tail = [self.choice(_ALL_NAMES)]
            else:
                tail = self.noun_np(_ANIMATE + _INANIMATE, self.choice(("sg", "pl")), det="the").words
        elif r.random() < 0.5:
            tail = [self.choice(L.ADVERBS)]
        else:
            tail = [self.choice(L.LOCATIVE_PREPOSITIONS)] + self.noun_np(
                L.OBJECT_NOUNS, self.choice(("sg", "pl")), det="the").words
        return verb, tail

    # ---- pronouns ----------------------------------------------------------------------
    def person(self, pclass: str, as_subject: bool, exclude: set[str]) -> NP:
        """A noun phrase whose possessive is `pclass`; names are never repeated in one item."""
        r = self.r
        if pclass in ("his", "her"):
            names = L.MALE_NAMES if pclass == "his" else L.FEMALE_NAMES
            if r.random() < 0.5:
                name = self.choice([n for n in names if n not in exclude] if exclude else names)
                return NP([name], "sg", pclass, head=name)
            np_ = self.noun_np(L.MALE_NOUNS if pclass == "his" else L.FEMALE_NOUNS, "sg",
                               p_adj=0.15, det="the")
            np_.pclass = pclass
            return np_
        if pclass == "its":
            np_ = self.noun_np(_NEUTER_SUBJECTS, "sg", p_adj=0.15, det="the")
            np_.pclass = "its"
            return np_
        # "their": plurals, coordinated names, and singular person nouns without grammatical
        # gender (singular they: "the author lost their book")
        x = r.random()
        if as_subject and x < 0.2:
            a, b = r.sample([n for n in _ALL_NAMES if n not in exclude], 2)
            return NP([a, "and", b], "pl", "their", head=a)
        if x > 0.75:
            np_ = self.noun_np(L.PERSON_NOUNS, "sg", p_adj=0.15, det="the")
            np_.pclass = "their"
            return np_
        np_ = self.noun_np(_PLURAL_SUBJECTS, "pl", p_adj=0.15, det="the")
        np_.pclass = "their"
        return np_

    def verb_form(self, lemma: str, subj: NP) -> str:
        if self.r.random() < 0.7:
            return L.past(lemma)
        return L.third_singular(lemma) if subj.number == "sg" else lemma

    def pronoun(self, n_att: int) -> tuple[dict, str]:
        r = self.r
        c = self.choice(L.POSSESSIVES)
        # modifier slots (0/1 noun) + predicate slots (0/1/2 nouns), at least n_att nouns in all
        mod, pred = self.choice(_PRONOUN_FRAMES[n_att])
        k = (mod != "none") + {"simple": 0, "about_coord": 2}.get(pred, 1)
        opp = set(r.sample(range(k), n_att))
        classes = [self.choice([x for x in L.POSSESSIVES if x != c]) if i in opp else c
                   for i in range(k)]

        used: set[str] = set()
        subj = self.person(c, True, used)
        used.update(w for w in subj.words if w in _NAME_SET)
        interveners: list[NP] = []

        def other(pc: str) -> NP:
            np_ = self.person(pc, False, used)
            used.update(w for w in np_.words if w in _NAME_SET)
            # an intervener of the subject's own class must be another entity
            if np_.words == subj.words:
                return other(pc)
            interveners.append(np_)
            return np_

        words = list(subj.words)
        ci = iter(classes)
        if mod == "pp":
            words += [self.choice(("with", "near", "beside", "behind"))] + other(next(ci)).words
        elif mod == "rc":
            words += ["that" if c == "its" else "who"]
            words += [self.verb_form(self.choice(L.VERBS_MEET), subj)] + other(next(ci)).words

        possessed_pool = L.OBJECT_NOUNS
        if pred == "simple":
            words.append(self.verb_form(self.choice(L.VERBS_POSSESSIVE_OBJECT), subj))
        elif pred in ("about", "about_coord"):
            v = self.choice(L.VERBS_TALK + ["tell"])
            if v == "tell":
                words.append(self.verb_form(v, subj))
            else:
                words += [self.verb_form(v, subj), "to"]
            words += other(next(ci)).words
            if pred == "about_coord":
                words += ["and"] + other(next(ci)).words
            words.append("about")
        elif pred == "ditrans":
            words.append(self.verb_form(self.choice(L.VERBS_DITRANSITIVE), subj))
            words += other(next(ci)).words
        elif pred == "meet":
            words.append(self.verb_form(self.choice(L.VERBS_MEET), subj))
            words += other(next(ci)).words
            words.append(self.choice(("in", "at", "near", "outside", "behind")))
            possessed_pool = _PLACES
        possessed = self.noun_np(possessed_pool, self.choice(("sg", "sg", "pl")), p_adj=0.2,
                                 det=MASK)
        words += possessed.words

        attractors = [np_ for np_ in interveners if np_.pclass != c]
        if attractors:
            wrong = attractors[-1].pclass
        elif c == "their" and subj.number == "sg":
            wrong = self.choice(("his", "her"))
        else:
            wrong = _OTHER_POSSESSIVE[c]
        if mod == "none":
            construction = pred
        elif pred == "simple":
            construction = mod
        else:
            construction = f"{mod}_{pred}"
        item = {"text": " ".join(words) + ".", "answer": c, "wrong": wrong, "task": "pronoun",
                "construction": construction, "n_attractors": len(attractors),
                "n_intervening": len(interveners)}
        assert len(attractors) == n_att
        key_other = interveners[-1].head if interveners else possessed.head
        return item, f"pronoun|{subj.head}|{key_other}"


def _one(gen: _Gen, task: str) -> tuple[dict, str]:
    r = gen.r
    if task == "agreement":
        n_att = r.randint(0, 4)
        feasible = [c for c in AGREEMENT_CONSTRUCTIONS
                    if not (c == "simple" and n_att > 0) and not (c in ("src", "orc") and n_att > 3)]
        return gen.agreement(n_att, gen.choice(feasible))
    if task == "pronoun":
        return gen.pronoun(r.randint(0, PRONOUN_CONSTRUCTIONS_MAX_ATTRACTORS))
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


def generate(task: str, n: int, seed: int, split: str = "train") -> list[dict]:
    """n items of `task` ("agreement" | "pronoun") for `split` ("train" | "test"), reproducible from
    `seed`. Attractor counts are sampled uniformly (agreement 0-4, pronoun 0-3). Test items are
    unique; training items may repeat."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    gen = _Gen(random.Random(f"attnviz-builtin|{task}|{split}|{seed}"))
    want_test = split == "test"
    out: list[dict] = []
    seen: set[str] = set()
    while len(out) < n:
        item, key = _one(gen, task)
        if _key_in_test(key) != want_test:
            continue
        if want_test:
            if item["text"] in seen:
                continue
            seen.add(item["text"])
        out.append(item)
    return out
