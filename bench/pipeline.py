"""The main job against its unavoidable work: `npmcore demo` in a fresh store, timed by stage, beside the
bare encoder forward of the same corpus on the same machine.

Usage: python bench/pipeline.py [--store DIR] [--log FILE]

1. ``npmcore demo --store DIR`` as a user runs it (a subprocess; its output, not a terminal, goes to
   ``--log``): ``pipeline_s``. Its stages come from the MLflow runs it made: ``startup`` (to the
   parent run), ``ingest``, the index flow's ``embedding``, ``faiss`` and ``bm25`` (its ``seconds.*``
   metrics; ``plan`` holds its ``plan_seconds.*`` estimates) and the rest of ``index``, ``evaluate``
   (the index's end to the parent run's) and ``finish`` (the query, the story, shutting down);
   ``precision`` is the one the index flow embedded in (its ``auto`` resolved: ``npmcore.index.precision``).
2. The same command again, nothing changed: ``cached_s`` (every stage's output found).
3. Every block of the demo's corpus through the encoder in this process, batches as the datastore
   forms them (8,192 padded tokens): with torch in float32, the fixed reference (``forward_s``;
   ``ratio`` = pipeline_s / forward_s), and with the forward the datastore runs (OpenVINO on a CPU) in
   each precision this CPU computes (``forward_tokens_per_s_by_precision``: ``f32``, and ``bf16`` only
   on a CPU with AMX or AVX512_BF16; on any other OpenVINO takes the bf16 hint and computes in f32, so
   a bf16 figure would be the f32 forward again). ``runtime_tokens_per_s`` is the flow's precision's
   (``flow_vs_runtime`` is the flow's embedding rate over it). Their GFLOP/s
   count the batches' padded shapes (:func:`npmcore.encoder.forward_flops`); ``matmul_gflops`` is a
   4096 x 4096 float32 product's with numpy, torch and OpenVINO (and in bf16 with torch and OpenVINO where the
   CPU has the units), the practical ceiling of these cores.

Run it alone on the machine. The last line is one JSON object.
"""

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runs from a tree that is not installed

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import numpy as np  # noqa: E402

BIN = Path(sys.executable).parent


def run_demo(store: str, log: Path) -> tuple[float, float]:
    """``npmcore demo`` with its output appended to ``log``; returns its (start, seconds) on the wall clock."""
    with log.open("a") as out:
        start = time.time()
        subprocess.run([str(BIN / "npmcore"), "demo", "--store", store], check=True, stdout=out, stderr=out)
        return start, time.time() - start


def stages(store: str, start: float, seconds: float) -> tuple[dict[str, float], dict[str, float], str, str]:
    """Seconds per stage of the demo run that started at ``start`` (wall clock), the index plan's
    estimates, the corpus snapshot it indexed and the precision it embedded in, from its MLflow runs."""
    import mlflow

    from npmcore.tracking_store import tracking_uri

    mlflow.set_tracking_uri(tracking_uri(store))
    runs = mlflow.search_runs(experiment_names=["npm-pipeline"], output_format="list")
    parent = max((r for r in runs if r.info.run_name == "pipeline"), key=lambda r: r.info.start_time)
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    ingest, index = children["ingest"], children["index"]

    def span(run: object) -> float:
        return (run.info.end_time - run.info.start_time) / 1000

    metrics = index.data.metrics
    timed = {k.removeprefix("seconds."): v for k, v in metrics.items() if k.startswith("seconds.")}
    out = {
        "startup": parent.info.start_time / 1000 - start,
        "ingest": span(ingest),
        **timed,
        "index_other": span(index) - sum(timed.values()),
        "evaluate": (parent.info.end_time - index.info.end_time) / 1000,
        "finish": start + seconds - parent.info.end_time / 1000,
    }
    plan = {k.removeprefix("plan_seconds."): round(v, 1) for k, v in metrics.items() if k.startswith("plan_seconds.")}
    return {k: round(v, 1) for k, v in out.items()}, plan, parent.data.params["corpus"], index.data.params["precision"]


