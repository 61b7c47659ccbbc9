"""Snapshots: atomic commit, checksums, refusal of incomplete or corrupted ones."""

import numpy as np
import pytest

from npmcore.storage import (
    FileEntry,
    Manifest,
    SnapshotError,
    SnapshotWriter,
    list_snapshots,
    open_snapshot,
    save_array,
    sha256_file,
    snapshot_id,
)


def write_snapshot(store: str, payload: dict[str, bytes]) -> str:
    snap_id = snapshot_id("test", [{"sha256": "x"}], {"n": len(payload)})
    with SnapshotWriter(store, "test", snap_id) as writer:
        for path, data in payload.items():
            writer.write_bytes(path, data)
        return writer.commit(Manifest("test", snap_id, [], {}, {"files": len(payload)}, dict(writer.files)))


def test_round_trip_and_listing(tmp_path, news_path):
    data = open(news_path, "rb").read()
    url = write_snapshot(str(tmp_path), {"a/news.cor": data, "b.bin": b"\x00\x01"})
    manifest = open_snapshot(url)
    assert manifest.files["a/news.cor"].bytes == len(data)
    assert [u for u, _ in list_snapshots(str(tmp_path), "test")] == [url]
    assert not [p for p in (tmp_path / "test").iterdir() if p.name.startswith(".")]  # staging is gone


def test_flipped_byte_is_caught(tmp_path, news_path):
    url = write_snapshot(str(tmp_path), {"news.cor": open(news_path, "rb").read()})
    path = tmp_path / "test" / url.rsplit("/", 1)[-1] / "news.cor"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="checksum mismatch in news.cor"):
        open_snapshot(url)


def test_missing_manifest_or_file_is_refused(tmp_path):
    url = write_snapshot(str(tmp_path), {"x.bin": b"abc", "y.bin": b"def"})
    (tmp_path / "test" / url.rsplit("/", 1)[-1] / "y.bin").unlink()
    with pytest.raises(SnapshotError, match="file y.bin is missing"):
        open_snapshot(url)
    (tmp_path / "test" / url.rsplit("/", 1)[-1] / "manifest.json").unlink()
    with pytest.raises(SnapshotError, match="manifest.json is missing"):
        open_snapshot(url)
    assert list_snapshots(str(tmp_path), "test") == []


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), SnapshotWriter(str(tmp_path), "test", "abc") as writer:
        writer.write_bytes("part.bin", b"123")
        raise RuntimeError("boom")
    assert list((tmp_path / "test").iterdir()) == []


def test_manifest_must_list_exactly_the_written_files(tmp_path):
    with SnapshotWriter(str(tmp_path), "test", "abc") as writer:
        writer.write_bytes("part.bin", b"123")
        with pytest.raises(SnapshotError, match="disagree"):
            writer.commit(Manifest("test", "abc", [], {}, {}, {"other.bin": FileEntry("0", 0)}))


def test_save_array_hashes_what_it_writes(tmp_path):
    """The checksum taken while writing is the file's own, and the file loads as np.save wrote it."""
    array = np.random.default_rng(0).standard_normal((1_250_000, 4), dtype=np.float32)  # 20 MB: numpy writes 2 chunks
    entry = save_array(str(tmp_path / "a.npy"), array)
    assert entry == sha256_file(str(tmp_path / "a.npy"))
    np.save(tmp_path / "b.npy", array)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
