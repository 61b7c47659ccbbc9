"""Evaluation data: metrics on hand-computed cases, task loading on the real shared data,
schema errors on broken copies, and the reference-corpus leakage guard."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from npmcore.evaluation.metrics import (
    accuracy,
    exact_match,
    length_bucket,
    macro_by_length,
    normalize_answer,
    repeats_query,
)
from npmcore.evaluation.references import leakage, reference_documents, write_reference_corpus
from npmcore.evaluation.tasks import (
    CLOSED_TASKS,
    LAMA_TASKS,
    QUESTION_TASKS,
    SENTIMENT_TASKS,
    TASKS,
    lama_split,
    load_task,
    question_split,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
assert DATA.is_dir(), f"test data missing: {DATA} (the shared data folder must sit beside the repository)"
FILE_TASKS = [n for n in TASKS if n != "cloze"]


def _squash(text: str) -> str:
    return "".join(text.split()).lower()


# --- metrics ----------------------------------------------------------------------------


def test_normalize_answer():
    assert normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("Theory of the Leisure Class") == "theory of leisure class"  # "the" inside a word stays
    assert normalize_answer("  U.S. Army ") == "u s army"  # punctuation becomes space, in gold and prediction alike
    assert normalize_answer("left-wing") == normalize_answer("left wing") == "left wing"
    assert normalize_answer("São Tomé") == "são tomé"  # accents are kept: answers are the passage's own characters


def test_exact_match_of_spans_as_passages_write_them():
    """Word pieces decoded again gave "left - wing" and "sao tome"; the passage's characters match."""
    assert exact_match("left-wing", ["left-wing"]) and exact_match("left-wing", ["left wing"])
    assert exact_match("São Tomé and Príncipe", ["Sao Tome", "São Tomé and Príncipe"])
    assert exact_match("Ruth's Chris", ["Ruth’s Chris", "Ruth's Chris"])


def test_exact_match_any_alias_after_normalisation():
    assert exact_match("the Beatles!", ["Beatles"])
    assert exact_match("Paris", ["London", "paris."])
    assert not exact_match("Parisian", ["Paris"])
    assert not exact_match("New York", ["York"])
    with pytest.raises(ValueError, match="no gold answers"):
        exact_match("Paris", [])


def test_an_answer_repeats_its_query_when_they_share_a_content_word():
    assert repeats_query("Shriki", "Shlomo Shriki was born in [MASK].")
    assert repeats_query("Bayern Munich", "FC Bayern Munich is named after [MASK].")
    assert repeats_query("Aristotélēs's school", "Aristoteles taught at [MASK].")  # accents and case aside
    assert not repeats_query("Jerusalem", "Shlomo Shriki was born in [MASK].")
    assert not repeats_query("the city of", "The capital of [MASK] is Paris.")  # function words only
    assert not repeats_query("Mask", "Dante was born in [MASK].")  # the mask is no word of the query


def test_accuracy():
    assert accuracy([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    assert accuracy([True, False], [True, True]) == 0.5
    with pytest.raises(ValueError, match="differ in length"):
        accuracy([0, 1], [0])
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])


def test_length_bucket():
    assert [length_bucket(n) for n in (1, 2, 3, 4, 9)] == ["1", "2", "3", "4+", "4+"]
    with pytest.raises(ValueError, match="at least 1"):
        length_bucket(0)


def test_macro_by_length_leaves_empty_buckets_out():
    correct = [True, False, True, True, False]
    lengths = [1, 1, 2, 5, 7]  # bucket "1": 1/2, "2": 1/1, "3": empty, "4+": 1/2
    assert macro_by_length(correct, lengths) == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    assert macro_by_length([True, False, False], [4, 4, 4]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="differ in length"):
        macro_by_length([True], [1, 2])


# --- tasks on the real data --------------------------------------------------------------


@pytest.mark.parametrize("name", FILE_TASKS)
def test_every_task_loads_with_one_mask_per_example(name):
    task = load_task(name, DATA, limit=50)
    assert task.name == name and len(task.examples) == 50
    assert len({ex.id for ex in task.examples}) == 50
    for ex in task.examples:
        assert ex.query.count("[MASK]") == 1, ex
        assert ex.text.strip(), ex
    if name in CLOSED_TASKS:
        assert task.kind == "closed" and task.macro_key is None
        assert len(task.label_words) == len(task.labels) >= 2
        assert all(ex.answers == () and ex.label in range(len(task.labels)) for ex in task.examples)
        assert len({ex.label for ex in task.examples}) >= 2  # a 50-sample sees more than one class
    else:
        assert task.kind == "open" and task.labels == () and task.label_words == ()
        assert all(ex.label is None and ex.answers for ex in task.examples)
        assert task.macro_key == ("answer_length" if name in LAMA_TASKS else None)


