"""Many machines for real: hosts that share nothing but a network and an S3 store (Linux namespaces,
tests/hosts.py), running the commands of docs/operate.md's "Many machines" section as they are written."""

import bz2
import json
import re
import shlex
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT
from hosts import DISK, KEPT, SUBNET, Host, Network, unavailable

OPERATE = ROOT / "docs" / "operate.md"
HOSTS = ["s3", "mlflow", "scheduler", "worker-a", "worker-b", "worker-c", "driver", "solo", "api"]
SECRETS = {"AWS_ACCESS_KEY_ID": "npm-hosts-test", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret"}
# The test's S3 clients give up sooner than npmcore's defaults (npmcore.storage.S3_CLIENT): shortened, not bypassed
SHORT_RETRIES = (
    '{"config_kwargs": {"connect_timeout": 2, "read_timeout": 5, "retries": {"mode": "standard", "max_attempts": 4}}}'
)
OUTAGE_S = 4
ROLES = {"scheduler": "scheduler", "worker-a": "worker", "worker-b": "worker", "worker-c": "worker", "driver": "client"}
ARTICLES = 40  # dump pages of the sample: corpus shards of 4 pages, a few seconds of embedding each
QUERY = "An adventure is an exciting or unusual [MASK]."  # article "Adventure" of the sample, masked

needs_namespaces = pytest.mark.skipif(bool(reason := unavailable()), reason=reason or "")


@dataclass(frozen=True)
class Block:
    hosts: tuple[str, ...]
    lines: tuple[str, ...]  # its commands, continuation lines joined


def blocks(path: Path = OPERATE) -> list[Block]:
    """The bash blocks of the "Many machines" section, each with the hosts its ``<!-- host(s): … -->`` names."""
    section = path.read_text().split("\n## Many machines\n", 1)[1].split("\n## ", 1)[0]
    found = []
    for hosts, body in re.findall(r"^<!-- hosts?: ([^>]*) -->\n```bash\n(.*?)^```", section, flags=re.S | re.M):
        lines = tuple(line.strip() for line in body.replace("\\\n", " ").splitlines() if line.strip())
        found.append(Block(tuple(hosts.split()), lines))
    return found


class Runbook:
    """docs/operate.md's blocks as a host's commands: its ``export`` lines, then a named line or block.
    Remembers what it handed out, so that the test can tell that it ran every line."""

    def __init__(self):
        self.blocks = blocks()
        self.used: set[str] = set()

    def environment(self, host: str) -> str:
        """The ``export`` lines of the blocks that name ``host``."""
        lines = [line for b in self.blocks if host in b.hosts for line in b.lines if line.startswith("export ")]
        self.used.update(lines)
        return "\n".join(lines)

    def command(self, host: str, start: str) -> str:
        """The one line for ``host`` that starts with ``start``."""
        (line,) = {x for b in self.blocks if host in b.hosts for x in b.lines if x.startswith(start)}
        self.used.add(line)
        return line

    def line(self, host: str, start: str) -> str:
        """The one line for ``host`` that starts with ``start``, after the host's environment."""
        return self.script(host, self.command(host, start))

    def script(self, host: str, command: str) -> str:
        """``command`` (not the runbook's) after the host's environment."""
        return f"{self.environment(host)}\n{command}"

    def unused(self) -> set[str]:
        return {line for b in self.blocks for line in b.lines} - self.used


def sample_dump(dump_path: str, first: int, end: int) -> str:
    """Articles ``first`` to ``end`` of the embedded dump sample, as a dump of their own."""
    xml = bz2.open(dump_path, "rt", encoding="utf-8").read()
    head = xml[: xml.index("<page>")]
    pages = [p for p in re.findall(r"<page>.*?</page>", xml, flags=re.S) if "#REDIRECT" not in p and len(p) < 20_000]
    return head + "".join(pages[first:end]) + "</mediawiki>\n"


def python(site: "Site", name: str, code: str, timeout_s: float = 120) -> str:
    """Run Python ``code`` on host ``name``, in its environment; returns its last line of output."""
    host = site.hosts[name]
    output = succeeded(host.run(site.runbook.script(name, f"python -c {shlex.quote(code)}"), site.env[name], timeout_s))
    return output.strip().splitlines()[-1] if output.strip() else ""


def wait_for(host: Host, env: dict, name: str, port: int, timeout_s: float = 120) -> None:
    """Until ``name:port`` accepts connections, as seen from ``host``."""
    script = f"until (exec 3<>/dev/tcp/{name}/{port}) 2>/dev/null; do sleep 0.2; done"
    result = host.run(f"timeout {timeout_s} bash -c {shlex.quote(script)}", env, timeout_s + 10)
    assert result.returncode == 0, f"{name}:{port} did not answer {host.name} within {timeout_s} s"


def wait_for_log(host: Host, log: str, pattern: str, timeout_s: float = 180) -> str:
    """Until ``pattern`` occurs in a log of ``host`` (whose command is its newest process); returns the log."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = host.log(log)
        if re.search(pattern, text):
            return text
        assert time.monotonic() < deadline, f"{host.name}: no {pattern!r} in {log} within {timeout_s} s:\n{text}"
        assert host.processes[-1].poll() is None, f"{host.name}: the command ended:\n{text}"
        time.sleep(0.2)


def comparable(files: dict[str, dict]) -> dict[str, object]:
    """A manifest's files as two builds of the same input must agree on them: every sha256, but only the sizes
    of BM25's files (Lucene writes a random segment id into each)."""
    return {path: entry["bytes"] if path.startswith("bm25/") else entry for path, entry in files.items()}


def succeeded(result) -> str:
    """The output of a command that must have succeeded."""
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def last_line(result) -> str:
    return succeeded(result).strip().splitlines()[-1]


@dataclass
class Site:
    network: Network
    hosts: dict[str, Host]
    runbook: Runbook
    env: dict[str, dict[str, str]]  # per host: what the test gives it beyond the runbook (secrets, role)


@pytest.fixture
def site(tmp_path) -> Iterator[Site]:
    runbook = Runbook()
    credentialed = {h for b in runbook.blocks for h in b.hosts if any("AWS_ENDPOINT_URL" in x for x in b.lines)}
    env = {
        name: {
            "FSSPEC_S3": SHORT_RETRIES,
            **(SECRETS if name in credentialed or name == "solo" else {}),
            **({"ROLE": ROLES[name]} if name in ROLES else {}),
        }
        for name in HOSTS
    }
    with Network(tmp_path / "hosts", HOSTS) as network:
        hosts = {name: network.host(name) for name in HOSTS}
        yield Site(network, hosts, runbook, env)


def start_services(site: Site) -> None:
    """S3, MLflow, the Dask scheduler and two workers, each on its host, as the runbook starts them."""
    h, rb, env = site.hosts, site.runbook, site.env
    last_line(h["driver"].run(rb.line("driver", "npmcore dask-certs"), env["driver"]))
    for name in ROLES.keys() - {"driver"}:  # copied to each Dask host by whoever runs them
        shutil.copytree(h["driver"].disk / "certs", h[name].disk / "certs", dirs_exist_ok=True)
    h["s3"].start(rb.line("s3", "moto_server"), env["s3"], "service.log")
    h["scheduler"].start(rb.line("scheduler", "dask scheduler"), env["scheduler"], "service.log")
    wait_for(h["driver"], {}, "s3", 9000)
    python(site, "driver", "import s3fs; s3fs.S3FileSystem().mkdir('npm')")  # the bucket, made once
    h["mlflow"].start(rb.line("mlflow", "mlflow server"), env["mlflow"], "service.log")
    for name in ("worker-a", "worker-b"):
        h[name].start(rb.line(name, "dask worker"), env[name], "service.log")
    wait_for(h["driver"], {}, "mlflow", 5000, timeout_s=180)
    for name in ("worker-a", "worker-b"):
        wait_for_log(h[name], "service.log", "Registered to")


@pytest.mark.slow
@pytest.mark.timeout(1500)  # 11 min on two shared cores, the outages' retries included
@needs_namespaces
def test_the_whole_job_across_hosts_equals_one_machine(site, dump_path):
    h, rb, env = site.hosts, site.runbook, site.env
    (h["driver"].disk / "sample.xml").write_text(sample_dump(dump_path, 0, ARTICLES), encoding="utf-8")
    # a later dump with more articles: the whole embedded one (106), whose ingest lasts until S3 is unplugged
    (h["driver"].disk / "more.xml").write_bytes(bz2.open(dump_path).read())
    start_services(site)
    python(site, "driver", f"import s3fs; s3fs.S3FileSystem().put('{DISK}/sample.xml', 'npm/dumps/sample.xml')")
    # a third worker host, without S3 credentials, has joined: the first command refuses it
    h["worker-c"].start(rb.line("worker-a", "dask worker"), env["worker-c"], "service.log")
    wait_for_log(h["worker-c"], "service.log", "Registered to")
    ingested = h["driver"].run(rb.line("driver", "npmcore ingest"), env["driver"], 600)
    corpus = last_line(ingested)
    assert corpus.startswith("s3://npm/store/corpus/"), corpus
    refusal = "refused: cannot access the store at s3://npm/store: Unable to locate credentials"
    assert len(re.findall(refusal, ingested.stderr)) == 1, ingested.stderr
    assert h["worker-c"].processes[0].wait(timeout=60) == 0  # the worker and its nanny closed
    assert len(re.findall(refusal, h["worker-c"].log("service.log"))) == 1

    # a file on the driver's disk only is refused, naming it, before any worker tries to read it
    (h["driver"].disk / "notes.txt").write_text("A note that only the driver's disk holds.\n")
    local = h["driver"].run(
        rb.line("driver", "npmcore ingest").replace("s3://npm/dumps/sample.xml", "~/notes.txt"), env["driver"]
    )
    assert local.returncode == 2, local.stderr
    assert f"error: {DISK}/notes.txt is not on the machines of the Dask workers tls://" in local.stderr, local.stderr

    # training on two hosts, one process each, equal to one process on the same global batches
    trainers = [
        h[name].start(rb.line(name, "torchrun"), {**env[name], "NODE_RANK": str(rank), "CORPUS": corpus}, "train.log")
        for rank, name in enumerate(["worker-a", "worker-b"])
    ]
    for trainer in trainers:
        trainer.wait(timeout=600)
    assert [t.returncode for t in trainers] == [0, 0], h["worker-a"].log("train.log") + h["worker-b"].log("train.log")
    one = rb.command("worker-a", "torchrun").split(" -m ")[1].replace("two-hosts", "one-process")
    single = f"torchrun --standalone --nproc-per-node 1 -m {one.replace('$CORPUS', corpus)}"
    succeeded(h["driver"].run(rb.script("driver", single), env["driver"], 600))
    difference = json.loads(python(site, "driver", TRAINED_DIFFERENCE))
    assert difference["steps"] == [2, 2] and difference["same_weights"]
    # Adam's first step moves a weight by at most the learning rate (2.5e-5 here, the second step's is 0): two
    # hosts that split the batch wrongly or skip averaging differ by that much; float sums in another order, by less
    assert difference["max_difference"] < 2.5e-5 / 4, difference
    model = last_line(h["driver"].run(rb.line("driver", "npmcore register"), env["driver"], 600))
    assert model == "models:/npm-encoder/1"
    artifacts = python(
        site, "driver", "import s3fs; print(len(s3fs.S3FileSystem().glob('npm/mlartifacts/**/*.safetensors')))"
    )
    assert int(artifacts) >= 1  # the registered weights live on S3, behind the MLflow server

    # the index, while a worker host dies mid-embedding
    indexing = h["driver"].start(rb.line("driver", "npmcore index"), env["driver"], "index.log")
    wait_for_log(h["driver"], "index.log", r"embedding: [\d,]+ of")
    h["worker-b"].kill()
    at_kill = json.loads(python(site, "driver", MARKERS))
    site.network.unplug("s3")  # and the store is gone for a few seconds: the requests' retries ride it out
    time.sleep(OUTAGE_S)
    site.network.plug("s3")
    assert indexing.wait(timeout=900) == 0, h["driver"].log("index.log")
    index = h["driver"].log("index.log").strip().splitlines()[-1]
    assert index.startswith("s3://npm/store/index/"), index
    markers = json.loads(python(site, "driver", MARKERS))
    shards = int(
        python(
            site,
            "driver",
            f"from npmcore.storage import open_snapshot; print(open_snapshot({corpus!r}).counts['shards'])",
        )
    )
    assert 0 < len(at_kill) < len(markers) == shards, (at_kill, markers)
    assert {k: markers[k] for k in at_kill} == at_kill  # what was finished was not done again

    # the same input on one machine (a local store, a local Dask cluster) gives the same snapshots
    solo = rb.script("api", "export MLFLOW_TRACKING_URI=http://mlflow:5000 NPM_STORE=$HOME/store")  # S3, no Dask
    local_corpus = last_line(h["solo"].run(f"{solo}\n{rb.command('driver', 'npmcore ingest')}", env["solo"], 600))
    local_index = last_line(h["solo"].run(f"{solo}\n{rb.command('driver', 'npmcore index')}", env["solo"], 900))
    remote = json.loads(python(site, "driver", f"{SNAPSHOTS}\nprint(json.dumps(snapshots({index!r})))"))
    local = json.loads(python(site, "solo", f"{SNAPSHOTS}\nprint(json.dumps(snapshots({local_index!r})))"))
    assert local_corpus.rsplit("/", 1)[1] == corpus.rsplit("/", 1)[1]
    for kind in ("corpus", "datastore", "index"):
        assert remote[kind]["id"] == local[kind]["id"], kind
        assert comparable(remote[kind]["files"]) == comparable(local[kind]["files"]), kind

    last_line(h["driver"].run(rb.line("driver", "npmcore eval"), {**env["driver"], "INDEX": index}, 900))
    last_line(h["driver"].run(rb.line("driver", "npmcore serving set"), {**env["driver"], "INDEX": index}, 300))
    h["api"].start(rb.line("api", "NPM_API_TOKEN"), {**env["api"], "TOKEN": "hosts-test-token"}, "service.log")
    answer = json.loads(python(site, "driver", ASK_API, timeout_s=400))
    local_answer = json.loads(
        last_line(
            h["solo"].run(solo + f"\nnpmcore query --index {local_index} --json {shlex.quote(QUERY)}", env["solo"], 600)
        )
    )
    assert [(a["text"], round(a["score"], 4)) for a in answer["results"][0]["answers"]] == [
        (a["text"], round(a["score"], 4)) for a in local_answer[0]["answers"]
    ]
    # a longer outage fails the command, after its retries, with one clear line and no snapshot
    python(site, "driver", f"import s3fs; s3fs.S3FileSystem().put('{DISK}/more.xml', 'npm/dumps/more.xml')")
    more = rb.line("driver", "npmcore ingest").replace("sample.xml", "more.xml")
    ingesting = h["driver"].start(more, env["driver"], "more.log")
    wait_for_log(h["driver"], "more.log", r"ingesting: [\d,]+ of")  # a first shard written, the others to come
    site.network.unplug("s3")
    try:
        assert ingesting.wait(timeout=600) == 2, h["driver"].log("more.log")
    finally:
        site.network.plug("s3")
    (error,) = [line for line in h["driver"].log("more.log").splitlines() if line.startswith("error:")]
    assert (
        error.startswith("error: the S3 store stopped answering, retries included: ") and "http://s3:9000/npm/" in error
    )
    corpora = python(
        site,
        "driver",
        "from npmcore.storage import list_snapshots; print([u for u, _ in list_snapshots('s3://npm/store', 'corpus')])",
    )
    assert corpora == str([corpus])
    assert not rb.unused(), rb.unused()


TRAINED_DIFFERENCE = """
import json, fsspec, torch
from npmcore.model.checkpointing import newest_checkpoint
found = [newest_checkpoint(f"s3://npm/store/runs/{name}") for name in ("two-hosts", "one-process")]
states = []
for url, manifest in found:
    with fsspec.open(url + "/model.pt", "rb") as f:
        states.append(torch.load(f, map_location="cpu"))
diff = max((states[0][k].float() - states[1][k].float()).abs().max().item() for k in states[1])
steps = [m.counts["step"] for _, m in found]
print(json.dumps({"steps": steps, "max_difference": diff, "same_weights": sorted(states[0]) == sorted(states[1])}))
"""
MARKERS = """
import json, s3fs
found = s3fs.S3FileSystem().glob("npm/store/datastore/*/shards/*.json", detail=True)
print(json.dumps({k: str(v["LastModified"]) for k, v in found.items()}))
"""
SNAPSHOTS = """
import json
from dataclasses import asdict
from npmcore.snapshots import open_index
from npmcore.storage import open_snapshot
def snapshots(index):
    urls = {"index": index, "datastore": open_index(index).datastore}
    urls["corpus"] = open_snapshot(urls["datastore"]).inputs[0]["corpus"]
    manifests = {kind: open_snapshot(url) for kind, url in urls.items()}
    return {k: {"id": m.id, "files": {f: asdict(e) for f, e in m.files.items()}} for k, m in manifests.items()}
"""
ASK_API = f"""
import json, time, urllib.request
deadline = time.monotonic() + 300
while True:  # until the service has loaded the index
    try:
        if urllib.request.urlopen("http://api:8000/readyz", timeout=5).status == 200:
            break
    except OSError:
        pass
    assert time.monotonic() < deadline, "the API never became ready"
    time.sleep(1)
request = urllib.request.Request("http://api:8000/v1/predict", data=json.dumps({{"queries": [{QUERY!r}]}}).encode(),
    headers={{"Authorization": "Bearer hosts-test-token", "Content-Type": "application/json"}})
print(json.dumps(json.load(urllib.request.urlopen(request, timeout=120))))
"""


@needs_namespaces
def test_hosts_share_nothing_but_the_network(tmp_path):
    """The fast sibling: what the slow test relies on about its hosts, and the runbook it runs."""
    with Network(tmp_path / "hosts", ["one", "two"]) as network:
        one, two = network.host("one"), network.host("two")
        secret = tmp_path / "driver-only"
        secret.write_text("the test's own file")
        server = two.start("exec python -m http.server 8000 --bind two", {}, "http.log")
        wait_for(one, {}, "two", 8000)
        fetch = "import urllib.request; print(urllib.request.urlopen('http://two:8000/', timeout=5).status)"
        assert last_line(one.run(f"python -c {shlex.quote(fetch)}", {})) == "200"
        checkout = shlex.quote(str(ROOT / "x"))
        seen = one.run(f"hostname; ls -A /tmp; test -e {secret} || echo hidden; touch {checkout} 2>&1 || true", {})
        kept = sorted({Path(p).relative_to("/tmp").parts[0] for p in KEPT})  # a checkout in /tmp: its folder
        # its name; a /tmp that holds nothing of the test's but what it keeps; the test's files hidden
        assert succeeded(seen).splitlines()[: 2 + len(kept)] == ["one", *kept, "hidden"]
        assert "Read-only file system" in seen.stdout  # the checkout, at its own path
        assert succeeded(one.run("ip route", {})).split()[0] == f"{SUBNET}.0/24"  # no way out but the test's net
        assert len(succeeded(one.run("ip route", {})).splitlines()) == 1
        succeeded(one.run("touch ~/mine", {}))
        assert (one.disk / "mine").exists() and not (two.disk / "mine").exists()  # its home is its own disk
        network.unplug("two")
        assert one.run(f"timeout 3 python -c {shlex.quote(fetch)}", {}).returncode != 0
        network.plug("two")
        assert last_line(one.run(f"python -c {shlex.quote(fetch)}", {})) == "200"
        two.kill()  # every process of the host, the server included
        assert server.poll() is not None
    runbook = Runbook()
    assert {h for b in runbook.blocks for h in b.hosts} <= set(HOSTS)
    assert all(b.lines for b in runbook.blocks)
