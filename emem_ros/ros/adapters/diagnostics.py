"""diagnostic_msgs/DiagnosticArray: one interoceptive draft per status.

"WARN motor_left: temperature high (temp=71.2, current=3.1)"; value = level
(0 OK, 1 WARN, 2 ERROR, 3 STALE), subject = the status name so that a sampled
intake policy thins each component separately.
"""

from __future__ import annotations

from typing import Any

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import (
    LayerLike,
    SkipMessage,
    byte_value,
    cap_text,
    draft,
    message_stamp,
    note,
    text_field,
)
from emem_ros.ros.intake import SUBJECT_KEY

LEVEL_WORDS = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
TEXT_VALUES = 4  # key values shown in the text
META_VALUES = 16  # key values kept in metadata
VALUE_CHARS = 32


def adapt_diagnostics(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    statuses = list(msg.status)
    if not statuses:
        raise SkipMessage("diagnostic array has no status")
    stamp = message_stamp(msg, receive_time)
    drafts = []
    for index, status in enumerate(statuses):
        level = byte_value(status.level)
        word = LEVEL_WORDS.get(level, f"LEVEL{level}")
        name = text_field(status.name, "status.name").strip()
        message = text_field(status.message, "status.message").strip()
        if not name and not message:
            note(f"status {index} has neither name nor message")
            continue
        pairs = [(text_field(kv.key, "key").strip(), text_field(kv.value, "value").strip())
                 for kv in list(status.values)[:META_VALUES]]
        pairs = [(k, v) for k, v in pairs if k]
        text = f"{word} {name or 'diagnostics'}" + (f": {message}" if message else "")
        if pairs:
            shown = ", ".join(f"{k}={cap_text(v, VALUE_CHARS)}" for k, v in pairs[:TEXT_VALUES])
            text += f" ({shown})"
        metadata: dict[str, Any] = {SUBJECT_KEY: name, "name": name, "level": level, "level_word": word,
                                    "message": message}
        hardware_id = getattr(status, "hardware_id", "")
        if isinstance(hardware_id, str) and hardware_id:
            metadata["hardware_id"] = hardware_id
        if pairs:
            metadata["values"] = dict(pairs)
        drafts.append(draft(layer, text, stamp, value=float(level), metadata=metadata))
    if not drafts:
        raise SkipMessage("no status has a name or a message")
    return drafts
