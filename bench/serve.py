"""Benchmark: the query service (``npmcore api``) under load, and while its index is swapped.

Usage: python bench/serve.py [--store npm-store] [--requests 48] [--concurrency 1 4 16] [--scoring evidence|npm]
                             [--precision auto|f32|bf16] [--no-swap]

Starts ``npmcore api`` on a loopback port over the store's serving index (the demo store by
default: run ``make demo`` first; an index with vectors or one of BM25 alone), then drives it with
an asyncio + httpx load generator: each of C clients sends real cloze queries
(``bench/data/cloze-test.jsonl``, one query a request) one after the other, ``--requests`` per
client, at each ``--concurrency``, ranked by ``--scoring`` (the service's default, evidence, or the
paper's npm: the cost of reading the evidence is the difference); the queries search the top BM25
passages, which every index answers. Then a second real index of the same corpus is built (the
served factory trained on another sample size over the same datastore; of BM25 alone: the corpus's
BM25 for the same encoder under its other name), and while 4 clients keep querying, the serving pointer is
moved to it and back (``npmcore.serve.serving``): each move counts once the service reports the new
index. Between the two moves a copy of the second index with its largest file damaged (8 bytes inverted, as a bad
disk leaves it) is offered: ``npmcore serving set`` must refuse it, and once written into the pointer by hand the
service must refuse it too, name it in ``/v1/index`` and keep answering from the index it has (the pointer
written back as it was clears the refusal). The service's RSS is sampled throughout. ``--no-swap`` leaves the second
index, the moves and the corrupt copy out (for a large index, whose second index would take long to build).
What what people type costs: one client sends each fact of ``bench/data/everyday-test.jsonl`` typed as a statement,
then the same fact typed as a question (asked as the service asks it: its statements and the paper's question, tagged
and answered in one batch), as keywords, and, where its statement is "The X is [MASK].", as the yes/no question of its
answer ("Is Canberra the capital of Australia?"), one a request, the facts three times over (the forms alternated, so
that the machine's drift weighs on all alike): ``p50_ms_statement``, ``p50_ms_question``, ``p50_ms_keywords``,
``p50_ms_yes_no`` and each one's ratio to the statement's, ``question_cost``, ``keywords_cost`` and ``yes_no_cost``
(the same facts, so the same passages to read).
The service encodes queries in ``--precision`` (``auto``: the machine's). Last line, one JSON object:
``{"factory", "precision", "index_precision", "answers", "p50_ms_c1", "p99_ms_c1", "qps_c1", "qps_c4",
"qps_c16", "p99_ms_c16", "p50_ms_statement", "p50_ms_question", "p50_ms_keywords", "p50_ms_yes_no", "question_cost",
"keywords_cost", "yes_no_cost", "errors", "swaps", "swap_errors",
"corrupt_refused", "p99_ms_during_swap", "rss_mb_steady", "rss_mb_swap_peak"}`` (``swap_errors``: failed requests
during the moves and the corrupt offer; ``corrupt_refused``: 1 when both refused the corrupt copy).
"""

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402

QUESTION_ROUNDS = 3  # each typed test fact asked this many times in each form


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def drive(
    url: str, queries: list[str], clients: int, per_client: int, scoring: str, need_answers: bool = True
) -> tuple[list[float], int, float]:
    """Latencies (ms) of ``clients`` concurrent clients each sending ``per_client`` requests; errors (a status
    other than 200, or with ``need_answers`` no answer); seconds."""
    latencies, errors = [], 0

    async def client(n: int, http: httpx.AsyncClient) -> None:
        nonlocal errors
        for i in range(per_client):
            query = queries[(n * per_client + i) % len(queries)]
            start = time.perf_counter()
            request = {"queries": [query], "evidence": 1, "scoring": scoring}
            response = await http.post(f"{url}/v1/predict", json=request)
            latencies.append(1000 * (time.perf_counter() - start))
            errors += response.status_code != 200 or need_answers and not response.json()["results"][0]["answers"]

    async with httpx.AsyncClient(timeout=60) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(n, http) for n in range(clients)))
        return latencies, errors, time.perf_counter() - start


def yes_no_of(statement: str, answer: str) -> str | None:
    """The yes/no question of a statement with its answer: "The capital of Australia is [MASK]." -> "Is Canberra the
    capital of Australia?"; None for a statement of another shape."""
    found = re.match(r"^The (.+) (is|was) \[MASK\]\.$", statement)
    return None if found is None else f"{found.group(2).capitalize()} {answer} the {found.group(1)}?"


def wait_ready(url: str, server: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"npmcore api exited with status {server.returncode}")
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"npmcore api was not ready within {timeout_s:g} s")


