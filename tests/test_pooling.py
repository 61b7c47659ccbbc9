"""One answer per thing named (npmcore.answer.pooling): which words name more of a name, which phrase holds which
(against a brute-force reading of the rule), and the pools: their scores, the form each is shown in, its members."""

import numpy as np
import pytest

from npmcore.answer.phrases import Phrases
from npmcore.answer.pooling import holders, inside_share, names_more, pool, shared_positions
from npmcore.vocab import spelled


@pytest.mark.parametrize(
    ("before", "added", "held", "more"),
    [
        ("discovered by ", "Alexander ", "Fleming", True),
        ("discovered by ", "Sir Alexander ", "Fleming", True),
        ("painted by ", "Vincent van ", "Gogh", True),  # a particle inside a name
        ("written by ", "J. R. R. ", "Tolkien", True),  # initials
        ("fell on ", "9 November ", "1989", True),  # a date's day and month
        ("by the ", "composer ", "Rossini", False),  # a common word
        ("the works of ", "Padua and ", "Pisa", False),  # a function word
        ("the ", "Wali of Egypt and ", "Sudan", False),
        ("in ", "1947 ", "Pakistan", False),  # a number before a name
        ("in the ", "Olympic ", "gymnastics", False),  # not a name
        ("of Florence. ", "Jan van ", "Eyck", False),  # a sentence's first word (found elsewhere inside one)
        ("", "Composer ", "Smetana", False),  # a sentence's first word: capitalised anyway
        ("Florence. ", "Composer ", "Smetana", False),
        ("in ", "Siem Reap, ", "Cambodia", False),  # punctuation
    ],
)
def test_the_words_before_a_name_name_more_of_it_where_they_are_name_words(before, added, held, more):
    assert names_more(before, added, held) is more


def test_what_a_phrase_spells_is_its_letters_and_digits():
    assert spelled("U.S.") == spelled("US") and spelled("São Paulo") == spelled("são paulo")
    assert spelled("Fleming") != spelled("Flemings")


def phrases_of(tokens: list[list[int]], positions: list[list[tuple[int, int]]], scores: list[float]) -> Phrases:
    """Ranked phrases (best first) of token ids, each with its positions (first, last global token id)."""
    width = max(len(t) for t in tokens)
    ids = np.array([t + [-1] * (width - len(t)) for t in tokens])
    spans = np.array([p for mine in positions for p in mine])
    of = np.array([rank for rank, mine in enumerate(positions) for _ in mine])
    scores = np.asarray(scores, dtype=np.float64)
    parts = np.arange(len(tokens) * 2, dtype=np.float64).reshape(len(tokens), 2)
    return Phrases(ids, scores, spans, np.full(len(spans), 1.0 / len(spans)), of, parts)


# "Fleming" (1) at 10 … 50, "Alexander Fleming" (2 1) at 9-10 and 29-30, "Sir Alexander Fleming" (3 2 1) at 28-30 (the
# name written whole once, in full twice, then short); "penicillin" (4) at 60; "Alexander" (2) at 9 and 29, held by
# nothing (no phrase ends with it)
FLEMING = phrases_of(
    [[1], [4], [2, 1], [2], [3, 2, 1]],
    [
        [(10, 10), (20, 20), (30, 30), (40, 40), (50, 50)],
        [(60, 60)],
        [(9, 10), (29, 30)],
        [(9, 9), (29, 29)],
        [(28, 30)],
    ],
    [0.5, 0.2, 0.15, 0.1, 0.05],
)


def brute_holders(p: Phrases, keys: list[str], more) -> list[int]:
    """The rule read plainly: of each phrase, the first phrase by rank (not itself) that spells the same and ranks
    above it, or that ends with its tokens and adds name words at a position of each where it does."""
    tokens = [tuple(int(t) for t in row if t >= 0) for row in p.token_ids]
    spans = [[tuple(int(x) for x in s) for s in p.spans[p.phrase_of_span == r]] for r in range(len(tokens))]
    out = []
    for short, mine in enumerate(tokens):
        found = -1
        for long, theirs in enumerate(tokens):
            if long == short:
                continue
            if keys[long] == keys[short] and long < short:
                found = long
                break
            extra = len(theirs) - len(mine)
            shared = [
                (spans[long].index((a - extra, b)), spans[short].index((a, b)))
                for a, b in spans[short]
                if extra > 0 and theirs[extra:] == mine and (a - extra, b) in spans[long]
            ]
            if shared and more(long, short, shared):
                found = long
                break
        out.append(found)
    return out


