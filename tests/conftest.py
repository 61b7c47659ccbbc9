import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cpu import pretend_flags, pretended_cpu, test_cpu_flags

from npmcore.runtime import configure_environment

configure_environment()
if "PYTEST_XDIST_WORKER" in os.environ:  # make test: two workers on two cores, one thread each (and their children)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def prefect_logging() -> None:
    """Prefect's logging set up once, on the session's streams: set up inside a CliRunner call (the first flow
    a test module runs), its console handler would keep that call's stream, and print Prefect's lines into the
    output of the commands after it (or fail on the stream, closed)."""
    from prefect.logging.configuration import setup_logging

    setup_logging()


@pytest.fixture(scope="session", autouse=True)
def test_cpu() -> Iterator[None]:
    """``NPM_TEST_CPU=avx2``: the whole session runs as on an AVX2-only CPU (tests/cpu.py), its session and module
    fixtures too (an NPM a module shares resolves its precision as its tests do)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        if pretended_cpu():
            pretend_flags(monkeypatch, test_cpu_flags())
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """xdist groups (``--dist loadgroup``): a module's tests run on one worker, so that its module
    fixtures are built once; every test of the shared news index runs on one worker too."""
    for item in items:
        uses_news = "news_store" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("news_store" if uses_news else item.nodeid.split("::")[0]))


ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the environment's commands: prefect, npmcore, dask
SHARED_DATA = ROOT.parent / "shared" / "data"
PYWB = ROOT / "tests" / "data" / "pywb"  # real crawler output from pywb's wheel (its README.md)
NEWS_ARTICLES = 60  # Lee news articles in the shared index (about 15k tokens)
NEWS_PARTITION_MB = 0.025  # several corpus shards, so that merging and resuming have something to do


@pytest.fixture(scope="session", autouse=True)
def dask_scheduler() -> Iterator[str]:
    """One local Dask cluster per test process, its two workers warm (their imports done once), exported as
    ``DASK_SCHEDULER_ADDRESS`` as an operator's shell would: every flow and command given no scheduler uses it
    instead of starting one of its own (several seconds of worker start-up each). Tests of the local cluster
    itself (tests/test_dask_cluster.py, test_flows.py) start their own."""
    from npmcore.cluster import local_cluster

    with local_cluster(2) as cluster:
        os.environ["DASK_SCHEDULER_ADDRESS"] = cluster.scheduler_address
        try:
            yield cluster.scheduler_address
        finally:
            del os.environ["DASK_SCHEDULER_ADDRESS"]


@pytest.fixture(scope="session")
def tokenizer():
    from npmcore.encoder import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def default_inputs() -> list[str]:
    from npmcore.corpus.readers import default_corpus

    return default_corpus()


@pytest.fixture(scope="session")
def dump_path(default_inputs) -> str:
    return default_inputs[0]


@pytest.fixture(scope="session")
def dump_documents(dump_path, tmp_path_factory, worker_id) -> dict[str, str]:
    """Title -> plain text of every article of the embedded dump, as the ingest writes it: parsed once a session
    (7-11 s here), the xdist workers sharing the parse through a file in the session's folder."""
    from filelock import FileLock

    from npmcore.corpus.readers import iter_wiki_pages, wiki_documents

    def parse() -> dict[str, str]:
        pages, prefixes = [], frozenset()
        for page, prefixes, _ in iter_wiki_pages(dump_path):
            pages.append(page)
        return {doc.title: doc.text for doc in wiki_documents(pages, prefixes, "dump")}

    if worker_id == "master":  # no workers: nothing to share
        return parse()
    shared = tmp_path_factory.getbasetemp().parent / "dump-documents.json"  # the session's, above each worker's
    with FileLock(f"{shared}.lock"):
        if not shared.exists():
            partial = shared.with_suffix(".tmp")
            partial.write_text(json.dumps(parse()))
            partial.rename(shared)
        return json.loads(shared.read_text())


@pytest.fixture(scope="session")
def news_path(default_inputs) -> str:
    return default_inputs[1]


@pytest.fixture(scope="session")
def news_lines(news_path) -> list[str]:
    with open(news_path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


@pytest.fixture(scope="session")
def bpe_tokenizer(news_lines):
    """A byte-level BPE (RoBERTa style) trained on the real news text: nothing is downloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(news_lines, trainer)
    return tok


@pytest.fixture(scope="session")
def roberta_tokenizer(bpe_tokenizer):
    """``bpe_tokenizer`` as a RoBERTa tokenizer: ``<s> … </s>`` and mask token ``<mask>``."""
    import json

    from transformers import RobertaTokenizerFast

    merges = json.loads(bpe_tokenizer.to_str())["model"]["merges"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]
    return RobertaTokenizerFast(vocab=bpe_tokenizer.get_vocab(), merges=merges, model_max_length=512)


@pytest.fixture(scope="session")
def small_encoder(tmp_path_factory) -> str:
    """MiniLM-L6's tokenizer on a BERT of 2 layers 64 wide with an MLM head, randomly initialised, for tests of
    training's mechanics (two processes equal one, an exact resume, a campaign's schedule), which hold at any size:
    a small share of MiniLM's compute. Tests of what a preset or the shipped encoder gives train MiniLM itself."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from npmcore.encoder import base_encoder_path, load_tokenizer

    path = tmp_path_factory.mktemp("small-encoder")
    tokenizer = load_tokenizer(base_encoder_path())
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **shape)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def enwiki_shard() -> str:
    path = SHARED_DATA / "enwiki_sample" / "wiki_00"
    assert path.exists(), f"test data missing: {path} (the shared data folder must sit beside the repository)"
    return str(path)


