"""The ``gannet`` command and every subcommand: the top of the import layers.

:mod:`root` is the ``gannet`` group (the console script ``gannet``; ``python -m
gannet.node.cli``); each subcommand group has its module. Nothing in the broker, the operator
or the pipeline imports this package (``.importlinter``).
"""
