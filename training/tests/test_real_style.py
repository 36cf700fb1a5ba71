"""The real-style training items (training/real_style.py) are labelled right: checked by reading each sentence back
with plain rules (who is the main-clause subject, what number the head noun has), not by the
generator's own bookkeeping."""
from __future__ import annotations

import collections

import pytest

from training import lexicon as L
from training import real_style as R

MALE = ["john", "peter", "omar", "george", "luis"]
FEMALE = ["mary", "anna", "sofia", "linda", "grace"]
NOUNS = ["bridge", "clock", "garden", "letter", "window", "river", "tower", "church", "coin", "village"]
LISTS = R.Lists(male=MALE, female=FEMALE, surnames=["smith", "garcia", "brown"], nouns_sg=NOUNS)


def _sex_words():
    male = set(MALE) | set(R.MALE_TITLES) | {m for m, _ in L.GENDERED_PAIRS} | set(R.KIN["m"])
    female = set(FEMALE) | set(R.FEMALE_TITLES) | {f for _, f in L.GENDERED_PAIRS} | set(R.KIN["f"])
    return male, female


def _subject_segment(it):
    words = it["text"].lower().split()
    mask = words.index("[mask]")
    text = " ".join(words[:mask - 1])  # the words before the main verb's first word and [MASK]
    kind = it["construction"]
    if kind in ("rc", "whose", "appos"):
        return text.split(" , ")[0]
    if kind == "fronted":
        return text.split(" , ")[-1]
    if kind == "coord":  # "X grew up in Y and [began]": X is the words before the first verb
        first_verbs = {vp.split()[0] for vp in R.FIRST_VPS} | {"was", "were"}
        words = text.split()
        return " ".join(words[:next(i for i, w in enumerate(words) if i > 0 and w in first_verbs)])
    return text.split(" , ")[-1]  # "in 1900 , X": the last segment


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pronoun_items_refer_to_the_subject(seed):
    male, female = _sex_words()
    items = R.items("pronoun", 400, LISTS, seed)
    kinds = {it["construction"] for it in items}
    assert {"rc", "whose", "appos", "fronted"} <= kinds
    for it in items:
        assert it["text"].count("[MASK]") == 1
        seg = _subject_segment(it).split()
        sexes = {"m" for w in seg if w in male} | {"f" for w in seg if w in female}
        plural = " and " in f" {' '.join(seg)} " or any(w in R.PLURAL_PEOPLE for w in seg)
        if plural:
            assert it["answer"] == "their", it
        else:
            assert len(sexes) == 1, (it, seg)
            want = "his" if sexes == {"m"} else "her"
            assert it["answer"] == want and it["wrong"] == {"his": "her", "her": "his"}[want], it
            # every other person before the blank has the other sex
            words = it["text"].lower().split()
            rest = [w for w in words[:words.index("[mask]")] if w not in seg]
            own = male if want == "his" else female
            assert not [w for w in rest if w in own], it
        if it["n_attractors"] == 0:
            assert it["construction"] in ("simple", "year", "adv", "coord")


# --- first names the census lists lack (data/first_names_extra.tsv) ---

EXTRA_M, EXTRA_F = ["wolfgang", "johann", "giacomo"], ["ingeborg", "priya", "giuliana"]


def _check_subject_reading(items, male, female, extras, others_too=False) -> collections.Counter:
    """The plain reading of a pronoun item: a singular subject's words name one sex, and the answer is
    its pronoun (others_too: no other person of that sex before the blank). -> how often each name of
    `extras` appears in a subject."""
    seen = collections.Counter()
    for it in items:
        seg = _subject_segment(it).split()
        seen.update(w for w in seg if w in extras)
        plural = " and " in f" {' '.join(seg)} " or any(w in R.PLURAL_PEOPLE for w in seg)
        if plural:
            continue
        sexes = {"m" for w in seg if w in male} | {"f" for w in seg if w in female}
        assert len(sexes) == 1, (it, seg)
        want = "his" if sexes == {"m"} else "her"
        assert it["answer"] == want, it
        if others_too:
            words = it["text"].lower().split()
            rest = [w for w in words[:words.index("[mask]")] if w not in seg]
            assert not [w for w in rest if w in (male if want == "his" else female)], it
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_pronoun_items_with_extra_names_refer_to_the_subject(seed):
    """With extra first names the items stay right by the same plain reading (each extra name has the
    sex written in this test), the extras are drawn, and a subject's first name is an extra now and
    then, not always."""
    lists = R.Lists(MALE, FEMALE, LISTS.surnames, NOUNS, extra_male=EXTRA_M, extra_female=EXTRA_F)
    male, female = _sex_words()
    male, female = male | set(EXTRA_M), female | set(EXTRA_F)
    items = R.items("pronoun", 600, lists, seed)
    seen = _check_subject_reading(items, male, female, set(EXTRA_M + EXTRA_F), others_too=True)
    assert set(seen) == set(EXTRA_M + EXTRA_F)
    with_first = sum(any(w in MALE + FEMALE + EXTRA_M + EXTRA_F for w in _subject_segment(it).split()) for it in items)
    assert 0.1 * with_first < sum(seen.values()) < 0.6 * with_first


