"""Passages encoded once: a BM25-restricted query over an index without this encoder's vectors encodes its top
passages, and the same passage comes again (another query, another task, the same article in a larger datastore
beside a new source, a query encoder trained for the same passage encoder). The process keeps their vectors,
least recently used dropped first, within a byte budget, keyed by what makes them: the passage encoder's weights,
the precision and the passage's token ids.
"""

import hashlib
import threading
from collections import OrderedDict

import numpy as np

BUDGET = 4 << 30  # bytes of vectors kept: about 12,000 passages of 230 tokens, a task's top 10 passages


def passage_key(fingerprint: str, precision: str, tokens: np.ndarray) -> bytes:
    """What a passage's vectors depend on: the encoder's weights, the precision and its token ids."""
    digest = hashlib.blake2b(f"{fingerprint}:{precision}:".encode(), digest_size=20)
    digest.update(np.ascontiguousarray(tokens, dtype=np.int32).tobytes())
    return digest.digest()


class PassageVectors:
    """An LRU of passages' vectors (n_tokens, d) as they were computed (float32), within ``budget`` bytes."""

    def __init__(self, budget: int = BUDGET):
        self.budget = budget
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: bytes) -> np.ndarray | None:
        with self._lock:
            found = self._vectors.get(key)
            if found is not None:
                self._vectors.move_to_end(key)
        return found

    def put(self, key: bytes, vectors: np.ndarray) -> None:
        kept = np.asarray(vectors, dtype=np.float32)
        kept.flags.writeable = False  # shared by every query that reads the passage
        with self._lock:
            if key in self._vectors or kept.nbytes > self.budget:
                return
            self._vectors[key] = kept
            self._bytes += kept.nbytes
            while self._bytes > self.budget:
                _, dropped = self._vectors.popitem(last=False)
                self._bytes -= dropped.nbytes

    def __len__(self) -> int:
        return len(self._vectors)


PASSAGES = PassageVectors()  # the process's
