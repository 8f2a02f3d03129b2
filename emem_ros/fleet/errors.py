"""Errors of the fleet store, in words the person running a fleet can act on."""

from __future__ import annotations

from emem_ros.core.errors import EmemError


class FleetError(EmemError):
    """The fleet store refused or could not do what was asked; nothing half-done is kept."""


class FleetUnavailableError(FleetError):
    """PostgreSQL cannot be reached (down, network, wrong address): retry later, nothing is lost."""


class FleetSchemaError(FleetError):
    """The database holds no fleet store, another version of it, or lacks an extension."""


class LogGapError(FleetError):
    """The robot's operation log no longer holds records the fleet has not applied."""