def test_extra_names_file_gives_each_name_one_sex():
    """data/first_names_extra.tsv: one sex per name, plain lowercase words; names any reader knows the
    sex of are on the right side, names given to both sexes in some country (Andrea, Jean, Nicola, Jan,
    Kim), the census names the generator already had (John, Mary) and common English words are not in
    it."""
    male, female = R.read_extra_names()
    assert len(male) > 1000 and len(female) > 1000
    assert not set(male) & set(female)
    assert all(n.isascii() and n.isalpha() and n.islower() and len(n) >= 3 for n in male + female)
    assert {"wolfgang", "friedrich", "johann"} <= set(male)
    assert {"priya", "beatrix"} <= set(female)
    assert not {"andrea", "jean", "nicola", "jan", "kim", "john", "mary"} & set(male + female)
    # English words that some locale lists as a first name are left out (a name drawn as "said jones")
    assert not {"said", "made", "ran", "less", "among", "odd", "media"} & set(male + female)


# --- a short list of common non-English first names (data/first_names_common.tsv) ---

def _tiny_corpus(tmp_path):
    """The files load_lists reads, in the format training/scripts/build_corpus.py writes them."""
    (tmp_path / "names_male.txt").write_text("\n".join(MALE) + "\n")
    (tmp_path / "names_female.txt").write_text("\n".join(FEMALE) + "\n")
    (tmp_path / "surnames.txt").write_text("smith\ngarcia\nbrown\n")
    (tmp_path / "nouns.txt").write_text("\n".join(NOUNS) + "\n")
    (tmp_path / "sentences.txt").write_text("".join(f"the {n} and the {L.plural(n)} were here .\n" * 3 for n in NOUNS))
    return tmp_path


def test_common_names_file_is_a_short_subset_of_the_extra_names():
    """data/first_names_common.tsv (scripts/build_common_names.py): one sex per name, each name on
    first_names_extra.tsv with the same sex (so the same filters hold), short enough that a 300-step
    run draws each name about twice (849 male, 771 female)."""
    male, female = R.read_extra_names(R.COMMON_NAMES)
    xm, xf = R.read_extra_names()
    assert (len(male), len(female)) == (849, 771)
    assert set(male) <= set(xm) and set(female) <= set(xf)
    assert not set(male) & set(female)
    assert all(n.isascii() and n.isalpha() and n.islower() and len(n) >= 3 for n in male + female)
    assert {"wolfgang", "klaus", "lars"} <= set(male) and not {"said", "made", "john"} & set(male + female)


@pytest.mark.parametrize("seed", [0, 1])
def test_common_names_option(tmp_path, seed):
    """load_lists(common_names=True) (train_real --common-names): the persons' first names are drawn from
    the common list now and then, the items stay right; off (the default), the lists and so the items
    are those of the census names alone; one list at a time."""
    corpus = _tiny_corpus(tmp_path)
    off, on = R.load_lists(corpus), R.load_lists(corpus, common_names=True)
    assert off.extra_male == off.extra_female == []
    assert R.items("pronoun", 300, off, seed) == R.items("pronoun", 300, R.load_lists(corpus, common_names=False), seed)
    cm, cf = R.read_extra_names(R.COMMON_NAMES)
    assert (on.extra_male, on.extra_female) == (cm, cf)
    male, female = _sex_words()
    male, female = male | set(cm), female | set(cf)
    items = R.items("pronoun", 600, on, seed)
    seen = _check_subject_reading(items, male, female, set(cm) | set(cf))
    assert len(seen) > 50  # many different common names as subjects
    with pytest.raises(ValueError):
        R.load_lists(corpus, extra_names=True, common_names=True)


