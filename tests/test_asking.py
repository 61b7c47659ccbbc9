"""How typed queries are asked (npmcore.ask.asking, statements, keywords, yes_no): a sentence with one [MASK] as it
is; a question as the statements it stands for, shape by shape; one the rules cannot read, or asked in the paper's
form, as the paper asks NQ; a yes/no question with what it asserts masked; a why or how not at all; keywords as the
statements they stand for; a sentence without a mask refused with what a query is."""

import pytest

from npmcore.answer.inference import Answer
from npmcore.answer.verdict import NO_FROM, YES_FROM, YES_FROM_MANY, YesNo, agrees, verdict
from npmcore.ask.asking import EXPLANATION, ask, question_query, reads_as_question
from npmcore.ask.questions import PERSON, PLACE, fits, stated_kind
from npmcore.ask.statements import state
from npmcore.ask.yes_no import Side
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
    (
        "Which book of the Bible comes right after Zephaniah?",
        ("[MASK] comes right after Zephaniah.", "The book that comes right after Zephaniah is [MASK]."),
    ),  # no passive
    (
        "What language is spoken in Brazil?",
        ("[MASK] is spoken in Brazil.", "The language that is spoken in Brazil is [MASK]."),
    ),
    ("Who is married to Barack Obama?", ("[MASK] is married to Barack Obama.",)),
    (
        "What river flows into the Caspian Sea?",
        ("[MASK] flows into the Caspian Sea.", "The river that flows into the Caspian Sea is [MASK]."),
    ),  # "flows" tagged a noun
    ("Who first grouped the Khoisan languages together?", ("[MASK] first grouped the Khoisan languages together.",)),
    ("How many people live in Tokyo?", ("[MASK] people live in Tokyo.",)),
    ("Whose work made paleontology a science?", ("[MASK]'s work made paleontology a science.",)),
    # "be" before its subject: the predicate ends the clause
    ("Where was Lionel Messi born?", ("Lionel Messi was born in [MASK].",)),
    ("When was the Eiffel Tower built?", ("The Eiffel Tower was built in [MASK].",)),
    ("Where is the Eiffel Tower located?", ("The Eiffel Tower is located in [MASK].",)),
    (
        "What is the capital of Australia?",
        ("The capital of Australia is [MASK].", "[MASK] is the capital of Australia."),
    ),
    (
        "what's the capital of australia",
        ("The capital of australia is [MASK].", "[MASK] is the capital of australia."),
    ),  # typed casually
    ("whats shawn michaels nickname", ("Shawn michaels nickname is [MASK].",)),
    (
        "Who was the first president of the United States?",
        (
            "The first president of the United States was [MASK].",
            "[MASK] was the first president of the United States.",
        ),
    ),
    ("What is Albert Einstein famous for?", ("Albert Einstein is famous for [MASK].",)),
    ("Who's Barack Obama married to?", ("Barack Obama is married to [MASK].",)),
    (
        "Which country is Timbuktu in?",
        ("Timbuktu is in [MASK].", "The country that Timbuktu is in is [MASK]."),
    ),  # a stranded preposition
    (
        "Which river is Cleveland at the mouth of?",
        ("Cleveland is at the mouth of [MASK].", "The river that Cleveland is at the mouth of is [MASK]."),
    ),
    (
        "What teams was Pele a member of?",
        ("Pele was a member of [MASK].", "The team that Pele was a member of is [MASK]."),
    ),
    ("Who was Hamlet written by?", ("Hamlet was written by [MASK].",)),
    ("What was Cassius Clay later called?", ("Cassius Clay was later called [MASK].",)),
    ("What is Sápmi traditionally called in English?", ("Sápmi is traditionally called [MASK] in English.",)),
    (
        "At which battle was Pompey defeated by Caesar?",
        ("Pompey was defeated by Caesar at [MASK].", "The battle that Pompey was defeated by Caesar at is [MASK]."),
    ),
    ("In which year was Charlemagne crowned?", ("Charlemagne was crowned in [MASK].",)),  # a fronted preposition
    ("To whom was Anne Boleyn married?", ("Anne Boleyn was married to [MASK].",)),
    (
        "Which territory was Arthur St. Clair made governor of in 1788?",
        (
            "Arthur St. Clair was made governor of [MASK] in 1788.",
            "The territory that Arthur St. Clair was made governor of in 1788 is [MASK].",
        ),
    ),
    ("Where was John Newton a parish priest?", ("John Newton was a parish priest in [MASK].",)),
    (
        "What village was there before Alexandria?",
        ("There was [MASK] before Alexandria.", "The village that there was before Alexandria is [MASK]."),
    ),
    ("How old was Mozart when he died?", ("Mozart was [MASK] old when he died.",)),  # a clause kept at the end
    ("How tall is the Eiffel Tower?", ("The Eiffel Tower is [MASK] tall.",)),
    ("Whose painting is the Mona Lisa?", ("The Mona Lisa is [MASK]'s painting.",)),
    # "do" before its subject: "did X sing" -> "X sang", "does X have" -> "X has"
    ("When did Elvis Presley die?", ("Elvis Presley died in [MASK].",)),
    ("What did Alexander Graham Bell invent?", ("Alexander Graham Bell invented [MASK].",)),
    ("Who did Marilyn Monroe marry in 1954?", ("Marilyn Monroe married [MASK] in 1954.",)),
    ("How many moons does Mars have?", ("Mars has [MASK] moons.",)),
    (
        "Which dynasty did Liu Bei found?",
        ("Liu Bei founded [MASK].", "The dynasty that Liu Bei founded is [MASK]."),
    ),  # the base form, not "find"'s past
    ("What did Elvis want to become?", ("Elvis wanted to become [MASK].",)),  # an infinitive asks for its object
    ("What does a wave need to travel?", ("A wave needs to travel [MASK].",)),
    (
        "Which Australian did Roger Federer defeat to win his first title?",
        (
            "Roger Federer defeated [MASK] to win his first title.",
            "The australian that Roger Federer defeated to win his first title is [MASK].",
        ),  # an infinitive with its own object
    ),
    ("Which river does Paris lie on?", ("Paris lies on [MASK].", "The river that Paris lies on is [MASK].")),
    ("Where did the Beatles come from?", ("The Beatles came from [MASK].",)),
    ("what year did the titanic sink", ("The titanic sank in [MASK].",)),
    ("When does season 8 of game of thrones come out", ("Season 8 of game of thrones comes out in [MASK].",)),
    ("When did Manchester United last win the league?", ("Manchester United last won the league in [MASK].",)),
    ("How long did Queen Victoria reign?", ("Queen Victoria reigned for [MASK].",)),  # "reign" tagged a noun
    ("what do they call a machete in the caribbean", ("They call a machete [MASK] in the caribbean.",)),
    (
        "what shells do hermit crabs like",
        ("Hermit crabs like [MASK].", "The shell that Hermit crabs like is [MASK]."),
    ),  # "like" tagged a preposition
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
    (
        '"What disease do the French call ""la Rage""?"',
        ('The French call "la Rage" [MASK].', 'The disease that the French call "la Rage" is [MASK].'),
    ),  # TriviaQA's quoting
]


