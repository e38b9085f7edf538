"""Gannet broker node: the RocketMQ-compatible store and the processes that serve it.

Sub-packages: ``store`` (commit log, consume queues, index, recovery, cleanup, timer store),
``testing`` (test kit shipped with the product). The ``gannet`` command lives in ``cli``.
"""