def test_train_real_refuses_both_name_lists(tmp_path):
    from training import train_real
    with pytest.raises(SystemExit):
        train_real.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "o"), "--extra-names", "--common-names"])
    with pytest.raises(SystemExit):  # --hidden sizes a new model; fine-tuning keeps the model's own size
        train_real.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "o"), "--hidden", "192",
                         "--init", str(tmp_path)])


@pytest.mark.parametrize("seed", [0, 1])
def test_agreement_items_agree_with_the_head_noun(seed):
    sg, pl = set(NOUNS), {L.plural(n) for n in NOUNS}
    import random
    rng = random.Random(seed)
    for it in [R.stacked_agreement_item(rng, LISTS) for _ in range(400)]:
        words = it["text"].lower().split()
        assert words[0] == "the"
        head = words[2] if words[1] in L.ADJECTIVES else words[1]
        assert head in sg | pl, it
        number = "sg" if head in sg else "pl"
        # the answer is the verb form of the head's number: 3rd singular / plural
        a, w = it["answer"], it["wrong"]
        pairs = {("is", "are"), ("was", "were"), ("has", "have")} | {(L.third_singular(v), v) for v in R.LEXICAL}
        assert ((a, w) if number == "sg" else (w, a)) in pairs, it
        # attractors: the nouns between the head and [MASK] with the other number
        between = words[words.index(head) + 1:words.index("[mask]")]
        other = pl if number == "sg" else sg
        assert sum(x in other for x in between) == it["n_attractors"], it


# --- the news / encyclopedia-style agreement items (comma clauses, appositions, participles, names) ---

def _news_nouns():
    sg = set(NOUNS) | set(R.ROLES) | set(R.ORGS) | set(R.THINGS)
    pl = {L.plural(n) for n in sg} | set(R.GROUP_SUBJECTS)
    return sg, pl


def _singular_verb(v: str) -> bool:
    """is / was / has and third-person -s forms are singular; are / were / have and bare forms plural."""
    if v in ("is", "was", "has"):
        return True
    if v in ("are", "were", "have"):
        return False
    return v.endswith("s")


def _is_proper(tok: str) -> bool:
    return tok[:1].isupper()


def _read_news_item(it):
    """(head number, number of other-number nouns between the head and the verb), read from the text:
    the head is the first noun of the sentence (after "the", a plural quantifier such as "hundreds
    of", adjectives and hyphenated modifiers), or a proper name at the start; after it, every
    capitalised word run is one singular proper noun, every listed noun counts with its number."""
    sg, pl = _news_nouns()
    toks = it["text"].split()
    mask = toks.index("[MASK]")
    low = [t.lower() for t in toks]
    i = 0
    for q in R.PLURAL_QUANT:
        qs = q.split()
        if low[:len(qs)] == qs:
            i = len(qs)
            break
    common = i > 0 or low[0] == "the" or low[0] in pl or low[1] in pl
    if low[i] == "the":
        i += 1
    while common and low[i] not in sg | pl and (low[i] in L.ADJECTIVES or "-" in low[i] or low[i] in
                                                ("new", "former", "local", "national", "main", "senior", "foreign")):
        i += 1
    if common and low[i] in sg | pl:
        number, start = ("sg" if low[i] in sg else "pl"), i + 1
        if i > 0 and low[0] in [q.split()[0] for q in R.PLURAL_QUANT]:
            assert number == "pl", it
    else:  # a proper name: a run of capitalised words
        assert i == 0 and _is_proper(toks[0]), it
        j = 1
        while j < mask and _is_proper(toks[j]):
            j += 1
        number, start = "sg", j
    nouns = []
    j = start
    while j < mask:
        if _is_proper(toks[j]):
            while j + 1 < mask and _is_proper(toks[j + 1]):
                j += 1
            nouns.append("sg")
        elif low[j] in sg:
            nouns.append("sg")
        elif low[j] in pl:
            nouns.append("pl")
        j += 1
    return number, sum(n != number for n in nouns), low[start:mask]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_news_agreement_items_agree_with_the_head(seed):
    import random
    rng = random.Random(seed)
    items = [R.news_agreement_item(rng, LISTS) for _ in range(1500)]
    kinds = {it["construction"] for it in items}
    assert {"pp", "part", "src", "appos", "whose", "orc", "paren"} <= kinds
    assert {it["n_attractors"] for it in items} == {0, 1, 2, 3, 4}
    aux = {("is", "are"), ("was", "were"), ("has", "have")}
    lexical = {(L.third_singular(v), v) for v in R.LEX_NEWS}
    rel = dict(R.REL_VERBS)
    rel_pl = {p for _, p in R.REL_VERBS}
    sg_nouns, pl_nouns = _news_nouns()
    for it in items:
        assert it["text"].count("[MASK]") == 1
        number, n_other, between = _read_news_item(it)
        a, w = it["answer"], it["wrong"]
        assert ((a, w) if number == "sg" else (w, a)) in aux | lexical, it
        assert n_other == it["n_attractors"], it
        # a relative clause about the head ("which supplies" / "who face") agrees with the head too
        for x, word in enumerate(between[:-1]):
            if word in ("which", "who") and x > 0 and between[x - 1] == ",":
                v = between[x + 1]
                assert v in rel or v in rel_pl, it
                assert _singular_verb(v) == (number == "sg"), it
            if word == "whose":  # "whose players have ..." agrees with the whose-noun
                noun, v = between[x + 1], between[x + 2]
                assert noun in sg_nouns | pl_nouns, it
                assert _singular_verb(v) == (noun in sg_nouns), it
        # a verb form used in a frame is never also a listed noun (it would be miscounted)
        assert not ({v for pair in R.REL_VERBS for v in pair} & (sg_nouns | pl_nouns))


