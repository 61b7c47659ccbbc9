"""Training: DDP equals one process on the same global batch (every objective); exact resume;
background masking equals inline masking; model FLOPs of a step; presets and overrides; bad input."""

import math
import subprocess
import sys
import threading
from contextlib import closing
from dataclasses import asdict, fields, replace
from itertools import count, islice

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import free_port
from typer.testing import CliRunner

import npmcore.model.train
from flows.cli import app
from npmcore.background import in_background
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.encoder import load_encoder, load_masked_lm, load_tokenizer, mlm_head
from npmcore.model.batching import iter_batches
from npmcore.model.checkpointing import CHECKPOINTS
from npmcore.model.loss import PreBatch
from npmcore.model.masking import MaskingConfig
from npmcore.model.step_batches import mask_batch, masked_batches, micro_batches, to_device
from npmcore.model.step_stats import model_size, step_flops
from npmcore.model.train import PREFETCH, average_gradients, batch_loss, main, train, training_model
from npmcore.model.train_config import PRESETS, TrainConfig, configure
from npmcore.storage import SnapshotError, list_snapshots

OBJECTIVES = {
    "npm": {},
    "npm-single": {"objective": "npm-single"},
    "mlm": {"objective": "mlm"},
    "npm+mlm": {"mlm_weight": 0.5},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, news_path) -> str:
    return ingest([news_path], str(tmp_path_factory.mktemp("corpus")), IngestConfig(max_tokens=64))


@pytest.fixture(scope="module")
def config(corpus, small_encoder) -> TrainConfig:
    return TrainConfig(
        corpus=corpus,
        encoder=small_encoder,
        steps=4,
        batch_size=4,
        warmup_steps=1,
        checkpoint_every=2,
        masking=MaskingConfig(),
    )


def global_batch(config: TrainConfig):
    batch = next(iter_batches(config.corpus, config.batch_size, config.seed))
    return mask_batch(batch, load_tokenizer(config.encoder), config, step=0, micro=0)


def masked_lm(config: TrainConfig):
    torch.manual_seed(0)  # the same fresh MLM head in every process
    return load_masked_lm(config.encoder)[1].eval()  # eval mode: no dropout, so ranks and the reference agree


