"""Gannet's Spark pipeline.

Bulk jobs over commit-log segments (:mod:`jobs`: export to Parquet, rebuild consume queues and
index files, verify), built from :mod:`segments` (finding and scanning one segment),
:mod:`columns` (parsing one segment in bulk into columns),
:mod:`exporting` (one segment to Parquet) and :mod:`rebuilding` (the broker's dispatch chain on
the driver); :mod:`cli` is the ``pipeline`` click group. A broker group's tier (its bucket) is a
source too: :mod:`sources` (tier objects and local files as one contiguous series, the
manifest) and :mod:`objects` (an object read by ranged GETs in windows on an executor).

The Spark data source ``gannet`` over a broker's v2 API (:mod:`datasource`; options in
:mod:`options`, rows in :mod:`rows`, reading in :mod:`reading`, writing in :mod:`writing`, the
RPCs in :mod:`calling`, offset ranges in :mod:`ranges`; reads from a tier or store directory
without a broker in :mod:`tierreading`) is registered with :func:`register`::

    import gannet.pipeline
    gannet.pipeline.register(spark)
    spark.read.format("gannet").option("endpoints", "127.0.0.1:8081").option("topic", "t").load()
"""

from __future__ import annotations

import os
import sys
from typing import Any


def register(spark: Any) -> None:
    """Register the ``gannet`` data source with a SparkSession (imports pyspark lazily).

    Spark runs a Python data source in worker processes started with the interpreter the
    SparkContext names (``PYSPARK_PYTHON``, else ``python3`` on PATH), which need not have
    Gannet installed. On a local master, with ``PYSPARK_PYTHON`` unset, the data source is
    registered to run under the interpreter calling this function instead (the session's other
    Python functions keep their interpreter). On a cluster, set ``PYSPARK_PYTHON`` or ship Gannet
    with ``--py-files`` as usual.
    """
    from gannet.pipeline import datasource  # noqa: PLC0415 — keeps pyspark out of CLI start

    context = spark.sparkContext
    chosen = worker_python(str(context.master), os.environ.get("PYSPARK_PYTHON"))
    if chosen is None or chosen == context.pythonExec:
        datasource.register(spark)
        return
    # pyspark takes the interpreter of a registered Python function from the context.
    previous = context.pythonExec
    context.pythonExec = chosen
    try:
        datasource.register(spark)
    finally:
        context.pythonExec = previous


def worker_python(master: str, pyspark_python: str | None) -> str | None:
    """The interpreter the data source's Spark workers should run, or ``None`` for Spark's
    own choice: this one on a local master unless ``PYSPARK_PYTHON`` says otherwise."""
    if pyspark_python or not (master == "local" or master.startswith("local[")):
        return None
    return sys.executable
