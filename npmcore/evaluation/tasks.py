"""Zero-shot evaluation tasks: examples with one ``[MASK]``, label words, seeded samples.

Closed-set: ``sst2``, ``mr``, ``cr``, ``rt`` (sentiment), ``subj``, ``agn``, ``rte``.
Open-set: LAMA ``trex`` and ``google_re`` (gold = ``obj_label``), ``kamel`` (gold = every label of every
object), ``nq`` and ``triviaqa`` (gold = every alias), ``cloze`` (any jsonl of ``{"query", "answers", "id"?}``:
sentences with one ``[MASK]``, or questions),
``wikitext2`` (masked-token prediction: a fixed 15% of the words of WikiText-2's test
articles, each masked alone in a window of its paragraph).
Templates and label words are in :mod:`npmcore.evaluation.templates`.

How questions are asked (``form``, :data:`npmcore.ask.asking.FORMS`): by default as each task's own data asks
them, the paper's question form for ``kamel``, ``nq`` and ``triviaqa`` ("… Answer: [MASK].", "… The answer is
[MASK].") and as the query service asks them for a ``cloze`` file (:func:`npmcore.ask.asking.ask`: a question as
the statements it stands for); ``form="statements"`` asks KAMEL's facts with its relation stated
(:func:`npmcore.evaluation.readers.kamel_statements`) and NQ's and TriviaQA's questions as their statements,
``form="paper"`` a cloze file's questions in the paper's form.
"""

import ast
import dataclasses
import hashlib
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from npmcore.ask.asking import Asked, Form, ask, question_query, reads_as_question
from npmcore.ask.questions import stated_kind
from npmcore.ask.statements import state
from npmcore.evaluation.readers import (
    GOOGLE_RE_TEMPLATES,
    kamel_files,
    kamel_statements,
    kamel_templates,
    lama_facts,
    lama_templates,
    read_csv,
    read_jsonl,
    read_tsv,
    schema_error,
    string_field,
    string_list,
)
from npmcore.evaluation.templates import (
    CLOSED_SPECS,
    MASK,
    ClosedSpec,
    clean,
    kamel_query,
    label_words,
    lama_query,
)

logger = logging.getLogger(__name__)

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SENTIMENT_TASKS = ("sst2", "mr", "cr", "rt")
CLOSED_TASKS = (*SENTIMENT_TASKS, "subj", "agn", "rte")
LAMA_TASKS = ("trex", "google_re")
QUESTION_TASKS = ("nq", "triviaqa")
# Drawn from the dated Wikipedia dumps of shared/data/enwiki_dated by bench/entity_translation.py and
# bench/temporal.py (their dev and test files: DRAWN_DATA_DIR/<name>-<split>.jsonl)
DRAWN_TASKS = ("entity_translation", "temporal")
DRAWN_DATA_DIR = Path(__file__).resolve().parents[2] / "bench" / "data"
TASKS = (*CLOSED_TASKS, *LAMA_TASKS, "kamel", *QUESTION_TASKS, *DRAWN_TASKS, "cloze", "wikitext2")
ASKED_TASKS = ("kamel", *QUESTION_TASKS, "cloze")  # tasks whose questions may be asked as statements or as the paper
Split = Literal["test", "dev"]
# Tuning data never evaluated as test: SST-2's own dev file, and for LAMA the facts whose uuid
# hashes into one fifth of the space (a fixed split, the same for every seed and limit).
# WikiText-2 likewise splits its test articles by title, and NQ and TriviaQA their questions by text
# (the files here are their published dev sets, which the paper tests on). KAMEL has its own dev files. The cloze
# task's split is its file (bench/data/cloze-dev.jsonl, cloze-test.jsonl).
DEV_FILES = {"sst2": "sst2/dev.tsv"}
DEV_SPLITS = (*DEV_FILES, *LAMA_TASKS, "kamel", *QUESTION_TASKS, *DRAWN_TASKS, "cloze", "wikitext2")
WIKITEXT_MASKED = 0.15  # share of WikiText-2's words that are masked positions (a fixed sample)
WIKITEXT_WINDOW = 40  # words of context kept on each side of a masked word


def lama_split(uuid: str) -> Split:
    """The split of a LAMA fact: dev for one fifth of the uuids (by sha256), test for the rest."""
    return "dev" if int(hashlib.sha256(uuid.encode()).hexdigest()[:8], 16) % 5 == 0 else "test"


