"""Temporal facts: TempLAMA rebuilt on two dated dumps of the same Wikipedia articles.

The NPM paper (Table 2) swaps the reference corpus for a newer dump and finds answers updated:
a fact whose answer changed between the dumps is answered with the new answer once the newer
corpus is searched. Here the two dumps are May 2015 and September 2020 WikiExtractor output of
the same articles, aligned by page id (:func:`aligned`); facts come in two kinds:

* ``changed``: a sentence of the 2020 article whose 2015 version differs in exactly one name,
  number or date: the rest of the sentence is the same word for word (:func:`tokens`: words
  and punctuation marks, whitespace ignored), the differing span holds 1 to
  :data:`MAX_SPAN_WORDS` words on each side (:func:`changed_pairs`), and the pairing is
  one to one. The masked phrase is that span, widened to the whole name or date when the
  difference is only part of one (:func:`answer_spans`), and it must be a pure name, number or
  date of the same kind (:func:`npmcore.evaluation.diagnostics.answer_kind`) on both sides, and
  not a restatement or a spelling's correction (:func:`restated`: "7,000" / "7000", "CA" /
  "California", "Ashkenazy" / "Ashkenazi"). The 2020 answer must not occur in the 2015 article,
  nor the 2015 answer in the 2020 one (:func:`occurs`): a stale answer is recognisable and the
  new one cannot be read in the old corpus. Many changes remain edits rather than events (a
  corrected year, a renamed place): the dumps do not tell them apart.
* ``unchanged``: a sentence written the same in both articles with one name, number or date
  masked, as :func:`npmcore.evaluation.verbatim.maskable` chooses them.

Sentences are those of :func:`npmcore.evaluation.verbatim.sentences` (the project's sentence
splitter, 8 to 60 words, capitalised, ending with ".", "!" or "?", no markup characters), less
those with a hole a dropped template left (:func:`article_sentences`); the
query is the 2020 sentence with its phrase replaced by :data:`MASK`, and, as in the verbatim
sets, no content word of the answers (either dump's) occurs in the rest of it. Articles go to
the dev split (one fifth) or the test split by the sha256 of their page id (:func:`split_of`);
:func:`draw` takes a seeded sample of each split and kind, a few facts per article at most.
"""

import functools
import hashlib
import random
import re
import tarfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from pathlib import Path
from typing import Literal

from npmcore.corpus.readers import Document, read_wikiextractor
from npmcore.evaluation.diagnostics import Kind, answer_key, answer_kind
from npmcore.evaluation.dumps import DUMPS  # the old and the new dump
from npmcore.evaluation.verbatim import maskable, sentences
from npmcore.mask import MASK
from npmcore.vocab import FUNCTION_WORDS, content_words_of

FactKind = Literal["changed", "unchanged"]
FACT_KINDS: tuple[FactKind, ...] = ("changed", "unchanged")
Split = Literal["dev", "test"]
SPLITS: tuple[Split, ...] = ("dev", "test")
ANSWER_KINDS: tuple[Kind, ...] = ("name", "date", "number")
MAX_SPAN_WORDS = 4  # the longest differing span, in words, on either side
MAX_SPAN_TOKENS = 8  # ... in words and punctuation marks ("May 5, 2015": 4 tokens)
SPELLING_RATIO = 0.6  # names as alike as this are a spelling's correction, not a change (restated)
KEY = 3  # candidate pairs share their first or their last KEY tokens, or are both short (changed_pairs)

_TOKEN = re.compile(r"[^\W_]+(?:['’.,-][^\W_]+)*|\S")  # a word (as verbatim's) or one other character
_WORD = re.compile(r"[^\W_]")  # a token holding a letter or digit is a word
_MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_DAY = re.compile(r"(0?[1-9]|[12]\d|3[01])(st|nd|rd|th)?")
_YEAR = re.compile(r"(1\d{3}|20\d{2})s?")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(st|nd|rd|th)?")  # "4,800", "2.5", "21st" (not "7Fhex")
_ORDINAL = re.compile(r"(\d)(st|nd|rd|th)\b")
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_WORDISH = re.compile(r"[\w]")  # a letter, digit or "_"
_HOLE = re.compile(r'\s[,.;:)]|\(\s*[,;)]|""')  # what a dropped template leaves: "As of , six", "born ( ) in", ""
_NAME_INNER = frozenset("of the and de du da di del der van von la le al ibn bin y".split())  # "Charles de Gaulle"
_NAME_MARKS = frozenset(".-'’&")  # marks inside a name: "J. R. Smith", "Hewlett-Packard" (split off by _TOKEN)


