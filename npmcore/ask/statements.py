"""A question as the statements it stands for: "Where was Lionel Messi born?" -> "Lionel Messi was born in [MASK].".

NPM was trained on sentences with spans masked, and reads a statement far better than a question. A question is
rewritten by rules over its words' part-of-speech tags and its wh-phrase, as :mod:`npmcore.ask.questions` reads
them, its verbs inflected with lemminflect's tables: nothing is downloaded.

The rules follow English wh-questions:

* the wh-phrase (``who``, ``what``, ``which river``, ``how many moons``, ``in which year``, ``whose painting``)
  is found at the start (after a fronted preposition, or an adverbial ending with a comma: "In 1969, who walked on
  the moon?") or in place ("The song X is from which year?": the phrase becomes the mask);
* a wh-phrase followed by its verb is the subject: "Who wrote Hamlet?" -> "[MASK] wrote Hamlet." and, where the
  verb has an object, its passive "Hamlet was written by [MASK].";
* otherwise an auxiliary comes before the subject, and goes after it: "did X sing Y" -> "X sang Y", "does X have"
  -> "X has", "was X born" -> "X was born"; the mask fills the gap the wh-phrase left: after a stranded preposition
  ("Which country is Timbuktu in?" -> "Timbuktu is in [MASK]."), as the verb's object ("What did Bell invent?" ->
  "Bell invented [MASK]."), as a copula's complement ("What is the capital of Australia?" -> "The capital of
  Australia is [MASK]."), after "in" for a place or a time ("When did X die?" -> "X died in [MASK]."), before its
  noun for "how many" ("Mars has [MASK] moons.").

A question the rules cannot read (a yes/no question, "why", "how did") makes no statement: it is asked as the
paper asks questions (:func:`npmcore.ask.asking.question_query`).
"""

import re
from dataclasses import dataclass

from npmcore.ask.questions import (
    BE,
    DO,
    HAVE,
    MODALS,
    NOUNISH,
    PERSON,
    PLACE,
    WH_WORDS,
    Expect,
    Token,
    WhPhrase,
    inflected,
    is_auxiliary,
    is_verb_tagged_noun,
    is_verbal,
    known_verb_lemmas,
    noun_end,
    span,
    tag,
    verb_base_form,
    wh_phrase,
)
from npmcore.mask import MASK

NP_END = frozenset({"NN", "NNS", "NNP", "NNPS", "CD", '"', ")"})  # how an object ends
NP_START = NOUNISH | {"DT", "PRP", "PRP$", "EX", '"', "(", "PDT"}
# what cannot start the subject after "be" or "have": "Who is [married] to X?" asks for the subject
NOT_SUBJECT = frozenset({"VBN", "VBG", "VBD", "IN", "TO", "RB", "RBR", "JJ", "JJR", "JJS", ",", ".", "MD", "CC"})
# what ends a copula's clause: "born", "famous", "located", "best known", "set up"
PREDICATE = frozenset({"VBN", "VBD", "VBG", "JJ", "JJR", "JJS", "RB", "RBS", "RP"})
BEFORE_NOUN = frozenset({"DT", "JJ", "PRP$", "POS"})  # a word after these is a noun ("the [turn] of the screw")
BEFORE_OBJECT = frozenset({"IN", "DT", "TO", "PRP$", "POS"})  # a word after these is an object, not a predicate
# where a predicate starts after a name: "Cleveland [at] the mouth of" (not "of", "for": "the Bank of England")
LOCATIVES = frozenset({"at", "on", "near", "along", "beside", "off", "inside", "outside", "under", "above", "below"})
PARTICLES = frozenset({"out", "up", "off", "down", "back", "away", "together", "apart"})  # "come out": no gap after
SUBORDINATORS = frozenset({"when", "while", "whilst", "after", "before", "because", "although", "though", "until"})
ADVERBS = frozenset({"first", "last", "once", "also", "later", "originally", "mostly", "mainly", "usually", "still"})
# verbs that name: "What was X called?" -> "X was called [MASK].", "what do they call X" -> "they call X [MASK]"
NAMING = frozenset({"call", "name", "nickname", "title", "rename", "dub", "term", "label"})
INTRANSITIVE = frozenset(  # no passive: "Which book comes after X?" is not "X is come by [MASK]"
    {"come", "go", "live", "die", "lie", "stay", "arrive", "happen", "occur", "exist", "sit", "stand", "fall", "rise"}
    | {"flow", "remain", "seem", "appear", "belong", "originate", "emigrate", "retire", "work", "become"}
)