def _hash_fraction(key: str) -> float:
    """A fixed number in [0, 1) for a key (sha256): WikiText-2's split and masked positions, the
    same for every seed and limit."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16**8


@dataclass(frozen=True)
class Example:
    query: str  # the model input, with exactly one literal "[MASK]"
    answers: tuple[str, ...]  # open-set gold aliases; () for closed-set tasks
    label: int | None  # closed-set gold index into Task.labels; None for open-set tasks
    id: str  # unique in its task: "<task>-<line>" or the dataset's own id (LAMA uuid, cloze "id")
    # The input before templating (review, "title description", premise, question); for
    # LAMA and cloze the query with the mask filled by the first gold answer. The leakage
    # guard searches the reference corpus for it.
    text: str = ""
    group: str = ""  # the subset it is scored in as well (entity translation: its language; temporal: its kind)
    stale: tuple[str, ...] = ()  # answers that were right once and are wrong now (temporal: the older dump's)
    # a question asked as its statements (npmcore.ask.asking.ask; ``query`` the first), answered by
    # npmcore.answer.answering.replies; None: ``query`` alone
    asked: Asked | None = None

    @property
    def queries(self) -> tuple[str, ...]:
        return (self.query,) if self.asked is None else self.asked.queries


@dataclass(frozen=True)
class Task:
    name: str
    kind: Literal["closed", "open"]
    examples: tuple[Example, ...]  # the evaluated (possibly subsampled) examples, in file order
    labels: tuple[str, ...]  # closed-set label names; () for open-set
    # Closed-set candidate words per label, unfiltered: the paper's word first, then the fuzzy
    # verbalizer synonyms; the caller keeps those that are one token of its encoder.
    label_words: tuple[tuple[str, ...], ...]
    skipped: dict[str, int]  # reason -> examples of the file dropped (before subsampling)
    # "answer_length" (LAMA): report the mean over answer-length buckets 1, 2, 3, 4+ (the
    # length in encoder tokens of the shortest gold answer); None: plain average.
    macro_key: str | None
    # Closed-set: the template without its input ("It was [MASK]."), whose label scores calibrate
    # the examples' (domain-conditional PMI); None for open-set tasks.
    domain: str | None = None
    split: Split = "test"  # the examples' split: "dev" data tunes, "test" data reports
    form: Form | None = None  # how its questions were asked (load_task); None: a task without questions


def _example(
    query: str,
    answers: tuple[str, ...],
    label: int | None,
    id: str,
    text: str,
    group: str = "",
    stale: tuple[str, ...] = (),
    asked: Asked | None = None,
) -> Example | str:
    """The example, or the reason it is skipped."""
    if query.count(MASK) != 1:
        return "mask_count"
    if not text.strip():
        return "empty_text"
    return Example(query, answers, label, id, text, group, stale, asked)


def _closed_rows(spec: ClosedSpec, path: Path) -> Iterator[tuple[int, dict]]:
    columns = (*spec.fields, spec.label_field)
    if path.suffix == ".tsv":
        return read_tsv(path, (spec.label_field, *spec.fields))  # SST: "__label__k<TAB>text"
    if path.suffix == ".csv":
        return read_csv(path, columns)
    return read_jsonl(path, columns)


def _closed_examples(name: str, spec: ClosedSpec, data_dir: Path) -> Iterator[Example | str]:
    """The examples of ``spec.file``."""
    path = data_dir / spec.file
    for line, row in _closed_rows(spec, path):
        raw = str(row[spec.label_field]).strip()
        if raw not in spec.label_map:
            raise schema_error(path, line, f"label {raw!r} is not one of {sorted(spec.label_map)}")
        label = spec.label_map[raw]
        if label is None:
            yield "neutral"
            continue
        fields = {f: clean(string_field(path, line, row, f)) for f in spec.fields}
        if not all(fields.values()):
            yield "empty_text"
            continue
        fields = spec.prepare(fields)
        text = " ".join(fields[f] for f in spec.text_fields)
        yield _example(spec.template.format(**fields), (), label, f"{name}-{line}", text)


def _lama_examples(name: str, data_dir: Path, split: Split) -> Iterator[Example | str]:
    templates = {**GOOGLE_RE_TEMPLATES, **lama_templates(data_dir)}  # relations.jsonl wins
    for relation, path, line, fact in lama_facts(data_dir, name):
        if lama_split(string_field(path, line, fact, "uuid")) != split:
            continue
        if relation not in templates:
            raise schema_error(path, line, f"relation {relation!r} has no template in lama/relations.jsonl")
        subject = " ".join(string_field(path, line, fact, "sub_label").split())
        answer = " ".join(string_field(path, line, fact, "obj_label").split())
        if not subject or not answer:
            yield "empty_text"
            continue
        query = lama_query(templates[relation], subject)
        uuid = string_field(path, line, fact, "uuid")
        yield _example(query, (answer,), None, uuid, query.replace(MASK, answer, 1))


def _kamel_examples(data_dir: Path, split: Split, form: Form) -> Iterator[Example | str]:
    """KAMEL's facts of ``split`` as the paper asks them ("What is followed by So-Lo? Answer: [MASK].") or, ``form``
    "statements", as the query service asks a question: their relation stated ("[MASK] is followed by So-Lo."), then
    the paper's question, answers of the kind the question asks for (:func:`npmcore.ask.statements.state`).
    Every label of every object is a gold answer (test files: each object's chosen, rdf and alternative labels; dev
    files: a list of labels)."""
    templates = kamel_templates(data_dir)
    stated = kamel_statements() if form == "statements" else {}
    expects = {r: state(question.replace("[S]", "X")).expects for r, question in templates.items() if stated}
    for relation, path in kamel_files(data_dir, split):
        if relation not in templates:
            raise schema_error(path, 1, f"relation {relation!r} has no question in kamel/question-templates.csv")
        for line, fact in read_jsonl(path, ("sub_label", "obj_label")):
            subject = " ".join(string_field(path, line, fact, "sub_label").split())
            objects = fact["obj_label"]
            if not isinstance(objects, list) or not all(isinstance(o, dict | str) for o in objects):
                raise schema_error(path, line, f"obj_label must be a list of labels or objects, got {objects!r}")
            labels = [
                label
                for o in objects
                for label in (
                    [o] if isinstance(o, str) else [o.get("chosen"), o.get("rdf"), *(o.get("alternative") or [])]
                )
                if isinstance(label, str) and label.strip()
            ]
            answers = tuple(dict.fromkeys(" ".join(a.split()) for a in labels))
            if not subject or not answers:
                yield "empty_text"
                continue
            paper = kamel_query(templates[relation], subject)
            query = stated[relation].replace("[S]", subject) if stated else paper
            kinds = (stated_kind(query),) * 2  # the noun of "The capital of X is [MASK].", as the service reads it
            asked = Asked(paper, (query, paper), "statements", (expects[relation],) * 2, kinds) if stated else None
            id = f"kamel-{relation}-{split}-{line}"
            yield _example(query, answers, None, id, query.replace(MASK, answers[0]), asked=asked)


def _entity_translation_examples(data_dir: Path, split: Split) -> Iterator[Example | str]:
    """The paper's entity translation ("The Korean translation of Banpo Bridge is: [MASK].") on names that
    articles of the 2015 dump give in another script in their opening; scored per language too."""
    path = data_dir / f"entity-translation-{split}.jsonl"
    for line, row in read_jsonl(path, ("id", "query", "answers", "language")):
        answers = string_list(path, line, row["answers"], "answers")
        query = string_field(path, line, row, "query")
        group = string_field(path, line, row, "language")
        yield _example(query, answers, None, str(row["id"]), query.replace(MASK, answers[0]), group=group)


def _temporal_examples(data_dir: Path, split: Split) -> Iterator[Example | str]:
    """Facts of the 2020 dump that changed since the 2015 one (gold: the 2020 answer, stale: the 2015
    answer) or did not (the same answer in both), grouped by that kind (the paper's TempLAMA)."""
    path = data_dir / f"temporal-{split}.jsonl"
    for line, row in read_jsonl(path, ("id", "query", "answers_2015", "answers_2020", "kind")):
        new = string_list(path, line, row["answers_2020"], "answers_2020")
        old = string_list(path, line, row["answers_2015"], "answers_2015")
        kind = string_field(path, line, row, "kind")
        if kind not in ("changed", "unchanged"):
            raise schema_error(path, line, f"kind must be 'changed' or 'unchanged', got {kind!r}")
        query = string_field(path, line, row, "query")
        stale = old if kind == "changed" else ()
        yield _example(query, new, None, str(row["id"]), query.replace(MASK, new[0]), group=kind, stale=stale)


def question_split(question: str) -> Split:
    """The split of an NQ or TriviaQA question: dev for one fifth of the questions (by the hash of its
    words), test for the rest."""
    return "dev" if _hash_fraction(" ".join(question.split())) < 0.2 else "test"


def _question_example(question: str, answers: tuple[str, ...], id: str, form: Form) -> Example | str:
    """A question's example, asked as :func:`npmcore.ask.asking.ask` asks it in ``form`` (NQ's phrases, "cast of
    die hard", in the paper's form)."""
    question = " ".join(question.split())
    if not any(a.strip() for a in answers):
        return "no_answers"
    if not reads_as_question(question):
        return _example(question_query(question), answers, None, id, question)
    asked = ask(question, form)
    if asked.how in ("explanation", "question"):  # asked as the paper asks (the service would not ask a why)
        return _example(question_query(question), answers, None, id, question)
    return _example(asked.queries[0], answers, None, id, question, asked=asked)


def _nq_examples(data_dir: Path, split: Split, form: Form) -> Iterator[Example | str]:
    path = data_dir / "nq" / "NQ-open.dev.jsonl"
    for line, row in read_jsonl(path, ("question", "answer")):
        if question_split(string_field(path, line, row, "question")) != split:
            continue
        answers = string_list(path, line, row["answer"], "answer")
        yield _question_example(string_field(path, line, row, "question"), answers, f"nq-{line}", form)


def _triviaqa_examples(data_dir: Path, split: Split, form: Form) -> Iterator[Example | str]:
    path = data_dir / "triviaqa" / "dpr_trivia_test.qa.tsv"
    for line, row in read_tsv(path, ("question", "answers"), quoted=True):
        if question_split(row["question"]) != split:
            continue
        try:
            value = ast.literal_eval(row["answers"])
        except (ValueError, SyntaxError) as e:
            raise schema_error(path, line, f"answers are not a Python list literal: {row['answers'][:80]!r}") from e
        yield _question_example(row["question"], string_list(path, line, value, "answers"), f"triviaqa-{line}", form)


def _cloze_examples(path: Path, form: Form) -> Iterator[Example | str]:
    """A file's queries: a sentence with one ``[MASK]`` as it is, a question as :func:`npmcore.ask.asking.ask`
    asks it in ``form``."""
    for line, row in read_jsonl(path, ("query", "answers")):
        query = string_field(path, line, row, "query")
        answers = string_list(path, line, row["answers"], "answers")
        if not any(a.strip() for a in answers):
            yield "no_answers"
            continue
        id = str(row["id"]) if row.get("id") is not None else f"cloze-{line}"
        try:
            asked = ask(query, form)
        except ValueError:
            yield "mask_count"  # several masks, or no words
            continue
        if not asked.queries:
            yield "explanation"  # a question asking why or how: the service answers it with a note, no phrase
            continue
        first = asked.queries[0]
        yield _example(first, answers, None, id, first.replace(MASK, answers[0], 1), asked=asked)


def _wikitext_examples(data_dir: Path, split: Split) -> Iterator[Example | str]:
    """Masked words of WikiText-2's raw test file: in each paragraph, a fixed
    :data:`WIKITEXT_MASKED` of its alphanumeric words (by hash of article, line and position),
    each masked alone with :data:`WIKITEXT_WINDOW` words on either side. An article ("= Title =")
    is dev data when its title hashes into one fifth of the space."""
    path = data_dir / "wikitext2" / "wiki.test.raw"
    if not path.exists():
        raise ValueError(f"WikiText-2 test file {path} is missing (see shared/data/README.md)")
    title = ""
    with path.open(encoding="utf-8") as f:
        for line, raw in enumerate(f, start=1):
            text = raw.strip()
            if text.startswith("= ") and text.endswith(" =") and not text.startswith("= ="):
                title = text.strip("= ")
                continue
            if not text or text.startswith("="):
                continue
            if ("dev" if _hash_fraction(title) < 0.2 else "test") != split:
                continue
            words = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".").split()
            for i, word in enumerate(words):
                if not word.isalnum() or _hash_fraction(f"{title}:{line}:{i}") >= WIKITEXT_MASKED:
                    continue
                left = words[max(0, i - WIKITEXT_WINDOW) : i]
                right = words[i + 1 : i + 1 + WIKITEXT_WINDOW]
                query = " ".join([*left, MASK, *right])
                yield _example(query, (word,), None, f"wikitext2-{line}-{i}", " ".join([*left, word, *right]))


