"""The example planner's ROS-free logic: discovery by service type, tool routing, the chat loop.

The node side is the real service handler (``services.handle``, as the node
calls it) on real memories; the model is the fake Ollama server scripted to
call a tool and then answer; the client is the real ``ollama`` client. The
same planner on the real graph is test/ros/test_planner.py.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("rosbags.typesys")
ollama = pytest.importorskip("ollama")

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.agent.planner import (  # noqa: E402
    LIST_TOOLS_TYPE,
    CallAnswer,
    ToolRouter,
    memory_nodes,
    node_key,
    parse_tools,
)
from emem_ros.embeddings import HashingEmbeddingProvider  # noqa: E402
from emem_ros.ros.services import handle  # noqa: E402
from emem_ros.tools.ollama_chat import run_ollama_chat  # noqa: E402
from test.support.fake_ollama import FakeOllama, tool_then_answer  # noqa: E402
from test.support.ros_messages import InterfaceFactory  # noqa: E402

MUG = (3.2, 1.5)


@pytest.fixture(scope="module")
def make() -> InterfaceFactory:
    return InterfaceFactory()


@pytest.fixture
def memories(tmp_path):
    """Two robots' memories: only robot1 has seen the red mug."""
    opened = {}
    for robot in ("robot1", "robot2"):
        opened[f"/{robot}/memory"] = Memory(
            config=MemoryConfig(db_path=str(tmp_path / f"{robot}.db"), flush_interval=0.0, index_save_interval=0.0),
            embedding_provider=HashingEmbeddingProvider())
    opened["/robot1/memory"].store_specific_memory("the red mug is on the kitchen table", x=MUG[0], y=MUG[1])
    opened["/robot2/memory"].store_specific_memory("the charger is behind the sofa", x=-4.0, y=7.0)
    yield opened
    for memory in opened.values():
        memory.close()


def graph(memories, make):
    """What the planner would get from the graph: list_tools answers and a call_tool runner."""

    def listing(node: str) -> list[dict]:
        response = handle(memories[node], "list_tools", make.request("ListTools"), make.response("ListTools"), make)
        assert response.success
        return parse_tools(response.tools_json, node)

    def call(node: str, tool: str, arguments_json: str) -> CallAnswer:
        request = make.request("CallTool", tool=tool, arguments_json=arguments_json)
        response = handle(memories[node], "call_tool", request, make.response("CallTool"), make)
        return CallAnswer(response.success, response.message, response.text)

    return {node: listing(node) for node in memories}, call


def test_memory_nodes_are_found_by_service_type_not_by_name():
    services = [
        ("/memory/list_tools", [LIST_TOOLS_TYPE]),
        ("/robot1/memory/list_tools", [LIST_TOOLS_TYPE]),
        ("/robot1/memory/call_tool", ["emem_ros/srv/CallTool"]),
        ("/other_component/list_tools", ["some_pkg/srv/ListTools"]),  # same name, another type: not a memory
        ("/memory/get_state", ["lifecycle_msgs/srv/GetState"]),
        ("/list_tools", [LIST_TOOLS_TYPE]),  # no node part: ignored
    ]
    assert memory_nodes(services) == ["/memory", "/robot1/memory"]
    assert memory_nodes([]) == []


def test_parse_tools_says_which_node_answered_garbage():
    for bad, words in (("{not json", "not JSON"), ('{"a": 1}', "not a list"), ('[{"name": "x"}]', "not a tool")):
        with pytest.raises(ValueError, match=words) as caught:
            parse_tools(bad, "/robot1/memory")
        assert "/robot1/memory/list_tools" in str(caught.value)


def test_node_key_is_a_valid_tool_name_prefix():
    assert node_key("/robot1/memory") == "robot1_memory"
    assert node_key("/memory") == "memory"
    assert node_key("/a.b/mem-1") == "a_b_mem-1"


