"""How typed queries are asked (npmcore.answer.asking, npmcore.answer.statements): a sentence with one [MASK] as it
is; a question as the statements it stands for, shape by shape; one the rules cannot read, or asked in the paper's
form, as the paper asks NQ; anything else refused with what a query is."""

import pytest

from npmcore.answer.asking import ask, question_query, reads_as_question
from npmcore.answer.questions import fits
from npmcore.answer.statements import state
from npmcore.evaluation.tasks import load_task

SHAPES = [  # (question, the statements it must give, the likeliest first)
    # the wh-phrase is the subject; a verb with an object asks its passive too
    ("Who wrote Hamlet?", ("[MASK] wrote Hamlet.", "Hamlet was written by [MASK].")),
    (
        "who discovered penicillin in 1928",
        ("[MASK] discovered penicillin in 1928.", "Penicillin was discovered by [MASK] in 1928."),
    ),
    (
        "Who shot Trayvon Martin?",
        ("[MASK] shot Trayvon Martin.", "Trayvon Martin was shot by [MASK]."),
    ),  # "shot" tagged a noun
    ("Which book of the Bible comes right after Zephaniah?", ("[MASK] comes right after Zephaniah.",)),  # no passive
    ("What language is spoken in Brazil?", ("[MASK] is spoken in Brazil.",)),
    ("Who is married to Barack Obama?", ("[MASK] is married to Barack Obama.",)),
    ("What river flows into the Caspian Sea?", ("[MASK] flows into the Caspian Sea.",)),  # "flows" tagged a noun
    ("Who first grouped the Khoisan languages together?", ("[MASK] first grouped the Khoisan languages together.",)),
    ("How many people live in Tokyo?", ("[MASK] people live in Tokyo.",)),
    ("Whose work made paleontology a science?", ("[MASK]'s work made paleontology a science.",)),
    # "be" before its subject: the predicate ends the clause
    ("Where was Lionel Messi born?", ("Lionel Messi was born in [MASK].",)),
    ("When was the Eiffel Tower built?", ("The Eiffel Tower was built in [MASK].",)),
    ("Where is the Eiffel Tower located?", ("The Eiffel Tower is located in [MASK].",)),
    ("What is the capital of Australia?", ("The capital of Australia is [MASK].",)),
    ("what's the capital of australia", ("The capital of australia is [MASK].",)),  # typed casually
    ("whats shawn michaels nickname", ("Shawn michaels nickname is [MASK].",)),
    ("Who was the first president of the United States?", ("The first president of the United States was [MASK].",)),
    ("What is Albert Einstein famous for?", ("Albert Einstein is famous for [MASK].",)),
    ("Who's Barack Obama married to?", ("Barack Obama is married to [MASK].",)),
    ("Which country is Timbuktu in?", ("Timbuktu is in [MASK].",)),  # a stranded preposition
    ("Which river is Cleveland at the mouth of?", ("Cleveland is at the mouth of [MASK].",)),
    ("What teams was Pele a member of?", ("Pele was a member of [MASK].",)),
    ("Who was Hamlet written by?", ("Hamlet was written by [MASK].",)),
    ("What was Cassius Clay later called?", ("Cassius Clay was later called [MASK].",)),
    ("What is Sápmi traditionally called in English?", ("Sápmi is traditionally called [MASK] in English.",)),
    ("At which battle was Pompey defeated by Caesar?", ("Pompey was defeated by Caesar at [MASK].",)),
    ("In which year was Charlemagne crowned?", ("Charlemagne was crowned in [MASK].",)),  # a fronted preposition
    ("To whom was Anne Boleyn married?", ("Anne Boleyn was married to [MASK].",)),
    (
        "Which territory was Arthur St. Clair made governor of in 1788?",
        ("Arthur St. Clair was made governor of [MASK] in 1788.",),
    ),
    ("Where was John Newton a parish priest?", ("John Newton was a parish priest in [MASK].",)),
    ("What village was there before Alexandria?", ("There was [MASK] before Alexandria.",)),
    ("How old was Mozart when he died?", ("Mozart was [MASK] old when he died.",)),  # a clause kept at the end
    ("How tall is the Eiffel Tower?", ("The Eiffel Tower is [MASK] tall.",)),
    ("Whose painting is the Mona Lisa?", ("The Mona Lisa is [MASK]'s painting.",)),
    # "do" before its subject: "did X sing" -> "X sang", "does X have" -> "X has"
    ("When did Elvis Presley die?", ("Elvis Presley died in [MASK].",)),
    ("What did Alexander Graham Bell invent?", ("Alexander Graham Bell invented [MASK].",)),
    ("Who did Marilyn Monroe marry in 1954?", ("Marilyn Monroe married [MASK] in 1954.",)),
    ("How many moons does Mars have?", ("Mars has [MASK] moons.",)),
    ("Which dynasty did Liu Bei found?", ("Liu Bei founded [MASK].",)),  # the base form, not "find"'s past
    ("What did Elvis want to become?", ("Elvis wanted to become [MASK].",)),  # an infinitive asks for its object
    ("What does a wave need to travel?", ("A wave needs to travel [MASK].",)),
    (
        "Which Australian did Roger Federer defeat to win his first title?",
        ("Roger Federer defeated [MASK] to win his first title.",),  # an infinitive with its own object
    ),
    ("Which river does Paris lie on?", ("Paris lies on [MASK].",)),
    ("Where did the Beatles come from?", ("The Beatles came from [MASK].",)),
    ("what year did the titanic sink", ("The titanic sank in [MASK].",)),
    ("When does season 8 of game of thrones come out", ("Season 8 of game of thrones comes out in [MASK].",)),
    ("When did Manchester United last win the league?", ("Manchester United last won the league in [MASK].",)),
    ("How long did Queen Victoria reign?", ("Queen Victoria reigned for [MASK].",)),  # "reign" tagged a noun
    ("what do they call a machete in the caribbean", ("They call a machete [MASK] in the caribbean.",)),
    ("what shells do hermit crabs like", ("Hermit crabs like [MASK].",)),  # "like" tagged a preposition
    ("Which planet's orbit does the Kuiper belt start at?", ("The Kuiper belt starts at [MASK]'s orbit.",)),
    ("when will the next solar eclipse happen", ("The next solar eclipse will happen in [MASK].",)),
    # "have" before its subject
    ("How many children has Barack Obama?", ("Barack Obama has [MASK] children.",)),
    ("How many matches has Pele played?", ("Pele has played [MASK] matches.",)),
    # a fronted adverbial, a wh-phrase in place, none at all
    ("In 1969, who walked on the moon?", ("In 1969, [MASK] walked on the moon.",)),
    (
        'The Bananarama hit "Robert de Niro\'s Waiting" is from which year?',
        ('The Bananarama hit "Robert de Niro\'s Waiting" is from [MASK].',),
    ),
    ("Ganymede is a moon of which planet?", ("Ganymede is a moon of [MASK].",)),
    ("mount everest is part of what mountain range", ("Mount everest is part of [MASK].",)),  # no "?" either
    (
        "how many episodes in season 3 of the walking dead",
        ("There are [MASK] episodes in season 3 of the walking dead.",),
    ),
    ('"What disease do the French call ""la Rage""?"', ('The French call "la Rage" [MASK].',)),  # TriviaQA's quoting
]


