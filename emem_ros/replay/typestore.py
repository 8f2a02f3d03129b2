"""rosbags typestores that know every message a robot running emem_ros publishes.

``Stores.ROS2_HUMBLE`` / ``ROS2_JAZZY`` carry the core packages (std_msgs,
nav_msgs, sensor_msgs, diagnostic_msgs, ...) but not vision_msgs, which is a
separate package, nor our own ``emem_ros/msg``. Both are registered here from
their ``.msg`` text: vision_msgs 4.x (Humble and Jazzy ship the same
definitions) from the copies under ``emem_ros/replay/vision_msgs/``, ours
from the repository's ``msg/`` (or an installed share directory). Without
our own messages a typestore is still useful (they only matter to bags that
recorded memory answers), so their absence is logged, not raised.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from emem_ros.core.errors import InvalidInputError
from emem_ros.ros.distro import BAGS

log = logging.getLogger(__name__)

DISTROS: dict[str, Stores] = {name: Stores[facts.rosbags_store] for name, facts in BAGS.items()}
"""Distribution -> its rosbags typestore (the list and the names: ``emem_ros.ros.distro.BAGS``)."""
VISION_MSGS_DIR = Path(__file__).resolve().parent / "vision_msgs"
OWN_PACKAGE = "emem_ros"

__all__ = ["DISTROS", "load_typestore", "own_msg_dir", "types_from_dir"]


def load_typestore(distro: str = "humble", *, own_msgs: Union[bool, Path, str] = True) -> Typestore:
    """A fresh typestore for ``distro`` with vision_msgs and (optionally) our own messages.

    ``own_msgs`` is True (find ``msg/`` beside the package), False (skip them)
    or a directory holding our ``.msg`` files. Each call builds a new store,
    so a caller may register more types without affecting anyone else.
    """
    key = str(distro).strip().lower()
    if key not in DISTROS:
        raise InvalidInputError(f"unknown ROS distro {distro!r}; use one of {', '.join(DISTROS)}")
    store = get_typestore(DISTROS[key])
    store.register(types_from_dir(VISION_MSGS_DIR, "vision_msgs"))
    if own_msgs is not False:
        directory = Path(own_msgs) if not isinstance(own_msgs, bool) else own_msg_dir()
        if directory is None or not directory.is_dir():
            log.info("emem_ros .msg files not found; replay works without them (they only describe memory answers)")
        else:
            store.register(types_from_dir(directory, OWN_PACKAGE))
    return store


def types_from_dir(directory: Path, package: str) -> dict[Any, Any]:
    """Parse every ``*.msg`` in ``directory`` as ``<package>/msg/<Name>``."""
    types: dict[Any, Any] = {}
    files = sorted(Path(directory).glob("*.msg"))
    if not files:
        raise InvalidInputError(f"no .msg files in {directory}")
    for path in files:
        text = path.read_text(encoding="utf-8")
        types.update(get_types_from_msg(text, f"{package}/msg/{path.stem}"))
    return types


def own_msg_dir(candidates: Optional[Iterable[Path]] = None) -> Optional[Path]:
    """Where our ``.msg`` files are: the source checkout's ``msg/``, else the installed share directory."""
    paths = list(candidates) if candidates is not None else _default_candidates()
    for path in paths:
        if path.is_dir() and any(path.glob("*.msg")):
            return path
    return None


def _default_candidates() -> list[Path]:
    package_dir = Path(__file__).resolve().parents[1]  # .../emem_ros
    paths = [package_dir.parent / "msg"]  # source checkout: <repo>/msg
    try:  # a colcon install: share/emem_ros/msg
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return paths
    try:
        paths.append(Path(get_package_share_directory(OWN_PACKAGE)) / "msg")
    except PackageNotFoundError:
        pass
    return paths
