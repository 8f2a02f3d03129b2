"""Forget keeps the tools' text catalog up to date by dropping the deleted rows (no rebuild), exactly."""

from __future__ import annotations

import threading
import time

from emem_ros.forgetting import make_selector
from emem_ros.forgetting.forget import Forgetter
from emem_ros.storage.events import Commit
from emem_ros.tools.catalog import TextCatalog

QUESTIONS = [("locate", "chair"), ("locate", "red mug"), ("semantic_search", "a man at the door"),
             ("semantic_search", "lamp"), ("spatial_query", None), ("recall", "chair")]


def _fill(memory, clock) -> list[str]:
    ids: list[str] = []
    t0 = clock.now - 5000
    for episode in range(3):
        memory.start_episode(f"round {episode}")
        for i in range(120):
            t = t0 + episode * 1000 + i
            text = ("chair", "red mug", "lamp", f"a man at the door {i % 4}", "desk")[i % 5]
            layer = "scene" if text.startswith("a man") else "detections"
            ids.append(memory.add(text, x=float(i % 9), y=float(i % 5), timestamp=t, layer_name=layer))
            if i % 30 == 0:
                ids.append(memory.add(f"battery {i}%", layer_name="battery", source_type="interoception",
                                      timestamp=t, value=i / 100))
        memory.end_episode(f"round {episode}")
    for i in range(40):  # outside any episode
        ids.append(memory.add(("chair", "box")[i % 2], x=2.0, y=float(i % 3), timestamp=t0 + 4000 + i,
                              layer_name="detections"))
    memory.flush()
    return ids


def _catalog(memory) -> TextCatalog:
    catalog = memory.tools.env.catalog
    catalog.sync()
    return catalog


def _fresh(memory) -> dict[str, object]:
    fresh = TextCatalog(memory.store)
    fresh.sync()
    return fresh.snapshot()


def _answers(memory) -> list[str]:
    out = []
    for tool, query in QUESTIONS:
        if tool == "spatial_query":
            out.append(str(memory.tools.call(tool, x=2.0, y=1.0, radius=3.0)))
        else:
            out.append(str(memory.tools.call(tool, query)))
    return out


def test_the_catalog_after_forgets_equals_a_fresh_one_without_a_rebuild(make_memory, clock):
    memory = make_memory()
    ids = _fill(memory, clock)
    catalog = _catalog(memory)
    builds = catalog.builds
    chairs = [r[0] for r in memory.store.reader().execute(
        "SELECT o.id FROM observations o JOIN texts t ON t.id = o.text_id WHERE t.text = 'chair' ORDER BY o.stamp")]
    # the first and last chair of all (first/last stamps go), rows in the middle, a body reading, every lamp
    memory.forget(ids=[f"obs-{chairs[0]}", f"obs-{chairs[-1]}", ids[7], ids[8], ids[200]])
    assert _catalog(memory).snapshot() == _fresh(memory)
    battery = [r[0] for r in memory.store.reader().execute(
        "SELECT id FROM observations WHERE source_type = 'interoception'")]
    memory.forget(ids=[f"obs-{b}" for b in battery])
    assert _catalog(memory).snapshot() == _fresh(memory)
    assert "battery" not in _catalog(memory).body_layers
    memory.forget(match="lamp")
    memory.forget(match="door 2")
    memory.forget(layer="scene", since=clock.now - 4000, until=clock.now - 3000)
    assert _catalog(memory).snapshot() == _fresh(memory)
    assert catalog.builds == builds, "a forget made the catalog rebuild"
    assert str(memory.tools.call("semantic_search", "lamp")).startswith("Nothing remembered")


def test_answers_after_a_forget_equal_those_of_a_freshly_opened_memory(make_memory, clock):
    memory = make_memory(consolidation_window=60.0, consolidation_min_samples=2)
    ids = _fill(memory, clock)
    clock.advance(120)
    memory.consolidate_time_window()
    _answers(memory)  # the catalog and the query cache are warm
    memory.forget(ids=ids[::7])
    memory.forget(match="red mug", since=clock.now - 4200)
    after = _answers(memory)
    memory.close()
    reopened = make_memory()
    assert _answers(reopened) == after


def test_a_sync_between_commit_and_notice_counts_each_deletion_once(make_memory, clock):
    """A question may read a snapshot holding a deletion before its notice arrives: commit numbers decide.

    The notice of the forget's deleting commit is held back while a sync runs; whichever comes first, the
    row the catalog counted goes once, and a row written after the last catch-up (never counted) not at all.
    """
    memory = make_memory()
    _fill(memory, clock)
    env = memory.tools.env
    catalog = _catalog(memory)
    counted = memory.store.reader().execute("SELECT MIN(id) FROM observations WHERE layer='detections'").fetchone()[0]
    new = memory.add("chair", x=2.0, y=2.0, timestamp=clock.now - 1, layer_name="detections")
    memory.flush()  # not caught up yet

    committed, release = threading.Event(), threading.Event()

    def gate(commit: Commit) -> None:
        if commit.removed_observations:
            committed.set()
            release.wait(5)

    memory.store.commits.unsubscribe(env._on_commit)
    memory.store.commits.subscribe(gate)
    memory.store.commits.subscribe(env._on_commit)
    forget = threading.Thread(target=lambda: Forgetter(memory.engine, None).forget(
        make_selector(ids=[f"obs-{counted}", new])))
    forget.start()
    assert committed.wait(5)
    asking = threading.Thread(target=catalog.sync)  # its snapshot holds the deletion; the notice is not out
    asking.start()
    time.sleep(0.1)
    release.set()
    asking.join()
    forget.join()
    catalog.sync()
    assert catalog.snapshot() == _fresh(memory)


def test_each_erase_transaction_deletes_at_most_the_batch(make_memory, clock):
    memory = make_memory()
    for i in range(600):
        memory.add(f"note {i % 7}", x=float(i % 10), y=0.0, timestamp=clock.now - 2000 + i, layer_name="notes")
    memory.flush()
    seen: list[int] = []
    memory.store.commits.subscribe(lambda commit: seen.append(len(commit.removed_observations)))
    report = Forgetter(memory.engine, None, batch=40).forget(make_selector(layer="notes"))
    assert report.observations == 600
    assert sum(seen) == 600 and max(seen) <= 40