@pytest.fixture(scope="session")
def simplewiki_shard() -> str:
    """The first file of Simple English Wikipedia (WikiExtractor --json), unpacked once into the cache."""
    from npmcore.evaluation.dumps import simple_wikipedia

    return str(simple_wikipedia() / "AA" / "wiki_00")


@pytest.fixture(scope="session")
def roberta_dir(tmp_path_factory, roberta_tokenizer) -> str:
    """A local directory holding a tiny RoBERTa tokenizer + randomly initialised model."""
    path = tmp_path_factory.mktemp("tiny-roberta")
    tokenizer = roberta_tokenizer
    assert tokenizer.mask_token == "<mask>"
    tokenizer.save_pretrained(path)
    import torch
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=514,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    RobertaModel(config).save_pretrained(path)
    return str(path)


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(env: dict, path: str, body: dict | None = None) -> object:
    """A request to the Prefect server's REST API (POST with a JSON body, else GET)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{env['PREFECT_API_URL']}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout_s:g} s"
        time.sleep(1)
    return found


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory) -> Iterator[dict]:
    """One `prefect server start` for the session, on a free port with a home of its own: the flows
    this process runs report to it, and the deployment tests drive it with the environment it yields
    (the CLI, workers), as an operator's shell would hold it."""
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {
        **os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "true", "NPM_PROJECT_DIR": str(ROOT),
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",  # the default minute is the test's whole budget
    }  # fmt: skip
    with (home / "server.log").open("wb") as log:
        server = subprocess.Popen(
            [BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: _healthy(env), 120, "the Prefect server answers /api/health")
        with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
            try:
                yield env
            finally:  # the flows' logs reach the server before it stops
                APILogWorker.drain_all()
    finally:
        stop(server, 30)


def stop(process: subprocess.Popen, grace_s: float = 60) -> None:
    """SIGTERM a process group started with ``start_new_session``; SIGKILL it if it is still there after
    ``grace_s`` (a Prefect worker hit while its flow run's process exits can hang in its shutdown)."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _healthy(env: dict) -> bool:
    try:
        return api(env, "/health") is True
    except OSError:
        return False


def prefect(env: dict, *args: str) -> str:
    result = subprocess.run([BIN / "prefect", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def run_training_deployment(env: dict, who: str) -> tuple[str, dict]:
    """Run the train deployment as from the UI (2 cpu-small steps, promoted) and wait until ``who``
    (a worker, a serving process) ends it; returns the flow run's id and final state."""
    params = {"preset": "cpu-small", "steps": 2, "batch_size": 4, "promote": True}
    out = prefect(env, "deployment", "run", "train_encoder/train", "--param", f"params={json.dumps(params)}")
    run_id = next(line.split()[-1] for line in out.splitlines() if "UUID" in line)
    final = wait_for(
        lambda: (
            (run := api(env, f"/flow_runs/{run_id}"))["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED") and run
        ),
        600,
        f"{who} finishes the training run",
    )
    return run_id, final["state"]


def kill_once(script: str, folder: Path, pattern: str, timeout_s: float = 300) -> None:
    """Run ``script`` in a new Python process and SIGKILL it as soon as a file matching
    ``pattern`` appears under ``folder`` (fails if the process ends first)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from npmcore.runtime import configure_environment; configure_environment()\n" + script]
    )
    try:
        deadline = time.time() + timeout_s
        while not list(folder.glob(pattern)):
            assert proc.poll() is None and time.time() < deadline, f"the process ended before {pattern} appeared"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()


@dataclass(frozen=True)
class NewsStore:
    raw: str  # the input file: NEWS_ARTICLES Lee news articles, one per line
    store: str
    corpus: str
    datastore: str
    index: str  # Flat, with BM25


@pytest.fixture(scope="session")
def news_store(tmp_path_factory, news_lines, prefect_server) -> NewsStore:
    """The shared index of the inference, evaluation, CLI and S3 tests: the news articles ingested
    and indexed by the flows, their shards embedded on the session's local Dask cluster of two workers."""
    from flows.index import IndexParams, index_corpus
    from flows.ingest import ingest_corpus
    from flows.params import ClusterParams, IngestParams
    from npmcore.cluster import dask_cluster
    from npmcore.snapshots import open_index

    raw = tmp_path_factory.mktemp("raw") / "news.txt"
    raw.write_text("\n".join(news_lines[:NEWS_ARTICLES]) + "\n")
    store = str(tmp_path_factory.mktemp("news-store"))
    with dask_cluster(os.environ["DASK_SCHEDULER_ADDRESS"]) as address:
        cluster = ClusterParams(dask_address=address)
        corpus = ingest_corpus(
            IngestParams(inputs=[str(raw)], store=store, partition_mb=NEWS_PARTITION_MB, cluster=cluster)
        )
        # f32 on every machine: its vectors are compared with torch's float32 forward (bf16: tests/test_precision.py)
        index = index_corpus(IndexParams(store=store, corpus=corpus, factory="Flat", precision="f32", cluster=cluster))
    return NewsStore(str(raw), store, corpus, open_index(index).datastore, index)
