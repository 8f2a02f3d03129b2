"""Start the emem_ros memory as a lifecycle node and bring it to `active`.

    ros2 launch emem_ros memory.launch.py
    ros2 launch emem_ros memory.launch.py params_file:=/path/to/memory.yaml namespace:=robot1
    ros2 launch emem_ros memory.launch.py autostart:=false   # drive the lifecycle yourself
    ros2 launch emem_ros memory.launch.py malloc_arena_max:=8  # glibc's arenas (default 2: less RSS)

The node is configured (parameters validated, store opened, embedder loaded)
and, once it reports `inactive` after configuring, activated (subscriptions,
services, timers). A failed configure leaves it `unconfigured` and logs why.
Tested on Humble and Jazzy (test/ros/, run on both by the ROS half).
"""

from __future__ import annotations

import lifecycle_msgs.msg
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

import launch
from launch import LaunchDescription


def generate_launch_description() -> LaunchDescription:
    node_name = LaunchConfiguration("node_name")
    namespace = LaunchConfiguration("namespace")
    params_file = LaunchConfiguration("params_file")
    log_level = LaunchConfiguration("log_level")
    use_sim_time = LaunchConfiguration("use_sim_time")
    autostart = LaunchConfiguration("autostart")

    arguments = [
        DeclareLaunchArgument("node_name", default_value="memory", description="Name of the memory node."),
        DeclareLaunchArgument("namespace", default_value="", description="Namespace of the memory node."),
        DeclareLaunchArgument(
            "params_file",
            default_value=PathJoinSubstitution([FindPackageShare("emem_ros"), "config", "memory.yaml"]),
            description="YAML file with the memory node's parameters.",
        ),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="Logging level: debug, info, warn, error or fatal."),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (simulation or bag playback) as the node's clock."),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="Configure and activate the node at startup."),
        DeclareLaunchArgument("malloc_arena_max", default_value="2",
                              description="glibc malloc arenas of the node (MALLOC_ARENA_MAX). Each thread would "
                                          "otherwise get one that keeps its freed memory: on a week's memory, 2 "
                                          "took 9 MB less RSS and no longer answers (docs/soak.md)."),
    ]

    # Humble's LifecycleNode requires `namespace` as a keyword argument.
    memory = LifecycleNode(
        package="emem_ros",
        executable="memory_node",
        name=node_name,
        namespace=namespace,
        parameters=[params_file, {"use_sim_time": ParameterValue(use_sim_time, value_type=bool)}],
        ros_arguments=["--log-level", log_level],
        additional_env={"MALLOC_ARENA_MAX": LaunchConfiguration("malloc_arena_max")},
        output="screen",
        emulate_tty=True,
    )

    # autostart: configure at launch, then activate once configuring has ended in
    # `inactive`. Matching start_state as well keeps a later deactivate
    # (active -> inactive) from re-activating the node behind the operator's back.
    configure = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=launch.events.matches_action(memory),
            transition_id=lifecycle_msgs.msg.Transition.TRANSITION_CONFIGURE,
        ),
        condition=IfCondition(autostart),
    )
    activate_when_configured = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=memory,
            start_state="configuring",
            goal_state="inactive",
            entities=[
                EmitEvent(
                    event=ChangeState(
                        lifecycle_node_matcher=launch.events.matches_action(memory),
                        transition_id=lifecycle_msgs.msg.Transition.TRANSITION_ACTIVATE,
                    )
                ),
            ],
        ),
        condition=IfCondition(autostart),
    )

    # The handler is registered before the node starts so no transition is missed.
    return LaunchDescription([*arguments, activate_when_configured, memory, configure])
