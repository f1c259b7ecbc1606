"""The shared library refreshes one name at a time, however many names clients send meanwhile.

``SharedVoiceStore`` serialises the refreshes of a name (ask S3, update the cache) with one lock per
name. Clients can send any names, so what it remembers per name must stay bounded; forgetting a lock
while a refresh held it let a second refresh of that name take a new lock and run beside the first.
No S3 request is made here: the lock and what is remembered are all this is about.
"""

from __future__ import annotations

import threading
from pathlib import Path

from speakwire.voices.s3 import S3Location, S3Objects
from speakwire.voices.shared import _NAMES_REMEMBERED, SharedVoiceStore
from speakwire.voices.store import VoiceStore


def shared_store(tmp_path: Path) -> SharedVoiceStore:
    objects = S3Objects(S3Location.parse("s3://speakwire-test/voices"), client=None)
    return SharedVoiceStore(objects, VoiceStore(tmp_path / "cache"), fresh_s=0.0)  # every answer stale at once


def test_a_names_lock_stays_the_same_while_held_however_many_other_names_come_and_go(tmp_path: Path) -> None:
    store = shared_store(tmp_path)
    held = store._name_lock("jane")
    with held:  # a refresh of "jane" under way
        store._evict("jane")  # S3 answered "not saved" for it (stale at once: fresh_s=0)
        for i in range(_NAMES_REMEMBERED + 10):  # meanwhile clients ask for many other names
            with store._name_lock(f"name-{i}"):
                store._evict(f"name-{i}")
        second = threading.Thread(target=lambda: result.append(store._name_lock("jane").acquire(blocking=False)))
        result: list[bool] = []
        second.start()
        second.join()
        assert result == [False]  # another thread refreshing "jane" must wait for the one under way
        assert store._name_lock("jane") is held


def test_what_is_remembered_per_name_stays_bounded(tmp_path: Path) -> None:
    store = shared_store(tmp_path)
    for i in range(3 * _NAMES_REMEMBERED):
        with store._name_lock(f"name-{i}"):
            store._evict(f"name-{i}")
    assert len(store._checked) <= _NAMES_REMEMBERED + 1
    assert len(store._name_locks) == 0  # no one holds a lock: none is kept
