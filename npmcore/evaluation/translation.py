"""Entity translation facts (NPM paper, Table 3): an entity's name in a non-Latin script, from Wikipedia openings.

English Wikipedia articles open with the subject's name in other languages: "Banpo Bridge (Korean: 반포대교) is
a ...", "Athens (; Modern Greek: Αθήνα, "Athína", ]; Ancient Greek: Ἀθῆναι, "Athēnai") is ...". Each such entry
makes one query of the paper's form, ``The Korean translation of Banpo Bridge is: [MASK].``, whose gold answer is
the name as the article writes it. The reference corpus holds the answer: it is the article's own opening.

What counts (:func:`translation_facts`), on the WikiExtractor text of an article:

* the *opening*: the first sentence of the first paragraph (:func:`opening`: it ends at the first "." outside
  parentheses that ends a sentence, not one of an abbreviation or an initial);
* its *subject part*: the opening up to its main verb (" is ", " was ", " are ", " were ", " refers to " outside
  parentheses), so a parenthesis about some other thing later in the sentence is never read;
* an *entry*: inside a parenthesis of the subject part, "(LANG:", "; LANG:" or ", LANG:" where LANG is one of
  :data:`LANGUAGES` (written in a non-Latin script), maybe after one of :data:`QUALIFIERS` ("Ancient Greek",
  "Modern Standard Arabic", "simplified Chinese") or before "Cyrillic" ("Serbian Cyrillic"); "Pashto/Dari:"
  names each; never "from Greek:" (an etymology) nor "Egyptian Arabic:" (a dialect);
* its *name* (:func:`entry_name`): the entry's text up to the next delimiter (``; , ( ) [ ] : / | =``, a quote
  mark, or " or "), direction marks removed, split into the leading words without a Latin letter (the name, its
  inner spaces as written) and the rest, which must be a Latin transliteration ("日本 Nippon"): no letter of
  another script in it and not only Roman numerals ("Андрій II" is left out: the name would lose its numeral).
  A name holds at least one letter and no Latin letter (:func:`non_latin`).

One fact per (article, language): the first entry of that language with a name. The subject of the query is the
article's title without a trailing parenthetical ("Abydos (Hellespont)" → "Abydos"), and the subject part must
name it (:func:`names`). Dev and test are split by article, half and half (:func:`split_facts`: articles in the
order of a seeded sha256 of their page id).
"""

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from npmcore.corpus.readers import read_wikiextractor
from npmcore.evaluation.tasks import Split
from npmcore.mask import MASK

# Languages written in a non-Latin script (their names as Wikipedia's language labels write them).
LANGUAGES: tuple[str, ...] = (
    "Greek", "Hebrew", "Arabic", "Russian", "Persian", "Japanese", "Chinese", "Korean", "Hindi", "Thai", "Urdu",
    "Amharic", "Georgian", "Armenian", "Ukrainian", "Bulgarian", "Serbian", "Bengali", "Tamil", "Yiddish",
    "Belarusian", "Macedonian", "Sanskrit", "Punjabi", "Nepali", "Tibetan", "Mongolian", "Kazakh", "Khmer",
    "Burmese", "Lao", "Sinhala", "Syriac", "Aramaic", "Coptic", "Pashto", "Sindhi", "Kashmiri", "Dari",
    "Tajik", "Kyrgyz", "Tatar", "Bashkir", "Chechen", "Uyghur", "Marathi", "Gujarati", "Telugu", "Kannada",
    "Malayalam", "Odia", "Assamese", "Tigrinya", "Dhivehi", "Dzongkha", "Manchu", "Cherokee", "Inuktitut",
)  # fmt: skip
# Words that may stand before a language's name in an entry ("Ancient Greek:"); the fact's language is the name.
QUALIFIERS: tuple[str, ...] = (
    "Ancient", "Modern", "Classical", "Koine", "Attic", "Byzantine", "Medieval", "Biblical", "Tiberian", "Mishnaic",
    "Literary", "Standard", "Modern Standard", "Simplified", "Traditional",
)  # fmt: skip
# Direction marks and embeddings/isolates: LRM, RLM, LRE…RLO, LRI…PDI, the Arabic letter mark.
DIRECTION_MARKS = "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c"
_STRIP_MARKS = str.maketrans(dict.fromkeys(DIRECTION_MARKS))
ALIASES = {"Sinhalese": "Sinhala"}  # labels of one language: facts use the second name
_LANGUAGE = "|".join(sorted([*LANGUAGES, *ALIASES], key=len, reverse=True))
_ENTRY = re.compile(
    r"[(;,]\s*(?:\[\]\s*)?(?:(?:" + "|".join(sorted(QUALIFIERS, key=len, reverse=True)) + r")\s+)?"
    r"((?:" + _LANGUAGE + r")(?:/(?:" + _LANGUAGE + r"))*)(?:\s+Cyrillic)?\s*:",
    re.IGNORECASE,
)
_CANONICAL = {language.lower(): language for language in LANGUAGES} | {a.lower(): b for a, b in ALIASES.items()}
_VALUE_END = re.compile(r"""[;,()\[\]:/|="“”„«»]|\sor\s""")
_VERB = re.compile(r"\s(?:is|was|are|were|refers\s+to)\s")
_ROMAN = re.compile(r"[IVXLCDM]+\.?")
# Words before a "." that does not end the sentence (besides single letters: initials, "c.", "b.").
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st mt ft jr sr gen col lt capt rev prof no vs ca fl co inc ltd bros approx est var".split()
)
_EDGES = re.compile(r"^[\s*\-–—.·\u200c\u200d\ufeff]+|[\s*\-–—.·\u200c\u200d\ufeff]+$")  # trimmed off a name
_TRAILING_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)$")


