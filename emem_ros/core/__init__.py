"""ROS-free data model, configuration, errors and time expressions."""
