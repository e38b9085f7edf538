"""Gannet's Spark pipeline.

Bulk jobs over commit-log segments (:mod:`jobs`: export to Parquet, rebuild consume queues and
index files, verify), built from :mod:`segments` (finding and scanning one segment),
:mod:`exporting` (one segment to Parquet) and :mod:`rebuilding` (the broker's dispatch chain on
the driver); :mod:`cli` is the ``pipeline`` click group. The Spark data source over the gRPC
broker (``spark.read.format("gannet")``) is still to come.
"""