@dataclass(frozen=True)
class Stated:
    """What a question stands for."""

    statements: tuple[str, ...]  # each with one [MASK], the likeliest first; () where the rules cannot read it
    expects: Expect | None = None  # the kind of answer its wh-phrase asks for, where it says (fits)
    kind: str | None = None  # the kind of thing it asks for (WhPhrase.asks_for): a person, a place, a river


def state(question: str) -> Stated:
    """The statements ``question`` stands for and the kind of answer it asks for (:mod:`npmcore.ask.statements`)."""
    text = question.strip()
    if len(text) > 1 and text[0] == text[-1] == '"':  # a question quoted whole, its own quotes doubled (CSV's way)
        text = text[1:-1].replace('""', '"')
    text = re.sub(r"(?i)\b(what|who|where|when|how)s\b", r"\1's", text.rstrip("?!. ").strip())  # "whats"
    tokens = tag(text)
    at = next((i for i, t in enumerate(tokens) if t.lower in WH_WORDS), None)
    if at is None:
        return Stated(())
    lead, preposition = "", None
    if at == 1 and tokens[0].tag in ("IN", "TO"):
        preposition = tokens[0]
    elif at > 0 and tokens[at - 1].text == ",":
        lead = text[: tokens[at - 1].end]  # a fronted adverbial: "In 1969,"
    elif at > 0:
        wh = wh_phrase(tokens, at, None)
        made = _finished(text, _in_place(text, tokens, at, wh))
        return Stated(made) if wh is None else Stated(made, wh.expects, wh.asks_for)
    wh = wh_phrase(tokens, at, preposition)
    if wh is None:
        return Stated(())
    made = _finished(text, [f"{lead} {s}" if lead else s for s in _rewritten(text, tokens, wh)])
    made = _finished(text, [*made, *_naming(made, wh.asks_for, lead), *other_ways(made)])
    return Stated(made, wh.expects, wh.asks_for)


def other_ways(made: tuple[str, ...]) -> list[str]:
    """The ways passages say a statement that the rules do not: a copula turned round ("The capital of Mongolia is
    [MASK]." -> "[MASK] is the capital of Mongolia."), an owner's "of" ("Argentina's capital is [MASK]." -> "The
    capital of Argentina is [MASK]."), a name called ("The name of our galaxy is [MASK]." -> "Our galaxy is called
    [MASK]."), a count with "there" ("[MASK] planets are in the solar system." -> "There are [MASK] planets in the
    solar system.")."""
    out = []
    for statement in made:
        named = re.match(r"^The name of (.+) (is|was) \[MASK\]\.$", statement)
        if named:  # "The name of X's company is [MASK]." -> "X's company is called [MASK]."
            out.append(f"{named.group(1)[:1].upper()}{named.group(1)[1:]} {named.group(2)} called {MASK}.")
        owned = re.match(r"^(\w[\w\s.-]*?)['’]s ([\w\s-]+?) (is|was|are|were) \[MASK\]\.$", statement)
        if owned and " of " not in owned.group(1) and not owned.group(1).startswith("The "):
            statement = f"The {owned.group(2)} of {owned.group(1)} {owned.group(3)} {MASK}."
            out.append(statement)
        copula = re.match(r"^The (.+?) (is|was|are|were)(?: called| named| known as)? \[MASK\]\.$", statement)
        if copula and MASK not in copula.group(1):
            out.append(f"{MASK} {copula.group(2)} the {copula.group(1)}.")
        counted = re.match(r"^\[MASK\] (\w+) (are|were) (in|on|at) (.+)$", statement)
        if counted:
            out.append(f"There {counted.group(2)} {MASK} {counted.group(1)} {counted.group(3)} {counted.group(4)}")
    return out


