"""A yes/no question read: what it asserts, masked from both sides, to be asked (the verdict:
:mod:`npmcore.answer.verdict`).

"Did Shakespeare write Hamlet?" asserts that Shakespeare wrote Hamlet. Asked with Hamlet masked ("Shakespeare wrote
[MASK].") the corpus names one of his many works; asked with Shakespeare masked ("[MASK] wrote Hamlet.", "Hamlet was
written by [MASK].") it names Hamlet's one author. A question is therefore read from both sides (:class:`Side`: its
statements and the part they mask), and the verdict reads each side's answer. The sides are

* after "is/was" with a complement with "the" ("Is Paris the capital of France?"): its subject ("[MASK] is the
  capital of France.", "The capital of France is [MASK]."; one answer); not the complement's last phrase ("Paris is
  the capital of [MASK].": Lagos was the capital of Nigeria, Casablanca is called Morocco's economic capital, and
  such answers said yes to false questions on the dev set);
* a complement with "a"/"an" ("Is a penguin a bird?"): its noun ("A penguin is a [MASK]."; one answer);
* a complement that is a place, a phrase after a preposition ("Is Canberra in Australia?", "Was Mozart born in
  Salzburg?"), or an adjective ("Is the sky blue?"): that phrase or word ("Canberra is in [MASK]."; one answer, of
  the kind asserted: the answer stage reads it so), and for a phrase the subject ("[MASK] is in Australia."; many);
* after "do/does/did", the verb's last phrase ("Did Columbus discover America?" -> "Columbus discovered [MASK]."; many)
  and the subject ("[MASK] discovered America.", "America was discovered by [MASK]."; one where the verb's object
  follows it, many after a preposition: "[MASK] flows through Hungary.").

A question of two choices ("Is a whale a fish or a mammal?") is asked as the statement and answered as one (the
corpus's answer is the reply), not with yes or no. :func:`yes_no_reading` returns None where no part asserted is
found ("Can penguins fly?"): such a question is asked as the paper asks questions. Imports the reading of
questions (:mod:`npmcore.ask.questions`).
"""

import re
from dataclasses import dataclass

from npmcore.ask.questions import BE, DO, Token, inflected, known_verb_lemmas, stated_kind, tag, verb_base_form
from npmcore.mask import MASK

ARTICLES = frozenset({"the", "a", "an"})


@dataclass(frozen=True)
class Side:
    """One side of what a yes/no question asserts: statements that mask it, the part they mask, and the kind of
    thing that part is where the statements say (:func:`npmcore.ask.questions.stated_kind`)."""

    statements: tuple[str, ...]
    asserted: str
    kind: str | None = None
    single: bool = True  # what its statements mask has one answer ("[MASK] wrote Hamlet."), not many ("Shakespeare
    # wrote [MASK].", "[MASK] is in Africa."): only such a side says no


@dataclass(frozen=True)
class YesNoReading:
    """A yes/no question's sides (the part it asserts first, then its subject where it can be masked too), and
    whether that part is a choice between several (answered as a question, not with yes or no)."""

    sides: tuple[Side, ...]
    choice: bool = False


def is_yes_no(text: str) -> bool:
    """Whether a question is a yes/no one: it starts with "is/are/was/were" or "do/does/did"."""
    first = text.strip().split(maxsplit=1)
    return bool(first) and (first[0].lower() in BE or first[0].lower() in DO)


def yes_no_reading(question: str) -> YesNoReading | None:
    """The statements of a yes/no question and the part it asserts (module docstring); None where none is found."""
    text = question.strip().rstrip("?!. ").strip()
    tokens = tag(text)
    if len(tokens) < 3:
        return None
    aux = tokens[0]
    if aux.lower in BE:
        end = _subject_end(tokens)
        if end is None:
            return None
        return _copula(text, aux.text.lower(), _span(text, tokens[1:end]), tokens[end:])
    if aux.lower in DO:
        verb = next((k for k in range(2, len(tokens)) if _is_verb(tokens[k])), None)
        if verb is None:
            return None
        return _done(text, aux.lower, _span(text, tokens[1:verb]), tokens[verb:])
    return None


