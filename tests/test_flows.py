"""Prefect flows against a real temporary Prefect server: ingest on Dask, training tracked in MLflow."""

import json
import os

import pytest

from flows.ingest import ingest_corpus
from flows.params import ClusterParams, IngestParams
from npmcore.snapshots import read_blocks
from npmcore.storage import open_snapshot


def test_ingest_flow_on_a_local_dask_cluster(tmp_path, news_path, prefect_server):
    params = IngestParams(inputs=[news_path], store=str(tmp_path), cluster=ClusterParams(n_workers=2))
    url = ingest_corpus(params)
    assert open_snapshot(url).counts["docs"] == 300
    assert sum(t.num_rows for t in read_blocks(url)) == open_snapshot(url).counts["blocks"]


SECRETS = {  # what an operator's environment holds; none of it may reach MLflow or Prefect
    "AWS_SECRET_ACCESS_KEY": "aws-secret-5f1e",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-secret-9c2a",
    "PREFECT_API_AUTH_STRING": "admin:prefect-secret-77d0",
}


def test_train_flow_logs_metrics_and_registers_the_encoder(
    tmp_path, news_lines, small_encoder, monkeypatch, prefect_server
):
    import mlflow
    from mlflow import MlflowClient

    from flows.train import TrainParams, train_encoder
    from npmcore.corpus.ingest import ingest
    from npmcore.corpus.partitions import IngestConfig
    from npmcore.tracking import tracking

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    raw = tmp_path / "news.txt"
    raw.write_text("\n".join(news_lines[:60]) + "\n")
    ingest([str(raw)], str(tmp_path), IngestConfig(max_tokens=64))
    params = TrainParams(  # from the small encoder: what the flow logs and registers does not depend on its size
        store=str(tmp_path),
        encoder=small_encoder,
        steps=3,
        batch_size=4,
        warmup_steps=1,
        alias="champion",
        experiment="test-train",
    )
    uri = train_encoder(params)
    assert uri == "models:/npm-encoder/1"
    uri_of_store = f"sqlite:///{tmp_path}/mlflow.db"
    assert not {"MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"} & os.environ.keys()  # not left to the next run
    client = MlflowClient(tracking_uri=uri_of_store, registry_uri=uri_of_store)
    version = client.get_model_version_by_alias("npm-encoder", "champion")
    run = client.get_run(version.run_id)
    assert run.data.params["steps"] == "3" and run.data.params["masking.ratio"] == "0.15"
    assert run.data.tags["preset"] == "cpu-small" and run.data.tags["prefect.flow_run_id"]  # linked to its flow run
    assert run.info.run_name == "npm cpu-small 3 steps" and "3 steps of 4 sequences" in version.description
    assert [d.dataset.digest for d in run.inputs.dataset_inputs] == [open_snapshot(run.data.params["corpus"]).id]
    logged = " ".join([*run.data.params.values(), *run.data.tags.values(), version.description or ""])
    assert not [name for name, value in SECRETS.items() if value in logged or value.split(":")[-1] in logged]
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == [1, 2, 3]
    assert {"start_acc", "end_acc", "tokens_per_s", "lr", "spans_per_seq", "masked_fraction"} <= run.data.metrics.keys()
    with tracking(uri_of_store, "test-train"):
        encoder = mlflow.transformers.load_model("models:/npm-encoder@champion", return_type="components")
    assert encoder["tokenizer"].mask_token == "[MASK]"
    assert train_encoder(params) == uri  # unchanged inputs: the cached result, no second run
    assert len(client.search_runs([run.info.experiment_id])) == 1
    again = train_encoder(params.model_copy(update={"seed": 1, "alias": None}))  # a changed config trains again
    assert again == "models:/npm-encoder/2"

    # the promotion rule: version 2 against the champion (version 1), with stated dev scores
    from flows import promote as promotion

    scores = {uri: 0.30, again: 0.25}
    monkeypatch.setattr(promotion, "dev_score", lambda model, params: scores[model])
    rule = promotion.PromoteParams(model=again, store=str(tmp_path), tasks=["cloze"])
    kept = promotion.promote(rule)
    assert (kept.promoted, kept.champion, kept.score, kept.champion_score) == (False, uri, 0.25, 0.30)
    assert client.get_model_version("npm-encoder", "2").tags["promotion.decision"] == "kept"
    scores[again] = 0.35
    assert promotion.promote(rule).promoted
    tags = client.get_model_version("npm-encoder", "2").tags
    assert (tags["promotion.decision"], tags["promotion.dev_tasks"]) == ("promoted", "cloze")
    assert client.get_model_version_by_alias("npm-encoder", "champion").version == 2
    forced = promotion.promote(rule.model_copy(update={"model": uri, "force": True}))
    assert forced.promoted and client.get_model_version_by_alias("npm-encoder", "champion").version == 1
    assert client.get_model_version("npm-encoder", "1").tags["promotion.reason"] == "forced"


