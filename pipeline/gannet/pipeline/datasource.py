"""The Spark data source ``gannet``: read and write Gannet topics through a broker.

Register it once per SparkSession, then use it by name::

    from gannet.pipeline import register
    register(spark)            # = spark.dataSource.register(GannetDataSource)

    df = (spark.read.format("gannet")
          .option("endpoints", "127.0.0.1:8081").option("topic", "orders")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())
    stream = (spark.readStream.format("gannet")
              .option("endpoints", "127.0.0.1:8081").option("topic", "orders")
              .option("maxMessagesPerTrigger", 10000).load())
    df.select("body", "keys", "tag").write.format("gannet") \\
        .option("endpoints", "127.0.0.1:8081").option("topic", "orders-copy") \\
        .mode("append").save()

Without a broker, a topic is read straight from a broker group's tier and/or its store
directory (the ``tier*`` and ``storeDir`` options; :mod:`gannet.pipeline.tierreading`)::

    df = (spark.read.format("gannet")
          .option("tierBucket", "gannet-tier").option("tierEndpoint", "https://s3.example")
          .option("tierCredentialsFile", "/etc/gannet/tier-credentials")
          .option("tierPrefix", "gannet/c1/broker-0").option("storeDir", "/data/broker-0")
          .option("topic", "orders").load())

Options are listed in :mod:`gannet.pipeline.options`, the schema in :mod:`gannet.pipeline.rows`,
reading in :mod:`gannet.pipeline.reading` (PullMessage, QueryOffset, QueryRoute) and writing in
:mod:`gannet.pipeline.writing` (SendMessage batches). The Python code runs in Spark's Python
workers, so executors need the ``gannet`` package (``pip install gannet[pipeline]`` or
``--py-files``, see :mod:`gannet.pipeline.jobs`) and network access to the broker's client port.
Writes append only; ``mode("overwrite")`` is refused (a topic cannot be truncated), and an
unknown topic is refused on the driver, before any task runs. Reads and writes cover every
broker group of the topic (the route the ``endpoints`` member answers lists them all).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from gannet.pipeline import options, reading, rows, tierreading, writing
from gannet.pipeline.calling import BrokerConnection, BrokerError
from gannet.pipeline.options import OptionError

NAME = "gannet"


class GannetDataSource(DataSource):
    """``format("gannet")``: batch and streaming reads, batch writes."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return rows.READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if options.is_tier_read(self.options):
            return tierreading.TierBatchReader(
                options.tier_read_options(self.options, streaming=False)
            )
        return reading.BatchReader(options.read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        if options.is_tier_read(self.options):
            options.tier_read_options(self.options, streaming=True)  # raises: needs a broker
        return reading.StreamReader(options.read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError(
                "gannet topics are append-only: use mode('append'), not mode('overwrite')"
            )
        try:
            rows.check_write_schema([(f.name, f.dataType.simpleString()) for f in schema.fields])
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        opts = options.write_options(self.options)
        with BrokerConnection(opts.endpoints, timeout_s=opts.timeout_s) as conn:
            try:
                route = conn.route(opts.topic)  # fails before any task for a bad topic
            except BrokerError as exc:
                raise OptionError(f"option 'topic': {exc}") from None
        groups = {q.group: q.endpoints for q in route if q.writable}
        if not groups:
            raise OptionError(f"option 'topic': topic {opts.topic!r} has no writable queue")
        return writing.Writer(opts, sorted(groups.items()))


def register(spark: Any) -> None:
    """Make ``format("gannet")`` known to ``spark`` (a SparkSession)."""
    spark.dataSource.register(GannetDataSource)