@pytest.mark.parametrize(("question", "statements"), SHAPES, ids=[q for q, _ in SHAPES])
def test_a_question_is_asked_as_the_statements_it_stands_for_and_as_the_paper_asks_it(question, statements):
    asked = ask(question)
    assert state(question).statements == statements
    assert (asked.how, asked.queries) == ("statements", (*statements, question_query(question)))


@pytest.mark.parametrize(
    "question",
    ["Did Elvis sing Hound Dog?", "Is Paris the capital of France?", "Why is the sky blue?", "How did Napoleon die?"],
)
def test_a_question_no_statement_can_be_made_of_is_asked_as_the_paper_asks_nq(question):
    asked = ask(question)
    assert state(question).statements == ()
    assert (asked.how, asked.queries) == ("question", (question_query(question),))


def test_the_papers_form_is_an_option():
    assert ask("Who taught Aristotle?", "paper").queries == ("Who taught Aristotle? The answer is [MASK].",)
    assert ask("who wrote hamlet", "paper").queries == ("who wrote hamlet? The answer is [MASK].",)  # as NQ writes them
    with pytest.raises(ValueError, match="form must be one of statements, paper, got 'nq'"):
        ask("Who wrote Hamlet?", "nq")


def test_a_question_says_what_kind_of_answer_it_asks_for_and_answers_are_kept_by_it():
    kinds = {
        "Where was Seymour Cray born?": "place",
        "Which city was Mozart born in?": "place",
        "When did Elvis Presley die?": "time",
        "In what year did Turkey invade Cyprus?": "time",
        "How many moons does Mars have?": "number",
        "How old was Mozart when he died?": "number",
        "Who wrote Hamlet?": None,
    }
    assert {q: ask(q).expects for q in kinds} == kinds
    assert fits("Chippewa Falls", "place") and not fits("1925", "place")
    assert fits("14 March 1879", "time") and fits("March", "time") and not fits("Vienna", "time")
    assert fits("64", "number") and fits("two", "number") and not fits("queens", "number")
    assert fits("1925", None)


