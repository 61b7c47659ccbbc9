"""The answering stage: how a query is asked, NPM's phrase candidates and their scores, evidence scoring, the
evidence passages with their sources, the confidence calibrator, kNN-LM, and ``NPM``, the searcher over an index.

Imports the shared modules, ``npmcore.corpus``, ``npmcore.index`` and ``npmcore.model``."""
