"""The encoder's forward on token ids, without torch or transformers: sequences batched by length
(:func:`encode_ids`), and the encoder compiled by OpenVINO from this machine's cache of converted encoders
(:func:`converted_forward`).

What a Dask worker that embeds on a CPU loads. The encoder is converted once per machine, by the first process
that needs it (:func:`npmcore.encoder.fast_forward`; on a first run the planner's precision probe), and kept under
its weights' fingerprint; a worker of the same machine reads it back by that fingerprint, so it imports neither
torch nor transformers and loads no weights (a process importing them and the shipped encoder's weights: 523 MB
and 6 s here; the worker's other imports: 107 MB).
"""

import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from npmcore.storage import cache_dir

log = logging.getLogger(__name__)

Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]  # ids, attention mask (b, w) int64 -> (b, w, d) float32
# The forward's matrix products: float32, or bfloat16 where a CPU has units for it (npmcore.index.precision chooses)
Precision = Literal["f32", "bf16"]
# Padded tokens a forward, by default: on a CPU the fastest a token (two one-thread processes side by side, bf16 on
# an AVX512_BF16 AMD, 512 blocks of the news corpus: 6.2k tokens/s each at 2,048, 5.7k at 8,192, 2026-12-03; the
# demo's embedding stage 63-67 s -> 58-63 s); a GPU wants far more (131,072: bench/embed.py)
BATCH_TOKENS = 2048
OPENVINO_CACHED = 4  # converted encoders kept in the cache (the newest; each as large as its fp32 weights)


class EncoderError(ValueError):
    """An encoder or tokenizer cannot be loaded or cannot be used for NPM."""


def converted_folder(fingerprint: str) -> Path:
    """Where the encoder of weights ``fingerprint`` (:func:`npmcore.encoder.encoder_fingerprint`) converted to
    OpenVINO is kept: ``{cache}/openvino/<fingerprint>-ov<version>-tf<version>`` (a new OpenVINO or transformers
    converts again)."""
    import openvino as ov

    transformers = importlib.metadata.version("transformers")
    return cache_dir() / "openvino" / f"{fingerprint}-ov{ov.__version__.split('-')[0]}-tf{transformers}"


def compile_forward(model: object, threads: int, precision: Precision) -> Forward:
    """The forward of an OpenVINO model (converted, or read from its ``encoder.xml``) compiled for the CPU with
    ``INFERENCE_PRECISION_HINT`` ``precision`` on ``threads`` threads.

    Raises:
        EncoderError: ``bf16`` on a CPU OpenVINO computes in float32 (one without AMX or AVX512_BF16:
            OpenVINO takes the hint there and silently runs float32).
    """
    import openvino as ov

    started = time.perf_counter()
    # no pinning: OpenVINO would pin every process's threads to the first cores, so that two one-thread Dask
    # workers shared one core (7,066 tokens/s for both, 12,775 unpinned)
    compiled = ov.Core().compile_model(
        model,
        "CPU",
        {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False},
    )
    ran = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    if ran != precision:
        raise EncoderError(
            f"OpenVINO compiles the encoder in {ran}, not {precision}, on this CPU "
            f"({ov.Core().get_property('CPU', 'FULL_DEVICE_NAME')}): bf16 needs AMX or AVX512_BF16; use f32 or auto"
        )
    log.info(
        "compiled the encoder with OpenVINO (%d threads, %s) in %.1f s",
        threads,
        precision,
        time.perf_counter() - started,
    )
    hidden = compiled.output("last_hidden_state")
    # a compiled model answers through one infer request, which refuses a second caller while busy ("Infer Request
    # is busy"): the service's loader checks a new index while the old one answers, with the same encoder
    lock = threading.Lock()

    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with lock:
            return compiled({"input_ids": ids, "attention_mask": mask})[hidden]  # a copy: share_outputs=False

    return forward


def converted_forward(fingerprint: str, threads: int, precision: Precision) -> Forward | None:
    """:func:`compile_forward` of the encoder of weights ``fingerprint`` as converted on this machine before
    (once per process, thread count and precision); None where it was not."""
    model = converted_folder(fingerprint) / "encoder.xml"
    key = (model, threads, precision)
    if key not in _converted:
        if not model.is_file():
            return None
        import openvino as ov

        _converted[key] = compile_forward(ov.Core().read_model(model), threads, precision)
    return _converted[key]


_converted: dict[tuple[Path, int, Precision], Forward] = {}


def encode_ids(
    sequences: Sequence[Sequence[int]], pad_id: int, forward: Forward, batch_tokens: int = BATCH_TOKENS
) -> list[np.ndarray]:
    """Last hidden states of token id sequences (special tokens included), in input order.

    Sequences are sorted by length and cut into batches of at most ``batch_tokens`` padded tokens
    (``pad_id``), so little compute goes to padding; ``forward`` runs each batch.

    Returns:
        One float32 array (len_i, d) per sequence.
    """
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
    if len(lengths) and lengths.min() == 0:
        raise ValueError(f"sequence {int(np.argmin(lengths))} is empty")
    order = np.argsort(-lengths, kind="stable")
    out: list[np.ndarray] = [np.empty(0)] * len(sequences)
    for batch in batch_order(lengths[order], batch_tokens):
        rows = order[batch]
        width = int(lengths[rows[0]])  # the longest of the batch: sorted descending
        ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        for row, i in enumerate(rows):
            ids[row, : lengths[i]] = sequences[i]
        mask = (np.arange(width) < lengths[rows][:, None]).astype(np.int64)
        hidden = forward(ids, mask)  # (b, width, d)
        for row, i in enumerate(rows):
            out[i] = hidden[row, : lengths[i]]
    return out


def batch_order(lengths: np.ndarray, batch_tokens: int) -> list[slice]:
    """The batches :func:`encode_ids` cuts sequences of descending ``lengths`` into: as many sequences
    as fit ``batch_tokens`` padded to the first one's length (at least one)."""
    batches, lo = [], 0
    while lo < len(lengths):
        hi = min(len(lengths), lo + max(1, batch_tokens // int(lengths[lo])))
        batches.append(slice(lo, hi))
        lo = hi
    return batches