def _naming(made: tuple[str, ...], kind: str | None, lead: str) -> tuple[str, ...]:
    """The statements that keep the wh-phrase's noun, which the mask took: "[MASK] flows through Baghdad." -> "The
    river that flows through Baghdad is [MASK].", "They speak [MASK] in brazil." -> "The language that they speak in
    brazil is [MASK]." (a noun, not a person or a place: the passages name those; not where the clause would end with
    its copula, "a koala is")."""
    if kind is None or kind in (PERSON, PLACE) or lead:
        return ()
    out = []
    for statement in made:
        if f"{MASK}'" in statement or f"{MASK}’" in statement:  # "[MASK]'s orbit": the mask is an owner
            continue
        clause = " ".join(statement.rstrip(".").replace(MASK, " ").split())
        if re.search(r"(?i)\b(?:is|are|was|were)$", clause) or len(clause.split()) < 2:
            continue
        clause = re.sub(r"^(A|An|The|They|It|There) ", lambda m: f"{m.group(1).lower()} ", clause)
        out.append(f"The {kind} that {clause} is {MASK}.")
    return tuple(dict.fromkeys(out))


def _finished(text: str, made: list[str]) -> tuple[str, ...]:
    """Each statement capitalised, ending with a full stop, with one mask; duplicates and the question itself out."""
    out = []
    for s in made:
        s = " ".join(s.split())
        s = s[:1].upper() + s[1:]
        if not re.search(r"[.!\"'”’)]$", s):
            s += "."
        if s.count(MASK) == 1 and s not in out and s != text:
            out.append(s)
    return tuple(out)


def _rewritten(text: str, tokens: list[Token], wh: WhPhrase) -> list[str]:
    """The statements of a question that starts with its wh-phrase; a clause after it ("when he died") is kept at
    the end."""
    rest = tokens[wh.end :]
    cut = next((i for i, t in enumerate(rest) if 1 < i < len(rest) - 2 and t.lower in SUBORDINATORS), len(rest))
    if cut < len(rest):
        clause = text[rest[cut].start :]
        return [f"{s} {clause}" for s in _rewritten(text[: rest[cut].start].rstrip(" ,"), tokens[: wh.end + cut], wh)]
    if not rest:
        return []
    if is_verb_tagged_noun(rest[0]):  # "What river [flows] into X?": the statement reads it as the verb it is
        rest[0] = Token(rest[0].text, "VBZ", rest[0].start, rest[0].end)
    first = rest[0]
    first_is_be = first.lower in BE and first.tag != "POS"
    first_is_aux = first_is_be or first.lower in DO or first.lower in HAVE or first.lower in MODALS
    if first_is_aux and len(rest) > 1 and rest[1].lower not in ("n't", "not"):
        checked = first_is_be or first.lower in HAVE  # "Who is married to X?", "Who has won X?": the subject is asked
        second = rest[1]
        third = rest[2] if len(rest) > 2 else None
        named = third is not None and (third.tag in NP_END or (second.tag == "VBG" and third.tag == "VBN"))
        named = named and not (second.tag == "VBN" and third.tag not in ("NN", "NNS"))  # "is called [Joual]"
        adjective = second.tag in ("JJ", "VBG", "VBN") and (second.text[:1].isupper() or named)  # "united nations"
        if not checked or second.tag not in NOT_SUBJECT or adjective:  # "Romanian", "notable works": a subject
            made = _inverted(text, rest, wh)
            if made is not None:
                return made
    adverb = (first.tag == "RB" or first.lower in ADVERBS) and len(rest) > 1 and is_verbal(rest[1])  # "who first X"
    if first.tag.startswith("VB") or first.tag == "MD" or first_is_aux or adverb:
        return _as_subject(text, rest, wh)
    if wh.kind == "how-many" and first.tag in ("IN", "TO", "RP"):
        return [f"there are {MASK} {span(text, wh.noun)} {span(text, rest)}"]  # "how many episodes in season 3"
    return []


def _as_subject(text: str, rest: list[Token], wh: WhPhrase) -> list[str]:
    """The wh-phrase is the subject: its place takes the mask ("Who wrote Hamlet?" -> "[MASK] wrote Hamlet."),
    and where the verb has an object, the passive asks it too ("Hamlet was written by [MASK].")."""
    if wh.kind in ("where", "when", "how-adj"):
        return []
    subject = f"{MASK} {span(text, wh.noun)}" if wh.kind in ("how-many", "how-much") else wh.gap(text)
    made = [f"{subject} {span(text, rest)}"]
    if subject == MASK:
        made += _passive(text, rest)
    return made


