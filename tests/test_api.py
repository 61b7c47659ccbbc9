"""The query service (npmcore api) and the serving pointer, on a copy of the shared news store."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from conftest import free_port, wait_for
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from flows.cli import app as cli
from npmcore.index.indexer import IndexConfig, build_index
from npmcore.serve.api import create_app
from npmcore.serve.service import Service, Settings
from npmcore.serve.serving import read_serving, rollback_serving, serve_if_unset, serving_index, set_serving
from npmcore.storage import SnapshotError

QUERY = "Australian firefighters battled bushfires near [MASK]."
UNKNOWN = "Aristotle was a student of [MASK]."


@pytest.fixture(scope="module")
def store(news_store, tmp_path_factory):
    """A store of its own (its serving pointer moves), with the news index and a second real index."""
    root = tmp_path_factory.mktemp("served") / "store"
    shutil.copytree(news_store.store, root, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "runs"))
    first = str(root / "index" / news_store.index.rsplit("/", 1)[1])
    datastore = str(root / "datastore" / news_store.datastore.rsplit("/", 1)[1])  # the copy: the index goes beside it
    second = build_index(datastore, IndexConfig(factory="Flat", train_size=21_000))
    return str(root), first, second


def ready(client: TestClient, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the service was never ready"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def client(store):
    root, first, _ = store
    set_serving(root, first)
    with TestClient(create_app(Settings(store=root, poll_s=0.2))) as client:
        ready(client)
        yield client


def test_the_service_answers_with_evidence_and_says_what_it_serves(client, store):
    response = client.post("/v1/predict", json={"queries": [QUERY], "answers": 3})
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    assert result["index"] == store[1] and 1 <= len(result["answers"]) <= 3
    for answer in result["answers"]:
        evidence = answer["evidence"][0]
        assert evidence["text"][evidence["start"] : evidence["end"]] == answer["text"]  # marked in its passage
    served = client.get("/v1/index").json()
    assert served["index"] == store[1] and served["tokens"] > 0 and served["factory"] == "Flat"
    assert served["precision"] in ("f32", "bf16") and served["index_precision"] in ("f32", "bf16")
    classified = client.post(
        "/v1/classify", json={"queries": ["The news was [MASK]."], "labels": {"good": ["great"], "bad": ["terrible"]}}
    )
    assert classified.status_code == 200 and classified.json()["results"][0]["label"] in ("good", "bad")
    by_task = client.post("/v1/classify", json={"queries": ["The news was [MASK]."], "task": "sst2"}).json()
    assert set(by_task["results"][0]["scores"]) == {"negative", "positive"}
    both = client.post("/v1/classify", json={"queries": [QUERY], "task": "sst2", "labels": {"a": ["x"], "b": ["y"]}})
    assert both.status_code == 422 and both.json() == {"error": "body: give labels or a task, not both or neither"}
    metrics = client.get("/metrics").text
    assert 'npm_request_seconds_bucket{endpoint="/v1/predict"' in metrics and "npm_batch_queries" in metrics
    assert client.get("/livez").json() == {"live": True}
    assert 'id="query"' in client.get("/").text  # the page's query box


def test_predict_ranks_by_evidence_or_by_npm_and_explains_its_scores(client, store):
    from npmcore.answer.inference import NPM, InferenceConfig
    from npmcore.answer.ranking import FEATURE_NAMES

    npm = NPM(store[1])
    for scoring in ("evidence", "npm"):
        body = {"queries": [QUERY], "answers": 3, "scoring": scoring, "explain": True}
        (result,) = client.post("/v1/predict", json=body).json()["results"]
        expected = npm.predict([QUERY], InferenceConfig(answers=3, scoring=scoring))[0]
        assert [a["text"] for a in result["answers"]] == [a.text for a in expected]
        for answer in result["answers"]:
            parts = answer["parts"]
            assert (parts is None) if scoring == "npm" else set(parts) == set(FEATURE_NAMES)
    (plain,) = client.post("/v1/predict", json={"queries": [QUERY]}).json()["results"]
    assert all("parts" not in answer for answer in plain["answers"])  # only when asked


def test_a_question_is_asked_as_its_statements_and_the_answer_says_how(client):
    from npmcore.answer.answering import replies
    from npmcore.answer.inference import NPM, InferenceConfig
    from npmcore.ask.asking import ask

    question = "Where did Australian firefighters battle bushfires?"
    (result,) = client.post("/v1/predict", json={"queries": [question], "answers": 3}).json()["results"]
    asked = ask(question)
    assert asked.queries == (
        "Australian firefighters battled bushfires in [MASK].",
        "Where did Australian firefighters battle bushfires? The answer is [MASK].",
    )
    assert result["query"] == question and result["asked"]["how"] == "statements"
    assert result["asked"]["queries"] == list(asked.queries) and result["asked"]["answered"] in asked.queries
    npm = NPM(client.get("/v1/index").json()["index"])
    (reply,) = replies(npm, [asked], InferenceConfig(answers=3))
    expected = reply.answers
    assert result["asked"]["answered"] == reply.query and [a["text"] for a in result["answers"]] == [
        a.text for a in expected
    ]
    assert all(a.text.isalpha() or " " in a.text for a in expected)  # a place: no number
    (paper,) = client.post("/v1/predict", json={"queries": [question], "ask": "paper"}).json()["results"]
    assert paper["asked"] == {"how": "question", "queries": [asked.queries[-1]], "answered": asked.queries[-1]}
    (plain,) = client.post("/v1/predict", json={"queries": [QUERY]}).json()["results"]
    assert plain["asked"] == {"how": "mask", "queries": [QUERY], "answered": QUERY}


def test_keywords_a_yes_no_question_and_a_why_are_each_answered_as_a_person_expects(client):
    queries = ["australia bushfires", "Did firefighters battle bushfires in Australia?", "Why did the bushfires start?"]
    keywords, yes_no, why = client.post("/v1/predict", json={"queries": queries}).json()["results"]
    assert keywords["asked"]["how"] == "keywords" and keywords["answers"] and keywords["found"]
    assert keywords["asked"]["queries"][0] == "The australia bushfires is [MASK]."  # what the keywords name
    sides = ["Firefighters battled bushfires in [MASK].", "[MASK] battled bushfires in Australia."]
    assert yes_no["asked"]["how"] == "yes-no" and yes_no["asked"]["queries"] == sides
    verdict = yes_no["yes_no"]  # read from a side: yes where the corpus's answer there is the part it asserts
    assert yes_no["asked"]["answered"] == sides[verdict["side"]]
    assert verdict["asserted"] == ["Australia", "firefighters"][verdict["side"]]
    assert verdict["corpus_says"] == yes_no["answers"][0]["text"]  # what it reads is shown first, with its evidence
    assert verdict["confidence"] == yes_no["answers"][0]["confidence"]
    said = verdict["corpus_says"].lower()
    assert verdict["verdict"] == "unknown" or (verdict["verdict"] == "yes") == (verdict["asserted"].lower() in said)
    assert (why["asked"]["how"], why["asked"]["answered"], why["answers"], why["found"]) == (
        "explanation",
        None,
        [],
        False,
    )
    assert "cannot explain" in why["note"] and keywords["note"] is None and keywords["yes_no"] is None
    assert all(isinstance(a["forms"], list) for a in keywords["answers"])  # the other forms of each answer


def test_every_answer_has_its_confidence_and_a_query_below_the_threshold_abstains_with_its_best_guess(client):
    served = client.get("/v1/index").json()["confidence"]
    assert served["calibrated"] and 0 < served["min_confidence"] < 1 and served["fitted_on"]["sets"]

    def ask(**settings) -> dict:
        response = client.post("/v1/predict", json={"queries": [QUERY], **settings})
        assert response.status_code == 200, response.text
        return response.json()["results"][0]

    result = ask()
    top = result["answers"][0]["confidence"]
    assert all(0 <= a["confidence"] <= 1 for a in result["answers"])
    assert result["min_confidence"] == served["min_confidence"]
    assert result["abstained"] == (top < served["min_confidence"])
    assert not ask(min_confidence=0)["abstained"]
    withheld = ask(min_confidence=1)
    assert withheld["abstained"] and withheld["answers"][0]["text"] == result["answers"][0]["text"]  # the best guess
    paper = ask(scoring="npm")  # the paper's scoring keeps its raw scores
    assert paper["answers"][0]["confidence"] is None and (paper["abstained"], paper["min_confidence"]) == (False, None)


def test_the_page_names_every_part_of_a_score():
    from npmcore.answer.ranking import FEATURE_NAMES
    from npmcore.serve.api import PAGE

    labels = re.search(r"const PARTS = \{(.*?)\};", PAGE.read_text(encoding="utf-8"), re.S).group(1)
    assert sorted(re.findall(r"(\w+): \"", labels)) == sorted(FEATURE_NAMES)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"queries": ["Aristotle was taught by Plato."]},
            'queries.0: a sentence needs one [MASK] where its answer goes ("Aristotle was taught by [MASK]."), or ask '
            "a question or type keywords",
        ),
        (
            {"queries": ["[MASK] and [MASK]."]},
            "queries.0: a query needs at most one [MASK], found 2: write a sentence with one, or a question",
        ),
        ({"queries": []}, "queries: List should have at least 1 item after validation, not 0"),
        ({"queries": [QUERY], "colour": "red"}, "colour: unknown field"),
        ({"queries": ["x" * 1001 + " [MASK]"]}, "queries.0: longer than 1000 characters"),
        ({"queries": [QUERY] * 33}, "queries: at most 32 a request"),
        ({"queries": [QUERY], "k": 0}, "k: Input should be greater than or equal to 1"),
        ({"queries": [QUERY], "scoring": "bm25"}, "scoring: Input should be 'npm' or 'evidence'"),
        ({"queries": ["Who wrote Hamlet?"], "ask": "nq"}, "ask: Input should be 'statements' or 'paper'"),
        ({"queries": [QUERY], "min_confidence": 1.5}, "min_confidence: Input should be less than or equal to 1"),
        (
            {"queries": [QUERY], "min_confidence": "sure"},
            "min_confidence: Input should be a valid number, unable to parse string as a number",
        ),
        (b"{not json", "body: not valid JSON"),
    ],
)
def test_bad_input_gets_422_with_one_line_naming_the_field(client, body, error):
    if isinstance(body, bytes):
        response = client.post("/v1/predict", content=body, headers={"content-type": "application/json"})
    else:
        response = client.post("/v1/predict", json=body)
    assert response.status_code == 422 and response.json() == {"error": error}


def test_a_token_is_required_when_one_is_set(store):
    with TestClient(create_app(Settings(store=store[0], index=store[1], token="s3cret"))) as client:
        assert client.get("/livez").status_code == 200  # probes need no token
        assert client.get("/v1/index").status_code == 401
        assert client.get("/v1/index", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ready(client)
        assert client.get("/v1/index", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_a_public_address_needs_a_token(store, monkeypatch):
    monkeypatch.delenv("NPM_API_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["api", "--store", store[0], "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "give a token (--token-file or NPM_API_TOKEN)" in result.output


def test_a_full_queue_answers_503_with_retry_after(store):
    with TestClient(create_app(Settings(store=store[0], index=store[1], queue_limit=1))) as client:
        ready(client)
        response = client.post("/v1/predict", json={"queries": [QUERY, QUERY]})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"


def test_the_service_follows_the_pointer(client, store):
    root, first, second = store
    set_serving(root, second)
    deadline = time.monotonic() + 60
    while client.get("/v1/index").json()["index"] != second:
        assert time.monotonic() < deadline, "the service never swapped to the new index"
        time.sleep(0.2)
    assert client.post("/v1/predict", json={"queries": [QUERY]}).json()["results"][0]["index"] == second
    assert rollback_serving(root).index == first
    while client.get("/v1/index").json()["index"] != first:
        assert time.monotonic() < deadline, "the service never swapped back"
        time.sleep(0.2)
    assert "npm_index_swaps_total 2.0" in client.get("/metrics").text


def test_a_batch_in_flight_finishes_on_the_old_index_and_a_broken_index_is_refused(store, tmp_path):
    root, first, second = store
    service = Service(Settings(store=root))
    service.load(first)
    with service.using() as old:
        service.load(second)  # swapped while a batch holds the old index
        assert service.current.url == second and old.retired and old.in_flight == 1
        assert old.npm.predict([QUERY])[0]  # the old index still answers the batch in flight
    assert old.in_flight == 0
    broken = f"{root}/index/broken"
    shutil.copytree(second, broken)
    with open(f"{broken}/tokens.npy", "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01")
    service.load(broken)
    assert service.current.url == second and service.refused.index == broken
    assert "checksum mismatch in tokens.npy" in service.refused.reason
    assert 'npm_index_refused_total{reason="SnapshotError"} 1.0' in service.metrics_text()


def linked_copy(snapshot: str, target: Path, damaged: str, damage) -> str:
    """A copy of ``snapshot`` at ``target``, its files hard links but ``damaged``, a real copy that ``damage``
    (bytes -> bytes) changed (the original is untouched)."""
    shutil.copytree(snapshot, target, copy_function=os.link)
    data = (target / damaged).read_bytes()
    (target / damaged).unlink()
    (target / damaged).write_bytes(damage(data))
    return str(target)


def flipped(data: bytes) -> bytes:
    """``data`` with 8 bytes in its middle inverted: the same size, another checksum."""
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 8]) + data[middle + 8 :]


def served(client: TestClient, index: str, timeout_s: float = 60) -> dict:
    """``/v1/index`` once the service serves ``index``."""
    deadline = time.monotonic() + timeout_s
    while (answer := client.get("/v1/index").json())["index"] != index:
        assert time.monotonic() < deadline, f"the service never served {index}"
        time.sleep(0.1)
    return answer


def test_under_load_a_corrupt_index_is_refused_and_named_and_a_good_one_swapped_in_without_a_failed_request(
    client, store
):
    """A steady stream of requests while the pointer names a copy of an index with its FAISS file damaged (as a
    person or an older version could write it: `npmcore serving set` refuses it), then a good index."""
    root, first, second = store
    set_serving(root, first)
    served(client, first)
    corrupt = linked_copy(second, Path(root) / "index" / "corrupt-copy", "index.faiss", flipped)
    answers: list[tuple[int, str | None]] = []  # (status, index answering) of each request
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                response = client.post("/v1/predict", json={"queries": [QUERY], "evidence": 1})
            except Exception:  # noqa: BLE001 - the test client raises what the app raised: a failed request
                answers.append((500, None))
                continue
            ok = response.status_code == 200
            answers.append((response.status_code, response.json()["results"][0]["index"] if ok else None))

    loader = threading.Thread(target=load)
    loader.start()
    try:
        while len(answers) < 3:  # a steady stream first
            time.sleep(0.05)
        with pytest.raises(SnapshotError, match=r"corrupt-copy: checksum mismatch in index\.faiss"):
            set_serving(root, corrupt)
        assert read_serving(root).index == first
        written, before = len(answers), refusals(client)
        file = Path(root) / "serving.json"
        good = file.read_text()
        pointer = {"index": corrupt, "previous": [first], "reason": "written by hand"}  # no "at": old or by hand
        file.write_text(json.dumps(pointer))
        deadline = time.monotonic() + 60
        while (now := client.get("/v1/index").json())["refused"] is None:
            assert time.monotonic() < deadline, "the corrupt index was never refused"
            time.sleep(0.1)
        assert now["index"] == first and now["refused"]["index"] == corrupt
        assert "checksum mismatch in index.faiss" in now["refused"]["reason"]
        time.sleep(1)  # five polls of the same pointer: refused once, not loaded again
        assert refusals(client) == before + 1
        named = len(answers)
        file.write_text(good)  # the served index named again: nothing to load, nothing refused
        deadline = time.monotonic() + 60
        while client.get("/v1/index").json()["refused"] is not None:
            assert time.monotonic() < deadline, "the refusal never cleared"
            time.sleep(0.1)
        set_serving(root, second, "the backfilled index")
        assert served(client, second)["refused"] is None
        time.sleep(0.5)  # answers from the new index too
    finally:
        stop.set()
        loader.join()
        set_serving(root, first)
        served(client, first)
        shutil.rmtree(corrupt)
    assert [status for status, _ in answers] == [200] * len(answers)
    assert named > written and {index for _, index in answers} == {first, second}  # answered all along


def refusals(client: TestClient) -> float:
    """How many indexes the service refused for a checksum or another snapshot error (``/metrics``)."""
    found = re.search(r'npm_index_refused_total\{reason="SnapshotError"\} ([0-9.]+)', client.get("/metrics").text)
    return float(found.group(1)) if found else 0.0


def test_an_index_whose_datastore_lost_bytes_is_refused_by_serving_set_and_by_the_service(store, tmp_path):
    """The datastore is only listed (its checksums were verified shard by shard when the index was built from
    it): a shard of another size than its manifest says, cut short by a full disk or a copy, is refused."""
    from npmcore.snapshots import open_datastore, open_index

    root, first, _ = store
    datastore = open_index(first).datastore
    shard = next(path for path in open_datastore(datastore).manifest.files if path.endswith("vectors.npy"))
    cut = linked_copy(datastore, tmp_path / "datastore", shard, lambda data: data[: len(data) // 2])
    index = Path(root) / "index" / "cut-datastore"
    shutil.copytree(first, index, copy_function=os.link)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["inputs"][0]["datastore"] = cut
    (index / "manifest.json").unlink()
    (index / "manifest.json").write_text(json.dumps(manifest))
    try:
        with pytest.raises(SnapshotError, match=f"{shard} has [0-9]+ bytes, its manifest says [0-9]+"):
            set_serving(root, str(index))
        service = Service(Settings(store=root))
        service.load(str(index))
        assert service.current is None and service.refused.index == str(index) and shard in service.refused.reason
    finally:
        shutil.rmtree(index)


@pytest.fixture(scope="module")
def bm25_only(store):
    """An index of BM25 alone of the news corpus, in the served store."""
    from npmcore.index.bm25_index import build_bm25_index
    from npmcore.snapshots import open_index

    return build_bm25_index(open_index(store[1]).corpus)


def test_an_index_of_bm25_alone_refuses_knn_requests_with_a_4xx_naming_why(store, bm25_only):
    with TestClient(create_app(Settings(store=store[0], index=bm25_only))) as client:
        ready(client)
        served = client.get("/v1/index").json()
        assert served["factory"] == "BM25" and served["serving"]["reason"] == "given by npmcore api --index"
        assert served["answers"] == {"restricted": True, "knn": False, "classify": False}
        assert set(served["cannot"]) == {"knn", "classify"} and "holds BM25 alone" in served["cannot"]["knn"]
        assert client.post("/v1/predict", json={"queries": [QUERY]}).json()["results"][0]["answers"]
        for endpoint, body in (
            ("/v1/predict", {"queries": [QUERY], "restrict": False}),
            ("/v1/classify", {"queries": ["The news was [MASK]."], "task": "sst2"}),
        ):
            response = client.post(endpoint, json=body)
            assert response.status_code == 422, (endpoint, response.text)
            assert response.json() == {"error": served["cannot"]["knn"]}
        assert 'npm_requests_total{endpoint="/v1/predict",status="500"}' not in client.get("/metrics").text


def test_a_batch_that_mixes_what_the_index_answers_fails_only_the_requests_it_cannot(store, bm25_only):
    """An index swapped in between a request's check and its batch: the requests it cannot answer get the
    reason, the others their answers."""
    from npmcore.answer.retrieval import Unsupported
    from npmcore.serve.api import PredictRequest
    from npmcore.serve.service import Item, run_predict

    service = Service(Settings(store=store[0]))
    service.load(bm25_only)
    restricted, knn = (PredictRequest(queries=[QUERY], restrict=r) for r in (True, False))
    answered, refused = run_predict(service, [Item(QUERY, restricted), Item(QUERY, knn)])
    assert answered["answers"] and isinstance(refused, Unsupported) and "holds BM25 alone" in str(refused)


def test_the_serving_pointer_keeps_history_and_refuses_what_is_not_an_index(store, tmp_path):
    root, first, second = store
    set_serving(root, first)
    set_serving(root, second, "a test", {"trex": 0.5})
    pointer = read_serving(root)
    assert (pointer.index, pointer.previous[0], pointer.scores) == (second, first, {"trex": 0.5})
    assert serving_index(root) == second
    with pytest.raises(Exception, match="manifest.json is missing"):
        set_serving(root, f"{root}/index/none")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no earlier serving index"):
        rollback_serving(str(empty))


def test_a_store_without_a_serving_pointer_serves_nothing_until_one_is_set(store, tmp_path):
    """Whatever indexes it holds (an evaluation's among them), a store serves only the index a person or the
    pipeline chose; the first choice is made by the first build that sets it."""
    root = tmp_path / "store"
    shutil.copytree(store[0], root, ignore=shutil.ignore_patterns("serving.json"))
    with pytest.raises(ValueError, match="has no serving pointer: choose the index to serve with `npmcore serving"):
        serving_index(str(root))
    refused = CliRunner().invoke(cli, ["api", "--store", str(root)])
    assert refused.exit_code == 2 and "has no serving pointer" in refused.output
    first, second = (f"{root}/index/{url.rsplit('/', 1)[1]}" for url in store[1:])
    assert serve_if_unset(str(root), first, "the first").index == first
    assert serve_if_unset(str(root), second, "another") is None and serving_index(str(root)) == first
    with pytest.raises(ValueError, match="no index snapshot in"):
        serving_index(str(tmp_path))


class Marks(HTMLParser):
    """The texts inside <mark> of a page: the answers the page marked in their passages."""

    def __init__(self):
        super().__init__()
        self.marks: list[str] = []
        self._open = False

    def handle_starttag(self, tag, attrs):
        self._open = self._open or tag == "mark"
        if tag == "mark":
            self.marks.append("")

    def handle_endtag(self, tag):
        self._open = self._open and tag != "mark"

    def handle_data(self, data):
        if self._open:
            self.marks[-1] += data


def answers_ready(url: str, service: subprocess.Popen) -> bool:
    assert service.poll() is None, f"npmcore api exited with status {service.returncode}"
    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:  # not listening yet
        return False


CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs a Chromium browser (Debian: apt-get install chromium)")
def test_the_page_shows_the_answers_marked_in_their_passages_in_headless_chromium(store, tmp_path):
    """`npmcore api` as a user starts it; the page as a browser renders it (screenshot kept in tmp_path)."""
    root, first, _ = store
    set_serving(root, first)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    service = subprocess.Popen(
        [str(Path(sys.executable).parent / "npmcore"), "api", "--store", root, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: answers_ready(url, service), 180, "npmcore api answers /readyz")
        expected = httpx.post(f"{url}/v1/predict", json={"queries": [QUERY], "answers": 3, "evidence": 1}).json()
        page = f"{url}/?q={urllib.parse.quote(QUERY)}"  # the page answers the query of its address
        browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,900"]
        budget = "--virtual-time-budget=60000"  # virtual time waits for the page's requests
        dom = subprocess.run([*browser, budget, "--dump-dom", page], capture_output=True, text=True, timeout=120)
        shot = tmp_path / "page.png"
        subprocess.run([*browser, budget, f"--screenshot={shot}", page], capture_output=True, timeout=120, check=True)

        def rendered_for(q: str) -> str:  # what the browser renders for query q: the answers' part, not the script
            return (
                subprocess.run(
                    [*browser, budget, "--dump-dom", f"{url}/?q={urllib.parse.quote(q)}"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                .stdout.split('<div id="out">', 1)[1]
                .split("<script", 1)[0]
            )

        doubts = {}  # a query it knows and one it does not: the page says what the service says
        for q in (QUERY, UNKNOWN):
            (said,) = httpx.post(f"{url}/v1/predict", json={"queries": [q], "answers": 3}).json()["results"]
            shown = rendered_for(q)
            unsure = re.search(r'<p class="abstained">Unsure: the best answer is right with probability', shown)
            nothing = re.search(r'<p class="abstained">Not in this corpus: nothing was found', shown)
            marked = shown.count('class="answer unsure"')
            found, doubted = said["found"], said["abstained"]
            doubts[q] = (found, doubted, unsure is not None, nothing is not None, marked, len(said["answers"]))
        yes_no = "Did firefighters battle bushfires in Australia?"
        (verdict,) = httpx.post(f"{url}/v1/predict", json={"queries": [yes_no]}).json()["results"]
        said_so, why, wrong = (rendered_for(q) for q in (yes_no, "Why did the bushfires start?", "Plato taught me."))
        question = "Where did Australian firefighters battle bushfires?"  # no mask: asked as its statements
        asked = rendered_for(question)
        (said,) = httpx.post(f"{url}/v1/predict", json={"queries": [question]}).json()["results"]
        question_shot = tmp_path / "question.png"
        question_page = [budget, f"--screenshot={question_shot}", f"{url}/?q={urllib.parse.quote(question)}"]
        subprocess.run([*browser, *question_page], capture_output=True, timeout=120, check=True)
    finally:
        service.terminate()
        service.wait(30)
    marks = Marks()
    marks.feed(dom.stdout)
    assert marks.marks == [answer["text"] for answer in expected["results"][0]["answers"]]
    whys = re.findall(r'<details class="why"( open="")?>', dom.stdout)  # rendered, not the script's template
    assert len(whys) == len(marks.marks) and whys[0] == ' open=""'  # each answer says why; the first shows it
    assert "Serving " in dom.stdout and first.rsplit("/", 1)[1] in dom.stdout  # the footer names the index
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    for found, doubted, unsure, nothing, marked, answers in doubts.values():
        assert nothing == (not found) and unsure == (found and doubted) and marked == (answers if doubted else 0)
    assert doubts[UNKNOWN][1]  # Aristotle is not in 60 news articles: unsure of its best guess, or nothing found
    word = {"yes": "Yes", "no": "No", "unknown": "The corpus does not say"}[verdict["yes_no"]["verdict"]]
    assert f'<p class="verdict"><strong>{word}</strong>' in said_so and verdict["yes_no"]["corpus_says"] in said_so
    assert '<p class="note">NPM answers with a phrase of its corpus' in why and 'class="answer' not in why
    assert '<p class="error">A sentence needs one [MASK] where its answer goes' in wrong and "queries.0" not in wrong
    answered, queries = said["asked"]["answered"], said["asked"]["queries"]  # the answering one first, then the rest
    others = "".join(f"<br>or: {q}" for q in queries if q != answered)
    assert len(queries) == 2 and f'<p class="asked">Asked as: {answered}{others}</p>' in asked
    assert question_shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each passage names where it comes from: the news file (no wiki, no address: no link)
    assert len(re.findall(r'<p class="evidence title">block [^<]+ · news</p>', dom.stdout)) == len(marks.marks)
