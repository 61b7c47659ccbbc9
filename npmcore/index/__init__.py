"""The index stage: a vector per token of a corpus snapshot (the datastore, in the machine's precision), FAISS over
those vectors, BM25 over the blocks, and the index snapshots that bind them.

Imports the shared modules and ``npmcore.corpus``."""
