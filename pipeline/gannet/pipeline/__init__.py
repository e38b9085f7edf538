"""Gannet's Spark pipeline.

Bulk jobs over commit-log segments (:mod:`jobs`: export to Parquet, rebuild consume queues and
index files, verify), built from :mod:`segments` (finding and scanning one segment),
:mod:`exporting` (one segment to Parquet) and :mod:`rebuilding` (the broker's dispatch chain on
the driver); :mod:`cli` is the ``pipeline`` click group.

The Spark data source ``gannet`` over a broker's v2 API (:mod:`datasource`; options in
:mod:`options`, rows in :mod:`rows`, reading in :mod:`reading`, writing in :mod:`writing`, the
RPCs in :mod:`calling`, offset ranges in :mod:`ranges`) is registered with :func:`register`::

    import gannet.pipeline
    gannet.pipeline.register(spark)
    spark.read.format("gannet").option("endpoints", "127.0.0.1:8081").option("topic", "t").load()
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``gannet`` data source with a SparkSession (imports pyspark lazily)."""
    from gannet.pipeline import datasource  # noqa: PLC0415 — keeps pyspark out of CLI start

    datasource.register(spark)
