"""The training stage: span masking, the contrastive and masked-LM losses, batches of a corpus snapshot, the training
loop with its checkpoints (``python -m npmcore.model.train``, torchrun), and the query side's encoder.

Imports the shared modules, ``npmcore.corpus`` and ``npmcore.index`` (BM25 finds cross-document positives)."""