def test_templates_and_label_words():
    mr = load_task("mr", DATA, limit=None)
    assert mr.examples[0].query == "simplistic , silly and tedious . It was [MASK]."
    assert mr.examples[0].label == 0 and mr.examples[0].id == "mr-2"
    assert [ws[0] for ws in mr.label_words] == ["terrible", "great"]
    assert len(mr.label_words[0]) > 100 and "awful" in mr.label_words[0] and "awful" not in mr.label_words[1]
    agn = load_task("agn", DATA, limit=None)
    assert agn.examples[0].query.startswith(
        "Fears for T N pension after talks Unions representing workers at Turner Newall"
    )
    assert agn.examples[0].query.endswith("Federal Mogul. The text topic is about [MASK].")
    assert agn.examples[0].label == 2 and agn.labels[2] == "Business"
    assert [ws[0] for ws in agn.label_words] == ["politics", "sports", "business", "technology"]
    subj = load_task("subj", DATA, limit=None)
    assert subj.label_words == (("review",), ("summary",)) and subj.examples[0].label == 1  # objective
    rte = load_task("rte", DATA, limit=None)
    assert rte.examples[0].query == (
        "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44, according to "
        "the Christopher Reeve Foundation, right? [MASK], christopher Reeve had an accident."
    )
    assert rte.examples[0].label == 1 and rte.label_words == (("Yes",), ("No",))
    google_re = load_task("google_re", DATA, limit=None)
    assert google_re.examples[0].query == "Khatchig Mouradian was born in [MASK]."
    assert google_re.examples[0].answers == ("Lebanon",)
    nq = load_task("nq", DATA, limit=None)
    assert nq.examples[0].query == "when was the last time anyone was on the moon? The answer is [MASK]."
    assert nq.examples[0].answers == ("14 December 1972 UTC", "December 1972")
    triviaqa = load_task("triviaqa", DATA, limit=None)
    assert triviaqa.examples[0].query == "Who was the man behind The Chipmunks? The answer is [MASK]."


def test_sst2_drops_neutral_items_and_counts_them():
    lines = (DATA / "sst2" / "test.tsv").read_text(encoding="utf-8").splitlines()
    neutral = sum(line.startswith("__label__3\t") for line in lines)
    positive = sum(line[9] in "45" for line in lines)
    task = load_task("sst2", DATA, limit=None)
    assert task.skipped == {"neutral": neutral} and neutral > 0
    assert len(task.examples) == len(lines) - neutral == 1821
    assert sum(ex.label == 1 for ex in task.examples) == positive


def test_subsampling_is_seeded_and_none_keeps_everything():
    ids = lambda **kw: [ex.id for ex in load_task("agn", DATA, **kw).examples]  # noqa: E731
    first, again, other = ids(limit=100, seed=0), ids(limit=100, seed=0), ids(limit=100, seed=1)
    assert first == again and first != other and len(set(first)) == 100
    assert [int(i.split("-")[1]) for i in first] == sorted(int(i.split("-")[1]) for i in first)  # file order
    with open(DATA / "agn" / "test.csv", encoding="utf-8", newline="") as f:
        rows = sum(1 for _ in csv.DictReader(f))
    assert len(ids(limit=None)) == rows == 7600
    assert len(load_task("rte", DATA).examples) == 277  # fewer than the default limit: all kept


@pytest.mark.parametrize("name", LAMA_TASKS)
def test_lama_dev_and_test_splits_are_disjoint_and_cover_every_fact(name):
    dev, test = (load_task(name, limit=None, split=split) for split in ("dev", "test"))
    dev_ids, test_ids = {e.id for e in dev.examples}, {e.id for e in test.examples}
    assert not dev_ids & test_ids and (dev.split, test.split) == ("dev", "test")
    assert 0.15 < len(dev_ids) / (len(dev_ids) + len(test_ids)) < 0.25  # one fifth of the facts, by uuid hash
    assert all(lama_split(i) == "dev" for i in dev_ids) and all(lama_split(i) == "test" for i in test_ids)


@pytest.mark.parametrize("name", QUESTION_TASKS)
def test_question_dev_and_test_splits_are_disjoint_and_cover_every_question(name):
    dev, test = (load_task(name, limit=None, split=split) for split in ("dev", "test"))
    everything = [*dev.examples, *test.examples]
    assert len({e.id for e in everything}) == len(everything)  # disjoint
    assert len(everything) == len(load_task(name, limit=None).examples) + len(dev.examples)  # together: the file
    assert 0.15 < len(dev.examples) / len(everything) < 0.25  # one fifth of the questions, by the hash of their words
    assert {question_split(e.text) for e in dev.examples} == {"dev"}
    assert {question_split(e.text) for e in test.examples} == {"test"}