class Rss:
    """Peak RSS (MB) of a process, sampled every 0.1 s; ``mark()`` starts a new window."""

    def __init__(self, pid: int):
        self.process, self.peak, self._stop = psutil.Process(pid), 0.0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self.process.memory_info().rss / 2**20)

    def mark(self) -> float:
        peak, self.peak = self.peak, 0.0
        return peak

    def stop(self) -> None:
        self._stop.set()


def second_index(index: str) -> str:
    """Another real index of the same corpus: of one with vectors, the served factory trained on another sample
    size over the same datastore; of one of BM25 alone, the same corpus's BM25 for its encoder named the other
    way (the default encoder by its folder, or by default): another snapshot, the same query encoder."""
    from npmcore.encoder import default_encoder_path
    from npmcore.index.bm25_index import build_bm25_index
    from npmcore.index.indexer import IndexConfig, build_index
    from npmcore.snapshots import open_index

    served = open_index(index)
    if not served.vectors:
        return build_bm25_index(served.corpus, None if served.encoder else str(default_encoder_path()))
    config = served.manifest.config
    return build_index(served.datastore, IndexConfig(factory=config["factory"], train_size=config["train_size"] + 1000))


def corrupt_copy(index: str) -> str:
    """A copy of a local ``index`` beside it (``{id}-corrupt``), its largest file with 8 bytes inverted (the
    same size, another checksum), its other files hard links."""
    source = Path(index)
    target = source.with_name(f"{source.name}-corrupt")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, copy_function=os.link)
    largest = max((p for p in target.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(largest.read_bytes())
    largest.unlink()  # a link: the original's bytes stay as they are
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    largest.write_bytes(data)
    return str(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default=str(ROOT / "npm-store"), help="a store with an index (make demo)")
    parser.add_argument("--requests", type=int, default=48, help="requests per client at each concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--scoring", choices=["evidence", "npm"], default="evidence")
    parser.add_argument("--precision", choices=["auto", "f32", "bf16"], default="auto", help="of the query encoder")
    parser.add_argument(
        "--no-swap", dest="swap", action="store_false", help="no second index, no swaps: load and typed costs alone"
    )
    args = parser.parse_args()

    from npmcore.serve.serving import read_serving, serving_index, set_serving

    store = str(Path(args.store).resolve())
    first = serving_index(store)
    pointer = read_serving(store)
    other = second_index(first) if args.swap else None
    corrupt = corrupt_copy(other) if other is not None else None
    queries = [json.loads(line)["query"] for line in (ROOT / "bench" / "data" / "cloze-test.jsonl").open()]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(Path(sys.executable).parent / "npmcore"), "api", "--store", store, "--port", str(port)]
    command += ["--precision", args.precision]
    server = subprocess.Popen([*command, "--poll-s", "0.5"], env={**os.environ, "NPM_API_TOKEN": ""})
    result: dict = {}
    try:
        set_serving(store, first, "bench/serve.py")
        wait_ready(url, server)
        rss = Rss(server.pid)
        served = httpx.get(f"{url}/v1/index").json()
        result |= {"factory": served["factory"], "precision": served["precision"]}
        result |= {"index_precision": served["index_precision"], "answers": served["answers"]}
        asyncio.run(drive(url, queries, 4, 8, args.scoring))  # warm
        errors = 0
        for clients in args.concurrency:
            latencies, failed, seconds = asyncio.run(drive(url, queries, clients, args.requests, args.scoring))
            errors += failed
            result |= {
                f"p50_ms_c{clients}": round(float(np.percentile(latencies, 50)), 1),
                f"p99_ms_c{clients}": round(float(np.percentile(latencies, 99)), 1),
                f"qps_c{clients}": round(len(latencies) / seconds, 1),
            }
            print(f"concurrency {clients}: {result}", file=sys.stderr, flush=True)
        typed = [json.loads(line) for line in (ROOT / "bench" / "data" / "everyday-test.jsonl").open()]
        facts: dict[str, dict[str, str]] = {}
        for row in typed:
            facts.setdefault(row["fact"], {})[row["form"]] = row["query"]
            if row["form"] == "statement" and (asserted := yes_no_of(row["query"], row["answers"][0])) is not None:
                facts[row["fact"]]["yes-no"] = asserted
        # each fact in every form, one after the other, QUESTION_ROUNDS times: the machine's drift weighs on all alike;
        # a question may find no answer of the kind it asks for: no error
        forms = ("statement", "question", "keywords", "yes-no")
        asked = [(form, f[form]) for f in facts.values() for form in forms if form in f] * QUESTION_ROUNDS
        latencies, failed, _ = asyncio.run(drive(url, [q for _, q in asked], 1, len(asked), args.scoring, False))
        errors += failed
        for form in forms:
            mine = [ms for (of, _), ms in zip(asked, latencies, strict=True) if of == form]
            result[f"p50_ms_{form.replace('-', '_')}"] = round(float(np.percentile(mine, 50)), 1)
        for form in forms[1:]:
            name = form.replace("-", "_")
            result[f"{name}_cost"] = round(result[f"p50_ms_{name}"] / result["p50_ms_statement"], 2)
        steady = rss.mark()
        result |= {"errors": errors, "rss_mb_steady": round(steady, 1)}

        if other is not None:
            result |= swapped(url, store, first, other, corrupt, queries, args.scoring)
            result["rss_mb_swap_peak"] = round(rss.mark(), 1)
        rss.stop()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if corrupt is not None:
            shutil.rmtree(corrupt)
        if pointer is not None:
            set_serving(store, pointer.index, "bench/serve.py: as before")
    print(json.dumps(result))


def swapped(url: str, store: str, first: str, other: str, corrupt: str, queries: list[str], scoring: str) -> dict:
    """While 4 clients query, the serving pointer moved to ``other`` and back, the ``corrupt`` copy offered between
    the two moves: the moves counted once the service reports them, the failed requests, whether both refused the
    corrupt copy, the p99 latency throughout."""
    from npmcore.serve.serving import set_serving
    from npmcore.storage import SnapshotError

    swaps, swap_latencies, swap_errors, corrupt_refused = 0, [], 0, 0

    async def offer_corrupt(http: httpx.AsyncClient) -> None:
        """Offer the corrupt copy: refused by ``serving set``, then written by hand, refused by the service;
        then the pointer as it was, written back by hand, clears the refusal."""
        nonlocal corrupt_refused
        try:
            await asyncio.to_thread(set_serving, store, corrupt, "bench/serve.py: must be refused")
            return
        except SnapshotError:
            pass
        file = Path(store, "serving.json")
        before = file.read_text()
        file.write_text(json.dumps({"index": corrupt, "previous": [other], "reason": "bench/serve.py: by hand"}))
        while (served := (await http.get(f"{url}/v1/index")).json())["refused"] is None:
            if served["index"] == corrupt:  # swapped in: not refused
                return
            await asyncio.sleep(0.1)
        named = served["refused"]["index"] == corrupt and served["index"] == other
        file.write_text(before)
        while (await http.get(f"{url}/v1/index")).json()["refused"] is not None:
            await asyncio.sleep(0.1)
        corrupt_refused += named

    async def swapping() -> None:
        nonlocal swaps
        async with httpx.AsyncClient() as http:
            await asyncio.sleep(2)
            for target in (other, first):
                await asyncio.to_thread(set_serving, store, target, "bench/serve.py swap")
                while (await http.get(f"{url}/v1/index")).json()["index"] != target:
                    await asyncio.sleep(0.1)
                swaps += 1
                await asyncio.sleep(2)
                if target == other:
                    await offer_corrupt(http)
                    await asyncio.sleep(2)

    async def measured() -> None:
        nonlocal swap_latencies, swap_errors
        task = asyncio.create_task(swapping())
        latencies, failed, _ = await drive_until(url, queries, 4, task, scoring)
        swap_latencies, swap_errors = latencies, failed

    asyncio.run(measured())
    return {
        "swaps": swaps,
        "swap_errors": swap_errors,
        "corrupt_refused": corrupt_refused,
        "p99_ms_during_swap": round(float(np.percentile(swap_latencies, 99)), 1),
    }


async def drive_until(
    url: str, queries: list[str], clients: int, until: asyncio.Task, scoring: str
) -> tuple[list[float], int, float]:
    """Like :func:`drive`, until the task ``until`` is done."""
    latencies, errors = [], 0

    async def client(n: int, http: httpx.AsyncClient) -> None:
        nonlocal errors
        i = 0
        while not until.done():
            query = queries[(n * 997 + i) % len(queries)]
            i += 1
            start = time.perf_counter()
            try:
                request = {"queries": [query], "evidence": 1, "scoring": scoring}
                response = await http.post(f"{url}/v1/predict", json=request)
                errors += response.status_code != 200
            except httpx.TransportError:
                errors += 1
            latencies.append(1000 * (time.perf_counter() - start))

    async with httpx.AsyncClient(timeout=60) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(n, http) for n in range(clients)), until)
        return latencies, errors, time.perf_counter() - start


if __name__ == "__main__":
    main()
