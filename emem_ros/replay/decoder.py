"""Raw CDR bytes of a bag connection -> message object, or a reason why not.

The typestore decides first. A bag recorded with a type the typestore lacks
(a robot's custom message), or with a definition that differs from the
typestore's (its RIHS01 hash disagrees, e.g. a Jazzy bag read with Humble
types), is decoded with the definition the bag itself carries, as
``ros2 bag play`` would. Only a type that neither knows is skipped; the
reason is kept once per connection and every skipped message is counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from rosbags.interfaces import MessageDefinitionFormat
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore

IDL_SEPARATOR = "=" * 80 + "\n"


class DecodeError(Exception):
    """One message could not be turned into an object; the message says why."""


@dataclass(frozen=True)
class Route:
    """How one connection's messages are decoded."""

    store: Any
    source: str
    """'typestore' or 'bag definition'."""


class Decoder:
    def __init__(self, typestore: Any, distro: str = "humble") -> None:
        self.typestore = typestore
        self.distro = distro
        self._routes: dict[int, Optional[Route]] = {}
        self._reasons: dict[int, str] = {}
        self.notes: list[str] = []
        """Things a person should know about the decoding (bag definitions used)."""

    def reason(self, connection: Any) -> Optional[str]:
        """None when ``connection`` can be decoded, else why it cannot (resolved once)."""
        self._route(connection)
        return self._reasons.get(connection.id)

    def decode(self, connection: Any, raw: bytes) -> Any:
        route = self._route(connection)
        if route is None:
            raise DecodeError(self._reasons[connection.id])
        try:
            return route.store.deserialize_cdr(raw, connection.msgtype)
        except Exception as exc:  # truncated or corrupt bytes raise struct, index, unicode and value errors
            raise DecodeError(f"could not deserialize a {connection.msgtype} message "
                              f"({type(exc).__name__}: {exc})") from None

    # ------------------------------------------------------------------ internals
    def _route(self, connection: Any) -> Optional[Route]:
        key = connection.id
        if key in self._routes:
            return self._routes[key]
        route: Optional[Route] = None
        msgtype = connection.msgtype
        known = msgtype in self.typestore.types
        differs = known and self._hash_differs(connection)
        if known and not differs:
            route = Route(self.typestore, "typestore")
        else:
            store, problem = self._bag_store(connection)
            if store is not None:
                route = Route(store, "bag definition")
                why = "differs from" if differs else "is missing from"
                self.notes.append(f"{connection.topic}: {msgtype} {why} the {self.distro} typestore; "
                                  "decoded with the definition recorded in the bag")
            elif known:  # the hash differs but the bag has no usable definition: try ours anyway
                route = Route(self.typestore, "typestore")
                self.notes.append(f"{connection.topic}: the bag's {msgtype} hash differs from the {self.distro} "
                                  f"typestore's and the bag has no usable definition ({problem}); decoding with ours")
            else:
                self._reasons[key] = (f"message type {msgtype} is unknown to the {self.distro} typestore "
                                      f"and {problem}")
        self._routes[key] = route
        return route

    def _hash_differs(self, connection: Any) -> bool:
        digest = getattr(connection, "digest", "") or ""
        if not digest.startswith("RIHS01_"):
            return False  # older bags record no type hash (or an md5 of ROS 1): nothing to compare
        try:
            differs: bool = self.typestore.hash_rihs01(connection.msgtype) != digest
            return differs
        except Exception:
            return False

    @staticmethod
    def _bag_store(connection: Any) -> tuple[Optional[Any], str]:
        """A typestore holding the bag's own definition of the connection's type, or (None, why)."""
        msgdef = getattr(connection, "msgdef", None)
        if msgdef is None or msgdef.format == MessageDefinitionFormat.NONE or not msgdef.data.strip():
            return None, "the bag carries no definition of it"
        try:
            if msgdef.format == MessageDefinitionFormat.MSG:
                types = get_types_from_msg(msgdef.data, connection.msgtype)
            else:
                types = {}
                if msgdef.data.startswith(IDL_SEPARATOR + "IDL: "):
                    for part in msgdef.data.split(IDL_SEPARATOR)[1:]:
                        types.update(get_types_from_idl(part.split("\n", 1)[1]))
                else:
                    types.update(get_types_from_idl(msgdef.data))
            store = get_typestore(Stores.EMPTY)
            store.register(types)
        except Exception as exc:
            return None, f"the bag's definition of it cannot be parsed ({type(exc).__name__}: {exc})"
        if connection.msgtype not in store.types:
            return None, "the bag's definition does not define it"
        return store, ""
