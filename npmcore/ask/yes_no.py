"""A yes/no question read: the part it asserts is masked, to be asked (the verdict: :mod:`npmcore.answer.verdict`).

"Is Paris the capital of France?" asserts Paris: it is asked as "[MASK] is the capital of France." and "The capital
of France is [MASK]."; where the corpus's answer is Paris the reply is "Yes: the corpus says Paris", where it is
another ("Is Madrid the capital of France?") "No: the corpus says Paris". The part asserted is

* after "is/was", a subject and a complement with "the" ("Is the Nile the longest river?"): the subject;
* a complement with "a"/"an" ("Is a penguin a bird?"): its noun ("A penguin is a [MASK].");
* a complement that is a place, a phrase after a preposition ("Is Canberra in Australia?", "Was Mozart born in
  Salzburg?"), or an adjective ("Is the sky blue?"): that phrase or word;
* after "do/does/did", the verb's last phrase ("Did Columbus discover America?" -> "Columbus discovered [MASK].").

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
class YesNoReading:
    """A yes/no question's statements, the part they mask (what the question asserts) and whether that part is a
    choice between several (answered as a question, not with yes or no)."""

    statements: tuple[str, ...]
    asserted: str
    choice: bool = False
    kind: str | None = None


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
        statements = (f"{MASK} {be} {complement}.", f"{complement[:1].upper()}{complement[1:]} {be} {MASK}.")
        return YesNoReading(statements, bare(subject), kind=stated_kind(statements[1]))
    if first.lower in ("a", "an"):  # "Is a penguin a bird?": its noun, "a fish or a mammal": a choice
        asserted = bare(complement)
        return YesNoReading((f"{_capital(subject)} {be} a {MASK}.",), asserted, choice)
    if first.tag in ("IN", "TO", "VBN") or first.tag.startswith("JJ"):  # "in Australia", "born in Salzburg", "blue"
        last = _last_phrase(rest)
        if last is None:
            return None
        lead = _span(text, rest[:last]) if last else ""
        statement = f"{_capital(subject)} {be} {lead} {MASK}.".replace("  ", " ")
        return YesNoReading((statement,), bare(_span(text, rest[last:])), choice)
    return None


def _done(text: str, do: str, subject: str, rest: list[Token]) -> YesNoReading | None:
    """ "Did Columbus discover America" -> "Columbus discovered [MASK]." asserting America."""
    verb = rest[0]
    if not (verb.tag.startswith("VB") or known_verb_lemmas(verb.lower)) or len(rest) < 2:
        return None
    base = verb.lower if verb.lower in known_verb_lemmas(verb.lower) else verb_base_form(verb.text)
    last = _last_phrase(rest[1:])
    if last is None:
        return None
    last += 1
    middle = _span(text, rest[1:last]) if last > 1 else ""
    statement = f"{_capital(subject)} {inflected(base, DO[do])} {middle} {MASK}.".replace("  ", " ")
    asserted = _span(text, rest[last:])
    return YesNoReading((statement,), bare(asserted), " or " in f" {asserted.lower()} ")


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