@pytest.mark.parametrize(("question", "statements"), SHAPES, ids=[q for q, _ in SHAPES])
def test_a_question_is_asked_as_the_statements_it_stands_for_and_as_the_paper_asks_it(question, statements):
    asked = ask(question)
    assert state(question).statements == statements
    assert (asked.how, asked.queries) == ("statements", (*statements, question_query(question)))


@pytest.mark.parametrize("question", ["Can penguins fly?", "Who?"])
def test_a_question_no_statement_can_be_made_of_is_asked_as_the_paper_asks_nq(question):
    asked = ask(question)
    assert state(question).statements == ()
    assert (asked.how, asked.queries) == ("question", (question_query(question),))


@pytest.mark.parametrize(
    ("question", "sides"),
    [
        (
            "Is Paris the capital of France?",
            [(("[MASK] is the capital of France.", "The capital of France is [MASK]."), "Paris", True)],
        ),
        (
            "is tokyo the capital of japan",
            [(("[MASK] is the capital of japan.", "The capital of japan is [MASK]."), "tokyo", True)],
        ),
        ("Is a penguin a bird?", [(("A penguin is a [MASK].",), "bird", True)]),
        (
            "Is Canberra in Australia?",
            [(("Canberra is in [MASK].",), "Australia", True), (("[MASK] is in Australia.",), "Canberra", False)],
        ),
        (
            "Was Mozart born in Salzburg?",
            [(("Mozart was born in [MASK].",), "Salzburg", True), (("[MASK] was born in Salzburg.",), "Mozart", False)],
        ),
        ("Is the sky blue?", [(("The sky is [MASK].",), "blue", True)]),
        (
            "Did Columbus discover America?",
            [
                (("Columbus discovered [MASK].",), "America", False),
                (("[MASK] discovered America.", "America was discovered by [MASK]."), "Columbus", True),
            ],
        ),
        (
            "Does the Danube flow through Vienna?",
            [
                (("The Danube flows through [MASK].",), "Vienna", False),
                (("[MASK] flows through Vienna.",), "Danube", False),
            ],
        ),
        (
            "Did Galileo write On the Origin of Species?",  # a title with a preposition is one object
            [
                (("Galileo wrote [MASK].",), "On the Origin of Species", False),
                (
                    ("[MASK] wrote On the Origin of Species.", "On the Origin of Species was written by [MASK]."),
                    "Galileo",
                    True,
                ),
            ],
        ),
    ],
)
def test_a_yes_no_question_is_asked_from_both_sides_of_what_it_asserts(question, sides):
    asked = ask(question)
    assert asked.how == "yes-no"
    assert [(side.statements, side.asserted, side.single) for side in asked.sides] == sides
    assert asked.queries == tuple(q for statements, _, _ in sides for q in statements)


