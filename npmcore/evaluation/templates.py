"""What each task's model input looks like: templates, label maps and label words.

Closed-set tasks (classification; Shi et al. 2022 templates, as in the NPM paper):

| task | template | label words (label 0, 1, ...) |
|---|---|---|
| sst2, mr, cr, rt | ``{text} It was [MASK].`` | terrible / great (+ fuzzy synonyms) |
| subj | ``{text} This is a [MASK].`` | review (subjective) / summary (objective) |
| agn | ``{title} {description} The text topic is about [MASK].`` | politics / sports / business / technology |
|     |                                                          | (+ fuzzy synonyms) |
| rte | ``{premise}, right? [MASK], {hypothesis}`` | Yes (entailment) / No |

Each closed-set task also has a *domain premise*: its template without the input
(``It was [MASK].``), whose label scores calibrate every example's (domain-conditional
PMI, Holtzman et al. 2021, as kNN-Prompt does: Shi et al. 2022).

Open-set: LAMA relation templates (``[X]`` -> subject, ``[Y]`` -> ``[MASK]``) and
``{question}? The answer is [MASK].`` for questions. The mask marker is always the
literal ``[MASK]``; the encoder side replaces it with its own mask tokens.
"""

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from npmcore.mask import MASK


@dataclass(frozen=True)
class ClosedSpec:
    """How a closed-set task is read and templated."""

    file: str  # data file under data_dir
    fields: tuple[str, ...]  # input columns, named as the template names them
    label_field: str  # column of the raw label
    label_map: dict[str, int | None]  # raw label -> label index; None: dropped as "neutral"
    template: str  # str.format template over the cleaned fields
    text_fields: tuple[str, ...]  # fields joined into Example.text (the input before templating)
    labels: tuple[str, ...]  # label names, by index
    words: tuple[str, ...]  # the paper's label word of each label
    domain: str  # the domain premise: the template without its input, for calibration
    verbalizer: str | None = None  # fuzzy synonyms under data_dir, one ", "-separated line per label
    # Rewrite of the cleaned fields before templating (RTE's punctuation).
    prepare: Callable[[dict[str, str]], dict[str, str]] = field(default=lambda fields: fields)


def _rte_fields(fields: dict[str, str]) -> dict[str, str]:
    # As in the reference code: "{premise without final punctuation}, right? [MASK],
    # {hypothesis starting lower case}." reads as one sentence.
    strip = string.punctuation + string.whitespace
    premise, hypothesis = fields["premise"].rstrip(strip), fields["hypothesis"].rstrip(strip)
    return {"premise": premise, "hypothesis": hypothesis[:1].lower() + hypothesis[1:] + "."}


def _sentiment(file: str, text: str = "text", label: str = "label", label_map: dict | None = None) -> ClosedSpec:
    return ClosedSpec(
        file=file,
        fields=(text,),
        label_field=label,
        label_map=label_map or {"0": 0, "1": 1},
        template="{%s} It was [MASK]." % text,
        text_fields=(text,),
        labels=("negative", "positive"),
        words=("terrible", "great"),
        domain="It was [MASK].",
        verbalizer="fuzzy_verbalizers/sst2_label_names_sentidict.txt",
    )


CLOSED_SPECS: dict[str, ClosedSpec] = {
    "sst2": _sentiment(
        "sst2/test.tsv",
        label_map={  # 5-class SST: 3 is neutral
            "__label__1": 0,
            "__label__2": 0,
            "__label__3": None,
            "__label__4": 1,
            "__label__5": 1,
        },
    ),
    "mr": _sentiment("mr/test.csv"),
    "cr": _sentiment("cr/test.csv"),
    "rt": _sentiment("rt/test.jsonl", text="input", label="output", label_map={"negative": 0, "positive": 1}),
    "subj": ClosedSpec(
        file="subj/test.csv",
        fields=("text",),
        label_field="score",
        label_map={"0": 0, "1": 1},
        template="{text} This is a [MASK].",
        text_fields=("text",),
        labels=("subjective", "objective"),
        words=("review", "summary"),
        domain="This is a [MASK].",
    ),
    "agn": ClosedSpec(
        file="agn/test.csv",
        fields=("Title", "Description"),
        label_field="Class Index",
        label_map={"1": 0, "2": 1, "3": 2, "4": 3},
        template="{Title} {Description} The text topic is about [MASK].",
        text_fields=("Title", "Description"),
        labels=("World", "Sports", "Business", "Sci/Tech"),
        words=("politics", "sports", "business", "technology"),
        domain="The text topic is about [MASK].",
        verbalizer="fuzzy_verbalizers/agn_label_names_kb.txt",
    ),
    "rte": ClosedSpec(
        file="rte/val.jsonl",
        fields=("premise", "hypothesis"),
        label_field="label",
        label_map={"entailment": 0, "not_entailment": 1},
        template="{premise}, right? [MASK], {hypothesis}",
        text_fields=("premise",),
        labels=("entailment", "not_entailment"),
        words=("Yes", "No"),
        domain="Right? [MASK].",
        prepare=_rte_fields,
    ),
}


def clean(value: str) -> str:
    """Collapse whitespace; AG News writes line breaks as backslashes (no other closed-set file has any)."""
    return " ".join(value.replace("\\", " ").split())


def label_words(spec: ClosedSpec, data_dir: Path) -> tuple[tuple[str, ...], ...]:
    """Per label: the paper's word, then the fuzzy verbalizer synonyms (unfiltered, deduplicated)."""
    if spec.verbalizer is None:
        return tuple((w,) for w in spec.words)
    path = data_dir / spec.verbalizer
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) != len(spec.labels):
        raise ValueError(f"{path}: expected one line of synonyms per label {spec.labels}, found {len(lines)} lines")
    return tuple(
        tuple(dict.fromkeys([word, *(w.strip() for w in line.split(",") if w.strip())]))
        for word, line in zip(spec.words, lines)
    )


def lama_query(template: str, subject: str) -> str:
    """``"[X] was born in [Y] ."`` -> ``"Dante was born in [MASK]."`` (the reference code's `` .`` fix)."""
    return template.replace(" .", ".").replace("[X]", subject).replace("[Y]", MASK)


def kamel_query(question: str, subject: str) -> str:
    """``"What is followed by [S]?"`` -> ``"What is followed by So-Lo? Answer: [MASK]."`` (the paper's KAMEL form)."""
    return f"{question.replace('[S]', subject)} Answer: {MASK}."
