"""The fs_* tools: MemFS in the same registry as every other tool (Python, LLM tool calling, MCP, ROS call_tool).

Each runs in the caller's session (``agent_id``, else the open session of
the single planner) and answers text written for an LLM: line numbers to
quote, how much remains, which version was read and written, and in errors
what to do instead. Names and parameters are part of the interface.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from emem_ros.core.errors import InvalidInputError
from emem_ros.memfs.records import OpResult
from emem_ros.memfs.session import Entry, Session
from emem_ros.tools.spec import TIME, ToolDef
from emem_ros.tools.spec import obj as _obj
from emem_ros.tools.spec import param as _p

AGENT = _p("string", "Your agent id when several agents share this memory (omit when you are the only one).")


def _session(env: Any, agent_id: Any) -> Session:
    if env.memfs is None:
        raise InvalidInputError("this memory has no MemFS (open it through emem_ros.Memory)")
    if agent_id is not None and not isinstance(agent_id, str):
        raise InvalidInputError(f"agent_id must be a string, got {agent_id!r}")
    session: Session = env.memfs().session_for(agent_id or None)
    return session


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp)) if stamp else "-"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} kB"


def _entry_line(e: Entry, base_depth: int) -> str:
    indent = "  " * max(0, e.path.count("/") - base_depth - 1)
    name = e.path.rsplit("/", 1)[-1] + ("/" if e.kind == "dir" else "")
    facts = [f"{e.files} files" if e.kind == "dir" else _size(e.size)]
    if e.kind == "file" and e.version:
        facts.append(f"v{e.version}")
    if e.modified:
        facts.append(f"modified {_when(e.modified)}")
    if e.perms and "w" not in e.perms:
        facts.append("read-only")
    desc = f" — {e.description}" if e.description else ""
    return f"{indent}{name} ({', '.join(facts)}){desc}"


def _done(result: OpResult, what: str) -> str:
    items = [f"{p} v{v}" if v else f"{p} deleted" for p, v in result.versions.items()]
    if len(items) > 6:
        items = items[:5] + [f"and {len(items) - 5} more paths"]
    versions = ", ".join(items)
    return f"{what} (operation {result.op_id}: {versions})." if result.op_id else f"{what} (nothing changed)."


# ---------------------------------------------------------------------- the tools
def fs_ls(env: Any, path: Any = "/", depth: Any = 1, agent_id: Any = None) -> str:
    session = _session(env, agent_id)
    listing = session.ls(path, depth)
    base = listing.path.rstrip("/").count("/") if listing.path != "/" else 0
    if not listing.entries:
        return f"{listing.path} is empty."
    lines = [f"{listing.path}:"] + [_entry_line(e, base) for e in listing.entries]
    if listing.omitted:
        lines.append(f"... and {listing.omitted} more not shown (list a subfolder, or use fs_search).")
    return "\n".join(lines)


def fs_read(env: Any, path: Any, offset: Any = 1, limit: Any = None, agent_id: Any = None) -> str:
    result = _session(env, agent_id).read(path, offset, limit)
    if not result.lines:
        if result.total_lines == 0:
            return f"{result.path} (version {result.version}) is empty."
        return f"{result.path} has {result.total_lines} lines; offset {result.offset} is past the end."
    width = len(str(result.offset + len(result.lines)))
    body = "\n".join(f"{n:>{width}}\t{line}" for n, line in enumerate(result.lines, result.offset))
    head = f"{result.path}" + (f" (version {result.version})" if result.version else "") + \
        f", lines {result.offset}-{result.offset + len(result.lines) - 1} of {result.total_lines}:"
    tail = []
    if result.remaining:
        tail.append(f"[{result.remaining} more lines: read on with offset={result.offset + len(result.lines)}]")
    if result.cut_lines:
        tail.append(f"[{result.cut_lines} long line(s) were cut]")
    return "\n".join([head, body, *tail])


def _change(env: Any, agent_id: Any, path: Any, what: str, op: Callable[[Session], OpResult]) -> str:
    """Run one changing operation in the caller's session and report it; ``what`` names the normalised
    ``{path}`` (formatted after the operation, so a bad path is reported by the operation itself)."""
    session = _session(env, agent_id)
    result = op(session)
    return _done(result, what.replace("{path}", session.path(path)))


def fs_write(env: Any, path: Any, content: Any, description: Any = None, tags: Any = None,
             expected_version: Any = None, x: Any = None, y: Any = None, entity_id: Any = None,
             pin_here: Any = False, agent_id: Any = None) -> str:
    hint = "" if description else " Tip: give a short description so it is easier to find."
    return _change(env, agent_id, path, "Wrote {path}", lambda s: s.write(
        path, content, description, tags, expected_version, x, y, None, None, entity_id, bool(pin_here))) + hint


def fs_edit(env: Any, path: Any, old_text: Any, new_text: Any, replace_all: Any = False,
            expected_version: Any = None, agent_id: Any = None) -> str:
    return _change(env, agent_id, path, "Edited {path}",
                   lambda s: s.edit(path, old_text, new_text, bool(replace_all), expected_version))


def fs_mkdir(env: Any, path: Any, description: Any = None, agent_id: Any = None) -> str:
    return _change(env, agent_id, path, "Folder {path} is there", lambda s: s.mkdir(path, description))


def fs_mv(env: Any, source: Any, destination: Any, agent_id: Any = None) -> str:
    return _change(env, agent_id, source, "Moved {path}", lambda s: s.mv(source, destination))


def fs_rm(env: Any, path: Any, recursive: Any = False, agent_id: Any = None) -> str:
    return _change(env, agent_id, path, "Deleted {path} (fs_undo brings it back)",
                   lambda s: s.rm(path, bool(recursive)))


def fs_peek(env: Any, path: Any, agent_id: Any = None) -> str:
    e = _session(env, agent_id).peek(path)
    lines = [f"{e.path}: {'folder' if e.kind == 'dir' else 'file'}"]
    if e.description:
        lines.append(f"description: {e.description}")
    if e.kind == "dir":
        lines.append(f"files inside: {e.files} ({_size(e.size)})")
    else:
        lines.append(f"size: {_size(e.size)}, {e.lines} lines, version {e.version}")
    if e.tags:
        lines.append(f"tags: {', '.join(e.tags)}")
    lines.append(f"owner: {e.owner or '-'}; permissions: {e.perms}")
    lines.append(f"created {_when(e.created)}, modified {_when(e.modified)}, accessed {_when(e.accessed)}")
    if e.place is not None:
        lines.append(f"pinned at ({e.place[0]:.2f}, {e.place[1]:.2f}, {e.place[2]:.2f})")
    if e.entity_id:
        lines.append(f"about entity {e.entity_id}")
    return "\n".join(lines)


def fs_search(env: Any, query: Any = None, path: Any = "/", mode: Any = "hybrid", tags: Any = None,
              owner: Any = None, type: Any = None, modified_after: Any = None, modified_before: Any = None,
              near_x: Any = None, near_y: Any = None, radius: Any = None, n_results: Any = 10,
              agent_id: Any = None) -> str:
    session = _session(env, agent_id)
    hits = session.search(query, path, mode=mode, tags=tags, owner=owner, kind=type,
                          modified_after=modified_after, modified_before=modified_before, near_x=near_x,
                          near_y=near_y, radius=radius, n_results=n_results)
    what = repr(query) if query else "files"
    if not hits:
        return f"No match for {what} under {session.path(path or '/')}."
    lines = [f"{len(hits)} match(es) for {what} under {session.path(path or '/')}:"]
    for n, h in enumerate(hits, 1):
        where = f" ({h.distance:.1f} m away)" if h.distance is not None else ""
        lines.append(f"{n}. {h.path}:{h.start_line}-{h.end_line} score {h.score:.2f}{where} — {h.snippet}")
    return "\n".join(lines)


def fs_log(env: Any, path: Any = None, limit: Any = 20, agent_id: Any = None) -> str:
    entries = _session(env, agent_id).log(path, limit)
    if not entries:
        return "No history yet." if not path else f"No history for {path}."
    lines = []
    for e in entries:
        undone = f" [undone by op {e.undone_by}]" if e.undone_by else ""
        dest = f" -> {e.dest}" if e.dest else ""
        version = f" v{e.version}" if e.version else ""
        lines.append(f"op {e.op_id} {_when(e.stamp)} {e.agent}: {e.op} {e.path}{dest}{version} — {e.summary}{undone}")
    return "\n".join(lines)


def fs_undo(env: Any, n: Any = 1, agent_id: Any = None) -> str:
    results = _session(env, agent_id).undo(n)
    return "\n".join(_done(r, "Undone") for r in results)


def fs_restore(env: Any, path: Any, version: Any, agent_id: Any = None) -> str:
    return _change(env, agent_id, path, "Restored {path} to version " + str(version),
                   lambda s: s.restore(path, version))


def _fs(run: Callable[..., str], description: str, properties: dict[str, Any], required: tuple[str, ...] = (),
        **extra: Any) -> ToolDef:
    """A MemFS tool named after its function; every one takes ``agent_id`` last (its session)."""
    return ToolDef(name=run.__name__, run=run, description=description,
                   parameters=_obj({**properties, "agent_id": AGENT}, required), **extra)


FS_TOOLS: tuple[ToolDef, ...] = (
    _fs(fs_ls, (
        "List a folder of your filesystem memory (MemFS): each entry with its description, size and number of "
        "files. Start with fs_ls('/') and read /AGENTS.md once. Long listings are cut with a count of the rest."),
        {"path": _p("string", "Folder (or file) to list, e.g. '/memory'. Default '/'."),
         "depth": _p("integer", "Levels to show (1-5).", default=1, minimum=1)}),
    _fs(fs_read, (
        "Read a file with line numbers; page through long files with offset and limit. Reading a file also "
        "records its version, so a later edit is refused (not lost) if someone changed it meanwhile."),
        {"path": _p("string", "File to read, e.g. '/memory/kitchen.md'."),
         "offset": _p("integer", "First line to show (1-based).", default=1, minimum=1),
         "limit": _p("integer", "Number of lines to show (default 400).", minimum=1)}, ("path",)),
    _fs(fs_write, (
        "Create or overwrite a whole file (parent folders are made). Write your notes under /memory/ (kept), "
        "scratch under /tmp/ (cleared at session end), shared notes under /mnt/<mount>/. Please give a short "
        "description and tags; pin a note to a place (x, y) or an entity when it is about one. For small changes "
        "use fs_edit."),
        {"path": _p("string", "File to write, e.g. '/memory/places/kitchen.md'."),
         "content": _p("string", "The full text of the file (UTF-8, at most 1 MiB)."),
         "description": _p("string", "One line saying what the file is for."),
         "tags": _p("array", "Short labels, e.g. ['kitchen', 'doors'].", items={"type": "string"}),
         "expected_version": _p("integer", "The version you read; the write is refused if the file has "
                                           "changed since."),
         "x": _p("number", "Pin the note to this X (metres); needs y."),
         "y": _p("number", "Pin the note to this Y (metres); needs x."),
         "entity_id": _p("string", "Pin the note to an entity, e.g. 'ent-3'."),
         "pin_here": _p("boolean", "Pin the note to where the robot is now.")},
        ("path", "content"), kind="action"),
    _fs(fs_edit, (
        "Change part of a file: replace old_text, which must occur exactly once (copy it from fs_read, without "
        "the line numbers), by new_text. If it occurs several times give more context or set replace_all."),
        {"path": _p("string", "File to edit."),
         "old_text": _p("string", "The exact text to replace."),
         "new_text": _p("string", "The replacement (empty to delete)."),
         "replace_all": _p("boolean", "Replace every occurrence.", default=False),
         "expected_version": _p("integer", "The version you read (default: the one fs_read showed you).")},
        ("path", "old_text", "new_text"), kind="action"),
    _fs(fs_mkdir, (
        "Make a folder (and any missing parents), e.g. /memory/people, with an optional description of what "
        "it will hold. fs_write makes folders by itself; use this to organise ahead."),
        {"path": _p("string", "Folder to make."),
         "description": _p("string", "What the folder holds.")}, ("path",), kind="action"),
    _fs(fs_mv, (
        "Move or rename a file or folder (into a folder if the destination is an existing one). Its history "
        "follows it; fs_undo moves it back."),
        {"source": _p("string", "What to move."),
         "destination": _p("string", "The new path, or an existing folder to move it into.")},
        ("source", "destination"), kind="action"),
    _fs(fs_rm, (
        "Delete a file, or a folder with recursive=true. Nothing is lost for good: fs_undo or fs_restore "
        "brings it back."),
        {"path": _p("string", "What to delete."),
         "recursive": _p("boolean", "Needed to delete a folder that is not empty.", default=False)},
        ("path",), kind="action"),
    _fs(fs_peek, (
        "Metadata of a file or folder without its content: description, tags, size, version, owner, "
        "permissions, times, pinned place."),
        {"path": _p("string", "File or folder.")}, ("path",)),
    _fs(fs_search, (
        "Search your filesystem memory from a folder: by meaning and keywords together (hybrid, default), "
        "keywords only (mode 'keyword', BM25) or meaning only ('meaning'); filter by tags, owner, type, "
        "modification time or place. Each hit gives path, line range, score and a snippet (fs_read the lines). "
        "Without a query, lists the newest files passing the filters. The rendered /raw/episodes and "
        "/raw/experiences are not searched here: for past tasks use episode_summary, for past attempts "
        "find_experiences, for what the robot perceived semantic_search."),
        {"query": _p("string", "What you are looking for, in words."),
         "path": _p("string", "Folder to search in (default '/')."),
         "mode": _p("string", "'hybrid', 'keyword' or 'meaning'.", enum=["hybrid", "keyword", "meaning"]),
         "tags": _p("array", "Only files with all these tags.", items={"type": "string"}),
         "owner": _p("string", "Only files created by this agent (or 'system')."),
         "type": _p("string", "'file' or 'dir'.", enum=["file", "dir"]),
         "modified_after": _p(["string", "number"], f"Only files modified after. {TIME}"),
         "modified_before": _p(["string", "number"], f"Only files modified before. {TIME}"),
         "near_x": _p("number", "Only notes pinned near this X (metres); needs near_y."),
         "near_y": _p("number", "Y of that place."),
         "radius": _p("number", "Radius around (near_x, near_y) in metres (default 5).",
                      exclusiveMinimum=0),
         "n_results": _p("integer", "Maximum hits (1-100).", default=10, minimum=1)},
        time_params=("modified_after", "modified_before")),
    _fs(fs_log, (
        "History of a path (or of everything): each operation with who, when and what, newest first. Use the "
        "versions it shows with fs_restore."),
        {"path": _p("string", "File or folder (omit for everything)."),
         "limit": _p("integer", "Entries to show (1-1000).", default=20, minimum=1)}),
    _fs(fs_undo, (
        "Revert your own last n operations (newest first). Refused, with the reason, when another agent changed "
        "the same file since; use fs_restore then. An undo is itself a new version: nothing is lost."),
        {"n": _p("integer", "How many of your operations to revert (1-50).", default=1, minimum=1)}, kind="action"),
    _fs(fs_restore, (
        "Put a file back as it was at an earlier version (fs_log lists them). Later versions are kept."),
        {"path": _p("string", "File to restore."),
         "version": _p("integer", "The version to bring back.", minimum=1)}, ("path", "version"), kind="action"),
)
