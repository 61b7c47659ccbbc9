"""The project's mask token: how a query, a template and an example write the blank that NPM fills, whatever the
encoder's own mask token is (BERT's ``[MASK]``, RoBERTa's ``<mask>``: :meth:`npmcore.answer.inference.NPM.query_ids`
puts the encoder's own in its place). Imports nothing."""

MASK = "[MASK]"