def test_sst2_dev_is_its_own_file_and_tasks_without_dev_data_refuse_it():
    dev, test = load_task("sst2", limit=None, split="dev"), load_task("sst2", limit=None, split="test")
    assert len(dev.examples) == 872 and len(test.examples) == 1821  # SST-2 dev and test without the neutral items
    assert not {e.query for e in dev.examples} & {e.query for e in test.examples}
    with pytest.raises(ValueError, match="task 'mr' has no dev split"):
        load_task("mr", split="dev")
    with pytest.raises(ValueError, match="unknown split 'train'"):
        load_task("sst2", split="train")


def test_unknown_task_and_bad_arguments():
    with pytest.raises(ValueError, match="unknown task 'sst5'.*sst2.*triviaqa"):
        load_task("sst5", DATA)
    with pytest.raises(ValueError, match="limit"):
        load_task("rte", DATA, limit=0)
    with pytest.raises(ValueError, match="path is required"):
        load_task("cloze", DATA)
    with pytest.raises(ValueError, match="only for it"):
        load_task("rte", DATA, path="x.jsonl")


# --- schema errors on broken copies of the data layout -----------------------------------


@pytest.fixture
def data_copy(tmp_path) -> Path:
    """A copy of the folder layout with the (small) verbalizer files; tests add the data file."""
    root = tmp_path / "data"
    shutil.copytree(DATA / "fuzzy_verbalizers", root / "fuzzy_verbalizers")
    return root


def _write(root: Path, relpath: str, text: str) -> Path:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "name, relpath, text, where, problem",
    [
        ("mr", "mr/test.csv", "label,review\n0,bad .\n", "test.csv:1:", "missing column.*'text'"),
        ("mr", "mr/test.csv", "label,text\n0,fine .\n7,odd label .\n", "test.csv:3:", "label '7' is not one of"),
        (
            "sst2",
            "sst2/test.tsv",
            "__label__1\tok .\n__label__5 no tab here\n",
            "test.tsv:2:",
            "2 tab-separated fields",
        ),
        (
            "rte",
            "rte/val.jsonl",
            '{"premise": "A.", "hypothesis": "B.", "label": "entailment"}\n{not json\n',
            "val.jsonl:2:",
            "not valid JSON",
        ),
        (
            "nq",
            "nq/NQ-open.dev.jsonl",
            '{"question": "who", "answer": ["x"]}\n\n{"question": "what"}\n',
            "NQ-open.dev.jsonl:3:",
            r"missing field\(s\) \['answer'\]",
        ),
        (
            "triviaqa",
            "triviaqa/dpr_trivia_test.qa.tsv",
            "Who?\t['A']\nWhat?\tnot a list\n",
            "dpr_trivia_test.qa.tsv:2:",
            "not a Python list literal",
        ),
    ],
)
def test_malformed_file_names_file_and_line(data_copy, name, relpath, text, where, problem):
    path = _write(data_copy, relpath, text)
    with pytest.raises(ValueError, match=problem) as info:
        load_task(name, data_copy)
    assert str(info.value).startswith(f"{path.parent}/{where}")


def test_text_with_a_mask_marker_is_skipped_and_counted(data_copy):
    _write(data_copy, "mr/test.csv", "label,text\n0,dull .\n1,a [MASK] of a film .\n1,great fun .\n")
    task = load_task("mr", data_copy)
    assert task.skipped == {"mask_count": 1}
    assert [ex.id for ex in task.examples] == ["mr-2", "mr-4"]