def test_one_memory_keeps_the_tool_names_it_listed(memories, make):
    listings, call = graph(memories, make)
    one = {"/robot1/memory": listings["/robot1/memory"]}
    router = ToolRouter(one, call)
    assert router.get_tool_definitions() == memories["/robot1/memory"].get_tool_definitions()
    answer = router.dispatch_tool_call("locate", {"concept": "red mug"})
    assert "3.2" in answer and "1.5" in answer, answer
    assert router.calls == [("/robot1/memory", "locate", '{"concept": "red mug"}')]


def test_several_memories_get_prefixed_names_and_each_call_reaches_its_own_node(memories, make):
    listings, call = graph(memories, make)
    router = ToolRouter(listings, call)
    names = [d["function"]["name"] for d in router.get_tool_definitions()]
    own = [d["function"]["name"] for d in memories["/robot1/memory"].get_tool_definitions()]
    assert names == [f"robot1_memory__{n}" for n in own] + [f"robot2_memory__{n}" for n in own]
    assert len(set(names)) == len(names)
    described = {d["function"]["name"]: d["function"]["description"] for d in router.get_tool_definitions()}
    assert described["robot2_memory__locate"].startswith("[memory /robot2/memory] ")
    # The schemas themselves are untouched.
    assert [d["function"]["parameters"] for d in router.get_tool_definitions()][: len(own)] == \
        [d["function"]["parameters"] for d in memories["/robot1/memory"].get_tool_definitions()]

    found = router.dispatch_tool_call("robot1_memory__locate", '{"concept": "red mug"}')
    elsewhere = router.dispatch_tool_call("robot2_memory__semantic_search", {"query": "charger"})
    assert "3.2" in found and "charger" in elsewhere and "red mug" not in elsewhere
    assert [(n, t) for n, t, _ in router.calls] == [("/robot1/memory", "locate"), ("/robot2/memory", "semantic_search")]


def test_bad_calls_come_back_as_error_text_the_model_can_act_on(memories, make):
    listings, call = graph(memories, make)
    router = ToolRouter(listings, call)
    unknown = router.dispatch_tool_call("locate", {"concept": "mug"})  # unprefixed with two memories
    assert unknown.startswith("Error: there is no tool named 'locate'") and "robot1_memory__locate" in unknown
    bad = router.dispatch_tool_call("robot1_memory__locate", {"concpet": "mug"})
    assert bad.startswith("Error") and "concept" in bad
    failing = ToolRouter(listings, lambda node, tool, args: CallAnswer(False, "did not answer within 30 s", ""))
    assert failing.dispatch_tool_call("robot1_memory__locate", None) == "Error: did not answer within 30 s"
    assert len(router.calls) == 1  # the unknown name was never sent


def test_the_model_calls_a_discovered_tool_and_answers_with_its_result(memories, make):
    listings, call = graph(memories, make)
    router = ToolRouter(listings, call)
    locate = tool_then_answer(lambda offered: next(n for n in offered if n == "robot1_memory__locate"),
                              {"concept": "red mug"}, prefix="The red mug: ")
    with FakeOllama(chat_responder=locate) as server:
        outcome = run_ollama_chat(router, ollama.Client(host=server.host, timeout=10.0), "fake-chat",
                                  [{"role": "user", "content": "where is the red mug?"}],
                                  tools=router.get_tool_definitions())
        chats = [r.body for r in server.chat_requests]
    assert len(chats) == 2
    assert [t["function"]["name"] for t in chats[0]["tools"]] == [d["function"]["name"]
                                                                  for d in router.get_tool_definitions()]
    assert router.calls == [("/robot1/memory", "locate", json.dumps({"concept": "red mug"}))]
    tool_message = next(m for m in chats[1]["messages"] if m.get("role") == "tool")
    direct = memories["/robot1/memory"].dispatch_tool_call("locate", {"concept": "red mug"})
    assert tool_message["content"].splitlines()[0] == direct.splitlines()[0]
    assert outcome.content == "The red mug: " + direct.splitlines()[0]
    assert "3.2" in outcome.content and [r.name for r in outcome.tool_calls] == ["robot1_memory__locate"]