def test_agreement_items_mix_news_and_stacked_frames():
    items = R.items("agreement", 600, LISTS, 0)
    styles = {it["style"] for it in items}
    assert styles == {"news", "plain"}


def test_dev_sets_are_apart_from_the_test_sets():
    """The hand-written dev sets the training recipe was tuned on share no sentence with the real test
    sets, have the same fields, and cover 0-4 attractors evenly (agreement: plain and news style)."""
    import collections

    from attnviz.datasets import read_jsonl, set_path
    for dev_name, test_name in (("real_dev_agreement", "real_agreement"), ("real_dev_pronoun", "real_pronoun")):
        dev, test = read_jsonl(set_path(f"{dev_name}.jsonl")), read_jsonl(set_path(f"{test_name}.jsonl"))
        norm = lambda t: " ".join(t.lower().split())  # noqa: E731
        assert not {norm(i["text"]) for i in dev} & {norm(i["text"]) for i in test}
        assert {frozenset(i) for i in dev} == {frozenset(test[0])}
        counts = collections.Counter(i["n_attractors"] for i in dev)
        assert sorted(counts) == [0, 1, 2, 3, 4] and max(counts.values()) - min(counts.values()) <= 2
        for it in dev:
            assert it["text"].count("[MASK]") == 1 and it["answer"] != it["wrong"]
            if it["task"] == "agreement":
                assert it["style"] in ("plain", "news")
                sg = it["answer"] in ("is", "was", "has") or (it["answer"] not in ("are", "were", "have")
                                                             and it["answer"].endswith("s"))
                assert sg == (it["subject_number"] == "sg"), it


# --- appositions that tell the subject's sex ---
MALE_HEADS = {"son", "brother", "husband", "widower", "father", "nephew", "grandson", "uncle", "stepson", "fiance",
              "king", "prince", "duke", "emperor", "actor", "monk", "businessman", "policeman", "schoolboy",
              "waiter", "headmaster", "landlord", "chairman", "sportsman"}
FEMALE_HEADS = {"daughter", "sister", "wife", "widow", "mother", "niece", "granddaughter", "aunt", "stepdaughter",
                "fiancee", "queen", "princess", "duchess", "empress", "actress", "nun", "businesswoman",
                "policewoman", "schoolgirl", "waitress", "headmistress", "landlady", "chairwoman", "sportswoman"}