def _subject_end(tokens: list[Token]) -> int | None:
    """Where the subject after "is" ends: at the complement's article, preposition or participle ("Is Paris [the]
    capital", "is mount everest [in] nepal", "Was Mozart [born]"), else before a last adjective ("Is the sky
    [blue]"); None where there is no complement."""
    start = 2 if tokens[1].lower in ARTICLES else 1
    for k in range(start + 1, len(tokens)):
        if tokens[k].lower in ARTICLES or tokens[k].tag in ("IN", "TO", "VBN"):
            return k
    if len(tokens) > start + 1 and tokens[-1].tag.startswith("JJ"):
        return len(tokens) - 1
    return None


def _is_verb(token: Token) -> bool:
    """A verb's base form, as "do" puts it before its verb ("does the Danube [flow]", however tagged)."""
    return token.tag in ("VB", "VBP") or token.lower in known_verb_lemmas(token.lower)


def _copula(text: str, be: str, subject: str, rest: list[Token]) -> YesNoReading | None:
    complement = _span(text, rest)
    first = rest[0]
    choice = " or " in f" {complement.lower()} "
    if first.lower == "the" and not choice:  # "Is Paris the capital of France?": the subject is asserted
        statements = (f"{MASK} {be} {complement}.", f"{_capital(complement)} {be} {MASK}.")
        return YesNoReading((Side(statements, bare(subject), stated_kind(statements[1])),))
    if first.lower in ("a", "an"):  # "Is a penguin a bird?": its noun, "a fish or a mammal": a choice
        return YesNoReading((Side((f"{_capital(subject)} {be} a {MASK}.",), bare(complement)),), choice)
    if first.tag in ("IN", "TO", "VBN") or first.tag.startswith("JJ"):  # "in Australia", "born in Salzburg", "blue"
        last = _last_phrase(rest)
        if last is None:
            return None
        lead = _span(text, rest[:last]) if last else ""
        asserted = bare(_span(text, rest[last:]))
        sides = [Side((f"{_capital(subject)} {be} {lead} {MASK}.".replace("  ", " "),), asserted)]
        if last and not choice:  # "[MASK] is in Australia."
            sides.append(Side((f"{MASK} {be} {lead} {_span(text, rest[last:])}.",), bare(subject), single=False))
        return YesNoReading(tuple(sides), choice)
    return None


def _done(text: str, do: str, subject: str, rest: list[Token]) -> YesNoReading | None:
    """ "Did Columbus discover America" -> "Columbus discovered [MASK]." asserting America, "[MASK] discovered
    America." and "America was discovered by [MASK]." asserting Columbus."""
    verb = rest[0]
    if not (verb.tag.startswith("VB") or known_verb_lemmas(verb.lower)) or len(rest) < 2:
        return None
    base = verb.lower if verb.lower in known_verb_lemmas(verb.lower) else verb_base_form(verb.text)
    titled = rest[1].text[:1].isupper()  # a name or a title: "write [On the Origin of Species]"
    last = 0 if titled else _last_phrase(rest[1:])
    if last is None:
        return None
    last += 1
    middle = _span(text, rest[1:last]) if last > 1 else ""
    done = inflected(base, DO[do])
    asserted = _span(text, rest[last:])
    choice = " or " in f" {asserted.lower()} "
    sides = [Side((f"{_capital(subject)} {done} {middle} {MASK}.".replace("  ", " "),), bare(asserted), single=False)]
    if not choice:
        statements = [f"{MASK} {done} {middle} {asserted}.".replace("  ", " ")]
        if not middle:  # "America was discovered by [MASK]."
            was = "were" if do == "do" else "was"
            statements.append(f"{_capital(asserted)} {was} {inflected(base, 'VBN')} by {MASK}.")
        sides.append(Side(tuple(statements), bare(subject), single=not middle))  # "flows through Vienna": many
    return YesNoReading(tuple(sides), choice)


def _last_phrase(tokens: list[Token]) -> int | None:
    """Where the phrase that ends ``tokens`` starts: after their last preposition or verb ("born in [Salzburg]"), or
    the whole of an adjective ("blue"); None where it is empty."""
    cut = max(
        (k + 1 for k, t in enumerate(tokens) if t.tag in ("IN", "TO", "VBN", "VBD", "VB", "VBZ", "VBP")), default=0
    )
    return cut if cut < len(tokens) else None


def _span(text: str, tokens: list[Token]) -> str:
    return text[tokens[0].start : tokens[-1].end] if tokens else ""


def bare(phrase: str) -> str:
    """A phrase without its article: "the Nile" -> Nile."""
    return re.sub(r"(?i)^(?:the|a|an)\s+", "", phrase.strip())


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
