"""A ready server's start-up objects are out of the collector's way, and a stopped server's engine is freed.

Collections that walk a loaded model stop every stream (``server.gc_heap``); freezing them must not turn
into a leak when the engine is released: a server stopped and started in one process frees the old one.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import httpx

from speakwire.server.state import ServerState
from speakwire.settings import Settings
from support.live_server import start_server


def test_ready_server_freezes_its_engine_and_a_stopped_one_frees_it() -> None:
    live = start_server(Settings())  # its own engine, loaded and released by the server
    try:
        engine = live.state.engine
        assert engine is not None
        assert gc.get_freeze_count() > 0
        assert not any(obj is engine for obj in gc.get_objects())  # collections skip it
        body = {"input": "Still speaking.", "response_format": "pcm"}
        response = httpx.post(f"{live.url}/v1/audio/speech", json=body)
        assert response.status_code == 200 and len(response.content) > 0
        engine_ref = weakref.ref(engine)
        del engine
    finally:
        live.stop()
    assert gc.get_freeze_count() == 0
    del live
    gc.collect()
    assert engine_ref() is None


async def test_a_server_that_never_became_ready_leaves_the_heap_as_it_found_it(tmp_path: Path) -> None:
    """Its load failed before the freeze: stopping it thaws nothing (another server in the process keeps its
    frozen heap), and it freezes nothing either."""
    gc.freeze()  # as a ready server elsewhere in this process left it
    try:
        state = ServerState(Settings(model=str(tmp_path / "no-such-voice.onnx"), data_dir=tmp_path / "data"))
        await state.start()
        assert state._load_task is not None
        await state._load_task
        assert state.load_error is not None and not state.ready
        await state.stop()
        assert gc.get_freeze_count() > 0  # (a frozen object can still go by its reference count)
    finally:
        gc.unfreeze()
