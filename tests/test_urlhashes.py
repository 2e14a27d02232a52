"""URL records: what the store hashed from a URL whose index publishes no hash, and the uploads it answered with."""

from __future__ import annotations

import hashlib

from envlock.model.lockfile import Artifact
from envlock.store.store import Store, store_file
from envlock.store.urlhashes import hashed_before, last_hashed, note_upload, record_hashed, uploads_hashed

URL = "https://download.pytorch.org/whl/nightly/cu130/torch-2.9.0.dev20250601-cp312-cp312-linux_x86_64.whl"


def _hashed(store: Store, data: bytes, validator: str | None, *, keep: bool = True) -> Artifact:
    """Record ``data`` as what URL held (as ``fetch_unhashed`` does), the bytes in the store if ``keep``."""
    art = Artifact(sha256=hashlib.sha256(data).hexdigest(), url=URL, size=len(data))
    if keep:
        path = store_file(store, art)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    record_hashed(URL, store, art, validator)
    return art


def test_a_record_names_the_bytes_while_the_store_holds_them(store: Store) -> None:
    assert (hashed_before(URL, store), last_hashed(URL, store)) == (None, None)
    art = _hashed(store, b"first upload", '"etag-1"')
    assert hashed_before(URL, store) == art
    assert last_hashed(URL, store) == art.sha256
    store_file(store, art).unlink()  # removed by hand: the sha256 is still known, the bytes are not
    assert (hashed_before(URL, store), last_hashed(URL, store)) == (None, art.sha256)


def test_the_uploads_seen_are_those_of_the_recorded_bytes(store: Store) -> None:
    art = _hashed(store, b"first upload", '"etag-1"')
    assert uploads_hashed(URL, store, art.sha256) == {'"etag-1"'}
    # Another host's ETag for the same bytes (a load balancer): kept beside the first.
    note_upload(URL, store, art.sha256, '"etag-2"')
    assert uploads_hashed(URL, store, art.sha256) == {'"etag-1"', '"etag-2"'}
    assert _hashed(store, b"first upload", '"etag-3"') == art  # hashed again: every one is kept
    assert uploads_hashed(URL, store, art.sha256) == {'"etag-1"', '"etag-2"', '"etag-3"'}
    # Other bytes uploaded under the URL: the record is theirs, the old uploads are forgotten.
    other = _hashed(store, b"second upload", None)
    assert uploads_hashed(URL, store, art.sha256) == set() == uploads_hashed(URL, store, other.sha256)
    note_upload(URL, store, other.sha256, '"etag-4"')  # no validator recorded for them: none is added
    assert uploads_hashed(URL, store, other.sha256) == set()
    assert hashed_before(URL, store) == other


def test_an_unreadable_or_foreign_record_is_no_record(store: Store) -> None:
    art = _hashed(store, b"bytes", '"etag"')
    (record,) = (store.root / "urls").iterdir()
    for text in ("{not json", '["a list"]', record.read_text().replace(URL, URL + "x")):
        record.write_text(text)
        assert (hashed_before(URL, store), last_hashed(URL, store), uploads_hashed(URL, store, art.sha256)) == (
            None, None, set())
