"""One datastore of several sources: English Wikipedia (September 2020, WikiExtractor's <doc> form) and Simple
English Wikipedia (December 2021, its --json form) in one store, their page ids colliding (page 12 is Anarchism in
one, Autonomous communities of Spain in the other). Simple English is added to an index while the service answers
from it; a backfill of English Wikipedia then leaves Simple English's pages and answers as they were."""

import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from flows.cli import app
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.evaluation.dumps import dump_file_text
from npmcore.index.bm25 import BM25Searcher
from npmcore.index.bm25_passages import write_bm25
from npmcore.serve.api import create_app
from npmcore.serve.service import Settings
from npmcore.snapshots import open_corpus, open_index, read_blocks
from npmcore.sources import checksum
from npmcore.storage import sha256_file

ENGLISH = {"12": "Anarchism", "25": "Autism", "39": "Albedo"}
SIMPLE = {"1": "April", "12": "Autonomous communities of Spain", "39": "Apple"}  # ids 12 and 39 in both wikis
SIMPLE_QUERY = "Spain is divided in 17 parts called [MASK] communities."
ENGLISH_QUERY = "Albedo is the measure of the diffuse reflection of [MASK] radiation."
runner = CliRunner()


@pytest.fixture(scope="module")
def wikis(tmp_path_factory, simplewiki_shard) -> dict[str, Path]:
    """English pages 12, 25 and 39 as the 2020 dump writes them, a second version of them (Albedo edited, Autism
    gone), and Simple English pages 1, 12 and 39 as its --json file writes them."""
    folder = tmp_path_factory.mktemp("wikis")
    text = dump_file_text("2020-09/AA/wiki_00")
    docs = {m.group(2): m.group(1) for m in re.finditer(r'(<doc id="(\d+)".*?</doc>\n)', text, flags=re.S)}
    paths = {name: folder / name / "wiki_00" for name in ("en", "en-v2", "simple")}
    for path in paths.values():
        path.parent.mkdir()
    paths["en"].write_text("".join(docs[i] for i in ENGLISH), encoding="utf-8")
    edited = docs["39"].replace("</doc>\n", "Albedo was measured again in 2021 by the backfill test.\n</doc>\n")
    paths["en-v2"].write_text(docs["12"] + edited, encoding="utf-8")
    lines = [line for line in open(simplewiki_shard, encoding="utf-8") if json.loads(line)["id"] in SIMPLE]
    paths["simple"].write_text("".join(lines), encoding="utf-8")
    return paths


def printed_index(output: str) -> str:
    return next(line for line in reversed(output.splitlines()) if "/index/" in line and " " not in line)


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def keys_and_titles(corpus: str) -> dict[str, str]:
    return {
        key: title
        for table in read_blocks(corpus, ["doc_id", "title"])
        for key, title in zip(*(table.column(c).to_pylist() for c in ("doc_id", "title")), strict=True)
    }