@dataclass(frozen=True)
class TemporalFact:
    id: str
    query: str  # the 2020 sentence with its phrase replaced by [MASK]
    answers_2015: list[str]  # the phrase as the 2015 sentence writes it
    answers_2020: list[str]  # ... as the 2020 sentence writes it (the same for an unchanged fact)
    kind: FactKind
    answer_kind: Kind  # "name", "date" or "number"
    title: str  # the 2020 article's title
    page_id: str
    evidence_2015: str  # the sentence in the 2015 article
    evidence_2020: str  # ... in the 2020 article


@dataclass(frozen=True)
class SentencePair:
    """A 2015 and a 2020 sentence that differ in one span: ``old[old_lo:old_hi]`` became
    ``new[new_lo:new_hi]`` (character offsets), the rest is the same token for token."""

    old: str
    new: str
    old_lo: int
    old_hi: int
    new_lo: int
    new_hi: int


# --- reading and aligning the dumps ---


def read_dump(folder: Path) -> dict[str, Document]:
    """The articles of one dump's WikiExtractor folder (``AA/wiki_00`` …) by page id."""
    docs: dict[str, Document] = {}
    for path in sorted(p for p in folder.glob("*/wiki_*") if p.is_file()):
        source = f"{folder.name}/{path.parent.name}/{path.name}"
        docs.update((doc.doc_id, doc) for doc in read_wikiextractor(path.read_text(encoding="utf-8"), source))
    return docs


def read_archive(path: Path, members: Iterable[str] | None = None) -> dict[str, dict[str, Document]]:
    """The articles of both dumps streamed from the archive (``2015-05/AA/wiki_00`` …) without
    unpacking it: ``{dump: {page_id: Document}}``. ``members``: read only those files, and stop
    as soon as they are read (the archive interleaves the dumps, so the first files are quick)."""
    wanted = None if members is None else set(members)
    docs: dict[str, dict[str, Document]] = {dump: {} for dump in DUMPS}
    with tarfile.open(path, "r:xz") as tar:
        for info in tar:
            if wanted is not None and not wanted:
                break
            dump = info.name.split("/", 1)[0]
            if not info.isfile() or dump not in docs or (wanted is not None and info.name not in wanted):
                continue
            if wanted is not None:
                wanted.discard(info.name)
            file = tar.extractfile(info)
            assert file is not None  # a regular file
            for doc in read_wikiextractor(file.read().decode("utf-8"), info.name):
                docs[dump][doc.doc_id] = doc
    return docs


def aligned(old: Mapping[str, Document], new: Mapping[str, Document]) -> list[tuple[Document, Document]]:
    """The articles of both dumps, paired by page id (in page-id order); renamed articles included."""
    return [(old[page_id], new[page_id]) for page_id in sorted(old.keys() & new.keys(), key=_page_order)]


def _page_order(page_id: str) -> tuple[int, str]:
    return (int(page_id), "") if page_id.isdigit() else (-1, page_id)


def split_of(page_id: str) -> Split:
    """An article's split: ``"dev"`` for one fifth of page ids (by their sha256), else ``"test"``."""
    return "dev" if int(hashlib.sha256(page_id.encode()).hexdigest(), 16) % 5 == 0 else "test"


# --- sentences, tokens and the changed pairs ---


def normalize(sentence: str) -> str:
    """A sentence with its whitespace collapsed to single spaces: how the dumps' sentences are compared."""
    return " ".join(sentence.split())


def tokens(sentence: str) -> list[tuple[int, int]]:
    """(start, end) of each word and each other non-space character of a sentence."""
    return [m.span() for m in _TOKEN.finditer(sentence)]


