"""The fleet store: many robots' memories in one PostgreSQL (PostGIS + pgvector), fed from their logs.

Each robot keeps its own SQLite memory and works offline; ``sync`` ships its
operation log into the fleet store when the network allows. Modules:
``schema`` (DDL, partitions), ``translate`` (log statements -> fleet
operations), ``apply`` (operations -> SQL, batched), ``local`` (reading a
robot's files without disturbing it), ``sync`` (cursor, batches, the
checkpoint fallback), ``robots`` (registering robots and their frames),
``transform`` (robot frame -> fleet frame). Needs ``psycopg`` (the ``fleet``
extra); nothing here is imported by the memory core.
"""

from emem_ros.fleet.errors import FleetError, FleetSchemaError, FleetUnavailableError, LogGapError
from emem_ros.fleet.transform import RigidTransform

__all__ = ["FleetError", "FleetSchemaError", "FleetUnavailableError", "LogGapError", "RigidTransform"]
