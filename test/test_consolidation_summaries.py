"""Fallback summaries: deduplicated, counted, ordered; numbers as ranges; never a raw ' | ' join."""

from __future__ import annotations

import calendar

from emem_ros.consolidation.rows import LayerKind, ObsRow, classify_layer, detection_labels
from emem_ros.consolidation.summaries import SummaryWriter, digest, numeric_ranges

T0 = calendar.timegm((2025, 11, 22, 10, 0, 0))


def row(n: int, text: str, layer: str, *, t: float = 0.0, meta: str | None = None, value=None,
        source: str = "perception") -> ObsRow:
    return ObsRow(n, T0 + t, layer, source, 3.1, 4.2, 0.0, n, text, 1.0, None, value, meta)


def kitchen_rows() -> list[ObsRow]:
    rows = []
    labels = ["red mug", "chair", "red mug", "refrigerator", "red mug", "chair", "red mug"]
    for i, label in enumerate(labels):
        rows.append(row(i, label, "detections", t=i * 100, meta=f'{{"class_id":"{label}"}}'))
    for i in range(3):
        rows.append(row(10 + i, "a kitchen with a red mug on the table", "scene", t=i * 400))
    rows.append(row(20, "a kitchen counter", "scene", t=900))
    for i, pct in enumerate([95, 90, 85, 80]):
        rows.append(row(30 + i, f"battery {pct}%", "battery", t=i * 400, value=pct / 100, source="interoception"))
    return sorted(rows, key=lambda r: r.stamp)


def test_a_place_reads_like_a_note_not_a_log():
    rows = kitchen_rows()
    kinds = {"detections": LayerKind.LABELS, "scene": LayerKind.TEXT, "battery": LayerKind.READINGS}
    text = digest(rows, kinds, (3.1, 4.2, 0.0), rows[0].stamp, rows[-1].stamp).text
    assert text == ("kitchen area (3.1, 4.2), 10:00–10:20: red mug ×4, chair ×2, refrigerator; "
                    "scene: a kitchen with a red mug on the table ×3 / a kitchen counter; battery 95%→80%")
    assert " | " not in text


def test_numbers_become_ranges():
    assert numeric_ranges(["battery 95%", "battery 97%", "battery 80%"]) == "battery 95%→80% (range 80–97%)"
    assert numeric_ranges(["temp 41.5 C", "temp 42.0 C"]) == "temp 41.5 C→42.0 C"
    assert numeric_ranges(["a kitchen", "a hallway"]) is None
    rows = [row(i, "ok", "battery", value=v, source="interoception") for i, v in enumerate([0.95, 0.9, 0.8])]
    text = digest(rows, {"battery": LayerKind.READINGS}, None, T0, T0).text
    assert text.endswith("battery 0.95→0.8")


def test_layers_are_classified_from_their_rows():
    assert classify_layer([row(1, "red mug", "d"), row(2, "chair", "d")]) is LayerKind.LABELS
    assert classify_layer([row(1, "the robot saw a red mug on the table", "s")]) is LayerKind.TEXT
    assert classify_layer([row(1, "cup 0.93 left", "d", meta='{"class_id":"cup"}')]) is LayerKind.LABELS
    assert classify_layer([row(1, "battery 50%", "b", source="interoception")]) is LayerKind.READINGS
    assert detection_labels(row(1, "chair, table", "d")) == ["chair", "table"]
    assert detection_labels(row(1, "x", "d", meta='{"detections":[{"class_id":"cup"},{"label":"fork"}]}')) == [
        "cup", "fork"]


class Flaky:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def summarize(self, texts, context):
        self.calls += 1
        return self.answers.pop(0) if self.answers else None


def test_the_writer_falls_back_and_stops_asking_a_failing_llm():
    writer = SummaryWriter(Flaky(["A kitchen with a red mug.", None, None, None, "late"]))
    assert writer.write(["red mug ×4"], "ctx", "fallback", prefix="kitchen area") == (
        "kitchen area: A kitchen with a red mug.", "llm")
    results = [writer.write(["x"], "ctx", "fallback") for _ in range(5)]
    assert results == [("fallback", "fallback")] * 5
    assert writer.summarizer.calls == 4  # three failures in a row, then it stops asking this run
    writer.reset()
    assert writer.write(["x"], "ctx", "fallback") == ("late", "llm")
    assert (writer.stats.llm, writer.stats.fallback, writer.stats.llm_failures) == (2, 5, 3)
