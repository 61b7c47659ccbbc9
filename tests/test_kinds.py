"""The kind of answer asked for, learned from the datastore (npmcore.answer.kinds): on the first file of Simple English
Wikipedia (371 real pages), what an article's first sentences say its subject is, each candidate's kind by its
article, and the answers re-ranked by it (against the re-weighting done by hand)."""

import numpy as np
import pytest

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.kinds import WEIGHTS, kind_of, predicate, preferred, says
from npmcore.answer.phrases import Phrases
from npmcore.answer.pooling import Pooled
from npmcore.ask.questions import PERSON, PLACE
from npmcore.corpus.ingest import ingest
from npmcore.index.articles import ARTICLES, Article, Articles, write_articles
from npmcore.index.bm25_index import build_bm25_index


@pytest.fixture(scope="module")
def simple_corpus(tmp_path_factory, simplewiki_shard) -> str:
    return ingest([simplewiki_shard], str(tmp_path_factory.mktemp("simple") / "store"))


@pytest.fixture(scope="module")
def articles(simple_corpus, tmp_path_factory) -> Articles:
    path = tmp_path_factory.mktemp("articles") / ARTICLES
    write_articles(simple_corpus, path)
    return Articles(path)


def test_what_an_article_says_its_subject_is_is_its_first_sentences_predicate():
    assert predicate("Canberra is the capital city of Australia. There are 403,468 people.").startswith(
        "the capital city of Australia."
    )
    uruguay = "Uruguay is a country in South America. Its capital is Montevideo, a port."
    assert "capital" not in predicate(uruguay).split() and "Montevideo," in predicate(uruguay)
    assert predicate("Neon is a chemical element with symbol Ne. It is a noble gas.").endswith("a noble gas.")


@pytest.mark.parametrize(
    ("candidate", "kind", "verdict"),
    [
        ("Beijing", "capital", 1),  # "Beijing is the capital of the People's Republic of China."
        ("beijing", "city", 1),  # any case
        ("Austria", "country", 1),
        ("Austria", "capital", -1),  # a country: its capital is another
        ("Colchester", "town", 1),
        ("Colchester", PLACE, 1),
        ("Alan Turing", PERSON, 1),  # "(London, 23 June 1912 – Wilmslow, Cheshire, 7 June 1954) was … He …"
        ("Beijing", PERSON, -1),
        ("Boil", "disease", 0),  # "Boil might mean:": a list of meanings says nothing
        ("Zürich", "city", 0),  # no article in these pages: unknown
    ],
)
def test_a_candidate_is_of_the_kind_its_own_article_says(articles, candidate, kind, verdict):
    assert kind_of(articles, candidate, kind) == verdict


def test_an_article_titled_with_the_kind_counts_for_it():
    language = Article("Portuguese language", "Portuguese is spoken in Portugal and Brazil.", False)
    assert says(language, "language") and not says(language, "country")


def brute_preferred(scores: np.ndarray, verdicts: np.ndarray) -> list[int]:
    """The rows by their scores times WEIGHTS (of the kind, of another), unknown ones as they are, best first."""
    weighed = [s * (WEIGHTS[0] if v > 0 else WEIGHTS[1] if v < 0 else 1.0) for s, v in zip(scores, verdicts)]
    weighed += list(scores[len(verdicts) :])
    return sorted(range(len(scores)), key=lambda r: (-weighed[r], r))


def test_answers_of_the_kind_asked_come_first_and_others_last_by_their_weights():
    scores = np.array([0.4, 0.3, 0.2, 0.1])
    phrases = Phrases(np.arange(4)[:, None], scores, np.array([[0, 0], [1, 1], [2, 2], [3, 3]]), scores, np.arange(4))
    pooled = Pooled(phrases, ((0,), (1,), (2,), (3,)), phrases, np.zeros(4, dtype=np.int64))
    verdicts = np.array([-1, 0, 1])  # the fourth is not looked up
    ranked = preferred(pooled, verdicts)
    order = brute_preferred(scores, verdicts)
    assert [m[0] for m in ranked.members] == order == [2, 1, 3, 0]
    assert ranked.phrases.scores.sum() == pytest.approx(1.0) and ranked.kinds.tolist() == [1, 0, 0, -1]
    assert ranked.phrases.phrase_of_span.tolist() == [order.index(r) for r in range(4)]  # positions follow their rows


def test_a_query_asking_for_a_kind_gets_its_answers_judged_by_their_articles(simple_corpus):
    npm = NPM(build_bm25_index(simple_corpus))
    query = "[MASK] is the capital of China."
    (phrases,) = npm.phrases([query], InferenceConfig(passages=5))
    plain, judged = npm.pooled(phrases), npm.pooled(phrases, "capital")
    texts = [a.text for a in npm.answers_from(query, plain, InferenceConfig(answers=10))]
    verdicts = [kind_of(npm.articles, text, "capital") for text in texts]
    assert [m[0] for m in judged.members] == [
        plain.members[r][0] for r in brute_preferred(plain.phrases.scores, np.array(verdicts))
    ]
    assert sorted(judged.kinds[:10].tolist()) == sorted(verdicts) and max(verdicts) == 1
    (answers,) = npm.predict([query], InferenceConfig(passages=5))
    assert all(a.forms == () or a.text not in a.forms for a in answers)  # a form is listed once, not as the answer
