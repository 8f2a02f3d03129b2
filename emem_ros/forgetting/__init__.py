"""Forgetting with proof: erase what a selector names from the memory and every file it keeps.

``selector`` (what), ``select`` (which rows), ``erase`` (SQLite rows and what
derives from them), ``scrub`` (the bytes: FTS, vectors, WAL, log, cold store,
dead letters), ``ledger_redact`` (experiences), ``audit`` (the trail),
``retention`` (policies the maintenance timer applies), ``forget`` (the order).
"""

from emem_ros.forgetting.forget import ForgetReport, Forgetter
from emem_ros.forgetting.selector import Selector, make_selector

__all__ = ["ForgetReport", "Forgetter", "Selector", "make_selector"]