def differing_span(old: list[str], new: list[str]) -> tuple[int, int, int, int] | None:
    """``(old_lo, old_hi, new_lo, new_hi)``: the token range by which two token lists differ, what is
    left between their longest common prefix and longest common suffix; ``None`` unless both ranges
    hold 1 to :data:`MAX_SPAN_WORDS` words and at most :data:`MAX_SPAN_TOKENS` tokens."""
    limit = min(len(old), len(new))
    prefix = 0
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    old_hi, new_hi = len(old) - suffix, len(new) - suffix
    for span in (old[prefix:old_hi], new[prefix:new_hi]):
        words = sum(1 for t in span if _WORD.search(t))
        if not (1 <= words <= MAX_SPAN_WORDS and len(span) <= MAX_SPAN_TOKENS):
            return None
    return prefix, old_hi, prefix, new_hi


def changed_pairs(old_sentences: Iterable[str], new_sentences: Iterable[str]) -> list[SentencePair]:
    """Every pair of a 2015 and a 2020 sentence, neither of them in the other article, whose tokens
    differ in one span (:func:`differing_span`), in the order of ``new_sentences``.

    Exact without comparing every pair: a pair's differing span leaves at most
    :data:`MAX_SPAN_TOKENS` tokens out of its common prefix and suffix, so it shares its first or
    its last :data:`KEY` tokens, or both sentences are at most ``MAX_SPAN_TOKENS + 2 * (KEY - 1)``
    tokens long; only those candidates are compared."""
    old_list = list(dict.fromkeys(old_sentences))
    new_list = list(dict.fromkeys(new_sentences))
    old_keys, new_keys = {normalize(s) for s in old_list}, {normalize(s) for s in new_list}
    old_list = [s for s in old_list if normalize(s) not in new_keys]
    new_list = [s for s in new_list if normalize(s) not in old_keys]
    short = MAX_SPAN_TOKENS + 2 * (KEY - 1)
    old_tokens = [_token_texts(s) for s in old_list]
    by_head: dict[tuple[str, ...], list[int]] = defaultdict(list)
    by_tail: dict[tuple[str, ...], list[int]] = defaultdict(list)
    shorts: list[int] = []
    for i, toks in enumerate(old_tokens):
        by_head[tuple(toks[:KEY])].append(i)
        by_tail[tuple(toks[-KEY:])].append(i)
        if len(toks) <= short:
            shorts.append(i)
    pairs = []
    for new in new_list:
        new_spans = tokens(new)
        new_toks = [new[lo:hi] for lo, hi in new_spans]
        candidates = set(by_head.get(tuple(new_toks[:KEY]), ())) | set(by_tail.get(tuple(new_toks[-KEY:]), ()))
        if len(new_toks) <= short:
            candidates.update(shorts)
        for i in sorted(candidates):
            found = differing_span(old_tokens[i], new_toks)
            if found is None:
                continue
            old_lo, old_hi, new_lo, new_hi = found
            old_spans = tokens(old_list[i])
            pairs.append(
                SentencePair(
                    old_list[i],
                    new,
                    old_spans[old_lo][0],
                    old_spans[old_hi - 1][1],
                    new_spans[new_lo][0],
                    new_spans[new_hi - 1][1],
                )
            )
    return pairs


def _token_texts(sentence: str) -> list[str]:
    return [sentence[lo:hi] for lo, hi in tokens(sentence)]


# --- the phrase a changed fact masks ---


