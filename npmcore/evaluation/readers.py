"""Line-numbered readers for the evaluation data files.

Every reader yields ``(line_number, record)`` pairs (1-based physical line numbers) and
raises ``ValueError("<file>:<line>: <problem>")`` on a schema problem: an unparsable line,
a missing column or field, a value of the wrong type. Blank lines are skipped.
"""

import bz2
import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Standard LAMA Google-RE templates (used when relations.jsonl has no entry for the relation).
GOOGLE_RE_TEMPLATES = {
    "place_of_birth": "[X] was born in [Y] .",
    "date_of_birth": "[X] (born [Y]).",
    "place_of_death": "[X] died in [Y] .",
}


def schema_error(path: Path, line: int, problem: str) -> ValueError:
    """The error every reader raises: file, line and what is wrong."""
    return ValueError(f"{path}:{line}: {problem}")


def _check_fields(path: Path, line: int, record: dict[str, Any], fields: Sequence[str]) -> None:
    missing = [f for f in fields if record.get(f) is None]
    if missing:
        raise schema_error(path, line, f"missing field(s) {missing}; present: {sorted(record)}")


def read_jsonl(path: Path, fields: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """JSON objects, one per line, each with (non-null) ``fields`` (a ``.bz2`` file is decompressed)."""
    opener = bz2.open if Path(path).suffix == ".bz2" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise schema_error(path, line_no, f"not valid JSON ({e.msg} at column {e.colno})") from e
            if not isinstance(record, dict):
                raise schema_error(path, line_no, f"expected a JSON object, got {type(record).__name__}")
            _check_fields(path, line_no, record, fields)
            yield line_no, record


def read_csv(path: Path, fields: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a csv file with a header row that names at least ``fields``."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in fields if c not in header]
        if missing:
            raise schema_error(path, 1, f"missing column(s) {missing}; header is {header}")
        for row in reader:
            if None in row or any(row[c] is None for c in fields):
                raise schema_error(path, reader.line_num, f"expected {len(header)} columns {header}, got {row}")
            yield reader.line_num, row


def read_tsv(path: Path, fields: Sequence[str], quoted: bool = False) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a header-less tab-separated file, named by ``fields``.

    ``quoted``: fields may be csv-quoted (DPR's qa.tsv files); otherwise lines are split
    on tabs as they are (SST's ``__label__k<TAB>text``, where a text may start with a quote).
    """
    with open(path, encoding="utf-8", newline="") as f:
        if quoted:
            reader = csv.reader(f, delimiter="\t")
            numbered = ((reader.line_num, values) for values in reader)
        else:
            numbered = ((n, line.rstrip("\r\n").split("\t")) for n, line in enumerate(f, start=1))
        for line_no, values in numbered:
            if not any(v.strip() for v in values):
                continue
            if len(values) != len(fields):
                problem = f"expected {len(fields)} tab-separated fields {list(fields)}, got {len(values)}"
                raise schema_error(path, line_no, problem)
            yield line_no, dict(zip(fields, values))


def string_field(path: Path, line: int, record: dict[str, Any], field: str) -> str:
    """``record[field]``, which must be a string."""
    value = record[field]
    if not isinstance(value, str):
        raise schema_error(path, line, f"field {field!r} must be a string, got {type(value).__name__} {value!r}")
    return value


def string_list(path: Path, line: int, value: Any, field: str) -> tuple[str, ...]:
    """A value that must be a list of strings (a task's gold answers)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise schema_error(path, line, f"field {field!r} must be a list of strings, got {value!r}")
    return tuple(value)


def lama_templates(data_dir: Path) -> dict[str, str]:
    """Relation id -> template (``[X] ... [Y] .``) from ``lama/relations.jsonl``."""
    path = data_dir / "lama" / "relations.jsonl"
    return {
        string_field(path, n, r, "relation"): string_field(path, n, r, "template")
        for n, r in read_jsonl(path, ("relation", "template"))
    }


def lama_files(data_dir: Path, name: str) -> list[tuple[str, Path]]:
    """``(relation, file)`` of a LAMA subset (``"trex"`` or ``"google_re"``), in a fixed order."""
    if name == "trex":
        files = sorted((data_dir / "lama" / "TREx").glob("P*.jsonl"))
        found = [(p.stem, p) for p in files]
    elif name == "google_re":
        found = [(r, data_dir / "lama" / "Google_RE" / f"{r}_test.jsonl") for r in GOOGLE_RE_TEMPLATES]
    else:
        raise ValueError(f"not a LAMA subset: {name!r} (expected 'trex' or 'google_re')")
    if not found or not all(p.is_file() for _, p in found):
        raise FileNotFoundError(f"LAMA {name} files missing under {data_dir / 'lama'}: {[str(p) for _, p in found]}")
    return found


def lama_facts(data_dir: Path, name: str) -> Iterator[tuple[str, Path, int, dict[str, Any]]]:
    """Every fact of a LAMA subset as ``(relation, file, line, record)``, in file order."""
    for relation, path in lama_files(data_dir, name):
        for line_no, record in read_jsonl(path, ("uuid", "sub_label", "obj_label", "evidences")):
            yield relation, path, line_no, record


def kamel_templates(data_dir: Path) -> dict[str, str]:
    """Relation id -> KAMEL question with ``[S]`` for the subject, from ``kamel/question-templates.csv``
    (rows ``Pxxx, What is … [S]?``, no header)."""
    path = data_dir / "kamel" / "question-templates.csv"
    templates = {}
    with open(path, encoding="utf-8", newline="") as f:
        for line, row in enumerate(csv.reader(f, skipinitialspace=True), start=1):
            if not row:
                continue
            if len(row) != 2 or "[S]" not in row[1]:
                raise schema_error(path, line, f"expected 'Pxxx, question with [S]', got {row}")
            templates[row[0].strip()] = row[1].strip()
    return templates


KAMEL_STATEMENTS = Path(__file__).parent / "data" / "kamel-statements.csv"


def kamel_statements(path: Path = KAMEL_STATEMENTS) -> dict[str, str]:
    """Relation id -> KAMEL's relation stated, with ``[S]`` for the subject and ``[MASK]`` for the object
    (``relation,question,statement`` rows: each of KAMEL's questions made a statement by
    :mod:`npmcore.ask.statements`, then read and corrected by hand)."""
    statements = {}
    with open(path, encoding="utf-8", newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            statement = row.get("statement") or ""
            if statement.count("[S]") != 1 or statement.count("[MASK]") != 1:
                raise schema_error(path, line, f"a statement needs one [S] and one [MASK], got {statement!r}")
            statements[row["relation"]] = statement
    return statements


def kamel_files(data_dir: Path, split: str) -> list[tuple[str, Path]]:
    """``(relation, file)`` of KAMEL's ``split`` ("test" or "dev"), in relation order."""
    files = sorted((data_dir / "kamel").glob(f"P*/{split}.jsonl.bz2"))
    if not files:
        raise FileNotFoundError(f"KAMEL {split} files missing under {data_dir / 'kamel'} (P*/{split}.jsonl.bz2)")
    return [(p.parent.name, p) for p in files]