def _answer(text: str, confidence: float, forms: tuple[str, ...] = ()) -> Answer:
    return Answer(text, (), confidence, (), confidence=confidence, forms=forms)


def test_a_yes_no_verdict_is_yes_where_a_side_names_what_it_asserts_no_only_where_a_side_of_one_answer_is_sure():
    one = Side(("[MASK] wrote Hamlet.",), "Shakespeare")
    many = Side(("Shakespeare wrote [MASK].",), "Hamlet", single=False)
    sure, unsure = max(NO_FROM, YES_FROM_MANY) + 0.1, min(NO_FROM, YES_FROM) - 0.01
    named = [(many, [_answer("Macbeth", sure)]), (one, [_answer("William Shakespeare", YES_FROM)])]
    assert verdict(named) == YesNo("yes", "Shakespeare", "William Shakespeare", YES_FROM, 1)
    other = [(many, [_answer("Macbeth", sure)]), (one, [_answer("Christopher Marlowe", NO_FROM)])]
    assert verdict(other) == YesNo("no", "Shakespeare", "Christopher Marlowe", NO_FROM, 1)
    unsure_other = [(many, [_answer("Macbeth", sure)]), (one, [_answer("Christopher Marlowe", unsure)])]
    assert verdict(unsure_other).verdict == "unknown"  # the side of one answer is not sure enough to say no
    assert verdict([(many, [_answer("Macbeth", sure)])]).verdict == "unknown"  # many answers: no reason for no
    low = [(one, [_answer("Marlowe", sure), _answer("Shakespeare", unsure)])]
    assert verdict(low).verdict == "unknown"  # named, not sure enough for yes; its side names it: no no
    assert verdict([(one, [_answer("Marlowe", sure), _answer("Shakespeare", YES_FROM)])]).verdict == "yes"
    assert verdict([(many, [_answer("Hamlet", YES_FROM_MANY - 0.01)])]).verdict == "unknown"
    assert verdict([(one, [_answer("Vienna", 0.9, ("Shakespeare",))])]).verdict == "yes"  # another form of it
    assert verdict([(one, [])]) == YesNo("unknown", "Shakespeare", None, None, 0)
    assert agrees("the Nobel Prize", "Nobel Prize in Physics") and agrees("Fleming", "Alexander Fleming")
    assert not agrees("France", "Francesca") and agrees("U.S.", "US")


