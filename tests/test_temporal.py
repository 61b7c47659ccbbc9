"""The temporal sets (bench/data/temporal-{dev,test}.jsonl) and the draw that makes them
(npmcore.evaluation.temporal): real articles of the May 2015 and September 2020 dumps (the first
file of each, from the unpacked folders or streamed from the shared archive), and literal sentences."""

import json
from collections import Counter
from pathlib import Path

import pytest

from npmcore.corpus.readers import Document, read_wikiextractor
from npmcore.evaluation.diagnostics import answer_kind
from npmcore.evaluation.temporal import (
    ANSWER_KINDS,
    DUMPS,
    MAX_SPAN_TOKENS,
    MAX_SPAN_WORDS,
    SentencePair,
    SharedSentence,
    TemporalFact,
    aligned,
    answer_spans,
    article_sentences,
    candidates,
    changed_facts,
    changed_pairs,
    draw,
    normalize,
    occurs,
    read_archive,
    restated,
    split_of,
    tokens,
    unchanged_facts,
)
from npmcore.evaluation.verbatim import maskable
from npmcore.mask import MASK
from npmcore.storage import cache_dir
from npmcore.vocab import content_words_of

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT.parent / "shared" / "data" / "enwiki_dated" / "enwiki_dated.tar.xz"
UNPACKED = (cache_dir() / "enwiki_dated",)  # where npmcore.evaluation.dumps.dated_dump unpacks the dumps
FIRST_FILE = "AA/wiki_00"  # page ids 12 to about 340 in both dumps: Anarchism, Alabama, Apollo, …
SMALL_CHARS = 30_000  # the brute-force reference compares every sentence pair of articles this short
DATA = ROOT / "bench" / "data"
FIELDS = {f for f in TemporalFact.__dataclass_fields__}


@pytest.fixture(scope="module")
def articles() -> list[tuple[Document, Document]]:
    """The articles of the first file of both dumps, aligned by page id."""
    for folder in UNPACKED:
        if all((folder / dump / FIRST_FILE).is_file() for dump in DUMPS):
            old, new = (
                {
                    d.doc_id: d
                    for d in read_wikiextractor((folder / dump / FIRST_FILE).read_text(encoding="utf-8"), dump)
                }
                for dump in DUMPS
            )
            return aligned(old, new)
    if not ARCHIVE.is_file():
        pytest.skip(f"neither the unpacked dumps ({', '.join(map(str, UNPACKED))}) nor the archive {ARCHIVE} is here")
    docs = read_archive(ARCHIVE, [f"{dump}/{FIRST_FILE}" for dump in DUMPS])
    return aligned(docs[DUMPS[0]], docs[DUMPS[1]])


@pytest.fixture(scope="module")
def small(articles: list[tuple[Document, Document]]) -> list[tuple[Document, Document]]:
    """The articles short enough to compare every pair of their sentences (in all about 100k pairs)."""
    return [(old, new) for old, new in articles if max(len(old.text), len(new.text)) <= SMALL_CHARS]


@pytest.fixture(scope="module")
def slice_candidates(articles: list[tuple[Document, Document]]) -> tuple[list[TemporalFact], list[SharedSentence]]:
    return candidates(articles)


def brute_force_pairs(old_sentences: tuple[str, ...], new_sentences: tuple[str, ...]) -> set[tuple[str, str, str, str]]:
    """Every pair of sentences compared in a plain nested loop (no index, no difflib): (old, new, old
    span, new span) of the pairs whose common prefix and suffix leave 1-4 words (at most 8 tokens) on
    each side."""
    old_keys, new_keys = {normalize(s) for s in old_sentences}, {normalize(s) for s in new_sentences}
    olds = [(s, tokens(s)) for s in old_sentences if normalize(s) not in new_keys]
    news = [(s, tokens(s)) for s in new_sentences if normalize(s) not in old_keys]
    found = set()
    for old, a_spans in olds:
        a = [old[lo:hi] for lo, hi in a_spans]
        for new, b_spans in news:
            b = [new[lo:hi] for lo, hi in b_spans]
            prefix, suffix = 0, 0
            while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
                prefix += 1
            while suffix < min(len(a), len(b)) - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
                suffix += 1
            a_mid, b_mid = a_spans[prefix : len(a) - suffix], b_spans[prefix : len(b) - suffix]
            words = [
                sum(any(c.isalnum() for c in s[lo:hi]) for lo, hi in mid) for s, mid in ((old, a_mid), (new, b_mid))
            ]
            if all(1 <= w <= MAX_SPAN_WORDS for w in words) and max(len(a_mid), len(b_mid)) <= MAX_SPAN_TOKENS:
                found.add((old, new, old[a_mid[0][0] : a_mid[-1][1]], new[b_mid[0][0] : b_mid[-1][1]]))
    return found


