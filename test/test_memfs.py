"""MemFS: the filesystem planners write themselves (issue 12), end to end through the tools and the facade."""

from __future__ import annotations

import json

import pytest

from emem_ros.memfs import Conflict, FsError, NotFound, NotText, PermissionDenied, TooLarge
from emem_ros.memfs.paths import normalise

KITCHEN = "# Kitchen\n\nThe door sticks: push twice.\n\n## Charging\n\nThe charger is behind the sofa.\n"


@pytest.fixture
def memory(make_memory):
    return make_memory()


def call(memory, tool, **arguments):
    return memory.dispatch_tool_call(tool, arguments)


def test_paths_resolve_and_never_escape_the_root():
    assert normalise("../../etc/passwd") == "/etc/passwd"
    assert normalise("notes/./a/../b.md", "/memory") == "/memory/notes/b.md"
    assert normalise("/memory//x/") == "/memory/x"
    with pytest.raises(FsError):
        normalise("/memory/a\x00b")
    with pytest.raises(FsError):
        normalise("")


def test_a_scripted_agent_session_end_to_end(memory):
    listing = call(memory, "fs_ls", path="/")
    for name in ("AGENTS.md", "memory/", "raw/", "tmp/", "mnt/"):
        assert name in listing
    guide = call(memory, "fs_read", path="/AGENTS.md")
    assert "/memory/" in guide and "lines 1-" in guide
    written = call(memory, "fs_write", path="/memory/places/kitchen.md", content=KITCHEN,
                   description="facts about the kitchen", tags=["kitchen", "doors"])
    assert "/memory/places v1" in written and "/memory/places/kitchen.md v1" in written  # mkdir -p
    read = call(memory, "fs_read", path="/memory/places/kitchen.md")
    assert "3\tThe door sticks: push twice." in read and "(version 1)" in read
    edited = call(memory, "fs_edit", path="/memory/places/kitchen.md", old_text="push twice",
                  new_text="lift the handle, then push")
    assert "kitchen.md v2" in edited
    assert "lift the handle" in memory.fs.system.text("/memory/places/kitchen.md")
    # search by meaning and keywords: the chunk about charging, with its line range
    hits = memory.fs.session_for().search("where is the charger", "/memory")
    assert hits[0].path == "/memory/places/kitchen.md" and hits[0].start_line <= 7 <= hits[0].end_line
    assert "charger" in hits[0].snippet
    assert "kitchen.md:" in call(memory, "fs_search", query="charger behind sofa", path="/memory", mode="keyword")
    assert call(memory, "fs_search", query="charger", path="/tmp").startswith("No match")
    tagged = memory.fs.session_for().search(None, "/", tags=["doors"])
    assert [h.path for h in tagged] == ["/memory/places/kitchen.md"]
    # history: log, undo (a new version), restore
    log = call(memory, "fs_log", path="/memory/places/kitchen.md")
    assert log.index("edit") < log.index("write")
    undone = call(memory, "fs_undo")
    assert "kitchen.md v3" in undone
    assert "push twice" in memory.fs.system.text("/memory/places/kitchen.md")
    restored = call(memory, "fs_restore", path="/memory/places/kitchen.md", version=2)
    assert "kitchen.md v4" in restored
    assert "lift the handle" in memory.fs.system.text("/memory/places/kitchen.md")
    assert "+The door sticks: lift the handle" in memory.fs.system.diff("/memory/places/kitchen.md", 1, 4)
    peek = call(memory, "fs_peek", path="/memory/places/kitchen.md")
    assert "version 4" in peek and "tags: doors, kitchen" in peek and "owner: agent" in peek


def test_refusals_say_what_to_do_instead(memory):
    session = memory.fs.session("planner")
    with pytest.raises(PermissionDenied, match="/memory/"):
        session.write("/notes.md", "x")
    with pytest.raises(PermissionDenied, match="read-only"):
        session.write("/raw/episodes.md", "x")
    with pytest.raises(PermissionDenied):
        session.write("/AGENTS.md", "mine now")
    with pytest.raises(PermissionDenied):
        session.rm("/memory", recursive=True)
    with pytest.raises(PermissionDenied, match="mount"):
        session.mkdir("/mnt/team")
    # traversal stays inside the filesystem: ../../etc is /etc, which does not exist and cannot be made
    with pytest.raises(NotFound):
        session.read("../../etc/passwd")
    with pytest.raises(PermissionDenied):
        session.write("../../etc/passwd", "root::0:0")
    with pytest.raises(NotText, match="NUL"):
        session.write("/memory/a.md", "a\x00b")
    with pytest.raises(NotText, match="binary"):
        session.write("/memory/b.bin", bytes([0xff, 0xfe, 0x00, 0x81]))
    with pytest.raises(TooLarge, match="1 MiB"):
        session.write("/memory/big.md", "x" * (10 * 1024 * 1024))
    session.write("/memory/kitchen.md", KITCHEN)
    with pytest.raises(NotFound, match="did you mean /memory/kitchen.md"):
        session.read("/memory/kitchn.md")
    with pytest.raises(FsError, match="occurs 2 times"):
        session.edit("/memory/kitchen.md", "The", "A")
    with pytest.raises(FsError, match="closest line is 3"):
        session.edit("/memory/kitchen.md", "The door stick: push twice", "x")
    with pytest.raises(FsError, match="recursive"):
        session.write("/memory/folder/a.md", "a")
        session.rm("/memory/folder")
    assert memory.fs.node("/notes.md") is None and memory.fs.node("/memory/big.md") is None
    errors = call(memory, "fs_write", path="/raw/x.md", content="x")
    assert errors.startswith("Error:") and "/memory/" in errors


