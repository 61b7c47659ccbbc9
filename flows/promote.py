"""Flow ``promote``: point the registry's ``champion`` alias at a trained encoder if it beats the
current champion on the dev evaluation (or if there is none yet).

The rule: both encoders are evaluated on the same dev data (default: LAMA T-REx and
Google-RE dev facts, BM25-restricted, and the cloze dev facts of the default corpus; an
encoder other than the index's encodes the passages again, so no index is rebuilt), and the
candidate takes the alias when its mean score is higher. The decision, both scores and the
dev data are recorded as tags of the candidate's registered version. The train deployment promotes
what it trains; ``npmcore promote`` applies the rule to any version (``--force``: always).
"""

from mlflow import MlflowClient
from prefect import flow
from pydantic import BaseModel, Field

from flows.evaluate import EvalParams, evaluate
from flows.params import ClusterParams, StoreURL, default_store
from npmcore.tracking import REGISTERED_MODEL, tracking
from npmcore.tracking_store import tracking_uri


class PromoteParams(BaseModel):
    model: str = Field(description="The candidate: a registered version, models:/npm-encoder/N.")
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    alias: str = Field("champion", description="The alias to move.")
    force: bool = Field(False, description="Move the alias without evaluating.")
    tasks: list[str] = Field(["trex", "google_re", "cloze"], description="Dev tasks of the comparison.")
    data: str | None = Field(
        None, description="The cloze task's dev file; empty = the default corpus's cloze dev facts."
    )
    corpus: str | None = Field(None, description="Evaluate against this corpus snapshot instead of the tasks' own.")
    limit: int = Field(100, ge=1, description="Dev examples per task.")
    cluster: ClusterParams = Field(default_factory=ClusterParams)


class Promotion(BaseModel):
    model: str
    alias: str
    promoted: bool
    reason: str
    champion: str | None  # the version the alias pointed at before; None: there was none
    score: float | None  # the candidate's mean dev score (None: not evaluated)
    champion_score: float | None


def dev_score(model: str, params: PromoteParams) -> float:
    """Mean score of ``model`` over the dev tasks (each an MLflow evaluation run, cached)."""
    rows = evaluate(
        EvalParams(
            tasks=params.tasks, store=params.store, model=model, data=params.data, corpus=params.corpus,
            limit=params.limit, split="dev", cluster=params.cluster,
        )
    )  # fmt: skip
    return sum(r.score for r in rows) / len(rows)


@flow(name="promote")
def promote(params: PromoteParams) -> Promotion:
    """Apply the promotion rule to ``params.model``; returns the decision (also tagged on the version)."""
    if not params.model.startswith(f"models:/{REGISTERED_MODEL}/"):
        raise ValueError(f"promote a registered version, models:/{REGISTERED_MODEL}/N, not {params.model!r}")
    version = params.model.rsplit("/", 1)[1]
    uri = tracking_uri(params.store)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    aliases = client.get_registered_model(REGISTERED_MODEL).aliases
    champion = f"models:/{REGISTERED_MODEL}/{aliases[params.alias]}" if params.alias in aliases else None
    score = champion_score = None
    if params.force:
        promoted, reason = True, "forced"
    elif champion is None:
        promoted, reason = True, f"no {params.alias} yet"
    elif champion == params.model:
        promoted, reason = True, f"already {params.alias}"
    else:
        score, champion_score = dev_score(params.model, params), dev_score(champion, params)
        promoted = score > champion_score
        verdict = "beats" if promoted else "does not beat"
        reason = f"dev score {score:.4f} {verdict} {champion}'s {champion_score:.4f}"
    with tracking(uri, None):
        if promoted:
            client.set_registered_model_alias(REGISTERED_MODEL, params.alias, version)
        tags = {
            "promotion.decision": "promoted" if promoted else "kept", "promotion.reason": reason,
            "promotion.dev_tasks": ",".join(params.tasks) if score is not None else "none (not evaluated)",
        }  # fmt: skip
        for key, value in tags.items():
            client.set_model_version_tag(REGISTERED_MODEL, version, key, value)
    return Promotion(
        model=params.model, alias=params.alias, promoted=promoted, reason=reason, champion=champion, score=score,
        champion_score=champion_score,
    )  # fmt: skip
