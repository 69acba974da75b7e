"""The master's CPU leaves out the process's full collections that fall in its threads
(``adloader.host.threads.FullCollections``): they are the process's cost, which a run with
no daemon pays too."""

from __future__ import annotations

import gc
import threading

from adloader.host.threads import FullCollections


def _garbage(n: int) -> list:
    return [[i, {"k": [i]}] for i in range(n)]  # tracked containers: a full collection walks them


def test_a_full_collection_is_counted_for_the_thread_it_ran_in_and_no_other():
    kept = _garbage(200_000)  # something for the collection to walk
    collections = FullCollections().start()
    try:
        other: dict[str, float] = {}

        def elsewhere():
            gc.collect(0)  # a young collection is not the process's full one
            other["spent"] = collections.spent()

        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        gc.collect(2)
        mine = collections.spent()
        assert mine > 0, "the full collection in this thread was not counted"
        assert other["spent"] == 0.0
        assert collections.spent(t.ident) == 0.0
    finally:
        collections.stop()
    assert collections._on not in gc.callbacks  # stopped: the process's callbacks as before
    gc.collect(2)
    assert collections.spent() == mine  # nothing counted once stopped
    del kept


def test_stop_twice_is_harmless():
    collections = FullCollections().start()
    collections.stop()
    collections.stop()