def loss_and_grads(model, batch, config):
    model.zero_grad()
    loss, _ = batch_loss(model, batch, config)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _ddp_worker(rank: int, world: int, port: int, configs: dict[str, TrainConfig], out: str) -> None:
    """Each objective's loss and averaged gradients on two gloo ranks (one process pair for all)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        results = {}
        for objective, config in configs.items():
            model = masked_lm(config)
            loss, _ = loss_and_grads(model, global_batch(config), config)
            average_gradients(model, world)
            total = loss.clone()
            dist.all_reduce(total)
            results[objective] = {
                "loss": total / world,
                "grads": {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
            }
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def test_two_process_ddp_equals_one_process_for_every_objective(tmp_path, config):
    configs = {objective: replace(config, **change) for objective, change in OBJECTIVES.items()}
    out = tmp_path / "ddp.pt"
    mp.start_processes(_ddp_worker, args=(2, free_port(), configs, str(out)), nprocs=2, start_method="spawn")
    ddp = torch.load(out)
    model = masked_lm(config)
    for objective, objective_config in configs.items():
        batch = global_batch(objective_config)
        if batch.npm is not None:  # both ranks have spans
            assert set(batch.npm.span_seq.tolist()) >= {0, 3}
        if batch.mlm is not None:  # and MLM targets
            assert set((batch.mlm.positions // batch.mlm.input_ids.shape[1]).tolist()) >= {0, 3}
        loss, grads = loss_and_grads(model, batch, objective_config)
        assert ("cls.predictions.transform.dense.weight" in grads) == (
            batch.mlm is not None
        )  # the head learns with MLM only
        torch.testing.assert_close(ddp[objective]["loss"], loss, rtol=1e-5, atol=1e-6, msg=objective)
        assert ddp[objective]["grads"].keys() == grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(
                ddp[objective]["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=f"{objective} {name}"
            )


SLOW = pytest.mark.slow


# npm-single and mlm resume through the same code as npm (slow; their steps are checked in the DDP test)
@pytest.mark.parametrize("objective", ["npm", pytest.param("npm-single", marks=SLOW), pytest.param("mlm", marks=SLOW)])
def test_interrupted_and_resumed_training_equals_uninterrupted(tmp_path, config, objective):
    config = replace(config, **OBJECTIVES[objective])
    _, straight = train(config, str(tmp_path / "a"))
    train(config, str(tmp_path / "b"), stop_after=2)
    assert [m.counts["step"] for _, m in list_snapshots(str(tmp_path / "b"), CHECKPOINTS)] == [2]
    _, resumed = train(config, str(tmp_path / "b"))
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    _, untouched = load_encoder(config.encoder)
    trained = straight.base_model.state_dict()["embeddings.word_embeddings.weight"]
    assert not torch.equal(trained, untouched.state_dict()["embeddings.word_embeddings.weight"])


def assert_same_batches(got, expected) -> None:
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        for part in ("npm", "mlm"):
            x, y = getattr(a, part), getattr(b, part)
            assert (x is None) == (y is None), (i, part)
            for f in fields(x) if x is not None else ():
                assert torch.equal(getattr(x, f.name), getattr(y, f.name)), (i, part, f.name)


def test_background_masking_gives_the_inline_batches_and_losses(tmp_path, config, monkeypatch):
    config = replace(config, steps=2, grad_accum=2, mlm_weight=0.5, checkpoint_every=2)
    tokenizer = load_tokenizer(config.encoder)
    inline = micro_batches(config, 1)  # what the loop masked inline, from a resumed step on
    expected = [mask_batch(next(inline), tokenizer, config, step, micro) for step in (1, 2, 3) for micro in (0, 1)]
    with closing(in_background(masked_batches(config, tokenizer, 1), PREFETCH)) as background:
        assert_same_batches(list(islice(background, 6)), expected)

    def run(name: str) -> tuple[list, dict]:
        history = []
        _, model = train(config, str(tmp_path / name), on_step=history.append)  # the encoder's dropout: 0.1
        measured = [{k: v for k, v in asdict(s).items() if not k.endswith("_per_s")} for s in history]  # not timings
        return measured, model.state_dict()

    background_losses, background_weights = run("background")
    monkeypatch.setattr(npmcore.model.train, "in_background", lambda items, depth: items)  # masked in the loop
    inline_losses, inline_weights = run("inline")
    assert background_losses == inline_losses and len(inline_losses) == 2
    for name, tensor in inline_weights.items():
        assert torch.equal(background_weights[name], tensor), name


def test_in_background_keeps_the_order_raises_the_workers_error_and_stops():
    def numbers():
        yield from range(5)
        raise ValueError("no more numbers")

    items = in_background(numbers(), 2)
    assert [next(items) for _ in range(5)] == list(range(5))
    with pytest.raises(ValueError, match="no more numbers"):
        next(items)
    endless = in_background(count(), 2)
    assert next(endless) == 0
    endless.close()  # the worker, blocked on a full queue, stops
    assert not any(thread.name == "in-background" for thread in threading.enumerate())


def test_step_flops_counts_the_matrix_multiplications_of_a_step(config):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    config = replace(config, mlm_weight=0.5)
    batch = global_batch(config)
    _, model = load_masked_lm(config.encoder)  # the small BERT: the counts' formulas hold for any width
    size, d = model_size(model), model.config.hidden_size
    # forward and backward of each part on real tokens only; attention on the kernel made of matmuls the
    # counter sees (it does not count the fused CPU kernel)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        for ids, mask in [
            (batch.npm.input_ids, batch.npm.attention_mask),
            (batch.npm.masked_input_ids, batch.npm.masked_attention_mask),
            (batch.mlm.input_ids, batch.mlm.attention_mask),
        ]:
            for row, real in zip(ids, mask.bool(), strict=True):  # embedded outside: no dense embedding gradient
                embedded = model.base_model.embeddings.word_embeddings(row[real][None]).detach().requires_grad_()
                model.base_model(inputs_embeds=embedded).last_hidden_state.sum().backward()
        keys = torch.randn(int(batch.npm.attention_mask.sum()), d, requires_grad=True)
        queries = torch.randn(2 * batch.npm.span_seq.numel(), d, requires_grad=True)  # [MASKs] and [MASKe]
        (queries @ keys.T).sum().backward()
        mlm_head(model)(torch.randn(batch.mlm.positions.numel(), d, requires_grad=True)).sum().backward()
    assert step_flops(batch, size, "npm") == counter.get_total_flops() > 0


def test_corrupted_checkpoint_and_changed_config_are_refused(tmp_path, config):
    run = tmp_path / "run"
    train(config, str(run), stop_after=2)
    weights = next(run.glob(f"{CHECKPOINTS}/step-*/model.pt"))
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="checksum mismatch in model.pt"):
        train(config, str(run))
    weights.write_bytes(bytes(data[:-100]) + bytes([data[-100] ^ 0xFF]) + bytes(data[-99:]))
    with pytest.raises(ValueError, match="another config"):
        train(replace(config, lr=1e-3), str(run))


def test_bad_input(tmp_path, config, news_path):
    with pytest.raises(SnapshotError, match="manifest.json is missing"):
        train(replace(config, corpus=str(tmp_path / "nothing")), str(tmp_path / "run"))
    with pytest.raises(ValueError, match="multiple of grad_accum"):
        train(replace(config, grad_accum=3), str(tmp_path / "run"))
    long_blocks = ingest([news_path], str(tmp_path / "long"), IngestConfig(max_tokens=600))
    with pytest.raises(ValueError, match="more than the encoder's 512 positions"):
        train(replace(config, corpus=long_blocks), str(tmp_path / "run"))


def checkpoint_config(run) -> dict:
    ((_, manifest),) = list_snapshots(str(run), CHECKPOINTS)
    return manifest.config


@pytest.mark.slow
def test_torchrun_trains_on_two_processes_and_the_run_can_be_registered(tmp_path, config):
    """A preset with overrides: the overrides win, the preset fills the rest, warm-up keeps its share. Fast tests
    of the same: two processes train as one (test_two_process_ddp_equals_one_process_for_every_objective), a run
    registered (tests/test_flows.py test_train_flow_logs_metrics_and_registers_the_encoder), presets and overrides
    (test_main_applies_the_preset_then_the_overrides)."""
    run = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "npmcore.model.train",
        "--corpus",
        config.corpus,
        "--run-dir",
        str(run),
        "--preset",
        "cpu-quality",
        "--steps",
        "2",
        "--batch-size",
        "4",
    ]
    subprocess.run(command, check=True, timeout=300)
    saved = checkpoint_config(run)
    assert (saved["steps"], saved["batch_size"], saved["warmup_steps"]) == (2, 4, 0)
    assert saved["lr"] == PRESETS["cpu-quality"]["lr"] and saved["masking"]["content_words"]
    result = CliRunner().invoke(app, ["register", str(run), "--store", str(tmp_path), "--alias", "candidate"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "models:/npm-encoder/1"


def test_main_applies_the_preset_then_the_overrides(tmp_path, config, monkeypatch):
    for name, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    run = tmp_path / "run"
    main(
        [
            "--corpus",
            config.corpus,
            "--run-dir",
            str(run),
            "--preset",
            "cpu-mlm",
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--lr",
            "1e-4",
        ]
    )
    saved = checkpoint_config(run)
    assert (saved["objective"], saved["steps"], saved["batch_size"], saved["lr"]) == ("mlm", 2, 4, 1e-4)
    assert saved["warmup_steps"] == round(PRESETS["cpu-mlm"]["warmup_steps"] * 2 / PRESETS["cpu-mlm"]["steps"])


def test_configure_composes_presets_and_overrides(config):
    preset = PRESETS["cpu-quality"]
    quality = configure(config.corpus, "cpu-quality")
    assert (quality.steps, quality.warmup_steps, quality.lr) == (preset["steps"], preset["warmup_steps"], preset["lr"])
    assert quality.masking.content_words
    short = configure(config.corpus, "cpu-quality", steps=80, mask_ratio=0.2, objective=None)
    share = round(preset["warmup_steps"] * 80 / preset["steps"])  # the preset's share of the schedule
    assert (short.steps, short.warmup_steps, short.masking.ratio, short.objective) == (80, share, 0.2, "npm")
    assert short.masking.content_words and not short.masking.title_ngrams  # the preset's masking, ratio overridden
    assert configure(config.corpus, "cpu-quality", steps=80, warmup_steps=3).warmup_steps == 3
    with pytest.raises(
        ValueError, match="warmup_steps=100 with steps=100: the learning rate would never reach its peak"
    ):
        configure(config.corpus, "cpu-quality", steps=100, warmup_steps=100)
    with pytest.raises(ValueError, match="unknown preset 'gpu'"):
        configure(config.corpus, "gpu")
    with pytest.raises(ValueError, match="unknown training settings"):
        configure(config.corpus, "cpu-small", stepz=3)
    with pytest.raises(ValueError, match="mlm_weight"):
        configure(config.corpus, "cpu-mlm", mlm_weight=0.5)


@pytest.mark.parametrize(("preset", "dropout"), [("cpu-small", 0.0), ("paper", 0.1)])  # paper: the encoder's own
def test_a_run_starts_from_the_preset_dropout(config, preset, dropout):
    _, model = training_model(configure(config.corpus, preset))
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {dropout}


# CPU autocast is emulated and slow here: one step each; fp16 (GradScaler) is in the slow suite
@pytest.mark.parametrize("amp", ["bf16", pytest.param("fp16", marks=pytest.mark.slow)])
def test_mixed_precision_training_runs(tmp_path, config, amp):
    """The autocast + GradScaler path (GPU defaults), exercised with CPU autocast."""
    losses = []
    config = replace(config, steps=1, warmup_steps=0, amp=amp)
    _, model = train(config, str(tmp_path / amp), on_step=lambda s: losses.append(s.loss))
    assert len(losses) == 1 and all(torch.isfinite(torch.tensor(losses)))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_export_writes_fp16_weights_with_the_tokenizer_unchanged(tmp_path, config):
    from safetensors.torch import load_file

    from npmcore.encoder import encoder_fingerprint, tokenizer_fingerprint
    from npmcore.model.checkpointing import checkpoint_steps
    from npmcore.model.trained import load_trained

    run = str(tmp_path / "run")
    _, trained = train(config, run)
    assert checkpoint_steps(run) == [2, 4]
    runner = CliRunner()
    out = runner.invoke(app, ["export", run, "--out", str(tmp_path / "enc")])
    assert out.exit_code == 0, out.output
    saved = load_file(tmp_path / "enc" / "model.safetensors")
    assert {t.dtype for t in saved.values()} == {torch.float16}
    tokenizer, exported = load_encoder(str(tmp_path / "enc"))
    assert tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(load_tokenizer(config.encoder))
    _, with_head = load_masked_lm(str(tmp_path / "enc"))
    for name, tensor in trained.state_dict().items():  # the exported weights are the trained ones, rounded to fp16
        assert torch.equal(with_head.state_dict()[name], tensor.half().float()), name
    assert (
        exported.state_dict().keys() == trained.base_model.state_dict().keys()
    )  # the encoder alone, no head, no pooler
    _, initial, _ = load_trained(run, 0)  # step 0: the encoder the run started from
    assert encoder_fingerprint(initial.base_model) == encoder_fingerprint(load_encoder(config.encoder)[1])
    missing = runner.invoke(app, ["export", run, "--out", str(tmp_path / "other"), "--step", "3"])
    assert missing.exit_code == 2 and "no checkpoint of step 3" in missing.output and not (tmp_path / "other").exists()


def test_pre_batch_negatives_and_rare_spans_train_and_are_logged(tmp_path, config):
    """Keys of earlier batches join the loss from the second step on; the masking logs its rare-span share."""
    steps: list = []
    boosted = replace(config, prebatch=2, masking=MaskingConfig(rare_boost=4.0))
    train(boosted, str(tmp_path / "run"), on_step=steps.append)
    assert [s.step for s in steps] == [1, 2, 3, 4] and all(math.isfinite(s.loss) for s in steps)
    assert all(0 <= s.rare_spans <= 1 and 0 <= s.rare_positives <= 1 for s in steps)
    model, batch = masked_lm(config), to_device(global_batch(config), torch.device("cpu"))
    prebatch = PreBatch(1)
    with torch.no_grad():
        first, _ = batch_loss(model, batch, boosted, prebatch)  # nothing earlier: the plain loss
        plain, _ = batch_loss(model, batch, config)
        second, _ = batch_loss(model, batch, boosted, prebatch)  # the same keys again, as negatives
    assert torch.equal(first, plain) and second > first
    with pytest.raises(ValueError, match="prebatch"):
        replace(config, objective="mlm", prebatch=1)
