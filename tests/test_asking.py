"""How typed queries are asked (npmcore.answer.asking): a sentence with one [MASK] as it is, a question as NQ's."""

import pytest

from npmcore.answer.asking import ask, reads_as_question
from npmcore.evaluation.tasks import load_task


def test_a_question_is_asked_as_the_evaluation_asks_nq_and_triviaqa():
    for name in ("nq", "triviaqa"):
        examples = load_task(name, limit=300, split="dev").examples  # their questions, as the evaluation asks them
        questions = [e for e in examples if reads_as_question(e.text)]  # NQ also has phrases: "cast of die hard"
        assert len(questions) > len(examples) / 2
        for example in questions:
            asked = ask(example.text)
            assert (asked.how, asked.query) == ("question", example.query), example
    assert ask("Who taught Aristotle?").query == "Who taught Aristotle? The answer is [MASK]."
    assert ask("who wrote hamlet").query == "who wrote hamlet? The answer is [MASK]."  # as NQ writes them


def test_a_sentence_with_one_mask_is_asked_as_it_is_and_anything_else_is_refused_with_what_a_query_is():
    sentence = "Aristotle was taught by [MASK]."
    assert (ask(sentence).how, ask(sentence).query) == ("mask", sentence)
    for text, message in (
        ("Aristotle was taught by Plato.", r"exactly one \[MASK\], found 0, or is a question"),
        ("[MASK] taught [MASK]?", r"exactly one \[MASK\], found 2$"),
        ("", r"found 0, or is a question"),
    ):
        with pytest.raises(ValueError, match=message):
            ask(text)
    assert reads_as_question("Is Paris the capital of France")  # an auxiliary first
    assert reads_as_question("The capital of France is?") and not reads_as_question("Whoever wins, wins.")
    assert reads_as_question('"What disease do the French call ""la Rage""?"')  # TriviaQA's quoting