@dataclass(frozen=True)
class TranslationFact:
    id: str  # entity-translation-{page_id}-{language}
    query: str  # "The {language} translation of {subject} is: [MASK]."
    answers: list[str]  # the name as the opening writes it (direction marks removed)
    language: str
    title: str
    page_id: str
    evidence: str  # the article's opening sentence


def read_articles(paths: Iterable[str | Path]) -> Iterator[tuple[str, str, str]]:
    """(page_id, title, text) of every article of WikiExtractor files, in file order
    (:func:`npmcore.corpus.readers.read_wikiextractor`)."""
    for path in paths:
        for doc in read_wikiextractor(Path(path).read_text(encoding="utf-8"), str(path)):
            yield doc.doc_id, doc.title, doc.text


def opening(text: str) -> str:
    """The first sentence of an article's first paragraph: up to the first "." outside parentheses that is
    followed by the paragraph's end or by a space and a capital letter or a quote mark, and does not close an
    abbreviation (:data:`_ABBREVIATIONS`) or an initial ("K. A. Abbas"). A paragraph whose parenthesis the
    extractor broke across lines ("(Nepali: कञ्चनजङ्घा, Tibetan: …" newline ", Hindi: कंचनजंघा) is …") goes on
    with the next line when that line closes it."""
    lines = text.strip().split("\n")
    paragraph = lines[0]
    for line in lines[1:]:
        depth = _depths(f"{paragraph})")[-1]  # open at the paragraph's end
        if depth == 0 or not _closes(line, depth):
            break  # the paragraph is whole, or the next line does not close it
        paragraph = f"{paragraph}\n{line}"
    paragraph = paragraph.strip()
    depth = 0
    for i, char in enumerate(paragraph):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)  # a stray ")" never hides the rest of the sentence
        elif char == "." and depth == 0 and _ends_sentence(paragraph, i):
            return paragraph[: i + 1]
    return paragraph


def _closes(line: str, depth: int) -> bool:
    """Whether ``line``, read with ``depth`` parentheses open, closes them all at some point."""
    for char in line:
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return True
    return False


def _ends_sentence(paragraph: str, i: int) -> bool:
    after = paragraph[i + 1 :]
    following = after.lstrip()[:1]
    if after and not (after[0].isspace() and (following.isupper() or following in '"“')):
        return False
    word = re.search(r"[\w.]*$", paragraph[:i]).group().lower()  # the word the "." closes
    return not (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or "." in word)


def subject_part(sentence: str) -> str:
    """The opening up to its main verb (the first " is ", " was ", " are ", " were ", " refers to " outside
    parentheses); the whole opening when it has none."""
    depths = _depths(sentence)
    for m in _VERB.finditer(sentence):
        if depths[m.start()] == 0:
            return sentence[: m.start()]
    return sentence


def _depths(text: str) -> list[int]:
    """The parenthesis depth at each character (an opening "(" counts itself; stray ")" clamp at 0)."""
    out, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        out.append(depth)
        if char == ")":
            depth = max(depth - 1, 0)
    return out


def is_latin(char: str) -> bool:
    """A letter of the Latin script (any accent, IPA and fullwidth forms included)."""
    return unicodedata.category(char).startswith("L") and "LATIN" in unicodedata.name(char, "")


