"""The ``emem`` command line: one module per subcommand, registered in ``main.py``."""