def answer_spans(pair: SentencePair) -> tuple[int, int, int, int] | None:
    """``(old_lo, old_hi, new_lo, new_hi)``: the character offsets of the phrase a changed fact masks
    in each sentence, or ``None`` when the pair differs in something else than one name, number or
    date. The differing span is widened over the words both sentences share around it where it is
    part of a name ("John [Smith → Brown]": the whole run of capitalised words) or of a date
    ("12 [June 2015 → May 2019]": the day, "June [5, 2015 → 7, 2019]": the month); then both
    phrases must be pure (:func:`pure_kind`) and of the same kind, at most :data:`MAX_SPAN_WORDS`
    words, and differ beyond case and accents."""
    old_spans, new_spans = tokens(pair.old), tokens(pair.new)
    old_lo = next(i for i, (lo, _) in enumerate(old_spans) if lo == pair.old_lo)
    old_hi = next(i for i, (_, hi) in enumerate(old_spans) if hi == pair.old_hi) + 1
    new_lo = next(i for i, (lo, _) in enumerate(new_spans) if lo == pair.new_lo)
    new_hi = next(i for i, (_, hi) in enumerate(new_spans) if hi == pair.new_hi) + 1
    old_toks, new_toks = _token_texts(pair.old), _token_texts(pair.new)
    while old_lo > 0 and _widens(old_toks[old_lo], new_toks[new_lo], old_toks[old_lo - 1]):
        old_lo, new_lo = old_lo - 1, new_lo - 1  # the shared token on the left belongs to the phrase
    while old_hi < len(old_toks) and _widens(old_toks[old_hi - 1], new_toks[new_hi - 1], old_toks[old_hi]):
        old_hi, new_hi = old_hi + 1, new_hi + 1
    old_phrase = pair.old[old_spans[old_lo][0] : old_spans[old_hi - 1][1]]
    new_phrase = pair.new[new_spans[new_lo][0] : new_spans[new_hi - 1][1]]
    kind = pure_kind(_token_texts(new_phrase), new_phrase)
    if kind is None or pure_kind(_token_texts(old_phrase), old_phrase) != kind:
        return None
    if kind == "name" and (old_lo == 0 or new_lo == 0):
        return None  # a sentence's first word is capitalised whatever it is (as verbatim's names)
    if restated(pair.old[pair.old_lo : pair.old_hi], pair.new[pair.new_lo : pair.new_hi], kind):
        return None
    return old_spans[old_lo][0], old_spans[old_hi - 1][1], new_spans[new_lo][0], new_spans[new_hi - 1][1]


def restated(old: str, new: str, kind: Kind) -> bool:
    """Whether two differing spans say the same thing, or the new one corrects the old one's spelling:
    equal but for case, accents, punctuation and ordinal suffixes, the same words reordered
    ("7 April" / "April 7", "May 11th" / "11 May"), the same number written otherwise or rounded
    ("7,000" / "7000", "2 million" / "2,000,000", "6.84" / "6.8", "ninety-six" / "96"), a name
    and its abbreviation or its beginning ("CA" / "California", "MGM's" / "Metro-Goldwyn-Mayer's",
    "Inter" / "Internazionale") or names spelt
    alike (a :class:`difflib.SequenceMatcher` ratio of at least :data:`SPELLING_RATIO`:
    "Ashkenazy" / "Ashkenazi", "Clarus" / "Claros"; "Bobcats" / "Hornets" is a change)."""
    old_key, new_key = (_ORDINAL.sub(r"\1", answer_key(text)) for text in (old, new))
    if old_key == new_key or sorted(old_key.split()) == sorted(new_key.split()):
        return True
    if kind == "number":
        if any(c.isdigit() for c in old) != any(c.isdigit() for c in new):
            return True
        old_value, new_value = _value(old), _value(new)
        return (
            old_value is not None
            and new_value is not None
            and abs(old_value[0] - new_value[0]) <= max(old_value[1], new_value[1])
        )
    if kind == "name":
        old_letters, new_letters = old_key.replace(" ", ""), new_key.replace(" ", "")
        return (
            old_letters.startswith(new_letters)
            or new_letters.startswith(old_letters)
            or _abbreviates(old, new)
            or _abbreviates(new, old)
            or SequenceMatcher(None, old_key, new_key).ratio() >= SPELLING_RATIO
        )
    return False


def _value(text: str) -> tuple[float, float] | None:
    """A number's value and its precision (half a unit of its last digit): "6.8" -> (6.8, 0.05),
    "2 million" -> (2e6, 5e5); ``None`` for number words."""
    first, *scales = text.replace(",", "").lower().split()
    digits = _ORDINAL.sub(r"\1", first)
    try:
        value = float(digits)
    except ValueError:
        return None
    unit = 0.5 * 10.0 ** -len(digits.partition(".")[2])
    for word in scales:
        if word not in _SCALES:
            return None
        value, unit = value * _SCALES[word], unit * _SCALES[word]
    return value, unit