def test_a_choice_is_answered_as_the_question_it_is_not_with_yes_or_no():
    asked = ask("Is a whale a fish or a mammal?")
    assert (asked.how, asked.queries, asked.sides) == ("statements", ("A whale is a [MASK].",), ())


@pytest.mark.parametrize("question", ["Why is the sky blue?", "How did Napoleon die?", "how does a rainbow form"])
def test_a_question_asking_why_or_how_is_not_asked_and_says_what_npm_answers(question):
    asked = ask(question)
    assert (asked.how, asked.queries) == ("explanation", ())
    assert "cannot explain" in EXPLANATION
    assert ask("How many moons does Mars have?").how == "statements"  # "how many" asks for a number


@pytest.mark.parametrize(
    ("keywords", "first", "expects", "kind"),
    [
        ("capital of australia", "The capital of australia is [MASK].", None, "capital"),
        ("einstein birthplace", "Einstein was born in [MASK].", "place", "place"),
        ("mona lisa painter", "Mona lisa was painted by [MASK].", None, "person"),
        ("rhenium atomic number", "The atomic number of rhenium is [MASK].", "number", None),
        ("currency japan", "The currency of japan is [MASK].", None, "currency"),
        ("petra country", "Petra is in [MASK].", "place", "country"),
        ("harry potter author", "The author of harry potter is [MASK].", None, "author"),
        ("hubble launch year", "Hubble launch was in [MASK].", "time", None),
        ("koala animal type", "The koala is a [MASK].", None, None),
        ("red planet", "The red planet is [MASK].", None, None),
        ("mozart birth date", "Mozart was born in [MASK].", "time", None),  # a birth's time, not its place
        ("einstein born", "Einstein was born in [MASK].", None, None),
    ],
)
def test_keywords_are_asked_as_the_statements_they_stand_for(keywords, first, expects, kind):
    asked = ask(keywords)
    assert asked.how == "keywords" and asked.queries[0] == first and asked.queries[-1] == question_query(keywords)
    assert (asked.expects, asked.kind) == (expects, kind)
    assert len(asked.expected) == len(asked.kinds) == len(asked.queries)  # each reading asks for its own kind


def test_a_question_says_what_kind_of_thing_it_asks_for():
    kinds = {
        "Which river flows through Baghdad?": "river",
        "What sport does Roger Federer play?": "sport",
        "Who discovered penicillin?": PERSON,
        "Where was Picasso born?": PLACE,
        "what kind of animal is a koala": "animal",
        "Which book of the Bible comes right after Zephaniah?": "book",
        "What is the capital of Australia?": "capital",  # the statement's noun
        "What year did WW2 end?": None,  # a time: fits
    }
    assert {q: ask(q).kind for q in kinds} == kinds
    assert stated_kind("[MASK] is the longest river in Asia.") == "river"
    assert stated_kind("Penicillin was discovered by [MASK].") is None


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
        assert all(e.queries == ask(e.text).queries and e.query == ask(e.text).queries[0] for e in made)
    kamel = load_task("kamel", limit=50, split="dev", form="statements").examples
    for stated, paper in zip(kamel, load_task("kamel", limit=50, split="dev").examples, strict=True):
        assert "?" not in stated.query and stated.queries == (stated.query, paper.query)  # the relation stated


def test_a_sentence_with_one_mask_is_asked_as_it_is_and_anything_else_is_refused_with_what_a_query_is():
    sentence = "Aristotle was taught by [MASK]."
    assert (ask(sentence).how, ask(sentence).queries) == ("mask", (sentence,))
    for text, message in (
        ("Aristotle was taught by Plato.", r"a sentence needs one \[MASK\] where its answer goes"),
        ("Plato taught me.", r"a sentence needs one \[MASK\] where its answer goes"),  # "taught" tagged a participle
        ("[MASK] taught [MASK]?", r"at most one \[MASK\], found 2"),
        ("", r"a query needs words"),
        ("?!", r"a query needs words"),
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