def test_two_agents_editing_one_file_conflict_instead_of_overwriting(memory):
    fs = memory.fs
    fs.mount("team")
    alice, bob = fs.session("alice"), fs.session("bob")
    alice.write("/mnt/team/plan.md", "1. patrol\n2. charge\n")
    assert "patrol" in bob.read("/mnt/team/plan.md").text
    alice.read("/mnt/team/plan.md")
    bob.edit("/mnt/team/plan.md", "charge", "charge at 20%")
    with pytest.raises(Conflict, match="changed since you read it.*version 1.*version 2.*bob"):
        alice.edit("/mnt/team/plan.md", "patrol", "patrol the garage")
    with pytest.raises(Conflict):
        alice.write("/mnt/team/plan.md", "alice's plan\n")
    assert fs.system.text("/mnt/team/plan.md") == "1. patrol\n2. charge at 20%\n"
    alice.read("/mnt/team/plan.md")  # read again, then the edit goes through
    alice.edit("/mnt/team/plan.md", "patrol", "patrol the garage")
    assert fs.system.text("/mnt/team/plan.md") == "1. patrol the garage\n2. charge at 20%\n"
    # undo is refused when someone else changed the file since
    with pytest.raises(Conflict, match="changed since"):
        bob.undo()


def test_tmp_is_private_and_cleared_and_the_conversation_is_renamed(memory, clock):
    fs = memory.fs
    with fs.session("alice", conversation="user: fetch the mug\n") as alice:
        bob = fs.session("bob")
        alice.write("/tmp/scratch.md", "half a thought")
        assert "scratch.md" in str([e.path for e in alice.ls("/tmp").entries])
        assert bob.ls("/tmp").entries == []
        with pytest.raises(NotFound):
            bob.read("/tmp/scratch.md")
        assert alice.read("/raw/conversation-history/CURRENT").text == "user: fetch the mug"
        with pytest.raises(PermissionDenied):
            alice.write("/raw/conversation-history/CURRENT", "rewritten")
        alice.append_conversation("robot: on my way\n")
        started = alice.started
    assert alice.ended
    assert fs.system.ls("/tmp").entries == []  # cleared, including the private folder
    names = [e.path for e in bob.ls("/raw/conversation-history").entries]
    import time as _time
    iso = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(started))
    assert names == [f"/raw/conversation-history/{iso}"]
    assert bob.text(names[0]) == "user: fetch the mug\nrobot: on my way\n"
    with pytest.raises(FsError, match="ended"):
        alice.write("/memory/x.md", "x")


def test_episodes_open_and_close_agent_sessions(memory):
    answer = call(memory, "start_episode", name="fetch mug", agent_id="planner")
    assert "MemFS session" in answer
    call(memory, "fs_write", path="/tmp/steps.md", content="1. go", agent_id="planner")
    assert memory.fs.session_for("planner").ls("/tmp").entries
    call(memory, "end_episode", result="done", success=True)
    assert memory.fs.system.ls("/tmp").entries == []
    episode = memory.fs.session("reader").text("/raw/episodes/ep-1.md")
    assert "fetch mug" in episode and "result: done" in episode
    memory.record_experience("open the garage", result="door stuck", success=False)
    experiences = memory.fs.session("reader").ls("/raw/experiences").entries
    assert len(experiences) == 1 and "door stuck" in memory.fs.system.text(experiences[0].path)


