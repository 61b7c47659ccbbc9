"""The encoder's precision on this machine: float32, or bfloat16 where the CPU has matrix units for it.

A setting is one of :data:`SETTINGS`:

* ``f32``: float32 products (on a CPU OpenVINO's ``INFERENCE_PRECISION_HINT`` f32; on a GPU torch without
  autocast).
* ``bf16``: bfloat16 products: OpenVINO's bf16 hint on a CPU with AMX or AVX512_BF16 (refused on any other:
  OpenVINO takes the hint there and silently computes in float32), torch's bf16 autocast on a GPU.
* ``auto`` (the default): on a GPU bf16; on a CPU bf16 where it has those units and the probe found the
  encoder faster in bf16, else f32.

The probe embeds blocks of real text (the first articles of the embedded news corpus) on one thread, as a
one-thread Dask worker embeds, in each precision the CPU can run, the precisions side by side where the CPU
has the cores (as the workers embed side by side). Its rates (tokens/s) are cached per
machine (CPU model and flags, OpenVINO version; a GPU's name) and encoder (its weights' fingerprint) in
``{cache}/precision/`` (:func:`npmcore.machine.measured_rates`); they are also the plan's embedding rate
(:func:`npmcore.index.datastore.embedding_seconds`).
"""

import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, get_args

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.corpus.blocks import split_document
from npmcore.corpus.readers import Document, default_corpus
from npmcore.encoder import encode, encoder_fingerprint, fast_forward
from npmcore.forward import BATCH_TOKENS, Precision
from npmcore.machine import cpu_description, cpu_flags, cpu_name, measured_rates

log = logging.getLogger(__name__)

Setting = Literal["auto", "f32", "bf16"]
SETTINGS: tuple[Setting, ...] = get_args(Setting)
BF16_UNITS = frozenset({"amx_bf16", "avx512_bf16"})  # /proc/cpuinfo flags of CPUs with bf16 matrix products
PROBE_BLOCK_TOKENS = 256  # the datastore's default block length (special tokens included)
PROBE_BATCH_BLOCKS = BATCH_TOKENS // PROBE_BLOCK_TOKENS  # blocks a batch: as many as the datastore's batches hold
PROBE_BATCHES = 5  # the first untimed (OpenVINO chooses its kernels for the shape), then the fastest of 4 counts
PROBE_BLOCKS = PROBE_BATCH_BLOCKS * PROBE_BATCHES


def has_bf16_units(flags: frozenset[str]) -> bool:
    """Whether a CPU of these flags computes bf16 products in hardware (AMX or AVX512_BF16)."""
    return bool(flags & BF16_UNITS)


def choose_precision(flags: frozenset[str], rates: Mapping[str, float]) -> Precision:
    """``auto`` on a CPU: bf16 where it has bf16 units and the probe's ``rates`` (tokens/s by precision)
    found bf16 faster, else f32."""
    return "bf16" if has_bf16_units(flags) and rates.get("bf16", 0.0) > rates["f32"] else "f32"


def resolve_precision(setting: Setting, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast) -> Precision:
    """The precision ``setting`` means for ``model`` on this machine (``auto`` resolved; probes once).

    Raises:
        ValueError: an unknown setting, or ``bf16`` for a CPU without bf16 units.
    """
    if setting not in SETTINGS:
        raise ValueError(f"precision must be one of {', '.join(SETTINGS)}, got {setting!r}")
    if _on_gpu(model):
        return "bf16" if setting == "auto" else setting
    flags = cpu_flags()
    if setting == "bf16" and not has_bf16_units(flags):
        raise ValueError(
            f"precision bf16 needs a CPU with AMX or AVX512_BF16; this one ({cpu_name()}) has neither, and OpenVINO "
            "would compute in f32: use f32 or auto"
        )
    if setting != "auto":
        return setting
    return choose_precision(flags, forward_rates(model, tokenizer)) if has_bf16_units(flags) else "f32"


def forward_rates(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast) -> dict[str, float]:
    """Tokens/s of ``model``'s forward on one thread here, by precision: f32, and bf16 on a CPU with bf16
    units (a GPU: both), from the cache (:func:`npmcore.machine.measured_rates`) or probed now."""
    if _on_gpu(model):
        machine, precisions = torch.cuda.get_device_name(next(model.parameters()).device), ("f32", "bf16")
    else:
        import openvino as ov

        flags = cpu_flags()
        machine = f"{cpu_description(flags)} openvino {ov.__version__}"
        precisions = ("f32", "bf16") if has_bf16_units(flags) else ("f32",)
    fingerprint = encoder_fingerprint(model)

    def measure() -> dict[str, float]:
        # the precisions side by side, one thread each where the machine has the cores: as the datastore's
        # one-thread workers embed (the probe's seconds halved on a CPU with bf16 units); each compiled first,
        # one after the other, so that no compilation runs beside a timed batch
        for p in precisions:
            fast_forward(model, p, threads=1)
        with ThreadPoolExecutor(min(len(precisions), len(os.sched_getaffinity(0)))) as pool:
            rates = dict(zip(precisions, pool.map(lambda p: probe(model, tokenizer, p), precisions), strict=True))
        log.info(
            "precision probe of encoder %s: %s",
            fingerprint,
            ", ".join(f"{p} {r:,.0f} tokens/s" for p, r in rates.items()),
        )
        return rates

    return measured_rates("precision", machine, fingerprint, measure)


def probe(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, precision: Precision) -> float:
    """Tokens/s of ``model``'s forward in ``precision`` on one thread, over blocks of real text: batches of
    :data:`PROBE_BATCH_BLOCKS`, the first to warm up, the fastest of the others counting (a job passing by
    slows one, rarely all; the rate is cached). About 3 s for f32, 2 s for bf16 on a CPU with AVX512_BF16."""
    blocks = probe_blocks(tokenizer)
    forward = fast_forward(model, precision, threads=1)
    warm, *timed = (blocks[i : i + PROBE_BATCH_BLOCKS] for i in range(0, PROBE_BLOCKS, PROBE_BATCH_BLOCKS))

    def rate(batch: list[list[int]]) -> float:
        started = time.perf_counter()
        encode(model, tokenizer, batch, PROBE_BATCH_BLOCKS * PROBE_BLOCK_TOKENS, forward)
        return sum(map(len, batch)) / (time.perf_counter() - started)

    rate(warm)
    return max(map(rate, timed))


def probe_blocks(tokenizer: PreTrainedTokenizerFast) -> list[list[int]]:
    """:data:`PROBE_BLOCKS` blocks of the embedded news corpus, cut as the datastore's default blocks."""
    news = Path(default_corpus()[1]).read_text().splitlines()
    blocks = []
    for number, text in enumerate(news):
        document = Document(f"probe-{number}", "", text, "probe")
        blocks += [b.token_ids for b in split_document(document, tokenizer, PROBE_BLOCK_TOKENS)]
        if len(blocks) >= PROBE_BLOCKS:
            return blocks[:PROBE_BLOCKS]
    raise AssertionError(f"the news corpus holds {len(blocks)} blocks, fewer than the probe's {PROBE_BLOCKS}")


def _on_gpu(model: PreTrainedModel) -> bool:
    return next(model.parameters()).device.type != "cpu"