@pytest.mark.parametrize("seed", [0, 1])
def test_gendered_apposition_option(tmp_path, seed):
    """load_lists(gendered_appos=p) (train_real --gendered-appos p): about p of the singular pronoun
    items become "SUBJECT , <apposition> , verb [MASK] ..." items. Read back with plain rules: the
    apposition's head noun (the word before "of" / "from") has the answer's sex, every person after
    "of" the other sex, the subject is a bare surname or a person not of the other sex; p = 0 draws
    no such item."""
    corpus = _tiny_corpus(tmp_path)
    assert not [it for it in R.items("pronoun", 400, R.load_lists(corpus), seed) if it["construction"] == "sexed_appos"]
    items = R.items("pronoun", 2000, R.load_lists(corpus, gendered_appos=0.4), seed)
    sexed = [it for it in items if it["construction"] == "sexed_appos"]
    singular = [it for it in items if it["answer"] != "their"]
    assert 0.3 < len(sexed) / len(singular) < 0.5
    male, female = _sex_words()
    surnames = {"smith", "garcia", "brown"}
    kinds = collections.Counter()
    for it in sexed:
        words = it["text"].lower().split()
        assert words.count("[mask]") == 1 and it["answer"] in ("his", "her") and {it["answer"], it["wrong"]} == {"his", "her"}
        segs = it["text"].lower().split(" , ")
        subj, appos = segs[0], " , ".join(segs[1:-1])  # the last segment holds the verb and [MASK]
        assert "[mask]" in segs[-1] and "[mask]" not in appos
        link = " of " if " of " in appos else " from "
        head, rest = appos.split(link, 1)
        head = head.split()[-1]
        own, other = (MALE_HEADS, FEMALE_HEADS) if it["answer"] == "his" else (FEMALE_HEADS, MALE_HEADS)
        assert head in own and head not in other, it
        same, opposite = (male, female) if it["answer"] == "his" else (female, male)
        if rest not in R.PLACES:
            people = rest.replace(" and ", " , ").split(" , ")
            assert len(people) == it["n_attractors"] >= 1, it
            for person in people:  # a distractor: no word of the subject's sex, some word of the other's or a surname
                assert not set(person.split()) & same, it
                assert set(person.split()) & (opposite | surnames), it
            kinds["of"] += 1
        else:
            assert it["n_attractors"] == 0 and rest in R.PLACES, it
            kinds["place"] += 1
        assert subj in surnames or (not set(subj.split()) & opposite and set(subj.split()) & same), it
        kinds["surname" if subj in surnames else "person"] += 1
    assert min(kinds.values()) > 20, kinds
    with pytest.raises(ValueError):
        R.load_lists(corpus, gendered_appos=1.5)


@pytest.mark.parametrize("seed", [0, 1])
def test_sexed_contrast_option(tmp_path, seed):
    """load_lists(sexed_contrast=q) (train_real --sexed-contrast q): about q of the singular pronoun items
    with distractors become "SUBJECT , whom the <sexed noun> ... <verb> , verb [MASK] ...". Read back with
    plain rules: the word after "whom the" (or after one adjective) is a sexed noun of the other sex than
    the answer, the subject before the first comma names a person of the answer's sex, and no person
    after "whom" is of the answer's sex; q = 0 draws no such item."""
    corpus = _tiny_corpus(tmp_path)
    assert not [it for it in R.items("pronoun", 400, R.load_lists(corpus), seed) if it["construction"] == "sexed_contrast"]
    items = R.items("pronoun", 2000, R.load_lists(corpus, sexed_contrast=0.4), seed)
    sexed = [it for it in items if it["construction"] == "sexed_contrast"]
    eligible = [it for it in items if it["answer"] != "their" and it["n_attractors"] >= 1]
    assert 0.3 < len(sexed) / len(eligible) < 0.5
    male, female = _sex_words()
    for it in sexed:
        segs = it["text"].lower().split(" , ")
        subj, clause = segs[0], " , ".join(segs[1:-1])
        assert "[mask]" in segs[-1] and clause.startswith("whom the "), it
        same, opposite = (male, female) if it["answer"] == "his" else (female, male)
        words = clause.split()
        noun = words[2] if words[2] in male | female else words[3]  # "whom the [adjective] noun"
        assert noun in opposite and noun not in same, it
        assert set(subj.split()) & same and not set(subj.split()) & opposite, it
        assert not set(words) & same, it
        assert it["n_attractors"] >= 1
    with pytest.raises(ValueError):
        R.load_lists(corpus, sexed_contrast=-0.1)


# --- lexical verbs and their tails from corpus sentences ---

def test_verb_frames_read_finite_verbs_and_their_number():
    """verb_frames_from_corpus: a verb form counts after he / she / it (3rd singular), they (plural) or a
    determiner and a noun of its number; a next word that is an auxiliary, "of" or another verb rules it out
    (the form is a noun there), and so does a tail with a pronoun of a person or a finite verb of its own;
    both forms must be words of the vocabulary. Read back with plain lists."""
    sents = ["the river flows into the sea .", "it flows north .", "the wheels turn slowly .",
             "they turn left .", "the disk drives lie end-to-end .", "the bus stops are far apart .",
             "she runs her shop .", "the dog runs and barks .", "the dog runs fast .",
             "the cats sleep all day .", "he sleeps .", "the plans of the city are old ."]
    verbs = ["flow", "turn", "drive", "lie", "stop", "run", "sleep", "bark", "plan"]
    frames = dict(R.verb_frames_from_corpus(sents, verbs, ["river", "wheel", "disk", "bus", "dog", "cat", "city"]))
    assert frames == {"flow": ["into the sea .", "north ."], "turn": ["left .", "slowly ."], "run": ["fast ."],
                      "sleep": [".", "all day ."]}
    # "he sleeps ." gives the bare full stop; "the disk drives lie": drives is a noun; "she runs her shop": a
    # person's pronoun; "the dog runs and barks": a finite verb of its own; "the plans of": "of" follows
    vocab = {"flow", "flows", "turn", "turns", "run"}  # "runs" missing: run is left out
    assert sorted(dict(R.verb_frames_from_corpus(sents, verbs, ["river", "wheel", "dog", "cat"], vocab))) == ["flow", "turn"]