def test_cloze_task(tmp_path):
    path = _write(
        tmp_path,
        "probe.jsonl",
        "\n".join(
            [
                json.dumps({"query": "Dante was born in [MASK].", "answers": ["Florence", "Firenze"], "id": "d1"}),
                json.dumps({"query": "No mask here.", "answers": ["x"]}),
                json.dumps({"query": "[MASK] [MASK] twice.", "answers": ["x"]}),
                json.dumps({"query": "The capital of France is [MASK].", "answers": ["Paris"]}),
            ]
        )
        + "\n",
    )
    task = load_task("cloze", tmp_path, path=str(path))
    assert task.kind == "open" and task.skipped == {"mask_count": 1}  # "No mask here." is asked as keywords
    assert [(ex.id, ex.answers) for ex in task.examples] == [
        ("d1", ("Florence", "Firenze")),
        ("cloze-2", ("x",)),
        ("cloze-4", ("Paris",)),
    ]
    assert task.examples[0].text == "Dante was born in Florence."
    bad = _write(tmp_path, "bad.jsonl", '{"query": "A [MASK].", "answers": ["b"]}\n{"query": "C [MASK]."}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: missing field\(s\) \['answers'\]"):
        load_task("cloze", tmp_path, path=bad)


# --- reference corpora and the leakage guard ---------------------------------------------


@pytest.mark.parametrize("name", CLOSED_TASKS)
def test_closed_set_reference_corpus_does_not_leak(name):
    task = load_task(name, DATA, limit=200)
    docs = list(reference_documents(task, DATA))
    assert len(docs) > 500 and all(set(d) == {"id", "title", "text"} and d["text"].strip() for d in docs)
    assert len({d["id"] for d in docs}) == len(docs)
    assert leakage(task, docs) == []
    victim = task.examples[17]
    planted = {"id": "planted", "title": "", "text": f"Before it.  {victim.text.upper()}\n after it."}
    assert victim.id in leakage(task, [*docs, planted])


def test_sentiment_corpus_drops_exactly_the_leaking_reviews():
    """Brute force: the corpus of sst2 is the other sets' reviews minus those containing an example."""
    task = load_task("sst2", DATA, limit=200)
    others = [ex for n in SENTIMENT_TASKS if n != "sst2" for ex in load_task(n, DATA, limit=None).examples]
    others += [ex for ex in load_task("subj", DATA, limit=None).examples if ex.label == 0]
    needles = [_squash(ex.text) for ex in task.examples]
    expected = [ex.id for ex in others if not any(n in _squash(ex.text) for n in needles)]
    docs = list(reference_documents(task, DATA))
    assert [d["id"] for d in docs] == expected
    assert len(expected) < len(others)  # MR and SST share reviews: some are dropped
    assert not any(d["id"].startswith("sst2-") for d in docs)


def test_topic_and_rte_corpora_are_wikipedia_and_news():
    for name in ("agn", "rte"):
        ids = [d["id"] for d in reference_documents(load_task(name, DATA, limit=20), DATA)]
        assert sum(i.startswith("lee-") for i in ids) == 300
        assert sum(i.startswith("enwiki-") for i in ids) > 500


@pytest.mark.parametrize("name", LAMA_TASKS)
def test_lama_corpus_is_the_unmasked_evidence_of_the_sampled_facts(name):
    task = load_task(name, DATA, limit=50)
    docs = list(reference_documents(task, DATA))
    assert [d["id"] for d in docs] == [ex.id for ex in task.examples]
    assert not any("[MASK]" in d["text"] for d in docs)
    assert leakage(task, docs) == []
    if name == "trex":  # the evidence usually states the answer; the probe itself must not be there
        assert sum(ex.answers[0].lower() in d["text"].lower() for ex, d in zip(task.examples, docs)) > 25
    probe = task.examples[3]
    assert leakage(task, [*docs, {"id": "p", "title": "", "text": probe.query}]) == [probe.id]


def test_question_tasks_have_no_documents_and_corpus_file_is_written(tmp_path):
    assert list(reference_documents(load_task("nq", DATA, limit=20), DATA)) == []
    task = load_task("rte", DATA, limit=50)
    out = write_reference_corpus(task, DATA, tmp_path / "refs" / "rte.jsonl")
    lines = Path(out).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == list(reference_documents(task, DATA))
    assert sorted(p.name for p in (tmp_path / "refs").iterdir()) == ["rte.jsonl"]  # no temporary left


def test_kamel_asks_the_papers_question_and_every_label_counts():
    """Against the raw files read here: each sampled fact's query is its relation's question with the
    subject filled and " Answer: [MASK]." after it, and its answers are every label of every object."""
    import bz2

    questions = {}
    for line in (DATA / "kamel" / "question-templates.csv").read_text(encoding="utf-8").splitlines():
        relation, question = line.split(",", 1)
        questions[relation] = question.strip()
    test = load_task("kamel", DATA, limit=3000, seed=0)
    assert len(test.examples) == 3000 and test.macro_key is None and test.kind == "open"
    relations = {ex.id.split("-")[1] for ex in test.examples}
    assert len(relations) > 200  # the seeded sample spans the relations (234, 200 test facts each)
    for ex in test.examples[::100]:
        _, relation, split, line = ex.id.split("-")
        with bz2.open(DATA / "kamel" / relation / f"{split}.jsonl.bz2", "rt", encoding="utf-8") as f:
            fact = json.loads(f.read().splitlines()[int(line) - 1])
        labels = [
            label
            for o in fact["obj_label"]
            for label in ([o] if isinstance(o, str) else [o["chosen"], o["rdf"], *(o["alternative"] or [])])
        ]
        assert split == "test"
        assert ex.query == questions[relation].replace("[S]", " ".join(fact["sub_label"].split())) + " Answer: [MASK]."
        assert set(ex.answers) == {" ".join(label.split()) for label in labels if label and label.strip()}
    dev = load_task("kamel", DATA, limit=None, split="dev")
    assert len(dev.examples) == 46800 and all(ex.id.split("-")[2] == "dev" for ex in dev.examples)
