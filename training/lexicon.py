"""Lexicon of the built-in synthetic English grammar.

Every word here is lowercase and becomes one whole-word entry of the built-in models' vocabulary.
Inflected forms are derived by small rules (`plural`, `third_singular`, `past`) with explicit
irregular tables; `all_word_forms()` lists every form the grammar can produce.
"""

from __future__ import annotations

from functools import lru_cache


def _words(block: str) -> list[str]:
    """Split a whitespace-separated block into words, keeping first-seen order, no duplicates."""
    seen: dict[str, None] = {}
    for w in block.split():
        seen.setdefault(w, None)
    return list(seen)


# --------------------------------------------------------------------------------------------
# Inflection rules
# --------------------------------------------------------------------------------------------

IRREGULAR_PLURALS = {
    "man": "men", "woman": "women", "child": "children", "person": "people", "mouse": "mice",
    "goose": "geese", "foot": "feet", "tooth": "teeth", "knife": "knives", "wife": "wives",
    "leaf": "leaves", "shelf": "shelves", "wolf": "wolves", "thief": "thieves", "scarf": "scarves",
    "loaf": "loaves", "calf": "calves", "half": "halves", "life": "lives", "gentleman": "gentlemen",
    "businessman": "businessmen", "businesswoman": "businesswomen", "policeman": "policemen",
    "policewoman": "policewomen", "fisherman": "fishermen", "chairman": "chairmen",
    "hero": "heroes", "potato": "potatoes", "tomato": "tomatoes", "echo": "echoes",
    "volcano": "volcanoes", "mosquito": "mosquitoes",
}