def test_a_phrase_is_held_by_the_best_ranked_longer_phrase_that_names_more_of_it_where_both_are_found():
    keys = ["fleming", "penicillin", "alexanderfleming", "alexander", "siralexanderfleming"]
    names = lambda long, short, shared: True  # noqa: E731
    spans_of = [FLEMING.spans[FLEMING.phrase_of_span == r] for r in range(5)]
    found = holders(FLEMING.token_ids, spans_of, keys, names)
    assert found.tolist() == brute_holders(FLEMING, keys, names) == [2, -1, 4, -1, -1]
    no_titles = lambda long, short, shared: long != 4  # noqa: E731  ("Sir" is no name word here)
    assert holders(FLEMING.token_ids, spans_of, keys, no_titles).tolist() == [2, -1, -1, -1, -1]
    same = ["fleming", "penicillin", "alexanderfleming", "fleming", "siralexanderfleming"]  # one spelling twice
    assert holders(FLEMING.token_ids, spans_of, same, lambda *a: False).tolist()[3] == 0
    assert shared_positions(spans_of[0], spans_of[2], 1) == [(0, 0), (1, 2)]
    assert inside_share(spans_of[0], spans_of[2], 1) == pytest.approx(2 / 5)


def test_a_pool_is_one_answer_its_score_the_sum_of_its_forms_shown_in_the_form_its_positions_write():
    keys = ["fleming", "penicillin", "alexanderfleming", "alexander", "siralexanderfleming"]
    pooled = pool(FLEMING, keys, lambda long, short, shared: True)
    # "Fleming" is mostly alone: shown as it is; "Alexander Fleming", half the time "Sir Alexander Fleming", absorbed
    # by it, but with less than "Fleming"'s own score
    assert pooled.members == ((0, 2, 4), (1,), (3,))
    assert pooled.phrases.scores.tolist() == pytest.approx([0.7, 0.2, 0.1])
    assert pooled.phrases.scores.sum() == pytest.approx(FLEMING.scores.sum())
    assert pooled.phrases.token_ids[0].tolist()[:1] == [1] and pooled.phrases.parts[0].tolist() == [0.0, 1.0]
    shown = pooled.phrases.phrase_of_span  # only the form shown has positions an answer reads
    assert sorted(FLEMING.spans[shown == 0].tolist()) == [[10, 10], [20, 20], [30, 30], [40, 40], [50, 50]]
    assert pooled.kinds.tolist() == [0, 0, 0] and pooled.source is FLEMING


def test_a_short_form_found_mostly_inside_a_longer_one_is_shown_as_the_longer():
    # "Gogh" (1) is nearly always "van Gogh" (5 1); "Vincent van Gogh" (6 5 1) once
    gogh = phrases_of(
        [[1], [5, 1], [6, 5, 1]],
        [[(11, 11), (21, 21), (31, 31)], [(10, 11), (20, 21), (30, 31)], [(9, 11)]],
        [0.6, 0.26, 0.08],
    )
    pooled = pool(gogh, ["gogh", "vangogh", "vincentvangogh"], lambda long, short, shared: True)
    assert pooled.members == ((1, 0, 2),)  # "van Gogh": its own score and Gogh's
    dates = phrases_of([[7], [8, 7]], [[(50, 50), (60, 60)], [(49, 50), (59, 60)]], [0.5, 0.1])
    assert pool(dates, ["1989", "november1989"], lambda *a: True).members == ((0, 1),)  # a year stays the year


def test_the_phrases_after_the_first_top_are_each_their_own_pool_ranked_among_the_pools():
    keys = ["fleming", "penicillin", "alexanderfleming", "alexander", "siralexanderfleming"]
    names = lambda long, short, shared: True  # noqa: E731
    cut = pool(FLEMING, keys[:2], names, top=2)  # "Alexander Fleming" and the rest after the first two: not pooled
    # the same as pooling them all where nothing after the first two holds or is held (its own spelling each)
    alone = pool(FLEMING, [*keys[:2], "a", "b", "c"], lambda long, short, shared: long < 2 and short < 2)
    assert cut.members == alone.members == ((0,), (1,), (2,), (3,), (4,))
    assert cut.phrases.scores.tolist() == alone.phrases.scores.tolist() == FLEMING.scores.tolist()
    assert cut.phrases.phrase_of_span.tolist() == FLEMING.phrase_of_span.tolist()
    pooled = pool(FLEMING, keys[:3], names, top=3)  # "Fleming" and "Alexander Fleming" pooled: 0.65 before 0.2
    assert pooled.members == ((0, 2), (1,), (3,), (4,))
    assert pooled.phrases.scores.tolist() == pytest.approx([0.65, 0.2, 0.1, 0.05])
    assert pooled.phrases.phrase_of_span.tolist() == [0] * 5 + [1] + [-1] * 2 + [2] * 2 + [3]