def _passive(text: str, rest: list[Token]) -> list[str]:
    """ "wrote Hamlet" -> "Hamlet was written by [MASK]" (a past or present verb and its object; a phrase after the
    object, "in 1928", kept after the mask)."""
    verb = rest[0]
    lemma = verb_base_form(verb.text)
    if verb.tag not in ("VBD", "VBN", "VBZ", "VBP") or is_auxiliary(verb) or lemma in INTRANSITIVE:
        return []
    end = 1
    while end < len(rest) and (rest[end].tag not in ("IN", "TO", ",", "WDT", "WP", "WRB") or rest[end].lower == "of"):
        end += 1
    obj = rest[1:end]
    if not obj or obj[0].tag not in NP_START or obj[-1].tag not in NP_END:
        return []
    head = next((obj[k - 1] for k in range(1, len(obj)) if obj[k].lower == "of"), obj[-1])  # "the lyrics of X"
    plural = head.tag in ("NNS", "NNPS")
    past = verb.tag in ("VBD", "VBN")
    if past:
        be = "were" if plural else "was"
    else:
        be = "are" if plural else "is"
    return [f"{span(text, obj)} {be} {inflected(lemma, 'VBN')} by {MASK} {span(text, rest[end:])}"]


def _stranded(words: list[Token]) -> int | None:
    """The preposition the wh-phrase left behind ("Which country is Timbuktu [in]?", "made governor [of] in
    1788"): one at the end or before another preposition; None when there is none."""
    for k in range(len(words) - 1, 0, -1):
        t = words[k]
        if t.tag in ("IN", "TO") and t.lower not in PARTICLES:
            if k == len(words) - 1 or words[k + 1].tag in ("IN", "TO"):
                return k
    return None


def _inverted(text: str, rest: list[Token], wh: WhPhrase) -> list[str] | None:
    """An auxiliary before its subject ("did X sing", "was X born", "is the capital of Y"); None where no subject
    and verb are found."""
    aux, words = rest[0], rest[1:]
    stranded = _stranded(words)
    if aux.lower in BE:
        return _copula(text, aux, words, stranded, wh)
    perfect = aux.lower in HAVE
    verbs = ("VBN", "VBD") if perfect else ("VB", "VBP")
    at = next(
        (i for i, t in enumerate(words) if i > 0 and t.tag in verbs and words[i - 1].tag not in BEFORE_NOUN), None
    )
    if at is None and not perfect:  # tagged loosely: any verb after the subject, or a verb's base tagged a noun
        at = next((i for i, t in enumerate(words) if i > 0 and t.tag.startswith("VB")), None)
        bases = [i for i in range(1, len(words)) if _is_base_verb(words, i)]
        bases_after_name = [i for i in bases if words[i - 1].tag in ("NNP", "NNPS", "PRP", "RB")]
        if at is None and bases_after_name:  # the first after a name: "did Alan Sokal [fool]"
            at = bases_after_name[0]
        elif at is None and bases:
            at = bases[-1]
        if at is None and stranded == len(words) - 1 and words[-1].lower in known_verb_lemmas(words[-1].lower):
            at, stranded = stranded, None  # "what shells do hermit crabs like": a verb tagged as a preposition
    if at is not None and at > 2 and words[at - 1].tag == "TO" and known_verb_lemmas(words[at - 2].lower):
        at -= 2  # the verb before an infinitive: "did X [want] to become", "does a wave [need] to travel"
    if at is None:
        if (perfect and wh.kind != "how-many") or aux.lower in DO:  # the clause's own verb: "Who did the voice"
            return _as_subject(text, rest, wh)
        if perfect:  # "How many children has X?" -> "X has [MASK] children."
            end = noun_end(words, 0)
            return [_filled(text, words[:end], aux.text, words[end:], _shifted(stranded, end), wh)] if end else []
        return None
    subject, verb = words[:at], words[at]
    verb_end = at + 1
    if verb_end + 1 < len(words) and words[verb_end].tag == "TO" and known_verb_lemmas(words[verb_end + 1].lower):
        after = verb_end + 2  # an infinitive without an object of its own asks for it: "X wanted to become [MASK]"
        if after < len(words) and words[after].tag == "VBN":
            after += 1  # "began to be called [MASK]"
        if after == len(words) or after == stranded or words[after].tag in ("IN", "TO", "RB", "RP"):
            verb_end = after  # (else the gap is the verb's own: "X defeated [MASK] to win his first title")
    if (
        verb_end < len(words)
        and verb_end != stranded
        and (words[verb_end].tag == "RP" or words[verb_end].lower in PARTICLES)
    ):
        verb_end += 1  # "give up", "come out"
    verb_text = span(text, words[at:verb_end])
    if aux.lower in DO:  # the verb's base form after "do" ("did Liu Bei found" -> "founded", not "find"'s past)
        base = verb.lower if verb.lower in known_verb_lemmas(verb.lower) else verb_base_form(verb.text)
        verb_text = inflected(base, DO[aux.lower]) + verb_text[len(verb.text) :]
    else:
        verb_text = f"{aux.text} {verb_text}"  # "will win", "has directed"
    return [_filled(text, subject, verb_text, words[verb_end:], _shifted(stranded, verb_end), wh)]