def _abbreviates(short: str, long: str) -> bool:
    """Whether ``short`` (upper case or at most 4 letters) is ``long`` abbreviated: its first letter,
    then the others in order."""
    s, full = answer_key(short).replace(" ", ""), answer_key(long).replace(" ", "")
    if not (1 < len(s) < len(full) and s[0] == full[0] and (short.isupper() or len(s) <= 4)):
        return False
    rest = iter(full)
    return all(c in rest for c in s)


def _widens(old_edge: str, new_edge: str, shared: str) -> bool:
    """Whether the token both sentences share next to the span belongs to the name or date whose
    part the span is: in both sentences, it and the span's token next to it are capitalised words,
    or a month and a day."""
    return _same_phrase(old_edge, shared) and _same_phrase(new_edge, shared)


def _same_phrase(edge: str, neighbour: str) -> bool:
    if _capitalised(edge) and _capitalised(neighbour):
        return True
    month_day = edge.lower() in _MONTHS and _DAY.fullmatch(neighbour) is not None
    return month_day or (_DAY.fullmatch(edge) is not None and neighbour.lower() in _MONTHS)


def _capitalised(token: str) -> bool:
    return token[:1].isupper() and not any(c.isdigit() for c in token)


def pure_kind(toks: list[str], phrase: str) -> Kind | None:
    """The kind of a phrase made only of a name (capitalised words, none a function word but a first
    "The", with "of", "de", … inside and ".", "-", "'", "&" marks), a number (number words and
    numbers: "4,800", "2.5 million") or a date (years, months, days: "1999", "May 2019",
    "12 June 2015", "June 5, 2015"), as :func:`answer_kind` names it; ``None`` for anything else
    ("in 2010", "4,800 at the 2010", "He")."""
    kind = answer_kind(phrase)
    words = [t for t in toks if _WORD.search(t)]
    marks = [t for t in toks if not _WORD.search(t)]
    if not words or not (_WORD.search(toks[0]) and _WORD.search(toks[-1])):
        return None
    if kind == "name":
        ok = (
            _capitalised(words[0])
            and _capitalised(words[-1])
            and all(_capitalised(w) or w in _NAME_INNER for w in words)
            and not any(_capitalised(w) and w.lower() in FUNCTION_WORDS for w in words[words[0] == "The" :])
            and all(m in _NAME_MARKS for m in marks)
        )
    elif kind == "number":
        ok = not marks and all(_NUMBER.fullmatch(w) or _number_word(w) for w in words)
    elif kind == "date":
        ok = all(m == "," for m in marks) and all(
            _YEAR.fullmatch(w) or _DAY.fullmatch(w) or w.lower() in _MONTHS for w in words
        )
    else:
        ok = False
    return kind if ok else None


def _number_word(word: str) -> bool:
    return not any(c.isdigit() for c in word) and answer_kind(word) == "number"  # "seven", "million"


def occurs(phrase: str, text: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words (ignoring case, any whitespace between
    its words): "4,800" is not in "14,800", "Smith" not in "Smithson"."""
    body = r"\s+".join(re.escape(w) for w in phrase.split())
    return re.search(rf"(?<![^\W_]){body}(?![^\W_])", text, flags=re.IGNORECASE) is not None


# --- candidate facts of one article ---


@dataclass(frozen=True)
class SharedSentence:
    """A sentence both dumps' articles write the same (whitespace aside): the source of unchanged facts."""

    page_id: str
    title: str  # the 2020 title
    old: str  # as the 2015 article writes it
    new: str  # as the 2020 article writes it


def article_sentences(text: str) -> tuple[str, ...]:
    """The query sentences of an article (:func:`sentences`), less those with a hole where the 2020
    extractor dropped a template ("As of , six former premiers …", "born ( ) in"); split once per
    text for an article's changed and unchanged facts."""
    return _article_sentences(text)


@functools.lru_cache(maxsize=4)
def _article_sentences(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for s in sentences(text) if not _HOLE.search(s)))


