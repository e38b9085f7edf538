"""Peer brokers for the side-by-side benchmark (issue 9).

Each module here starts one system on 127.0.0.1 as a child process group, waits until it is
ready, hands its endpoint to :mod:`bench.loadgen`, and stops it (SIGTERM, then SIGKILL after a
grace period). Called by :mod:`bench.loadgen.run`; nothing here is imported by the product.
"""