def _shifted(stranded: int | None, by: int) -> int | None:
    return None if stranded is None or stranded < by else stranded - by


def _is_base_verb(words: list[Token], i: int) -> bool:
    """Whether ``words[i]``, tagged a noun or an adjective, is a verb's base form after its subject ("did Queen
    Victoria reign", "did X first encounter")."""
    t, before = words[i], words[i - 1]
    after_subject = before.tag not in BEFORE_NOUN or before.lower in ADVERBS
    return t.tag in ("NN", "JJ") and after_subject and t.lower in known_verb_lemmas(t.lower)


def _copula(text: str, aux: Token, words: list[Token], stranded: int | None, wh: WhPhrase) -> list[str]:
    """ "be" before its subject: the predicate ends the clause ("born", "famous for", a stranded "in", "called in
    English") and the subject is what comes before it ("Where was Lionel Messi born?" -> "Lionel Messi was born in
    [MASK].")."""
    be = "is" if aux.lower in ("'s", "’s") else aux.text
    if words[0].tag == "EX":  # "How many moons are there around Mars?", "What village was there before X?"
        asked = f"{MASK} {span(text, wh.noun)}" if wh.kind == "how-many" else wh.gap(text)
        return [f"there {be} {asked} {span(text, words[1:])}"] if wh.kind in ("who", "how-many") else []
    limit = len(words) if stranded is None else stranded
    end = limit
    while end > 1 and (words[end - 1].tag in PREDICATE or words[end - 1].lower in PARTICLES):
        before, word = words[end - 2], words[end - 1]
        described = before.tag in ("JJ", "JJR") and before.lower not in ADVERBS and word.tag in ("VBG", "JJ", "JJR")
        if before.tag in BEFORE_OBJECT or described:  # "the housefly", "for stuttering", "great awakening": an object
            break
        end -= 1
    if end == limit:
        participle = next((k for k in range(1, limit) if _is_participle(words, k)), None)
        if participle is not None:  # "Sápmi traditionally called in English", "Pompey defeated by Caesar"
            end = participle
            while end > 1 and words[end - 1].tag == "RB":
                end -= 1
        elif stranded is not None or wh.kind in ("where", "when") or wh.preposition:  # "X a member of"
            end = next((k for k in range(1, limit) if _starts_predicate(words, k, stranded is not None)), limit)
    subject, predicate = words[:end], words[end:]
    if wh.kind == "how-adj":
        return [] if predicate else [f"{span(text, subject)} {be} {MASK} {wh.noun[0].text}"]  # "X is [MASK] old"
    if wh.kind == "how-many":
        return []
    return [_filled(text, subject, be, predicate, _shifted(stranded, end), wh, copula=True)]


