"""Query encoders: an encoder of queries trained for the vectors of one passage encoder.

NPM answers by comparing a query's two mask vectors with the corpus's token vectors. The two sides
need not be one encoder: query-side training (:mod:`npmcore.adapt.query_train`) adapts a copy of the
passage encoder to its queries while the passage encoder, and so every index built with it, stays
as it is (a served index of billions of vectors is never embedded again for it).

A query encoder is an ordinary encoder folder (a masked LM and its tokenizer) with a
``query_encoder.json`` naming its passage encoder and that encoder's weights (fingerprint). NPM
encodes queries with it and passages with the encoder it names; an index whose vectors another
encoder made is refused with one line (:func:`check_index`).
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from npmcore.encoder import default_encoder_path, local_model_dir

QUERY_ENCODER = "query_encoder.json"


@dataclass(frozen=True)
class PassageSide:
    """What a query encoder was trained against."""

    encoder: str  # the passage encoder: "default" (the shipped one), a folder, a cached name or a models:/ URI
    fingerprint: str  # its weights (npmcore.encoder.encoder_fingerprint)
    trained: dict  # how: the index, the examples, the steps (the run's config)


def passage_side(source: str) -> PassageSide | None:
    """The passage side of the encoder at ``source`` when it is a query encoder; None for any other encoder."""
    path = Path(local_model_dir(source)) / QUERY_ENCODER
    if not path.is_file():
        return None
    return PassageSide(**json.loads(path.read_text()))


def write_passage_side(folder: Path, side: PassageSide) -> None:
    """Mark an encoder folder as a query encoder of ``side.encoder``."""
    (Path(folder) / QUERY_ENCODER).write_text(json.dumps(asdict(side), indent=1, sort_keys=True))


def passage_source(side: PassageSide) -> str:
    """Where the passage encoder of a query encoder loads from."""
    return str(default_encoder_path()) if side.encoder == "default" else side.encoder


def embedding_encoder(source: str | None) -> str | None:
    """The encoder that embeds passages for the encoder at ``source``: a query encoder's passage encoder
    (None: the shipped one), any other encoder itself. An index built "with" a query encoder holds its passage
    encoder's vectors: the datastore of that encoder is reused, nothing is embedded again."""
    side = None if source is None else passage_side(source)
    if side is None:
        return source
    return None if side.encoder == "default" else side.encoder


def check_passage_weights(query_source: str, side: PassageSide, fingerprint: str) -> None:
    """Refuse a passage encoder whose weights are not those the query encoder was trained for.

    Raises:
        ValueError: another encoder answers to the name the query encoder gives.
    """
    if fingerprint != side.fingerprint:
        raise ValueError(
            f"query encoder {query_source} was trained for passage encoder {side.encoder!r} with weights "
            f"{side.fingerprint}, but {side.encoder!r} now has weights {fingerprint}"
        )


def check_index(query_source: str, side: PassageSide, index_url: str, index_fingerprint: str | None) -> None:
    """Refuse an index whose vectors another encoder than the query encoder's passage encoder made (an index
    of BM25 alone holds none: its passages are encoded by the passage encoder, and it is accepted).

    Raises:
        ValueError: one line naming both encoders.
    """
    if index_fingerprint is not None and index_fingerprint != side.fingerprint:
        raise ValueError(
            f"query encoder {query_source} was trained for passage encoder {side.encoder!r} (weights "
            f"{side.fingerprint}), but index {index_url} holds vectors of weights {index_fingerprint}: use a query "
            "encoder trained for that index's encoder, or an index built with its passage encoder"
        )