def plural(noun: str) -> str:
    """Plural of a count noun: irregular table, then -es / -ies / -s."""
    if noun in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def third_singular(verb: str) -> str:
    """Third-person singular present: have->has, go->goes, carry->carries, run->runs."""
    if verb == "have":
        return "has"
    if verb == "be":
        return "is"
    if verb.endswith(("s", "x", "z", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


IRREGULAR_PAST = {
    "be": "was", "have": "had", "do": "did", "go": "went", "run": "ran", "sleep": "slept",
    "swim": "swam", "sing": "sang", "fly": "flew", "fall": "fell", "sit": "sat", "stand": "stood",
    "leave": "left", "shine": "shone", "shake": "shook", "grow": "grew", "hide": "hid",
    "swing": "swung", "sink": "sank", "rise": "rose", "shrink": "shrank", "see": "saw",
    "find": "found", "know": "knew", "meet": "met", "buy": "bought", "sell": "sold", "read": "read",
    "write": "wrote", "eat": "ate", "drink": "drank", "catch": "caught", "throw": "threw",
    "hit": "hit", "hold": "held", "bring": "brought", "take": "took", "break": "broke",
    "steal": "stole", "forget": "forgot", "teach": "taught", "give": "gave", "tell": "told",
    "send": "sent", "lend": "lent", "make": "made", "keep": "kept", "lose": "lost", "win": "won",
    "spin": "spun", "draw": "drew", "build": "built", "say": "said", "speak": "spoke",
    "feel": "felt", "get": "got", "ride": "rode", "drive": "drove", "wear": "wore",
    "tear": "tore", "begin": "began", "choose": "chose", "cut": "cut", "put": "put",
    "hurt": "hurt", "feed": "fed", "lead": "led", "dig": "dug", "bite": "bit", "seek": "sought",
    "fight": "fought", "think": "thought", "spend": "spent", "cost": "cost", "hang": "hung",
    "blow": "blew", "freeze": "froze", "bend": "bent", "light": "lit", "shoot": "shot",
    "sweep": "swept", "weep": "wept", "creep": "crept", "dive": "dove", "bleed": "bled",
    "hear": "heard", "pay": "paid", "lay": "laid", "understand": "understood", "fit": "fit",
    "forgive": "forgave", "sting": "stung", "strike": "struck", "wake": "woke", "beat": "beat",
    "ring": "rang", "kneel": "knelt", "panic": "panicked", "stick": "stuck", "swear": "swore", "tread": "trod", "wind": "wound",
}

# Verbs that double their final consonant before -ed.
_DOUBLING = set(_words("""
    stop drop plan hug grab rob shop chat admit prefer rub trap wrap nod beg skip jog slip
    tap clap ship hop trip grip pat pet scrub knit permit regret control patrol nap drip
"""))


def past(verb: str) -> str:
    """Simple past: irregular table, doubling list, -d / -ied / -ed."""
    if verb in IRREGULAR_PAST:
        return IRREGULAR_PAST[verb]
    if verb in _DOUBLING:
        return verb + verb[-1] + "ed"
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


# --------------------------------------------------------------------------------------------
# Nouns
# --------------------------------------------------------------------------------------------

# (male, female) pairs of gendered person nouns.
GENDERED_PAIRS = [tuple(p.split("/")) for p in _words("""
    king/queen man/woman boy/girl father/mother brother/sister son/daughter uncle/aunt
    husband/wife nephew/niece grandfather/grandmother grandson/granddaughter prince/princess
    actor/actress waiter/waitress monk/nun duke/duchess emperor/empress hero/heroine
    host/hostess gentleman/lady boyfriend/girlfriend groom/bride steward/stewardess god/goddess
    wizard/witch landlord/landlady businessman/businesswoman policeman/policewoman
    schoolboy/schoolgirl headmaster/headmistress stepfather/stepmother dad/mom grandpa/grandma
    baron/baroness abbot/abbess lad/lass
""")]
MALE_NOUNS = [m for m, _ in GENDERED_PAIRS]
FEMALE_NOUNS = [f for _, f in GENDERED_PAIRS]

# Person nouns without grammatical gender (used in agreement; as plurals in pronoun items).
PERSON_NOUNS = _words("""
    teacher doctor student author farmer lawyer nurse pilot driver writer painter singer dancer
    artist baker banker builder cook chef clerk judge soldier officer sailor scientist engineer
    manager worker player coach guard guest neighbor friend child baby customer visitor tourist
    stranger leader senator mayor president minister professor editor reporter poet musician
    surgeon dentist pianist architect carpenter plumber thief prisoner patient parent cousin
    teenager adult citizen villager passenger runner swimmer climber gardener librarian secretary
    designer pupil tutor servant merchant trader owner buyer seller tenant traveler explorer
    researcher historian detective spy captain sheriff knight peasant shepherd miner butcher
    tailor barber kid person expert member partner colleague boss employee volunteer athlete
    champion critic fan winner neighbor rider hunter fisherman chairman photographer pharmacist
    mechanic electrician firefighter waiter journalist novelist director producer students
    lecturer scholar doctor intern cashier janitor courier messenger announcer referee umpire
    goalkeeper student apprentice inventor philosopher priest pilgrim prophet rebel robber
    sailor soldier vendor voter witness
""")
PERSON_NOUNS = [w for w in PERSON_NOUNS if w not in MALE_NOUNS + FEMALE_NOUNS and w != "students"]

ANIMAL_NOUNS = _words("""
    dog cat horse bird cow pig goat mouse rat rabbit fox wolf bear lion tiger elephant monkey
    donkey duck goose chicken owl eagle snake frog whale dolphin shark camel zebra giraffe
    kangaroo parrot spider bee ant butterfly puppy kitten pony turtle lizard squirrel bat crow
    swan penguin hamster insect worm beetle pigeon falcon hawk crab lobster bull
""")

OBJECT_NOUNS = _words("""
    key cabinet door book table chair box car house window picture letter bottle cup glass plate
    bowl spoon fork knife pen pencil paper bag hat coat shirt shoe boot sock dress jacket ring
    watch clock lamp bed sofa desk shelf drawer wall floor roof room kitchen garden fence gate
    road bridge tree flower leaf plant rock stone hill mountain river lake island beach field
    forest farm barn tower castle palace shop market office station airport train bus truck
    bike boat ship plane engine machine computer phone camera radio television screen button
    wire cable rope chain tool hammer nail brush mirror curtain carpet blanket pillow towel
    basket bucket candle map ticket coin card envelope package parcel gift toy ball doll kite
    drum guitar piano violin song story poem novel report file document photo painting
    statue sign flag wheel tire seat ladder pipe tank jar pot pan kettle oven stove sink
    sandwich cake cookie apple banana lemon potato tomato egg onion carrot pie pizza umbrella
    wallet purse suitcase backpack helmet glove scarf belt necklace bracelet crown sword shield
    arrow medal trophy prize cabin tent hut cottage apartment building street path tunnel
    balcony staircase garage yard pool fountain monument temple cathedral prison theater
    cinema stadium gym laboratory classroom hall corridor planet star moon cloud wave shell
    feather bone tooth notebook folder envelope magnet battery bulb switch socket keyboard
    tablet printer speaker microphone jug tray vase frame sculpture cushion mattress quilt
    closet cupboard counter stool bench bin sack crate barrel plan idea job day night morning
    evening week year holiday party meal dinner lunch breakfast problem question lesson game
    trip journey
""")

# Neuter singular subjects for the pronoun task (possessive "its").
INSTITUTION_NOUNS = _words("""
    company city country government university hospital museum school club bank factory
    hotel team army church restaurant newspaper magazine airline firm agency charity village
    town library shop store orchestra choir council museum
""")

ALL_COMMON_NOUNS = _words(" ".join(MALE_NOUNS + FEMALE_NOUNS + PERSON_NOUNS + ANIMAL_NOUNS
                                    + OBJECT_NOUNS + INSTITUTION_NOUNS))

# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------

_MALE_NAMES = _words("""
    john james robert michael william david richard joseph thomas charles christopher daniel
    matthew anthony donald steven paul andrew joshua kenneth kevin brian george timothy ronald
    edward jason jeffrey ryan jacob gary nicholas eric jonathan stephen larry justin scott
    brandon benjamin samuel gregory alexander patrick raymond jack dennis jerry tyler aaron jose
    adam nathan henry douglas zachary peter kyle ethan walter noah jeremy christian keith roger
    terry gerald harold sean austin carl arthur lawrence dylan jesse bryan billy joe bruce
    gabriel logan albert willie alan juan wayne elijah randy roy vincent ralph eugene russell
    bobby mason philip louis harry oliver leo oscar hugo felix victor martin simon luke ian neil
    colin owen liam lucas isaac caleb connor evan ivan omar ali ahmed hassan carlos diego luis
    miguel pedro marco paolo hans karl pierre klaus sven lars dmitri boris igor kenji hiroshi
    raj arjun vikram tom tim ben fred ted ned ray rob dan jim bob mike nick steve tony andy
    frederick theodore edgar ernest howard leonard stanley herbert chester milton clarence
    vernon lionel rupert angus duncan fergus hamish gordon stuart alistair desmond
""")
_FEMALE_NAMES = _words("""
    mary patricia jennifer linda elizabeth barbara susan jessica sarah karen nancy lisa betty
    margaret sandra ashley kimberly emily donna michelle dorothy carol amanda melissa deborah
    stephanie rebecca sharon laura cynthia kathleen amy shirley angela helen anna brenda pamela
    nicole emma samantha katherine christine debra rachel catherine carolyn janet ruth maria
    heather diane virginia julie joyce victoria olivia kelly christina lauren joan evelyn
    judith megan cheryl andrea hannah martha jacqueline frances gloria ann teresa kathryn sara
    janice alice madison doris abigail julia judy denise marilyn beverly danielle theresa
    sophia marie diana brittany natalie isabella charlotte alexis kayla lucy chloe zoe mia ella
    ava sophie clara eva ida nina vera irene agnes edith ellen esther fiona gina jane kate leah
    lena mona nora paula rita rosa sally tina wendy yvonne sofia elena ingrid greta heidi yuki
    priya aisha fatima leila carmen lucia isabel monica sue meg jill beth peggy molly polly
    bella stella gemma harriet louise matilda maud mabel nell ophelia penelope rosalind
    sylvia ursula winifred yolanda
""")

# Adjectives, adverbs and verbs are listed before names are filtered: a name that is also another
# word of the lexicon is dropped, so every word has one part of speech.

# --------------------------------------------------------------------------------------------
# Adjectives and adverbs
# --------------------------------------------------------------------------------------------

ADJECTIVES = _words("""
    big small old new red blue green yellow black white brown gray pink purple tall short long
    wide narrow heavy dark bright clean dirty cheap expensive hot cold warm cool wet dry soft
    smooth rough quiet loud fast slow young happy sad angry tired hungry thirsty busy lazy kind
    nice friendly rude polite clever smart stupid brave shy calm nervous proud rich poor famous
    strange beautiful pretty ugly handsome lovely strong weak healthy sick alive asleep awake
    ready empty full open closed broken fresh sweet sour bitter salty tasty delicious spicy fat
    thin deep shallow high low round flat sharp blunt safe dangerous useful useless important
    simple easy difficult modern ancient rare common popular private public free huge tiny
    little large enormous gentle wild tame wise foolish honest careful careless curious funny
    serious silly strict fair loyal jealous lonely lucky elegant fancy plain shiny dusty muddy
    rusty sunny rainy windy cloudy foggy icy snowy noisy crowded comfortable cozy spacious messy
    tidy neat fragile solid hollow precious valuable golden wooden woolen colorful pale
    brilliant excellent terrible horrible wonderful awful perfect normal usual unusual special
    secret hidden visible local foreign national royal rural urban northern southern eastern
    western cheerful grumpy sleepy clumsy fierce fluffy furry hairy bald blind deaf skinny slim
    elderly ordinary charming gorgeous adorable anxious ashamed bored excited scared worried
    upset generous greedy humble patient polite sensible stubborn talented cruel rare crisp
    sticky greasy frozen melted cracked bent torn faded stained spotless shabby sturdy flimsy
    narrow steep sandy rocky grassy leafy sleek bulky compact portable silent fearless
    graceful playful thoughtful helpful hopeful careful powerful peaceful dreadful grateful
    mighty gloomy merry jolly weird odd clear cloudy famous favorite fine huge
""")
ADJECTIVES = [a for a in ADJECTIVES if a not in ("patient",)]  # "patient" is a noun here

ADVERBS = _words("""
    quickly slowly quietly loudly often rarely happily sadly carefully badly well early late
    today here there again together alone outside inside daily sometimes gently softly proudly
    nervously calmly eagerly patiently politely rudely silently suddenly easily gladly
    brightly warmly loosely tightly smoothly safely bravely wisely
""")

# --------------------------------------------------------------------------------------------
# Verbs (base forms)
# --------------------------------------------------------------------------------------------

# Intransitive verbs for animate subjects; complement is an adverb or a prepositional phrase.
VERBS_INTRANS_ANIMATE = _words("""
    run walk sleep swim sing dance laugh cry smile shout jump sit stand wait work play rest talk
    arrive leave travel dream hide wander climb cough sneeze whisper yawn listen move fight pray
    complain cheer shiver sweat stumble hurry march skate ski relax nap snore sigh giggle blush
    frown kneel bow wink scream weep creep dive jog pause panic hesitate succeed vote
""")
# Intransitive verbs for inanimate subjects.
VERBS_INTRANS_INANIMATE = _words("""
    shine glow fall break shake burn float sink melt crack rattle shrink spin swing fade rust leak
    squeak vanish appear stop open close freeze bend tremble collapse drip glitter sparkle
    wobble creak
""")
# Transitive verbs for animate subjects.
VERBS_TRANS_ANIMATE = _words("""
    like love hate see watch want need find know meet visit help follow carry push pull open
    clean paint draw build buy sell read write eat drink cook chase catch throw kick hit hold
    bring take fix steal miss remember forget admire praise blame call greet invite thank trust
    fear teach feed wash touch guard protect hug kiss answer ask pay hear describe study
    borrow lift drop grab rob trap wrap pack unpack polish repair destroy choose order accept
    reject share check count measure weigh examine observe notice recognize ignore avoid
    prefer collect deliver carry explore enjoy obey serve support warn rescue save hire
    interview photograph record design
""")
# Transitive verbs for inanimate subjects.
VERBS_TRANS_INANIMATE = _words("""
    block cover contain hide touch reach support reflect resemble match fit face cost
    overlook surround hold protect
""")
# Past-tense verbs for the pronoun task.
VERBS_POSSESSIVE_OBJECT = _words("""
    lose find sell clean paint wash fix love like carry visit describe mention sell forget
    remember show check open close share hide miss keep leave
""")  # "S V [MASK] N"
VERBS_DITRANSITIVE = _words("show give send lend sell offer bring hand promise read teach")
VERBS_TALK = _words("talk speak write complain lie")  # "S V to O about [MASK] N"
VERBS_MEET = _words("meet see visit find leave call help kiss greet hug photograph")  # "S V O in [MASK] N"

ALL_VERBS = _words(" ".join(VERBS_INTRANS_ANIMATE + VERBS_INTRANS_INANIMATE + VERBS_TRANS_ANIMATE
                            + VERBS_TRANS_INANIMATE + VERBS_POSSESSIVE_OBJECT + VERBS_DITRANSITIVE
                            + VERBS_TALK + VERBS_MEET + ["tell", "be", "have"]))

# --------------------------------------------------------------------------------------------
# Function words
# --------------------------------------------------------------------------------------------

PREPOSITIONS = _words("to of near behind beside under above on in with from for by without "
                      "inside outside at about across along around into onto past")
PP_PREPOSITIONS = _words("to of near behind beside under above on in with from for by without")
LOCATIVE_PREPOSITIONS = _words("on in near behind under beside above inside outside")
DETERMINERS = _words("the a an my your our this that these those every some many no two three "
                     "several few all")
POSSESSIVES = ["his", "her", "its", "their"]
FUNCTION_WORDS = _words("""
    the a an and or but that who which whom is are was were has have had be been being do does
    did not very also too quite really so than then when while because if what where why how
    it he she they we you i me him us them my your our his her its their this these those
    every some many much more most no two three four five several few all both either neither
    one to of near behind beside under above on in with from for by without inside outside at
    about across along around into onto past there here lot
""")

# Names: drop any that collide with another word of the lexicon.
_OTHER_WORDS = set(ALL_COMMON_NOUNS) | set(ADJECTIVES) | set(ADVERBS) | set(ALL_VERBS) | set(
    FUNCTION_WORDS)
MALE_NAMES = [n for n in _MALE_NAMES if n not in _OTHER_WORDS and n not in _FEMALE_NAMES]
FEMALE_NAMES = [n for n in _FEMALE_NAMES if n not in _OTHER_WORDS and n not in _MALE_NAMES]


@lru_cache(maxsize=None)
def all_word_forms() -> tuple[str, ...]:
    """Every word form the grammar can produce (sorted, unique)."""
    forms: set[str] = set(FUNCTION_WORDS) | set(ADJECTIVES) | set(ADVERBS)
    forms |= set(MALE_NAMES) | set(FEMALE_NAMES)
    for n in ALL_COMMON_NOUNS:
        forms.add(n)
        forms.add(plural(n))
    for v in ALL_VERBS:
        forms.update((v, third_singular(v), past(v)))
    forms.update(("is", "are", "was", "were", "has", "have", "had"))
    return tuple(sorted(forms))
