"""Query-side adaptation: reading sets (cloze examples of a corpus, a query log's questions) and the training of a
query encoder against a fixed passage encoder's index.

Imports the shared modules and every stage below it: ``npmcore.model``, ``npmcore.answer``, ``npmcore.evaluation``."""
