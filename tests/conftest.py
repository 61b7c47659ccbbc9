from pathlib import Path

import pytest

from npmcore.runtime import configure_environment

configure_environment()

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tokenizer():
    from npmcore.encoder import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def default_inputs() -> list[str]:
    from npmcore.corpus import default_corpus

    return default_corpus()


@pytest.fixture(scope="session")
def dump_path(default_inputs) -> str:
    return default_inputs[0]


@pytest.fixture(scope="session")
def news_path(default_inputs) -> str:
    return default_inputs[1]


@pytest.fixture(scope="session")
def enwiki_shard() -> str:
    path = SHARED_DATA / "enwiki_sample" / "wiki_00"
    assert path.exists(), f"test data missing: {path} (the shared data folder must sit beside the repository)"
    return str(path)