def changed_facts(old: Document, new: Document) -> list[TemporalFact]:
    """Every changed fact of one article (ids empty): the one-to-one pairs of :func:`changed_pairs`
    whose difference is one name, number or date (:func:`answer_spans`), the rest of both sentences
    the same but for whitespace, the answers standing as whole words, once in each sentence, absent
    from the other dump's article (:func:`occurs`), and sharing no content word with the rest of the
    query."""
    pairs = changed_pairs(article_sentences(old.text), article_sentences(new.text))
    olds, news = Counter(p.old for p in pairs), Counter(p.new for p in pairs)
    facts = []
    for pair in pairs:
        if olds[pair.old] > 1 or news[pair.new] > 1:
            continue  # the sentence has several counterparts: which one is its old version is unsure
        spans = answer_spans(pair)
        if spans is None:
            continue
        old_lo, old_hi, new_lo, new_hi = spans
        a_old, a_new = pair.old[old_lo:old_hi], pair.new[new_lo:new_hi]
        rest = pair.new[:new_lo] + " " + pair.new[new_hi:]
        query = pair.new[:new_lo] + MASK + pair.new[new_hi:]
        if (
            normalize(pair.old[:old_lo] + MASK + pair.old[old_hi:]) != normalize(query)  # "21°C" / "23 °C"
            or not (standalone(pair.old, old_lo, old_hi) and standalone(pair.new, new_lo, new_hi))
            or pair.old.count(a_old) != 1
            or pair.new.count(a_new) != 1
            or occurs(a_new, old.text)
            or occurs(a_old, new.text)
            or not (content_words_of(a_old) | content_words_of(a_new)).isdisjoint(content_words_of(rest))
        ):
            continue
        kind = answer_kind(a_new)
        facts.append(
            TemporalFact("", query, [a_old], [a_new], "changed", kind, new.title, new.doc_id, pair.old, pair.new)
        )
    return facts


def standalone(sentence: str, lo: int, hi: int) -> bool:
    """Whether ``sentence[lo:hi]`` is whole words: no letter, digit or "_" touches it ("formula_56")."""
    return not (lo > 0 and _WORDISH.match(sentence[lo - 1])) and not (
        hi < len(sentence) and _WORDISH.match(sentence[hi])
    )


def shared_sentences(old: Document, new: Document) -> list[SharedSentence]:
    """The sentences of the 2020 article (:func:`article_sentences`) the 2015 article also has."""
    old_by_key = {normalize(s): s for s in article_sentences(old.text)}
    return [
        SharedSentence(new.doc_id, new.title, old_by_key[normalize(s)], s)
        for s in article_sentences(new.text)
        if normalize(s) in old_by_key
    ]


def unchanged_of(shared: SharedSentence) -> list[TemporalFact]:
    """The unchanged facts of one shared sentence (ids empty): each name, number or date
    :func:`maskable` finds in it, standing as whole words."""
    return [
        TemporalFact(
            "",
            shared.new[:lo] + MASK + shared.new[hi:],
            [shared.new[lo:hi]],
            [shared.new[lo:hi]],
            "unchanged",
            kind,
            shared.title,
            shared.page_id,
            shared.old,
            shared.new,
        )
        for kind, lo, hi in maskable(shared.new)
        if kind in ANSWER_KINDS and standalone(shared.new, lo, hi)
    ]


def unchanged_facts(old: Document, new: Document) -> list[TemporalFact]:
    """Every unchanged fact of one article (ids empty): :func:`unchanged_of` each shared sentence."""
    return [fact for shared in shared_sentences(old, new) for fact in unchanged_of(shared)]


def candidates(pairs: Iterable[tuple[Document, Document]]) -> tuple[list[TemporalFact], list[SharedSentence]]:
    """The changed facts and the shared sentences of every aligned article. Unchanged facts are
    masked in the draw, only in the shared sentences it visits (:func:`maskable` on every shared
    sentence would take most of the time)."""
    changed: list[TemporalFact] = []
    shared: list[SharedSentence] = []
    for old, new in pairs:
        changed += changed_facts(old, new)
        shared += shared_sentences(old, new)
    return changed, shared


# --- the draw ---