def _is_participle(words: list[Token], k: int) -> bool:
    """Whether ``words[k]`` is a participle after the subject ("Pompey [defeated] by", "autonomy [recognised] by")."""
    before = words[k - 1].tag
    if words[k].tag == "VBN":
        return before != "DT"
    return words[k].tag == "VBD" and before in ("NN", "NNS", "NNP", "NNPS")


def _starts_predicate(words: list[Token], k: int, has_stranded: bool) -> bool:
    """Whether a predicate starts at ``words[k]`` after the subject's noun: "X [a member] of", "X [sharing] borders
    with", and, where a preposition is stranded (``has_stranded``), after a name: "the Qikiqtaaluk Region [part] of"."""
    before, word = words[k - 1].tag, words[k].tag
    after_name = has_stranded and before in ("NNP", "NNPS") and (word == "NN" or words[k].lower in LOCATIVES)
    return (before in NOUNISH and word in ("DT", "PRP$", "VBG", "VBN")) or after_name


def _filled(
    text: str,
    subject: list[Token],
    verb: str,
    after: list[Token],
    stranded: int | None,
    wh: WhPhrase,
    copula: bool = False,
) -> str:
    """The statement: its subject, its verb group and what follows, the mask where the wh-phrase's gap is
    (``stranded``: the index in ``after`` of the preposition left behind)."""
    head = f"{span(text, subject)} {verb}"
    after_text = span(text, after)
    gap = wh.gap(text)
    if stranded is not None:  # "Which country is Timbuktu in?"
        return f"{head} {span(text, after[: stranded + 1])} {gap} {span(text, after[stranded + 1 :])}"
    if wh.kind == "how-many":
        return f"{head} {MASK} {span(text, wh.noun)} {after_text}"
    if wh.kind == "how-much":
        return f"{head} {MASK} {after_text}"
    if wh.kind == "how-adj":  # "How long did X reign?" -> "X reigned for [MASK]."
        return f"{head} {after_text} for {MASK}" if wh.noun[0].lower == "long" and not copula else ""
    if wh.preposition is not None:  # "In which year was X crowned?"
        return f"{head} {after_text} {wh.preposition.text.lower()} {gap}"
    naming = next((k for k, t in enumerate(after) if t.tag.startswith("VB") and verb_base_form(t.text) in NAMING), None)
    found_in = wh.expects in ("place", "time")  # a place or a time is found after "in"
    if copula and naming is not None and not found_in:  # "What is X traditionally called in English?"
        return f"{head} {span(text, after[: naming + 1])} {gap} {span(text, after[naming + 1 :])}"
    # the verb group's own verb ("will [happen]", "has [directed]"): its first word no auxiliary and no particle
    lemma = next(
        (verb_base_form(w) for w in verb.split() if not is_auxiliary(Token(w, "", 0, 0)) and w not in PARTICLES), ""
    )
    still = copula or (not after and lemma in INTRANSITIVE)  # "What city was X born?", "What city did X die?"
    if wh.kind in ("where", "when") or wh.expects == "time" or (found_in and still):
        return f"{head} {after_text} in {gap}"
    if copula:  # "What is the capital of Australia?" -> "The capital of Australia is [MASK]."
        return f"{head} {after_text} {gap}"
    if after and lemma in NAMING:  # "what do they call a machete" -> "they call a machete [MASK]"
        name_end = noun_end(after, 0)
        return f"{head} {span(text, after[:name_end])} {gap} {span(text, after[name_end:])}"
    return f"{head} {gap} {after_text}"  # the verb's object: "X married [MASK] in 1954."


def _in_place(text: str, tokens: list[Token], at: int, wh: WhPhrase | None) -> list[str]:
    """A wh-phrase inside a statement ("The song X is from which year?"): the phrase becomes the mask."""
    if wh is None or wh.kind == "how-adj":
        return []
    if not wh.noun and wh.end < len(tokens):  # "fibres [which] are": a relative clause, not a question
        return []
    before = text[: tokens[at].start].rstrip()
    after = text[tokens[wh.end - 1].end :].strip()
    if wh.kind == "how-many":
        gap = f"{MASK} {span(text, wh.noun)}"
    elif wh.kind == "how-much":
        gap = MASK
    else:
        gap = wh.gap(text)
    if wh.kind in ("where", "when"):
        gap = f"in {gap}"
    return [f"{before} {gap} {after}"]
