"""sensor_msgs/BatteryState: "battery 54% (11.9 V, discharging)", value = charge fraction 0..1."""

from __future__ import annotations

from typing import Any, Optional

from emem_ros.ingest.drafts import ObservationDraft
from emem_ros.ros.adapters.base import LayerLike, SkipMessage, as_float, draft, message_stamp

STATUS_WORDS = {0: "unknown", 1: "charging", 2: "discharging", 3: "not charging", 4: "full"}
HEALTH_WORDS = {
    0: "unknown", 1: "good", 2: "overheat", 3: "dead", 4: "overvoltage", 5: "unspecified failure",
    6: "cold", 7: "watchdog timer expired", 8: "safety timer expired",
}


def adapt_battery(msg: Any, layer: LayerLike, receive_time: float) -> list[ObservationDraft]:
    fraction, source = _fraction(msg)
    status = STATUS_WORDS.get(int(msg.power_supply_status), "unknown")
    health = HEALTH_WORDS.get(int(msg.power_supply_health), "unknown")
    voltage = as_float(msg.voltage)

    details = []
    if voltage is not None and voltage > 0:
        details.append(f"{voltage:.1f} V")
    if status != "unknown":
        details.append(status)
    if health not in ("unknown", "good"):
        details.append(health)
    if getattr(msg, "present", True) is False:
        details.append("not present")
    text = f"battery {round(fraction * 100)}%" + (f" ({', '.join(details)})" if details else "")

    metadata: dict[str, Any] = {"percentage": fraction, "fraction_source": source, "status": status,
                                "health": health}
    for name in ("voltage", "current", "temperature", "charge", "capacity"):
        number = as_float(getattr(msg, name, None))
        if number is not None:
            metadata[name] = number
    location = getattr(msg, "location", "")
    if isinstance(location, str) and location:
        metadata["location"] = location
    return [draft(layer, text, message_stamp(msg, receive_time), value=fraction, metadata=metadata)]


def _fraction(msg: Any) -> tuple[float, str]:
    """Charge on 0..1: the percentage field, else charge / capacity (NaN means unmeasured)."""
    percentage = as_float(msg.percentage)
    if percentage is not None and 0.0 <= percentage <= 1.0:
        return percentage, "percentage"
    if percentage is not None and 1.0 < percentage <= 100.0:
        return percentage / 100.0, "percentage (0..100 scale)"  # drivers that ignore the 0..1 spec
    ratio = _ratio(msg.charge, msg.capacity) or _ratio(msg.charge, getattr(msg, "design_capacity", None))
    if ratio is not None:
        return ratio, "charge/capacity"
    raise SkipMessage(f"battery percentage is {msg.percentage!r} and charge/capacity is unknown")


def _ratio(charge: Any, capacity: Any) -> Optional[float]:
    c, cap = as_float(charge), as_float(capacity)
    if c is None or cap is None or cap <= 0 or c < 0:
        return None
    return min(1.0, c / cap)
