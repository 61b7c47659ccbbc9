"""Entity translation facts (npmcore.evaluation.translation) from the openings of a real 2015 Wikipedia dump,
and the sets bench/entity_translation.py wrote from it (bench/data/entity-translation-{dev,test}.jsonl)."""

import json
import tarfile
import unicodedata
from pathlib import Path

import pytest
import regex

from npmcore.evaluation.tasks import DEFAULT_DATA_DIR
from npmcore.evaluation.translation import (
    ALIASES,
    DIRECTION_MARKS,
    LANGUAGES,
    QUALIFIERS,
    TranslationFact,
    entries,
    opening,
    read_articles,
    split_facts,
    subject_of,
    translation_facts,
)
from npmcore.mask import MASK
from npmcore.storage import cache_dir

SHARDS = [f"2015-05/AA/wiki_{n:02d}" for n in range(12)]  # 775 articles, about 100 facts
UNPACKED = [cache_dir() / "enwiki_dated"]  # where npmcore.evaluation.dumps.dated_dump unpacks the dumps
ARCHIVE = DEFAULT_DATA_DIR / "enwiki_dated" / "enwiki_dated.tar.xz"
DATA = Path(__file__).resolve().parents[1] / "bench" / "data"
UNMARK = str.maketrans(dict.fromkeys(DIRECTION_MARKS))


@pytest.fixture(scope="module")
def articles(tmp_path_factory) -> list[tuple[str, str, str]]:
    """The articles of the dump's first shards: from an unpacked copy, else streamed out of the archive
    (its first members: well under a second)."""
    for root in UNPACKED:
        if all((root / shard).is_file() for shard in SHARDS):
            return list(read_articles(root / shard for shard in SHARDS))
    if not ARCHIVE.is_file():
        pytest.skip(f"the 2015 dump is neither unpacked ({', '.join(map(str, UNPACKED))}) nor at {ARCHIVE}")
    out, wanted = tmp_path_factory.mktemp("enwiki_dated"), set(SHARDS)
    with tarfile.open(ARCHIVE, "r:xz") as tar:
        for member in tar:
            if member.name in wanted:
                (out / member.name).parent.mkdir(parents=True, exist_ok=True)
                (out / member.name).write_bytes(tar.extractfile(member).read())
                wanted.discard(member.name)
                if not wanted:
                    break
    return list(read_articles(out / shard for shard in SHARDS))


# The brute-force reference: the same rules written independently, with the regex module's scripts
# (\p{Latin}) and recursive patterns instead of unicodedata names and depth counting.
_LANG = "|".join(sorted([*LANGUAGES, *ALIASES], key=len, reverse=True))
_ENTRY = regex.compile(
    rf"(?<=[(;,]\s*(?:\[\]\s*)?)(?:(?:{'|'.join(sorted(QUALIFIERS, key=len, reverse=True))})\s+)?"
    rf"((?:{_LANG})(?:/(?:{_LANG}))*)(?:\s+Cyrillic)?\s*:([^;,()\[\]:/|=\"“”„«»]*)",
    regex.IGNORECASE,
)
_GROUP = regex.compile(r"\((?:[^()]++|(?R))*\)")  # a balanced parenthesis
_NAMES = {name.lower(): ALIASES.get(name, name) for name in [*LANGUAGES, *ALIASES]}


def _fold(text: str) -> str:
    return regex.sub(r"\p{M}", "", unicodedata.normalize("NFKD", text)).casefold()