def test_a_second_wiki_is_added_while_the_service_answers_and_a_backfill_of_one_leaves_the_other(
    wikis, prefect_server, tmp_path
):
    store = str(tmp_path / "store")
    invoke("ingest", str(wikis["en"]), "--dump-date", "2020-09", "--store", store)
    english = printed_index(invoke("index", "--bm25-only", "--store", store))  # the store's first: served

    answered: list[tuple[int, str | None]] = []  # (status, index) of every request while Simple English is added
    stop = threading.Event()
    with TestClient(create_app(Settings(store=store, poll_s=0.2))) as client:
        deadline = time.monotonic() + 120
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the service was never ready"
            time.sleep(0.2)

        def load() -> None:
            while not stop.is_set():
                response = client.post("/v1/predict", json={"queries": [SIMPLE_QUERY, ENGLISH_QUERY], "evidence": 1})
                ok = response.status_code == 200
                answered.append((response.status_code, response.json()["results"][0]["index"] if ok else None))

        loader = threading.Thread(target=load)
        loader.start()
        try:
            added = invoke(
                "backfill", str(wikis["simple"]), "--date", "2021-12", "--previous", english, "--store", store
            )
            combined = printed_index(added)
            deadline = time.monotonic() + 120
            while client.get("/v1/index").json()["index"] != combined:
                assert time.monotonic() < deadline, "the service never served the index with Simple English"
                time.sleep(0.2)
            time.sleep(0.5)  # answers from the new index too
        finally:
            stop.set()
            loader.join()
        assert [status for status, _ in answered] == [200] * len(answered)
        assert {index for _, index in answered} == {english, combined}
        served = client.get("/v1/index").json()["sources"]
        assert [(s["name"], s["dump_date"]) for s in served] == [
            ("en.wikipedia.org", "2020-09-01"),
            ("simple.wikipedia.org", "2021-12-01"),
        ]
        (result,) = client.post("/v1/predict", json={"queries": [SIMPLE_QUERY]}).json()["results"]
        assert result["answers"][0]["evidence"][0]["source"] == {
            "source": "simple.wikipedia.org",
            "wiki": "simple.wikipedia.org",
            "dump_date": "2021-12-01",
            "title": "Autonomous communities of Spain",
            "url": "https://simple.wikipedia.org/wiki/Autonomous_communities_of_Spain",
        }
    assert "kept" in added and "added" in added  # the sources table: what the backfill did to each

    # one corpus of both wikis: neither page 12 replaced the other; English Wikipedia's shards copied as they were
    first, both = open_corpus(open_index(english).corpus), open_corpus(open_index(combined).corpus)
    assert keys_and_titles(both.url) == {f"en.wikipedia.org:{i}": t for i, t in ENGLISH.items()} | {
        f"simple.wikipedia.org:{i}": t for i, t in SIMPLE.items()
    }
    en, simple = both.sources
    assert (en.name, simple.name) == ("en.wikipedia.org", "simple.wikipedia.org")
    assert simple.sha256 == checksum([{"sha256": sha256_file(str(wikis["simple"])).sha256}])
    assert en == first.sources[0] and {p: both.manifest.files[p] for p in en.shards} == first.manifest.files
    assert both.manifest.counts["docs"] == en.docs + simple.docs == 6

    # BM25 of the added source alone, beside the index it extends: the searches of a full build
    extended, full = tmp_path / "extended", tmp_path / "full"
    assert write_bm25(both.url, extended, english) == simple.blocks  # only Simple English's blocks indexed
    assert write_bm25(both.url, full) == en.blocks + simple.blocks
    searchers = BM25Searcher(str(extended)), BM25Searcher(str(full))
    for query in [SIMPLE_QUERY, ENGLISH_QUERY, *ENGLISH.values(), *SIMPLE.values(), "the year 2021"]:
        mine, reference = ([(h.block_id, round(h.score, 4)) for h in s.search(query, 10)] for s in searchers)
        assert mine == reference, query

    # a new English dump replaces English Wikipedia's pages only: Simple English's and its answers stay as they were
    backfilled = invoke("backfill", str(wikis["en-v2"]), "--date", "2021-01", "--previous", combined, "--store", store)
    assert "replaced" in backfilled and "kept" in backfilled
    later = printed_index(backfilled)
    after = open_corpus(open_index(later).corpus)
    assert [s.name for s in after.sources] == ["simple.wikipedia.org", "en.wikipedia.org"]
    assert after.sources[0] == simple and {p: after.manifest.files[p] for p in simple.shards} == {
        p: both.manifest.files[p] for p in simple.shards
    }
    assert set(keys_and_titles(after.url)) == {"en.wikipedia.org:12", "en.wikipedia.org:39"} | {
        f"simple.wikipedia.org:{i}" for i in SIMPLE
    }
    config = InferenceConfig(passages=1)  # its own page's passage (with more, English pages' compete as ever)
    searched = {url: NPM(url) for url in (combined, later)}
    assert searched[later].retrieval.passages(SIMPLE_QUERY, 1) == searched[combined].retrieval.passages(SIMPLE_QUERY, 1)
    before, now = (searched[url].predict([SIMPLE_QUERY], config)[0] for url in (combined, later))
    assert [a.text for a in now] == [a.text for a in before]  # (their scores move a little with the corpus's IDF)
    sources = [
        [searched[url].evidence.span(e).source for e in a.evidence]
        for url, a in ((combined, before[0]), (later, now[0]))
    ]
    assert sources[0] == sources[1] and sources[0][0].wiki == "simple.wikipedia.org"


def test_a_wiki_added_beside_an_index_with_vectors_embeds_its_pages_only(news_store, wikis, prefect_server, tmp_path):
    """Simple English added to the shared news index (token vectors, Flat): the news blocks' vectors are copied,
    only the new wiki's blocks go through the encoder, and the news stays as it was."""
    from flows.backfill import BackfillParams, backfill_dump

    root = tmp_path / "store"
    shutil.copytree(news_store.store, root, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "runs"))
    previous = str(root / "index" / news_store.index.rsplit("/", 1)[1])
    params = BackfillParams(
        dump=[str(wikis["simple"])], dump_date="2021-12", store=str(root), previous=previous, precision="f32"
    )  # the news index's precision: vectors of two precisions are never mixed
    result = backfill_dump(params)
    news, both = (open_corpus(open_index(url).corpus) for url in (previous, result.index))
    simple = both.sources[-1]
    assert result.sources == {"news": "kept", "simple.wikipedia.org": "added"} and result.vectors
    assert result.reused_blocks == news.manifest.counts["blocks"]  # every news block's vectors copied
    assert result.blocks - result.reused_blocks == simple.blocks  # only the new wiki's embedded
    assert both.sources[0] == news.sources[0]