def test_notes_pinned_to_a_place_show_in_recall_and_context(memory):
    memory.add("kitchen door", x=4.0, y=1.0, source_type="perception", layer_name="detections")
    memory.flush()
    call(memory, "fs_write", path="/memory/doors.md", content="The kitchen door sticks; push twice.",
         description="kitchen door sticks, push twice", x=4.2, y=1.1)
    call(memory, "fs_write", path="/memory/far.md", content="The garage is cold.", description="garage", x=40, y=40)
    recall = memory.recall("kitchen door")
    assert "Notes pinned here" in recall and "/memory/doors.md" in recall and "far.md" not in recall
    memory.set_live_pose(lambda: (4.0, 1.0, 0.0))
    context = memory.get_current_context()
    assert "/memory/doors.md" in context and "push twice" in context and "garage" not in context
    near = call(memory, "fs_search", query="door", near_x=4.0, near_y=1.0, radius=2.0)
    assert "doors.md" in near and "far.md" not in near
    pinned_here = call(memory, "fs_write", path="/memory/here.md", content="charger", pin_here=True)
    assert "here.md" in pinned_here and memory.fs.node("/memory/here.md").place == (4.0, 1.0, 0.0)


def test_a_one_line_edit_reembeds_one_chunk(memory):
    session = memory.fs.session("planner")
    paragraphs = ["\n".join(f"paragraph {p} line {n} about topic {p}" for n in range(5)) for p in range(40)]
    first = session.write("/memory/long.md", "\n\n".join(paragraphs))
    assert first.embedded >= 20
    paragraphs[7] = paragraphs[7].replace("line 2", "line two")
    second = session.write("/memory/long.md", "\n\n".join(paragraphs))
    assert second.embedded == 1 and second.reused == first.embedded - 1
    chunks = memory.store.reader().execute("SELECT COUNT(*) FROM fs_chunks").fetchone()[0]
    assert len(memory.store.vectors["fs_chunks"]) == chunks


def test_mv_and_rm_are_versions_that_undo_brings_back(memory):
    session = memory.fs.session("planner")
    session.write("/memory/a/one.md", "one", description="first")
    session.mv("/memory/a", "/memory/b")
    assert memory.fs.node("/memory/b/one.md") is not None and memory.fs.node("/memory/a") is None
    session.rm("/memory/b", recursive=True)
    assert memory.fs.node("/memory/b") is None
    session.undo(2)
    assert session.text("/memory/a/one.md") == "one" and memory.fs.node("/memory/b") is None
    assert session.peek("/memory/a/one.md").description == "first"
    session.undo()  # the first write: the file and the folder made for it are gone, as before
    assert memory.fs.node("/memory/a/one.md") is None and memory.fs.node("/memory/a") is None
    with pytest.raises(FsError, match="nothing to undo"):
        session.undo()


def test_rebuild_from_the_log_and_export_import_keep_the_notes(make_memory, tmp_path):
    from emem_ros.storage.rebuild import rebuild_from_log

    memory = make_memory("a.db", log_enabled=True)
    session = memory.fs.session("planner")
    session.write("/memory/charger.md", "The charger is behind the sofa.", description="charger", x=1.0, y=2.0)
    session.edit("/memory/charger.md", "sofa", "green sofa")
    memory.export_to(tmp_path / "out.jsonl")
    memory.close()
    rebuild_from_log(tmp_path / "a.db")
    again = make_memory("a.db", log_enabled=True)
    assert again.fs.system.text("/memory/charger.md") == "The charger is behind the green sofa."
    assert again.fs.session("planner").search("charger sofa")[0].path == "/memory/charger.md"
    assert len(again.fs.system.log("/memory/charger.md")) == 2
    other = make_memory("b.db")
    report = other.import_from(tmp_path / "out.jsonl")
    assert report.added["fs_nodes"] >= 1
    assert other.fs.system.text("/memory/charger.md") == "The charger is behind the green sofa."
    assert other.fs.node("/memory/charger.md").place == (1.0, 2.0, 0.0)
    assert "/memory/charger.md" in other.recall("charger") or other.fs.session("x").search("charger")
    assert other.import_from(tmp_path / "out.jsonl").existing["fs_nodes"] >= 1


def test_fs_tools_are_in_the_registry_and_mcp(memory):
    names = [d["function"]["name"] for d in memory.get_tool_definitions()]
    for name in ("fs_ls", "fs_read", "fs_write", "fs_edit", "fs_mkdir", "fs_mv", "fs_rm", "fs_peek", "fs_search",
                 "fs_undo", "fs_log", "fs_restore"):
        assert name in names
    from emem_ros.agent import mcp_server

    listed = [spec["name"] for spec in mcp_server.tool_specs(memory)]
    assert "fs_write" in listed and "fs_search" in listed
    text, is_error = mcp_server.call(memory, "fs_write", {"path": "/memory/mcp.md", "content": "via MCP"})
    assert not is_error and "mcp.md v1" in text
    text, is_error = mcp_server.call(memory, "fs_write", {"path": "/mcp.md", "content": "x"})
    assert is_error and "root" in text