def reference_facts(articles: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """(page_id, language, name) of every fact, walking each opening's balanced parentheses with one regex."""
    found = []
    for page_id, title, text in articles:
        sentence = opening(text)
        sentence += ")" * _GROUP.sub("", sentence).count("(")  # a parenthesis left open closes at the end
        verb = regex.search(r"\s(?:is|was|are|were|refers\s+to)\s", _GROUP.sub(lambda m: "_" * len(m[0]), sentence))
        subject = sentence[: verb.start()] if verb else sentence
        first = regex.match(r"\W*(\w+)", _fold(subject_of(title)))
        if not first or not regex.search(rf"\b{regex.escape(first[1])}", _fold(subject)):
            continue
        seen = set()
        for group in _GROUP.finditer(subject):
            for m in _ENTRY.finditer(group[0]):
                value = regex.split(r"\sor\s", m[2].translate(UNMARK))[0]
                latin = regex.search(r"\S*\p{Latin}", value)  # the first word with a Latin letter
                name, tail = (value[: latin.start()], value[latin.start() :]) if latin else (value, "")
                if regex.search(r"(?!\p{Latin})\p{L}", tail) or regex.fullmatch(r"(?:[IVXLCDM]+\.?\s*)+", tail):
                    continue
                name = regex.sub(r"^[\s*\-–—.·\u200c\u200d\ufeff]+|[\s*\-–—.·\u200c\u200d\ufeff]+$", "", name)
                if not regex.match(r"[\p{L}\p{M}]", name) or regex.search(r"\p{Latin}", name):
                    continue
                for language in (_NAMES[part.lower()] for part in m[1].split("/")):
                    if language not in seen:
                        seen.add(language)
                        found.append((page_id, language, name))
    return found


def test_facts_of_real_articles_are_those_of_a_brute_force_walk(articles):
    facts = translation_facts(articles)
    assert [(f.page_id, f.language, f.answers[0]) for f in facts] == reference_facts(articles)
    assert len(facts) >= 80 and len({f.language for f in facts}) >= 8  # Greek, Arabic, Russian, Hebrew, …
    assert ("Achilles", "Greek", ["Ἀχιλλεύς"]) in [(f.title, f.language, f.answers) for f in facts]


def test_each_answer_is_a_non_latin_name_written_in_its_articles_opening(articles):
    texts = {page_id: (title, text) for page_id, title, text in articles}
    facts = translation_facts(articles)
    assert len({f.id for f in facts}) == len({(f.page_id, f.language) for f in facts}) == len(facts)
    for f in facts:
        title, text = texts[f.page_id]
        (answer,) = f.answers
        assert f.title == title and f.evidence == opening(text) and f.evidence in text
        assert answer in f.evidence.translate(UNMARK), f.id  # as written, direction marks aside
        assert answer == answer.strip() and not set(answer) & set(DIRECTION_MARKS)
        assert regex.search(r"\p{L}", answer) and not regex.search(r"\p{Latin}", answer), f.id
        assert f.query == f"The {f.language} translation of {subject_of(title)} is: {MASK}."


def test_split_is_seeded_deterministic_and_by_article(articles):
    facts = translation_facts(articles)
    split = split_facts(facts)
    assert split == split_facts(facts) and split != split_facts(facts, seed=1)
    assert sorted([*split["dev"], *split["test"]], key=facts.index) == facts
    dev, test = ({f.page_id for f in split[s]} for s in ("dev", "test"))
    assert dev and test and not dev & test
    assert len(split["dev"]) == len(facts) // 2  # half and half: the small articles fill dev to exactly half


# Openings of the 2015 dump's articles, as the extractor wrote them (some shortened after their subject part).
OPENINGS = {
    "Athens": (
        'Athens (; Modern Greek: Αθήνα, "Athína", ]; Ancient\xa0Greek: Ἀθῆναι, "Athēnai") is the capital of Greece.'
    ),
    "Akira Kurosawa": (
        "Akira Kurosawa (Japanese: 黒澤 明, Hepburn: Kurosawa Akira, March 23, 1910\xa0– September 6, 1998)"
        " was a Japanese filmmaker."
    ),
    "Japan": (
        'Japan (Japanese: 日本 Nippon or Nihon; formally 日本国 \xa0 or Nihon-koku, "State of Japan")'
        " is an island nation in East Asia."
    ),
    "Ahab": (
        'Ahab (Hebrew: אַחְאָב, \xa0"Aẖ\'av", \xa0"ʼAḥʼāḇ"\xa0; "Brother of the father"; Greek: Αχααβ;'
        ' Latin: "Achab") was the seventh king of Israel.'
    ),
    "Allah": 'Allah ( or ; Arabic: الله\u200e "Allāh", ]) is the Arabic word for God.',
    "Avicenna": (
        "Avicenna (; Latinate form of Ibn-Sīnā (Persian: پور سینا / ابن سینا\u200e\u200d;"
        " Arabic: ابن سینا\u200e\u200d),"
        " full name Abū ʿAlī al-Ḥusayn ibn ʿAbd Allāh ibn Al-Hasan ibn Ali ibn Sīnā\xa0(Arabic:\xa0أبو علي الحسين ابن"
        " عبد الله ابن سينا\u200d; c.\u2009980\xa0– June 1037) was a Persian polymath."
    ),
    "Afghanistan": (
        'Afghanistan (Pashto/Dari: افغانستان, "Afġānistān"), officially the Islamic Republic of Afghanistan,'
        " is a landlocked country."
    ),
    "Nikola Tesla": (
        "Nikola Tesla (Serbian Cyrillic: Никола Тесла; 10 July 1856\xa0– 7 January 1943)"
        " was a Serbian American inventor."
    ),
    "Nagarjuna": "Nāgārjuna (Tibetan: ཀླུ་སྒྲུབ་, Sinhalese: නාගර්ජුන, c. 150 – c. 250 CE) is a philosopher.",
    "Alexander Balas": "Alexander Balas (Ancient\xa0Greek: Ἀλέξανδρoς Bάλας), ruler of the Greek Seleucid kingdom.",
    "Andrew II of Hungary": (
        'Andrew II of Jerusalem (Croatian: "Andrija II.", Ukrainian: Андрій II; 1177\xa0– 21 September 1235)'
        " was King of Hungary."
    ),
    "Agamemnon": (
        'Agamemnon (; Greek: Ἀγαμέμνων from *Ἀγαμέδμων (from ἄγαν, "very much"), "very steadfast")'
        " was the son of king Atreus."
    ),
    "Serbia": (
        "Serbia (), officially the Republic of Serbia (Serbian: Republika Srbija, Република Србија, ]),"
        " is a sovereign state."
    ),
    "Arachnophobia": 'Arachnophobia (from the Greek: ἀράχνη, "aráchnē", "spider") is a specific phobia.',
    "Raphael of Brooklyn": (
        "Saint Raphael of Brooklyn (November 08, 1860\xa0– February 27, 1915), also known as Father Raphael,"
        " was born as Raphael Hawaweeny (Arabic: رفائيل هواويني\u200e) in Beirut."
    ),
    "AK-47": (
        "The AK-47 is a selective-fire assault rifle."
        ' It is officially known as "Avtomat Kalashnikova" (Russian: Автомат Калашникова).'
    ),
    "History of Chad": (
        'Chad (Arabic: تشاد\u200e; French: "Tchad"), officially the Republic of Chad, is a landlocked country.'
    ),
    "Alexander the Great": (
        "Alexander III of Macedon (20/21 July 356 – 10/11 June 323 BC), commonly known as Alexander the Great"
        ' (Greek: Ἀλέξανδρος ὁ Μέγας, "Aléxandros ho Mégas" ]),iii[›] was a King ("Basileus") of the Ancient Greek'
        " kingdom of Macedon. Born in Pella in 356 BC, Alexander succeeded his father."
    ),
    "Khwaja Ahmad Abbas": (
        "Khwaja Ahmad Abbas (Hindi: ख़्वाजा अहमद अब्बास) (7 June 1914 – 1 June 1987), popularly known as K. A. Abbas,"
        " was an Indian film director. He was the maker of important Hindi films."
    ),
    "Aristophanes": (
        "Aristophanes ( or ; Greek: Ἀριστοφάνης, ]; c. 446 – c. 386 BC), son of Philippus,"
        " was a comic playwright of ancient Athens. Eleven of his plays survive."
    ),
    "Kangchenjunga": (
        "Kangchenjunga (Nepali: कञ्चनजङ्घा, Sikkimese and Tibetan: གངས་ཆེན་མཛོད་ལྔ་\n, Hindi: कंचनजंघा)"
        " is the third highest mountain in the world. It rises with an elevation of 8586 m.\nThe main peak."
    ),
}


def facts_of(title: str) -> list[tuple[str, str]]:
    return [(f.language, f.answers[0]) for f in translation_facts([("1", title, OPENINGS[title])])]


def test_entries_of_real_openings():
    # several languages and qualifiers in one parenthesis; one fact per language: the first
    assert entries(OPENINGS["Athens"]) == [("Greek", "Αθήνα"), ("Greek", "Ἀθῆναι")]
    assert facts_of("Athens") == [("Greek", "Αθήνα")]
    # transliterations after a comma, a quote, a space
    assert facts_of("Akira Kurosawa") == [("Japanese", "黒澤 明")]
    assert facts_of("Japan") == [("Japanese", "日本")]
    assert facts_of("Ahab") == [("Hebrew", "אַחְאָב"), ("Greek", "Αχααβ")]
    # direction marks (and a joiner left after them) are not part of the name
    assert facts_of("Allah") == [("Arabic", "الله")]
    assert facts_of("Avicenna") == [("Persian", "پور سینا"), ("Arabic", "ابن سینا")]
    # "Pashto/Dari:" names both; "Serbian Cyrillic:" is Serbian; "Sinhalese:" is Sinhala
    assert facts_of("Afghanistan") == [("Pashto", "افغانستان"), ("Dari", "افغانستان")]
    assert facts_of("Nikola Tesla") == [("Serbian", "Никола Тесла")]
    assert entries(OPENINGS["Nagarjuna"]) == [("Tibetan", "ཀླུ་སྒྲུབ་"), ("Sinhala", "නාගර්ජුන")]


@pytest.mark.parametrize(
    "title",
    [
        "Alexander Balas",  # a Latin letter in the name (a typo of the article)
        "Andrew II of Hungary",  # the name would lose its numeral
        "Agamemnon",  # another script after a Latin word
        "Serbia",  # a name in Latin letters
        "Arachnophobia",  # an etymology ("from the Greek:"), no translation
        "Raphael of Brooklyn",  # a parenthesis after the opening's main verb
        "AK-47",  # a parenthesis of the second sentence
        "History of Chad",  # the 2015 text opens as "Chad" does: the name is no translation of the title
    ],
)
def test_entries_left_out(title):
    assert facts_of(title) == []


def test_opening_is_the_first_sentence():
    assert opening(OPENINGS["Alexander the Great"]).endswith("kingdom of Macedon.")
    assert facts_of("Alexander the Great") == [("Greek", "Ἀλέξανδρος ὁ Μέγας")]
    assert opening(OPENINGS["Khwaja Ahmad Abbas"]).endswith("film director.")  # "K. A. Abbas" ends nothing
    assert opening(OPENINGS["Aristophanes"]).endswith("ancient Athens.")  # nor "c. 446" in parentheses
    assert opening(OPENINGS["AK-47"]) == "The AK-47 is a selective-fire assault rifle."
    # a parenthesis the extractor broke across two lines goes on; a paragraph that is whole does not
    assert opening(OPENINGS["Kangchenjunga"]).endswith("in the world.")
    assert facts_of("Kangchenjunga") == [("Nepali", "कञ्चनजङ्घा"), ("Hindi", "कंचनजंघा")]
    broken = "Harappans (]; Punjabi: ਹਰਪਾ; is an archaeological site\nThe site (of a city)."
    assert opening(broken) == "Harappans (]; Punjabi: ਹਰਪਾ; is an archaeological site"


def test_subject_and_query():
    assert subject_of("Mercury (planet)") == "Mercury" and subject_of("Abydos (Hellespont)") == "Abydos"
    assert subject_of("Ranma ½") == "Ranma ½" and subject_of("(Untitled)") == "(Untitled)"
    (fact,) = translation_facts([("30", "Banpo Bridge (Seoul)", "Banpo Bridge (Korean: 반포대교) is a bridge.")])
    assert fact.query == "The Korean translation of Banpo Bridge is: [MASK]." and fact.answers == ["반포대교"]
    assert fact.id == "entity-translation-30-Korean" and fact.evidence == "Banpo Bridge (Korean: 반포대교) is a bridge."


def test_the_written_sets_are_well_formed_and_split_by_article():
    sets = {
        s: [json.loads(line) for line in (DATA / f"entity-translation-{s}.jsonl").open(encoding="utf-8")]
        for s in ("dev", "test")
    }
    every = sorted((TranslationFact(**f) for facts in sets.values() for f in facts), key=lambda f: f.id)
    again = split_facts(every)
    assert {s: sorted(f.id for f in again[s]) for s in again} == {s: sorted(f["id"] for f in sets[s]) for s in sets}
    assert len(sets["dev"]) == len(sets["test"]) >= 400  # half and half
    for facts in sets.values():
        for f in facts:
            assert set(f) == {"id", "query", "answers", "language", "title", "page_id", "evidence"}
            (answer,) = f["answers"]
            assert f["language"] in LANGUAGES
            assert answer in f["evidence"].translate(UNMARK) and not regex.search(r"\p{Latin}", answer)
            assert f["query"] == f"The {f['language']} translation of {subject_of(f['title'])} is: {MASK}."
    assert not {f["page_id"] for f in sets["dev"]} & {f["page_id"] for f in sets["test"]}
    ids = [f["id"] for facts in sets.values() for f in facts]
    assert len(set(ids)) == len(ids)
