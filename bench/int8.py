"""Benchmark: int8 encoder forward on CPU against fp32, speed and vector agreement.

Usage: python bench/int8.py [--tokens 100000] [--k 4096] [--queries 64]
Needs the ``bench`` extra (``pip install -e '.[bench]'``: onnx, onnxruntime).

Embeds the first ``--tokens`` tokens of ../shared/data/enwiki_sample/wiki_00 with the
default encoder in fp32 (PyTorch's forward, not the shipped OpenVINO one) and with each int8 candidate:

* ``torch-dynamic``: PyTorch dynamic quantization of every Linear layer (per-channel qint8);
* ``onnxruntime``: the encoder exported to ONNX, fused by ONNX Runtime's BERT optimizer and
  dynamically quantized (per-channel int8 weights) by ``onnxruntime.quantization``.

For each it reports tokens/s (batches as ``npmcore.encoder.encode`` forms them; best of two
passes, fp32 measured between them) and ``overlap``: the mean share of the exact top-k
(inner product over all embedded tokens) that the candidate's vectors keep, for the
vectors of ``--queries`` random tokens. The last line is one JSON object.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from npmcore.corpus.ingest import ingest  # noqa: E402
from npmcore.encoder import encode, load_encoder, torch_forward  # noqa: E402
from npmcore.forward import Forward  # noqa: E402
from npmcore.snapshots import read_blocks  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from topk import overlap, top_k  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "enwiki_sample" / "wiki_00"


def onnx_forward(path: str) -> Forward:
    """An ONNX Runtime session as the forward ``encode`` runs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


def torch_dynamic_int8(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose Linear layers run int8 (PyTorch dynamic, per-channel qint8 weights)."""
    return torch.ao.quantization.quantize_dynamic(
        model, {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}, dtype=torch.qint8
    )


def export_onnx(model: torch.nn.Module, path: Path) -> Path:
    """The encoder's forward (ids, attention mask -> last hidden states) as an ONNX file, any batch and length."""

    class Hidden(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask):
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    dims = {0: "batch", 1: "tokens"}
    example = (torch.ones(2, 16, dtype=torch.long), torch.ones(2, 16, dtype=torch.long))
    torch.onnx.export(
        Hidden(model).eval(),
        example,
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["hidden"],
        dynamic_axes={"input_ids": dims, "attention_mask": dims, "hidden": dims},
        dynamo=False,
        opset_version=17,
    )
    return path


def onnx_int8(model, folder: Path) -> Forward:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    export_onnx(model, folder / "fp32.onnx")
    fused = optimize_model(
        str(folder / "fp32.onnx"),
        model_type="bert",
        num_heads=model.config.num_attention_heads,
        hidden_size=model.config.hidden_size,
    )
    fused.save_model_to_file(str(folder / "fused.onnx"))
    quantize_dynamic(
        str(folder / "fused.onnx"),
        str(folder / "int8.onnx"),
        weight_type=QuantType.QInt8,
        per_channel=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return onnx_forward(str(folder / "int8.onnx"))


def rate(model, tokenizer, sample: list[list[int]], forward: Forward) -> tuple[float, np.ndarray]:
    encode(model, tokenizer, sample[:4], forward=forward)  # warm-up
    start = time.perf_counter()
    vectors = np.concatenate(encode(model, tokenizer, sample, forward=forward))
    return sum(map(len, sample)) / (time.perf_counter() - start), vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--queries", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = ingest([str(DATA)], tmp)
        sample, total = [], 0
        for ids in (i for t in read_blocks(corpus, ["token_ids"]) for i in t.column("token_ids").to_pylist()):
            if total >= args.tokens:
                break
            sample.append(ids)
            total += len(ids)
        tokenizer, model = load_encoder()
        candidates = {
            "torch-dynamic": torch_forward(torch_dynamic_int8(model)),
            "onnxruntime": onnx_int8(model, Path(tmp)),
        }
        fp32_rates, (fp32_rate, fp32) = [], rate(model, tokenizer, sample, torch_forward(model))
        fp32_rates.append(fp32_rate)
        rates: dict[str, list[float]] = {name: [] for name in candidates}
        vectors = {}
        for _ in range(2):
            for name, candidate in candidates.items():
                r, vectors[name] = rate(model, tokenizer, sample, candidate)
                rates[name].append(r)
            fp32_rates.append(rate(model, tokenizer, sample, torch_forward(model))[0])
    queries = np.random.default_rng(0).choice(len(fp32), args.queries, replace=False)
    truth = top_k(fp32, queries, args.k)
    fp32_best = max(fp32_rates)
    result = {"tokens": total, "k": args.k, "fp32_tokens_per_s": round(fp32_best, 1)}
    for name in candidates:
        found = top_k(vectors[name], queries, args.k)
        agreement = overlap(found, truth)
        result[name] = {
            "tokens_per_s": round(max(rates[name]), 1),
            "speedup": round(max(rates[name]) / fp32_best, 3),
            "overlap": round(agreement, 4),
        }
        print(f"{name}: {max(rates[name]):,.0f} tokens/s, overlap {agreement:.3f}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