def test_the_benchmarks_questions_are_asked_in_the_papers_form_unless_asked_as_statements():
    for name in ("nq", "triviaqa"):
        paper = load_task(name, limit=300, split="dev").examples
        stated = load_task(name, limit=300, split="dev", form="statements").examples
        questions = [e for e in paper if reads_as_question(e.text)]  # NQ also has phrases: "cast of die hard"
        assert len(questions) > len(paper) / 2
        assert all(e.query == question_query(e.text) and e.asked is None for e in paper)
        made = [e for e in stated if e.asked is not None]
        assert len(made) > 0.8 * len(questions)  # most questions make statements
        assert all(e.queries == ask(e.text).queries and e.query == state(e.text).statements[0] for e in made)
    kamel = load_task("kamel", limit=50, split="dev", form="statements").examples
    for stated, paper in zip(kamel, load_task("kamel", limit=50, split="dev").examples, strict=True):
        assert "?" not in stated.query and stated.queries == (stated.query, paper.query)  # the relation stated


def test_a_sentence_with_one_mask_is_asked_as_it_is_and_anything_else_is_refused_with_what_a_query_is():
    sentence = "Aristotle was taught by [MASK]."
    assert (ask(sentence).how, ask(sentence).queries) == ("mask", (sentence,))
    for text, message in (
        ("Aristotle was taught by Plato.", r"exactly one \[MASK\], found 0, or is a question"),
        ("[MASK] taught [MASK]?", r"exactly one \[MASK\], found 2$"),
        ("", r"found 0, or is a question"),
    ):
        with pytest.raises(ValueError, match=message):
            ask(text)
    assert reads_as_question("Is Paris the capital of France")  # an auxiliary first
    assert reads_as_question("The capital of France is?") and not reads_as_question("Whoever wins, wins.")
    assert reads_as_question("what's the capital of maine") and reads_as_question("whats shawn michaels nickname")
    assert not reads_as_question("whatsoever you do")
    assert reads_as_question("in which year was charlemagne crowned") and reads_as_question("during whose reign")
    assert reads_as_question("ampicillin shouldn't be given to people allergic to what")
    assert reads_as_question("the iau is a member of which organisation")  # a wh-phrase ends it
    assert reads_as_question("the eiffel tower was finished in what year")
    assert not reads_as_question("This is the house in which I live")
    assert not reads_as_question("In the beginning was the word.") and not reads_as_question("Whatever.")
    assert reads_as_question('"What disease do the French call ""la Rage""?"')  # TriviaQA's quoting