def test_run_ollama_chat_drives_the_fs_tools(memory):
    ollama = pytest.importorskip("ollama")
    from emem_ros.tools import run_ollama_chat
    from test.support.fake_ollama import FakeOllama

    def tool(name, **arguments):
        return {"function": {"name": name, "arguments": arguments}}

    with FakeOllama(dim=16) as server:
        server.chat_replies = [
            {"role": "assistant", "content": "", "tool_calls": [tool("fs_read", path="/AGENTS.md", limit=3)]},
            {"role": "assistant", "content": "", "tool_calls": [
                tool("fs_write", path="/memory/lessons.md", content="Push the kitchen door twice.",
                     description="lessons learned", tags=["doors"])]},
            {"role": "assistant", "content": "", "tool_calls": [tool("fs_search", query="kitchen door")]},
            {"role": "assistant", "content": "Noted: push the kitchen door twice."},
        ]
        client = ollama.Client(host=server.host, timeout=10.0)
        outcome = run_ollama_chat(memory, client, "fake-chat", [{"role": "user", "content": "remember the door"}])
    assert outcome.content == "Noted: push the kitchen door twice."
    assert [r.name for r in outcome.tool_calls] == ["fs_read", "fs_write", "fs_search"]
    assert "How to use this filesystem" in outcome.tool_calls[0].result
    assert "/memory/lessons.md:1-1" in outcome.tool_calls[2].result
    assert memory.fs.system.text("/memory/lessons.md") == "Push the kitchen door twice."


def test_the_emem_fs_command(make_memory, tmp_path, capsys):
    from emem_ros.cli.main import main

    memory = make_memory("cli.db")
    memory.fs.session("planner").write("/memory/a.md", "one\n")
    memory.fs.session("planner").write("/memory/a.md", "two\n")
    memory.close()
    db = str(tmp_path / "cli.db")
    source = tmp_path / "map.txt"
    source.write_text("the map legend\n")
    assert main(["fs", db, "write", str(source), "--description", "map legend"]) == 0
    assert main(["fs", db, "ls", "/raw/artifacts"]) == 0
    assert "map.txt" in capsys.readouterr().out
    assert main(["fs", db, "cat", "/raw/artifacts/map.txt"]) == 0
    assert capsys.readouterr().out == "the map legend\n"
    assert main(["fs", db, "diff", "/memory/a.md", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "-one" in out and "+two" in out
    assert main(["fs", db, "restore", "/memory/a.md", "1"]) == 0
    assert main(["fs", db, "log", "/memory/a.md"]) == 0
    assert "restore" in capsys.readouterr().out
    assert main(["fs", db, "cat", "/memory/a.md"]) == 0
    assert capsys.readouterr().out == "one\n"
    agent = make_memory("cli.db").fs.session("planner")
    with pytest.raises(PermissionDenied):
        agent.write("/raw/artifacts/map.txt", "mine")
    assert json.dumps(agent.peek("/raw/artifacts/map.txt").description) == '"map legend"'


def test_concurrent_edits_of_one_file_let_exactly_one_through(memory):
    import threading

    fs = memory.fs
    fs.mount("team")
    fs.session("setup").write("/mnt/team/list.md", "- milk\n")
    agents = [fs.session(f"agent{n}") for n in range(4)]
    for agent in agents:
        agent.read("/mnt/team/list.md")
    barrier = threading.Barrier(len(agents))
    outcomes: list[str] = []

    def edit(agent):
        barrier.wait()
        try:
            agent.edit("/mnt/team/list.md", "- milk\n", f"- milk\n- eggs from {agent.agent_id}\n")
            outcomes.append("ok")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=edit, args=(a,)) for a in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict"] * 3 + ["ok"]
    text = fs.system.text("/mnt/team/list.md")
    assert text.count("eggs") == 1 and fs.node("/mnt/team/list.md").version == 2


def test_keyword_lists_use_distinctive_words_and_keyword_mode_any_word(memory, monkeypatch):
    from emem_ros.memfs import search

    session = memory.fs.session("planner")
    for n, extra in enumerate(("zebra", "yak", "walrus")):
        session.write(f"/memory/door{n}.md", f"the door {extra}\n")
    monkeypatch.setattr(search, "KEYWORD_DF", 1)  # 'door' is in 3 files: too common for the keyword list
    monkeypatch.setattr(search, "KEYWORD_FLOOR", 1)
    memory.fs.df_cache.clear()
    hits = session.search("door walrus", "/memory", mode="keyword")
    assert [h.path for h in hits] == ["/memory/door2.md"]  # the distinctive word decides
    assert len(session.search("door", "/memory", mode="keyword")) == 3  # asked for keywords: any word will do
    assert session.search("door walrus", "/memory/door0.md", mode="keyword") == []
