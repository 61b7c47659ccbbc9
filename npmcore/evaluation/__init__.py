"""Zero-shot evaluation data: tasks (closed-set classification and open-set cloze / QA),
their metrics, and the reference corpora they are evaluated against.

| module | what |
|---|---|
| `readers.py` | line-numbered readers for the data files (jsonl, csv, tsv, LAMA) with clear schema errors |
| `templates.py` | closed-set templates, label maps and label words; LAMA and question query templates |
| `tasks.py` | `Example`, `Task`, `load_task`: templates, label words, skipping, seeded subsampling |
| `metrics.py` | SQuAD normalisation, exact match, accuracy, LAMA macro average by answer length |
| `references.py` | each task's reference corpus as ingestible documents, and the leakage guard |
| `diagnostics.py` | open-set errors: the gold's rank among NPM's candidates, the top-1's kind (name, date, …) |

Tests: `tests/test_evaluation_data.py`, `tests/test_paraphrase.py`.

Imports the shared modules, ``npmcore.corpus`` and ``npmcore.answer`` (the systems it evaluates).
"""