def draw(
    changed: Iterable[TemporalFact],
    shared: Iterable[SharedSentence],
    sizes: Mapping[Split, int],
    seed: int,
    per_article: int = 2,
) -> dict[Split, list[TemporalFact]]:
    """A seeded sample of each split (:func:`split_of`): up to ``sizes[split]`` changed facts and as
    many unchanged ones, at most ``per_article`` of each kind per article and one per sentence.
    Unchanged facts follow the answer kinds of the changed facts drawn (names, dates and numbers in
    the same shares, as far as the shared sentences have them), so that the two kinds differ by
    whether the fact changed, not by what is asked. Ids ``temporal-{split}-{n}``, changed facts
    first, in draw order."""
    changed_by_split: dict[Split, list[TemporalFact]] = {split: [] for split in SPLITS}
    shared_by_split: dict[Split, list[SharedSentence]] = {split: [] for split in SPLITS}
    for fact in changed:
        changed_by_split[split_of(fact.page_id)].append(fact)
    for sentence in shared:
        shared_by_split[split_of(sentence.page_id)].append(sentence)
    out: dict[Split, list[TemporalFact]] = {}
    for split in SPLITS:
        facts = _draw_changed(
            changed_by_split[split], sizes[split], per_article, random.Random(f"{seed}-{split}-changed")
        )
        quotas = _quotas(Counter(f.answer_kind for f in facts), sizes[split])
        rng = random.Random(f"{seed}-{split}-unchanged")
        facts += _draw_unchanged(shared_by_split[split], sizes[split], per_article, quotas, rng)
        out[split] = [replace(f, id=f"temporal-{split}-{n}") for n, f in enumerate(facts, start=1)]
    return out


def _draw_changed(facts: list[TemporalFact], size: int, per_article: int, rng: random.Random) -> list[TemporalFact]:
    order = sorted(facts, key=lambda f: (_page_order(f.page_id), f.query, f.answers_2020))
    rng.shuffle(order)
    taken: list[TemporalFact] = []
    per_page: Counter[str] = Counter()
    for fact in order:
        if len(taken) == size:
            break
        if per_page[fact.page_id] < per_article:
            taken.append(fact)
            per_page[fact.page_id] += 1
    return taken


def _draw_unchanged(
    shared: list[SharedSentence], size: int, per_article: int, quotas: Mapping[Kind, int], rng: random.Random
) -> list[TemporalFact]:
    """Shared sentences in a seeded order, one fact each (a seeded choice among its phrases whose
    answer kind is still under its quota), at most ``per_article`` per article; a second pass
    fills what the quotas left (a kind the sentences have too few of) with any kind."""
    order = sorted(shared, key=lambda s: (_page_order(s.page_id), s.new))
    rng.shuffle(order)
    taken: list[TemporalFact] = []
    per_page: Counter[str] = Counter()
    per_kind: Counter[Kind] = Counter()
    used: set[int] = set()
    for capped in (True, False):
        for n, sentence in enumerate(order):
            if len(taken) == size:
                return taken
            if n in used or per_page[sentence.page_id] >= per_article:
                continue
            facts = [
                f
                for f in unchanged_of(sentence)
                if not capped or per_kind[f.answer_kind] < quotas.get(f.answer_kind, 0)
            ]
            if facts:
                fact = rng.choice(facts)
                taken.append(fact)
                used.add(n)
                per_page[sentence.page_id] += 1
                per_kind[fact.answer_kind] += 1
    return taken


def _quotas(shares: Mapping[Kind, int], size: int) -> dict[Kind, int]:
    """``size`` split over the kinds in proportion to ``shares`` (largest remainders first); equal
    shares when there are none."""
    shares = (
        {kind: shares.get(kind, 0) for kind in ANSWER_KINDS} if sum(shares.values()) else dict.fromkeys(ANSWER_KINDS, 1)
    )
    total = sum(shares.values())
    exact = {kind: size * n / total for kind, n in shares.items()}
    quotas = {kind: int(x) for kind, x in exact.items()}
    for kind in sorted(exact, key=lambda k: (quotas[k] - exact[k], k))[: size - sum(quotas.values())]:
        quotas[kind] += 1
    return quotas