def test_the_index_finds_the_same_changed_pairs_as_comparing_every_pair(small):
    total = 0
    for old, new in small:
        olds, news = article_sentences(old.text), article_sentences(new.text)
        fast = {
            (p.old, p.new, p.old[p.old_lo : p.old_hi], p.new[p.new_lo : p.new_hi]) for p in changed_pairs(olds, news)
        }
        assert fast == brute_force_pairs(olds, news), new.title
        total += len(fast)
    assert len(small) >= 10 and total >= 50  # one-span edits are common: wording, numbers, names


def test_changed_facts_of_real_articles_are_single_updates(articles, slice_candidates):
    docs = {new.doc_id: (old, new) for old, new in articles}
    changed, _ = slice_candidates
    assert len(changed) >= 3 and {f.answer_kind for f in changed} >= {"name", "number"}
    for f in changed:
        old, new = docs[f.page_id]
        (a_old,), (a_new,) = f.answers_2015, f.answers_2020
        assert f.kind == "changed" and f.title == new.title
        assert f.evidence_2015 in old.text and f.evidence_2020 in new.text
        assert f.evidence_2015 in article_sentences(old.text) and f.evidence_2020 in article_sentences(new.text)
        assert f.query.count(MASK) == 1 and f.query.replace(MASK, a_new) == f.evidence_2020
        assert normalize(f.query.replace(MASK, a_old)) == normalize(f.evidence_2015)
        assert not occurs(a_new, old.text) and not occurs(a_old, new.text)  # stale recognisable, new not findable
        assert f.answer_kind in ANSWER_KINDS and answer_kind(a_old) == answer_kind(a_new) == f.answer_kind
        rest = content_words_of(f.query.replace(MASK, " "))
        assert rest.isdisjoint(content_words_of(a_old) | content_words_of(a_new))


def test_unchanged_facts_of_real_articles_are_stated_alike_in_both(small):
    unchanged = [(old, new, f) for old, new in small for f in unchanged_facts(old, new)]
    assert Counter(f.answer_kind for _, _, f in unchanged).keys() == set(ANSWER_KINDS)
    for old, new, f in unchanged:
        assert f.kind == "unchanged" and f.answers_2015 == f.answers_2020
        assert f.evidence_2015 in old.text and f.evidence_2020 in new.text
        assert normalize(f.evidence_2015) == normalize(f.evidence_2020)
        assert f.query.replace(MASK, f.answers_2020[0]) == f.evidence_2020
        lo = f.query.index(MASK)
        assert (f.answer_kind, lo, lo + len(f.answers_2020[0])) in maskable(f.evidence_2020)