@pytest.mark.slow
def test_promotion_evaluates_the_candidate_and_the_champion_on_dev_data(tmp_path, news_store):
    from mlflow import MlflowClient

    from flows.promote import PromoteParams, promote
    from npmcore.corpus.ingest import ingest
    from npmcore.corpus.partitions import IngestConfig
    from npmcore.encoder import default_encoder_path
    from npmcore.tracking import register_encoder

    corpus = ingest([news_store.raw], str(tmp_path), IngestConfig(max_tokens=64))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    champion = register_encoder(str(default_encoder_path()), uri, "test-train", alias="champion")
    candidate = register_encoder(str(default_encoder_path()), uri, "test-train")  # the same weights
    cloze = tmp_path / "cloze.jsonl"
    cloze.write_text(
        json.dumps({"query": "The Prime Minister, John [MASK], has revealed it.", "answers": ["Howard"]}) + "\n"
    )
    decision = promote(
        PromoteParams(model=candidate, store=str(tmp_path), tasks=["cloze"], data=str(cloze), corpus=corpus)
    )
    assert decision.champion == champion and decision.score == decision.champion_score  # a tie keeps the champion
    assert not decision.promoted
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert client.get_model_version("npm-encoder", "2").tags["promotion.dev_tasks"] == "cloze"


def test_a_missing_champion_names_the_way_to_make_one(tmp_path):
    from npmcore.tracking import model_version

    with pytest.raises(ValueError, match="no npm-encoder@champion in the model registry .*npmcore promote"):
        model_version("models:/npm-encoder@champion", str(tmp_path))


def test_train_params_keep_the_presets_masking_unless_overridden():
    from flows.train import TrainParams
    from npmcore.model.masking import MaskingConfig
    from npmcore.model.train_config import PRESETS

    quality = TrainParams(store="/tmp/unused", preset="cpu-quality").config("corpus", None, None)
    assert quality.masking == PRESETS["cpu-quality"]["masking"] and quality.masking.content_words
    assert quality.steps == PRESETS["cpu-quality"]["steps"]
    ratio = TrainParams(store="/tmp/unused", preset="cpu-quality", mask_ratio=0.3).config("corpus", None, None)
    assert ratio.masking == MaskingConfig(ratio=0.3, content_words=True, title_ngrams=False)
    assert TrainParams(store="/tmp/unused").config("corpus", None, None).masking == MaskingConfig()
    short = TrainParams(store="/tmp/unused", preset="cpu-quality", steps=8).config("corpus", "models-folder", None)
    assert (short.steps, short.warmup_steps, short.encoder) == (8, 1, "models-folder")  # the preset's warm-up share


def test_a_registered_encoder_brings_its_evidence_weights_back_when_exported(tmp_path):
    from npmcore.answer.ranking import RANKER_FILE
    from npmcore.encoder import default_encoder_path
    from npmcore.storage import local_folder
    from npmcore.tracking import export_encoder, register_encoder, tracking

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    model_uri = register_encoder(str(default_encoder_path()), uri, "test-train", alias="champion")
    with tracking(uri, None):
        exported = export_encoder("models:/npm-encoder@champion", str(tmp_path / "store"))
    assert model_uri == "models:/npm-encoder/1"
    shipped = (default_encoder_path() / RANKER_FILE).read_text()
    assert (local_folder(exported) / RANKER_FILE).read_text() == shipped
