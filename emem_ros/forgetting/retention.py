"""Retention policies: what is forgotten by age, applied by the maintenance run.

Two kinds (``MemoryConfig``; on a robot the node parameters
``retention.max_age`` and ``retention.rules``, JSON text):

- per layer, ``retention_max_age = {"scene": 86400}``: observations of that
  layer older than that (by their stamp, on the memory's clock) go;
- rules, ``retention_rules = [{"match": "person|man|woman|child", "max_age":
  86400}]``: observations whose text holds one of the alternatives (exact
  words, any case; ``|`` separates alternatives) go after their own age,
  optionally only in ``layer``. Matching ledger experiences are redacted
  (``ledger_redact.py``).

One run gathers every policy's selection and forgets it in one pass: one
audit row (kind ``retention``, who ``retention``), one scrub of the files. A
run that finds nothing writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from emem_ros.forgetting.forget import ForgetReport, Forgetter
from emem_ros.forgetting.selector import Selector, make_selector

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.consolidation.coldstore import ColdStore
    from emem_ros.consolidation.summaries import SummaryWriter
    from emem_ros.core.config import MemoryConfig
    from emem_ros.engine import Engine


def selectors(config: "MemoryConfig", now: float) -> list[Selector]:
    out = []
    for layer, age in sorted(config.retention_max_age.items()):
        out.append(make_selector(layer=layer, until=now - float(age)))
    for rule in config.retention_rules:
        for words in str(rule["match"]).split("|"):
            if words.strip():
                out.append(make_selector(match=words, until=now - float(rule["max_age"]), layer=rule.get("layer")))
    return out


def has_policies(config: "MemoryConfig") -> bool:
    return bool(config.retention_max_age or config.retention_rules)


def apply_retention(engine: "Engine", cold: Optional["ColdStore"],
                    summaries: Optional["SummaryWriter"] = None) -> Optional[ForgetReport]:
    """Forget what the policies say is too old; None when there are no policies."""
    if not has_policies(engine.config):
        return None
    chosen = selectors(engine.config, engine.now())
    describe = "; ".join(f"layer {layer} older than {age:g} s"
                         for layer, age in sorted(engine.config.retention_max_age.items()))
    rules = len(engine.config.retention_rules)
    reason = "retention policy" + (f": {describe}" if describe else "") + (f"; {rules} word rule(s)" if rules else "")
    return Forgetter(engine, cold, summaries=summaries).forget_many(chosen, reason=reason, who="retention", kind="retention",
                                               skip_if_empty=True)
