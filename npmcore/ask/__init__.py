"""The asking stage: what a person typed read as the queries NPM is asked (a sentence with one mask as it is, a
question as its statements, keywords as their readings, a yes/no question as the statements that mask what it
asserts, an explanation refused) and the kind of answer each asks for. Grammar only, no vectors and no scores: the
answering stage reads what it asks.

Imports the shared modules only (``npmcore.mask``)."""