def subsample(examples: list[Example], limit: int | None, seed: int) -> tuple[Example, ...]:
    """A seeded sample of ``limit`` examples (all when ``limit`` is None or not smaller), in input order."""
    if limit is None or len(examples) <= limit:
        return tuple(examples)
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size=limit, replace=False))
    return tuple(examples[i] for i in keep)


def load_task(
    name: str,
    data_dir: Path = DEFAULT_DATA_DIR,
    limit: int | None = 3000,
    seed: int = 0,
    path: str | Path | None = None,
    split: Split = "test",
    form: Form | None = None,
) -> Task:
    """Load an evaluation task.

    Args:
        name: one of ``TASKS``.
        data_dir: the shared data folder (layout of ``shared/data/README.md``).
        limit: keep a seeded sample of this many examples; None keeps all.
        seed: seed of ``numpy.random.default_rng`` for the sample.
        path: the jsonl file of the ``cloze`` task (only for it).
        split: "test", or "dev" (tuning data) for the tasks of ``DEV_SPLITS``; the cloze
            task's split is its file.
        form: how questions are asked (module docstring); None: the task's own (the paper's form for KAMEL, NQ
            and TriviaQA, the query service's for a cloze file).

    Returns:
        The task; examples that cannot be evaluated are counted in ``Task.skipped``.

    Raises:
        ValueError: unknown name, bad ``limit``/``path``, or a data file with a wrong schema
        (the message names the file and line).
    """
    data_dir = Path(data_dir)
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of examples or None, got {limit}")
    if (path is None) == (name == "cloze"):
        raise ValueError(f"path is required for the cloze task and only for it (task {name!r}, path {path!r})")
    if split not in ("test", "dev"):
        raise ValueError(f"unknown split {split!r}; splits: test, dev")
    if split == "dev" and name not in DEV_SPLITS:
        raise ValueError(f"task {name!r} has no dev split; tasks with one: {', '.join(DEV_SPLITS)}")
    if form is not None and name not in ASKED_TASKS:
        raise ValueError(f"task {name!r} has no questions to ask another way; tasks with: {', '.join(ASKED_TASKS)}")
    form = form or ("statements" if name == "cloze" else "paper")  # each task's own
    labels: tuple[str, ...] = ()
    words: tuple[tuple[str, ...], ...] = ()
    domain = None
    if name in CLOSED_SPECS:
        spec = CLOSED_SPECS[name]
        if split == "dev":
            spec = dataclasses.replace(spec, file=DEV_FILES[name])
        items = _closed_examples(name, spec, data_dir)
        labels, words, domain = spec.labels, label_words(spec, data_dir), spec.domain
    elif name in LAMA_TASKS:
        items = _lama_examples(name, data_dir, split)
    elif name == "kamel":
        items = _kamel_examples(data_dir, split, form)
    elif name == "entity_translation":
        items = _entity_translation_examples(DRAWN_DATA_DIR, split)
    elif name == "temporal":
        items = _temporal_examples(DRAWN_DATA_DIR, split)
    elif name == "nq":
        items = _nq_examples(data_dir, split, form)
    elif name == "triviaqa":
        items = _triviaqa_examples(data_dir, split, form)
    elif name == "wikitext2":
        items = _wikitext_examples(data_dir, split)
    else:
        items = _cloze_examples(Path(path), form)
    examples, skipped = [], Counter()
    for item in items:
        if isinstance(item, str):
            skipped[item] += 1
        else:
            examples.append(item)
    duplicates = [i for i, n in Counter(ex.id for ex in examples).items() if n > 1]
    if duplicates:
        raise ValueError(f"task {name!r}: duplicate example ids {duplicates[:5]}")
    if skipped:
        logger.info("task %s: skipped %s", name, dict(skipped))
    if name == "cloze" and sum(skipped.values()) > len(examples):
        raise ValueError(
            f"{path}: {sum(skipped.values())} of {sum(skipped.values()) + len(examples)} lines cannot be asked as the "
            f"query service asks them ({', '.join(f'{k}: {v}' for k, v in skipped.items())}): not a score of this file"
        )
    return Task(
        name=name,
        kind="closed" if name in CLOSED_TASKS else "open",
        examples=subsample(examples, limit, seed),
        labels=labels,
        label_words=words,
        skipped=dict(skipped),
        macro_key="answer_length" if name in LAMA_TASKS else None,
        domain=domain,
        split=split,
        form=form if name in ASKED_TASKS else None,
    )