def forward_rates(corpus: str) -> dict[str, object]:
    """Every block of ``corpus`` through the default encoder here: torch's seconds in float32 and the
    shipped runtime's by precision (``runtime``), after one untimed pass over a slice (kernel selection,
    compiling)."""
    from npmcore.encoder import encode, encoder_config, fast_forward, forward_flops, load_encoder, torch_forward
    from npmcore.forward import BATCH_TOKENS, Forward, batch_order
    from npmcore.index.precision import cpu_flags, has_bf16_units
    from npmcore.snapshots import read_blocks

    sequences = [ids for table in read_blocks(corpus, ["token_ids"]) for ids in table.column("token_ids").to_pylist()]
    lengths = np.sort(np.fromiter(map(len, sequences), dtype=np.int64))[::-1]
    config = encoder_config()
    flops = sum(
        (b.stop - b.start) * int(lengths[b.start]) * forward_flops(config, int(lengths[b.start]))
        for b in batch_order(lengths, BATCH_TOKENS)
    )
    tokenizer, model = load_encoder()
    precisions = ("f32", "bf16") if has_bf16_units(cpu_flags()) else ("f32",)

    def seconds(forward: Forward) -> float:
        encode(model, tokenizer, sequences[:64], BATCH_TOKENS, forward)
        started = time.perf_counter()
        encode(model, tokenizer, sequences, BATCH_TOKENS, forward)
        return time.perf_counter() - started

    return {
        "tokens": int(lengths.sum()),
        "flops": flops,
        "torch": seconds(torch_forward(model)),
        "runtime": {p: seconds(fast_forward(model, p)) for p in precisions},
    }


def matmul_gflops(n: int = 4096, repeats: int = 5) -> dict[str, float]:
    """GFLOP/s of an (n, n) @ (n, n) product on all cores: in float32 with numpy (OpenBLAS), torch and OpenVINO;
    where the CPU has bf16 units also in bf16 with torch and OpenVINO (``torch_bf16``, ``openvino_bf16``)."""
    import openvino as ov
    import openvino.opset13 as ops
    import torch

    from npmcore.index.precision import cpu_flags, has_bf16_units

    a, b = (np.random.default_rng(i).random((n, n), dtype=np.float32) for i in (0, 1))
    x = ops.parameter([n, n], ov.Type.f32)

    def compiled(hint: str):
        config = {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": os.cpu_count()}
        config["ENABLE_CPU_PINNING"] = False
        return ov.Core().compile_model(ov.Model([ops.matmul(x, ops.constant(b), False, False)], [x]), "CPU", config)

    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    products = {"numpy": lambda: a @ b, "torch": lambda: ta @ tb, "openvino": functools.partial(compiled("f32"), a)}
    if has_bf16_units(cpu_flags()):
        ha, hb = ta.bfloat16(), tb.bfloat16()
        products |= {"torch_bf16": lambda: ha @ hb, "openvino_bf16": functools.partial(compiled("bf16"), a)}
    rates = {}
    for name, fn in products.items():
        fn()
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        rates[name] = round(repeats * 2 * n**3 / (time.perf_counter() - started) / 1e9, 1)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default=None, help="a fresh store folder (default: a temp dir)")
    parser.add_argument("--log", type=Path, default=Path("pipeline-bench.log"), help="the demo runs' output")
    args = parser.parse_args()
    args.log.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(args.store or Path(tmp) / "store").resolve())
        start, pipeline_s = run_demo(store, args.log)
        by_stage, plan, corpus, precision = stages(store, start, pipeline_s)
        _, cached_s = run_demo(store, args.log)
        forward = forward_rates(corpus)
    tokens, gflop, runtime = forward["tokens"], forward["flops"] / 1e9, forward["runtime"][precision]
    embed_rate = tokens / by_stage["embedding"]
    result = {
        "pipeline_s": round(pipeline_s, 1),
        "forward_s": round(forward["torch"], 1),
        "ratio": round(pipeline_s / forward["torch"], 3),
        "embed_tokens_per_s": round(embed_rate),
        "forward_tokens_per_s": round(tokens / forward["torch"]),
        "precision": precision,
        "forward_tokens_per_s_by_precision": {p: round(tokens / s) for p, s in forward["runtime"].items()},
        "runtime_tokens_per_s": round(tokens / runtime),
        "flow_vs_runtime": round(embed_rate * runtime / tokens, 3),
        "runtime_speedup": round(forward["torch"] / runtime, 3),
        "stages": by_stage,
        "plan": plan,
        "cached_s": round(cached_s, 1),
        "tokens": tokens,
        "forward_gflops": round(gflop / forward["torch"], 1),
        "runtime_gflops": round(gflop / runtime, 1),
        "matmul_gflops": matmul_gflops(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
