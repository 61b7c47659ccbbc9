"""The query service: the store's serving pointer (which index is served), the service that answers from the index
the pointer names and swaps in each new one (batches of queries), and ``npmcore api`` over it (FastAPI, its page).

Imports the shared modules, ``npmcore.index``, ``npmcore.answer`` and ``npmcore.evaluation`` (the closed-set tasks'
label words)."""