@pytest.mark.parametrize("seed", [0, 1])
def test_verb_frames_option(tmp_path, seed):
    """load_lists(verb_frames=r) (train_real --verb-frames r): about a share r of the agreement items end in a
    corpus verb and its tail; the answer is that verb in the subject's number (subject_number, which the
    frame items share with the item they replace), the wrong word the other number; r = 0 draws the
    agreement items unchanged; without verbs.txt a clear error."""
    corpus = _tiny_corpus(tmp_path)
    with open(corpus / "sentences.txt", "a") as f:
        f.write("it stands on a hill .\nthe towers stand near the sea .\nit remains open .\n")
    (corpus / "verbs.txt").write_text("stand\nremain\n")
    off = R.items("agreement", 400, R.load_lists(corpus), seed)
    assert R.items("agreement", 400, R.load_lists(corpus, verb_frames=0.0), seed) == off
    items = R.items("agreement", 400, R.load_lists(corpus, verb_frames=0.5), seed)
    frames = [it for it in items if it.get("verb") == "frame"]
    assert 0.35 < len(frames) / len(items) < 0.65
    forms = {"sg": {"stands", "remains"}, "pl": {"stand", "remain"}}
    for it in frames:
        assert it["answer"] in forms[it["subject_number"]], it
        assert it["wrong"] in forms["pl" if it["subject_number"] == "sg" else "sg"], it
        assert it["text"].endswith(("on a hill .", "near the sea .", "open .")), it
        assert it["construction"].endswith("_frame") and it["text"].count("[MASK]") == 1
    (corpus / "verbs.txt").unlink()
    with pytest.raises(FileNotFoundError):
        R.load_lists(corpus, verb_frames=0.5)


# --- more nouns whose meaning gives the sex ---

@pytest.mark.parametrize("seed", [0, 1])
def test_more_sexed_option(tmp_path, seed):
    """load_lists(more_sexed=q) (train_real --more-sexed q): a person's "the (adjective) noun" now and then
    takes one of MALE_MORE / FEMALE_MORE ("the widow", "the bridegroom"). Read back with plain rules: in the
    items with no distractor whose subject is "the [adjective] NOUN" with NOUN on one of the new lists, the
    answer is his for the male list and her for the female one; q = 0 draws the items of the generator
    without the option, item for item, and no new noun."""
    corpus = _tiny_corpus(tmp_path)
    new = set(R.MALE_MORE) | set(R.FEMALE_MORE)
    assert not set(R.MALE_MORE) & set(R.FEMALE_MORE)
    assert not new & ({w for p in L.GENDERED_PAIRS for w in p} | set(R.MALE_TITLES) | set(R.FEMALE_TITLES))  # not repeated
    assert {"widow", "bridegroom", "widower", "spinster"} <= new
    base = R.items("pronoun", 600, R.load_lists(corpus), seed)
    assert R.items("pronoun", 600, R.load_lists(corpus, more_sexed=0.0), seed) == base
    words = lambda its: {w for it in its for w in it["text"].lower().split()}  # noqa: E731
    assert not words(base) & new
    items = R.items("pronoun", 3000, R.load_lists(corpus, more_sexed=0.5), seed)
    checked = 0
    for it in items:
        w = it["text"].lower().split()
        if it["n_attractors"] or it["answer"] == "their" or w[0] != "the":
            continue
        noun = w[1] if w[1] in new else w[2] if w[2] in new else None
        if noun and w[w.index("[mask]") - 1] not in ("and",):
            assert it["answer"] == ("his" if noun in R.MALE_MORE else "her"), it
            checked += 1
    assert checked >= 20
    assert len(words(items) & new) >= 40
    with pytest.raises(ValueError):
        R.load_lists(corpus, more_sexed=1.5)