def test_the_draw_is_seeded_capped_per_article_and_split_by_article(slice_candidates):
    changed, shared = slice_candidates
    sizes = {"dev": 3, "test": 8}
    first = draw(changed, shared, sizes, seed=0)
    assert first == draw(changed, shared, sizes, seed=0)
    assert first != draw(changed, shared, sizes, seed=1)
    pages = {split: {f.page_id for f in facts} for split, facts in first.items()}
    assert pages["dev"].isdisjoint(pages["test"])
    for split, facts in first.items():
        assert all(split_of(f.page_id) == split for f in facts)
        assert [f.id for f in facts] == [f"temporal-{split}-{n}" for n in range(1, len(facts) + 1)]
        per_page = Counter(f.page_id for f in changed if split_of(f.page_id) == split)
        achievable = sum(min(2, n) for n in per_page.values())
        assert Counter(f.kind for f in facts) == Counter(changed=min(sizes[split], achievable), unchanged=sizes[split])
        for kind in ("changed", "unchanged"):
            of_kind = [f for f in facts if f.kind == kind]
            assert max(Counter(f.page_id for f in of_kind).values(), default=0) <= 2
            assert len({f.evidence_2020 for f in of_kind}) == len(of_kind)
    # the unchanged facts ask for the answer kinds the changed ones do, in the same shares
    test_changed = Counter(f.answer_kind for f in first["test"] if f.kind == "changed")
    test_unchanged = Counter(f.answer_kind for f in first["test"] if f.kind == "unchanged")
    shares = {k: n / sum(test_changed.values()) for k, n in test_changed.items()}
    assert all(abs(test_unchanged[k] - shares.get(k, 0) * sizes["test"]) < 1 for k in ANSWER_KINDS)


def test_split_of_is_by_page_id_one_fifth_dev():
    splits = [split_of(str(i)) for i in range(5000)]
    assert splits == [split_of(str(i)) for i in range(5000)]
    assert 0.17 < splits.count("dev") / len(splits) < 0.23


def pair(old: str, new: str) -> SentencePair | None:
    found = changed_pairs([old], [new])
    return found[0] if found else None


def masked(old: str, new: str) -> tuple[str, str] | None:
    """The two answers a changed fact of this sentence pair masks, or None."""
    p = pair(old, new)
    spans = None if p is None else answer_spans(p)
    return None if p is None or spans is None else (p.old[spans[0] : spans[1]], p.new[spans[2] : spans[3]])


def test_one_name_number_or_date_differs():
    assert masked("The population was 4,410 at the 2010 census.", "The population was 4,800 at the 2010 census.") == (
        "4,410",
        "4,800",
    )
    # two changes are no single update; the span between them is no number
    assert pair(
        "The population was 4,410 at the 2000 census here.", "The population was 4,800 at the 2010 census here."
    )
    assert (
        masked("The population was 4,410 at the 2000 census here.", "The population was 4,800 at the 2010 census here.")
        is None
    )
    # a span of five words, an insertion and an identical sentence are not pairs
    assert (
        pair(
            "The current mayor of the town is a man.", "The current mayor of the town is John Paul George Ringo Starr."
        )
        is None
    )
    assert pair("The mayor of the old town is John Smith.", "The mayor of the old town is now John Smith.") is None
    assert changed_pairs(["The mayor of the town is John Smith."], ["The mayor of the town is John Smith."]) == []
    # a name is masked whole, a date with its day or month
    assert masked("The current mayor of the town is John Smith.", "The current mayor of the town is John Brown.") == (
        "John Smith",
        "John Brown",
    )
    assert masked(
        "The bridge over the river was opened on 12 June 2015.", "The bridge over the river was opened on 12 May 2019."
    ) == (
        "12 June 2015",
        "12 May 2019",
    )
    assert masked(
        "The bridge over the river was opened on June 5, 2015.", "The bridge over the river was opened on June 7, 2019."
    ) == (
        "June 5, 2015",
        "June 7, 2019",
    )
    # kinds differ, a pronoun, words around a number
    assert (
        masked(
            "The bridge over the river was opened in the year 2015.",
            "The bridge over the river was opened in the year Bob.",
        )
        is None
    )
    assert (
        masked("He was the mayor of the town for many years.", "She was the mayor of the town for many years.") is None
    )
    assert (
        masked(
            "The bridge over the river was opened in 2015 at last.",
            "The bridge over the river was opened by 2019 at last.",
        )
        is None
    )


def test_restatements_and_corrections_are_no_update():
    assert restated("7 April 1970", "April 7, 1970", "date") and restated("May 11th", "11 May", "date")
    assert restated("7,000", "7000", "number") and restated("2 million", "2,000,000", "number")
    assert restated("6.84", "6.8", "number") and restated("ninety-six", "96", "number")
    assert not restated("7,700", "7,000", "number") and not restated("2015", "2019", "date")
    assert restated("Ashkenazy Jews", "Ashkenazi Jews", "name") and restated("CA", "California", "name")
    assert restated("Inter", "Internazionale", "name")
    assert not restated("Bobcats", "Hornets", "name") and not restated("Roy Moore", "Tom Parker", "name")