def non_latin(name: str) -> bool:
    """At least one letter, and none of them Latin."""
    return any(unicodedata.category(c).startswith("L") for c in name) and not any(is_latin(c) for c in name)


def entry_name(value: str) -> str | None:
    """The name an entry's text starts with (the text after "LANG:"), or None when it has none written in a
    non-Latin script; see the module's rules."""
    value = _VALUE_END.split(value.translate(_STRIP_MARKS), maxsplit=1)[0]
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", value)]
    words = [value[lo:hi] for lo, hi in spans]
    n = 0
    while n < len(words) and not any(is_latin(c) for c in words[n]):
        n += 1
    tail = words[n:]
    if any(unicodedata.category(c).startswith("L") and not is_latin(c) for word in tail for c in word):
        return None  # another script after a Latin word: not a name and its transliteration
    if tail and all(_ROMAN.fullmatch(word) for word in tail):
        return None  # "Андрій II": the numeral belongs to the name
    name = _EDGES.sub("", value[: spans[n - 1][1]]) if n else ""  # inner spaces as written
    if not name or unicodedata.category(name[0])[0] not in "LM" or not non_latin(name):
        return None
    return name


def entries(sentence: str) -> list[tuple[str, str]]:
    """(language, name) of every entry with a name in the parentheses of an opening's subject part, in order."""
    subject = subject_part(sentence)
    depths = _depths(subject)
    found = []
    for m in _ENTRY.finditer(subject):
        if depths[m.start()] == 0:
            continue  # a ";" or "," outside every parenthesis
        name = entry_name(subject[m.end() :])
        if name is not None:
            found.extend((_CANONICAL[language.lower()], name) for language in m.group(1).split("/"))
    return found


def subject_of(title: str) -> str:
    """The entity a title names: without a trailing parenthetical disambiguation ("Mercury (planet)")."""
    return _TRAILING_DISAMBIGUATION.sub("", title).strip() or title


def fold(text: str) -> str:
    """Lower case without accents or other combining marks ("Ānanda" → "ananda")."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).casefold()


def names(part: str, subject: str) -> bool:
    """Whether an opening's subject part names the title's entity: a word of it starts with the subject's first
    word, accents and case aside ("Harappans" for "Harappa"; not "Chad" for "History of Chad", whose 2015 text
    is the opening of "Chad")."""
    first = re.search(r"\w+", fold(subject))
    return first is not None and any(word.startswith(first.group()) for word in re.findall(r"\w+", fold(part)))


def query_of(language: str, subject: str) -> str:
    """The paper's query: ``The {language} translation of {subject} is: [MASK].``"""
    return f"The {language} translation of {subject} is: {MASK}."


def translation_facts(articles: Iterable[tuple[str, str, str]]) -> list[TranslationFact]:
    """One fact per (article, language) of ``articles`` ((page_id, title, text)): the first entry of that
    language in the article's opening (see the module's rules), in article and entry order."""
    facts = []
    for page_id, title, text in articles:
        sentence = opening(text)
        subject = subject_of(title)
        if not names(subject_part(sentence), subject):
            continue
        seen: set[str] = set()
        for language, name in entries(sentence):
            if language in seen:
                continue
            seen.add(language)
            facts.append(
                TranslationFact(
                    f"entity-translation-{page_id}-{language}",
                    query_of(language, subject),
                    [name],
                    language,
                    title,
                    page_id,
                    sentence,
                )
            )
    return facts


def split_facts(facts: Iterable[TranslationFact], seed: int = 0) -> dict[Split, list[TranslationFact]]:
    """Facts by split, half and half by article: the articles in the order of a sha256 of seed and page id, each
    to dev while its facts fit in half of all (the others to test), so that dev holds exactly half where the
    small articles allow (445 of 890 facts); all facts of an article in the same split, in order. Half, not a
    fifth: a calibrator cannot be chosen on 170 facts (docs/evaluate.md)."""
    facts = list(facts)
    per_page = Counter(f.page_id for f in facts)
    order = sorted(per_page, key=lambda page: hashlib.sha256(f"{seed}:{page}".encode()).digest())
    dev, held = set(), 0
    for page in order:
        if held + per_page[page] <= len(facts) // 2:
            dev.add(page)
            held += per_page[page]
    return {"dev": [f for f in facts if f.page_id in dev], "test": [f for f in facts if f.page_id not in dev]}
