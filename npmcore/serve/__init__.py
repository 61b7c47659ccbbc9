"""The query service: the store's serving pointer (which index is served) and ``npmcore api`` (FastAPI, its page),
which answers from the index the pointer names and swaps in each new one.

Imports the shared modules, ``npmcore.index``, ``npmcore.answer`` and ``npmcore.evaluation`` (the closed-set tasks'
label words)."""