def doc(text: str, page_id: str = "7") -> Document:
    return Document(page_id, "Springfield", text, "test")


def test_changed_facts_need_absent_answers_and_a_clean_query():
    old = "Springfield is a small town in the valley. The population of the town was 4,410 in the last count."
    new = "Springfield is a small town in the valley. The population of the town was 4,800 in the last count."
    (fact,) = changed_facts(doc(old), doc(new))
    assert (fact.query, fact.answers_2015, fact.answers_2020) == (
        f"The population of the town was {MASK} in the last count.",
        ["4,410"],
        ["4,800"],
    )
    assert (fact.kind, fact.answer_kind, fact.evidence_2015) == ("changed", "number", old.split(". ")[1])
    assert changed_facts(doc(old + " It had 4,800 cows."), doc(new)) == []  # the new answer is in the old article
    assert changed_facts(doc(old), doc(new + " It once had 4,410 people.")) == []  # the old one in the new article
    # the answer shares a word with the query; the span is part of a placeholder ("formula_56")
    assert (
        changed_facts(
            doc("The club plays at Old Trafford Park near the park today."),
            doc("The club plays at Anfield Park near the park today."),
        )
        == []
    )
    assert (
        changed_facts(
            doc("The inverse is then written as formula_56 in the main text."),
            doc("The inverse is then written as formula_57 in the main text."),
        )
        == []
    )
    # the rest of the sentence differs in spacing only
    lake = "The water of the lake is {} on average in the summer."
    assert changed_facts(doc(lake.format("21°C")), doc(lake.format("23°C")))[0].answers_2020 == ["23"]
    assert changed_facts(doc(lake.format("21 °C")), doc(lake.format("23°C"))) == []
    # a sentence with two old counterparts: which one it replaced is unsure
    two = " ".join(f"The population of the town was {n} in the last count." for n in ("4,410", "3,900"))
    assert changed_facts(doc(two), doc(new)) == []


def test_sentences_with_template_holes_are_left_out():
    text = (
        "As of , six former premiers of the state are alive today. He was born ( ) in the old town of Perth. "
        'It was influenced by Alan Moore\'s "" and by other comics of the time. '
        "Six former premiers of the state are alive as of 2020."
    )
    assert article_sentences(text) == ("Six former premiers of the state are alive as of 2020.",)


def test_occurs_whole_words_any_case_any_spacing():
    assert occurs("4,800", "had 4,800 people") and not occurs("4,800", "had 14,800 people")
    assert occurs("John Smith", "met john\nsmith there") and not occurs("Smith", "Smithson")


def test_the_temporal_sets_are_well_formed_and_split_by_article():
    sets = {
        split: [json.loads(line) for line in (DATA / f"temporal-{split}.jsonl").open(encoding="utf-8")]
        for split in ("dev", "test")
    }
    pages = {split: {f["page_id"] for f in facts} for split, facts in sets.items()}
    assert pages["dev"].isdisjoint(pages["test"])
    for split, facts in sets.items():
        kinds = Counter(f["kind"] for f in facts)
        assert kinds["changed"] >= 100 and kinds["unchanged"] >= kinds["changed"], split
        assert len({f["id"] for f in facts}) == len(facts)
        for f in facts:
            assert set(f) == FIELDS and split_of(f["page_id"]) == split
            assert f["answer_kind"] in ANSWER_KINDS and f["query"].count(MASK) == 1
            assert f["query"].replace(MASK, f["answers_2020"][0]) == f["evidence_2020"]
            assert normalize(f["query"].replace(MASK, f["answers_2015"][0])) == normalize(f["evidence_2015"])
            assert (f["answers_2015"] != f["answers_2020"]) == (f["kind"] == "changed")
        for kind in ("changed", "unchanged"):
            assert max(Counter(f["page_id"] for f in facts if f["kind"] == kind).values()) <= 2
