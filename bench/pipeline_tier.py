"""Spark export from the tier's bucket vs from local files: MB/s of commit log and records/s.

Run with ``python -m bench.pipeline_tier`` (``--quick``: 4 files of 16 MiB; ``make bench`` runs
it when SeaweedFS's ``weed`` is built — ``make s3-tools`` — and says it skipped otherwise). It
writes ``--files`` commit-log files of ``--file-mib`` MiB full of 1 KiB RocketMQ records (the
store's encoder, :func:`bench.tier_read.write_files`), offloads them to a real SeaweedFS S3
server on 127.0.0.1 with the tier's uploader (local copies kept), and runs on Spark
``local[2]``, after one warm-up export (Python workers started):

* ``export_local``: :func:`gannet.pipeline.jobs.export` of the local files (mapped; large files cut
  into byte ranges, one task each);
* ``export_tier``: the same export of the bucket alone (one task per object, each read by ranged
  GETs of 32 MiB windows from the Python worker, :mod:`gannet.pipeline.objects`);
* ``verify_tier``: :func:`gannet.pipeline.jobs.verify` of the bucket;
* ``read_tier``: ``spark.read.format("gannet")`` with the ``tier*`` options, ``count()``, after a
  warm-up read (as ``bench.pipeline``'s data-source read).

Both exports write the same Parquet rows (checked: same count). The S3 server runs on the same
machine and shares its cores, so ``export_tier`` pays for the server's CPU too. Results are
appended to ``bench/results/pipeline_tier.jsonl`` with the load average; on a shared machine
compare runs taken side by side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gannet.pipeline
from bench import results_log
from bench.tier_read import write_files
from e2e.tier import seaweedfs
from gannet.node.store.tier import buckets, uploading
from gannet.pipeline import jobs, sources

PREFIX = "bench/pipeline/g0"


def timed(run: Callable[[], int], size_bytes: int) -> dict[str, float]:
    started = time.perf_counter()
    records = run()
    elapsed_s = time.perf_counter() - started
    return {
        "s": round(elapsed_s, 2),
        "mb_per_s": round(size_bytes / elapsed_s / 1e6, 1),
        "records_per_s": round(records / elapsed_s),
        "records": records,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--file-mib", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="4 files of 16 MiB")
    args = parser.parse_args()
    if args.quick:
        args.files, args.file_mib = 4, 16
    if not seaweedfs.weed_binary().exists():
        print(f"pipeline_tier: skipped, {seaweedfs.weed_binary()} missing (make s3-tools)")
        return
    file_bytes = args.file_mib << 20
    size_bytes = args.files * file_bytes
    with (
        tempfile.TemporaryDirectory(prefix="gannet-pipeline-tier-") as tmp,
        seaweedfs.SeaweedS3() as server,
    ):
        store = Path(tmp) / "store"
        (store / "commitlog").mkdir(parents=True)
        offsets = write_files(store / "commitlog", args.files, file_bytes)
        config = server.bucket_config(seaweedfs.BUCKET, timeout_s=30.0)
        bucket = buckets.S3Bucket(config)
        log = uploading.FileManifestLog(Path(tmp) / "manifest.json", PREFIX)
        for path in sorted((store / "commitlog").iterdir()):
            uploading.offload(path, bucket=bucket, log=log, now_ms=0, delete=False)
        tiered = sources.TieredSource(sources.TierBucket(config, PREFIX), log.current())
        credentials = Path(tmp) / "credentials"
        credentials.write_text(
            f"aws_access_key_id = {server.access_key}\n"
            f"aws_secret_access_key = {server.secret_key}\n"
        )
        spark = jobs.session("local[2]")
        gannet.pipeline.register(spark)
        out = Path(tmp) / "out"

        def export(source: Any) -> Callable[[], int]:
            def run() -> int:
                return jobs.export(spark, source, str(out), mode="overwrite").messages

            return run

        export(store)()  # warm-up: Python workers, JVM code paths
        local = timed(export(store), size_bytes)
        tier = timed(export(tiered), size_bytes)
        if local["records"] != tier["records"] or tier["records"] != len(offsets):
            raise AssertionError(f"exports differ: {local} {tier} ({len(offsets)} written)")
        verify = timed(lambda: jobs.verify(spark, tiered).records_ok, size_bytes)
        frame = (
            spark.read.format("gannet")
            .option("tierBucket", seaweedfs.BUCKET)
            .option("tierEndpoint", server.endpoint_url)
            .option("tierCredentialsFile", str(credentials))
            .option("tierPrefix", PREFIX)
            .option("tierManifest", str(log.path))
            .option("topic", "TierBench")
        )
        frame.load().count()  # warm-up: the data source's planner and reader workers
        read = timed(lambda: int(frame.load().count()), size_bytes)
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    result = {
        "bench": "pipeline_tier",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "files": args.files,
        "file_mib": args.file_mib,
        "export_local": local,
        "export_tier": tier,
        "verify_tier": verify,
        "read_tier": read,
    }
    results_log.append("pipeline_tier", result)
    print(result)


if __name__ == "__main__":
    main()
