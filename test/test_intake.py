"""Intake policy: sampling by message time, change detection, per-subject tracks."""

from __future__ import annotations

import threading

import pytest

from emem_ros.core.errors import InvalidInputError
from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.intake import SUBJECT_KEY, IntakeConfig, IntakePolicy

T0 = 1_700_000_000.0


def det(label: str, stamp: float, layer: str = "detections") -> ObservationDraft:
    return ObservationDraft(text=label, stamp=stamp, layer=layer, metadata={SUBJECT_KEY: label})


def reading(text: str, value: float, stamp: float, layer: str = "battery") -> ObservationDraft:
    return ObservationDraft(text=text, stamp=stamp, layer=layer, source_type="interoception", value=value)


def test_mode_all_keeps_everything_and_counts():
    policy = IntakePolicy("all")
    assert all(policy.accept(det("red mug", T0)) for _ in range(50))
    assert policy.counts()["detections"].accepted == 50
    assert policy.counts()["detections"].dropped == 0


def test_30hz_identical_detections_sampled_at_one_second_yield_one_per_second():
    policy = IntakePolicy("sampled", min_period=1.0)
    kept = [k for k in range(300) if policy.accept(det("red mug", T0 + k / 30.0))]  # 10 s at 30 Hz
    assert len(kept) == 10
    assert kept == [30 * s for s in range(10)]  # exactly on each second, float stamps notwithstanding
    counts = policy.counts()["detections"]
    assert (counts.accepted, counts.dropped) == (10, 290)


def test_objects_seen_in_the_same_frame_are_sampled_separately():
    policy = IntakePolicy("sampled", min_period=1.0)
    frame = [det("red mug", T0), det("chair", T0), det("red mug", T0)]
    assert [policy.accept(d) for d in frame] == [True, True, False]


def test_sampling_is_per_layer():
    policy = IntakePolicy("sampled", min_period=1.0)
    assert policy.accept(ObservationDraft("x", T0, "a"))
    assert policy.accept(ObservationDraft("x", T0, "b"))
    assert not policy.accept(ObservationDraft("x", T0 + 0.5, "a"))
    assert set(policy.counts()) == {"a", "b"}


def test_change_only_drops_repeats_until_max_silence():
    policy = IntakePolicy("sampled", min_period=1.0, change_only=True, max_silence=60.0)
    scene = "a kitchen with a red mug"
    assert policy.accept(ObservationDraft(scene, T0, "scene"))
    assert not policy.accept(ObservationDraft(scene, T0 + 5, "scene"))
    assert policy.accept(ObservationDraft("a hallway", T0 + 6, "scene"))
    assert not policy.accept(ObservationDraft("a hallway", T0 + 30, "scene"))
    assert policy.accept(ObservationDraft("a hallway", T0 + 66.0, "scene"))  # steady state, re-recorded


def test_change_only_still_respects_min_period():
    policy = IntakePolicy("sampled", min_period=2.0, change_only=True)
    assert policy.accept(ObservationDraft("a", T0, "scene"))
    assert not policy.accept(ObservationDraft("b", T0 + 1, "scene"))
    assert policy.accept(ObservationDraft("b", T0 + 2, "scene"))


def test_max_silence_zero_never_re_records_a_steady_state():
    policy = IntakePolicy("sampled", min_period=0.0, change_only=True, max_silence=0.0)
    assert policy.accept(ObservationDraft("ok", T0, "scene"))
    assert not policy.accept(ObservationDraft("ok", T0 + 10_000, "scene"))


def test_numeric_drafts_change_when_value_moves_beyond_tolerance():
    policy = IntakePolicy("sampled", min_period=0.0, change_only=True, value_tolerance=0.01)
    assert policy.accept(reading("battery 54% (11.9 V, discharging)", 0.540, T0))
    # Text differs only in numbers and the value moved 0.4 %: not news.
    assert not policy.accept(reading("battery 54% (11.8 V, discharging)", 0.536, T0 + 1))
    assert not policy.accept(reading("battery 53% (11.8 V, discharging)", 0.532, T0 + 2))
    # Compared with the last *kept* reading, the drift adds up: 0.540 -> 0.528 is 1.2 %.
    assert policy.accept(reading("battery 53% (11.8 V, discharging)", 0.528, T0 + 3))


def test_numeric_drafts_change_when_the_words_change():
    policy = IntakePolicy("sampled", min_period=0.0, change_only=True, value_tolerance=0.05)
    assert policy.accept(reading("battery 54% (discharging)", 0.54, T0))
    assert policy.accept(reading("battery 54% (charging)", 0.54, T0 + 1))


def test_a_clock_jump_back_resets_the_track():
    policy = IntakePolicy("sampled", min_period=1.0, change_only=True)
    assert policy.accept(det("red mug", T0 + 100))
    assert not policy.accept(det("red mug", T0 + 100.2))
    assert not policy.accept(det("red mug", T0 + 99.9))  # out of order by a little: a duplicate
    assert policy.accept(det("red mug", T0))  # bag looped: a new timeline


def test_reset_forgets_tracks_but_keeps_counts():
    policy = IntakePolicy("sampled", min_period=10.0)
    policy.accept(det("red mug", T0))
    assert not policy.accept(det("red mug", T0 + 1))
    policy.reset()
    assert policy.accept(det("red mug", T0 + 2))
    assert policy.counts()["detections"].accepted == 2


def test_tracks_are_bounded():
    policy = IntakePolicy("sampled", min_period=100.0, max_tracks=3)
    for label in ("a", "b", "c", "d"):
        assert policy.accept(det(label, T0))
    assert policy.accept(det("a", T0 + 1))  # evicted, so treated as new
    assert not policy.accept(det("d", T0 + 1))


def test_from_config_matches_constructor():
    config = IntakeConfig("sampled", 2.0, True, 0.5, 30.0)
    assert IntakePolicy.from_config(config).config == config


@pytest.mark.parametrize("kwargs, field", [
    ({"mode": "sometimes"}, "mode"),
    ({"mode": "sampled", "min_period": -1.0}, "min_period"),
    ({"mode": "sampled", "min_period": float("nan")}, "min_period"),
    ({"mode": "sampled", "value_tolerance": -0.1}, "value_tolerance"),
    ({"mode": "sampled", "max_silence": "long"}, "max_silence"),
    ({"mode": "all", "change_only": True}, "change_only"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(InvalidInputError, match=field):
        IntakePolicy(**kwargs)


def test_concurrent_callbacks_count_every_draft():
    policy = IntakePolicy("sampled", min_period=1.0)

    def feed(layer: str) -> None:
        for k in range(3000):
            policy.accept(ObservationDraft("x", T0 + k / 30.0, layer))

    threads = [threading.Thread(target=feed, args=(f"layer{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = policy.counts()
    assert all(c.accepted == 100 and c.accepted + c.dropped == 3000 for c in counts.values())
