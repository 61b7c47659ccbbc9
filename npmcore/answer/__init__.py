"""The answering stage: NPM's reading of the queries ``npmcore.ask`` makes, its phrase candidates and their scores,
evidence scoring, the evidence passages with their sources, the confidence calibrator, a yes/no question's verdict,
kNN-LM, and ``NPM``, the searcher over an index.

Imports the shared modules, ``npmcore.ask``, ``npmcore.corpus``, ``npmcore.index`` and ``npmcore.model``."""
