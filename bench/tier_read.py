"""Consuming from the tier vs from local disk: MB/s and CPU per message.

Run with ``python -m bench.tier_read`` (``make s3-tools`` first: it needs SeaweedFS's ``weed``).
It writes ``--files`` commit-log files of ``--file-mib`` MiB full of 1 KiB RocketMQ records (the
store's encoder), reads every record back from the local files (the baseline: one slice of the
file per record, decoded by the store's decoder), offloads the files to a real SeaweedFS S3
server on 127.0.0.1 with the tier's uploader, and reads every record again through
:class:`gannet.node.store.tier.reading.TierReader` — cold (every block fetched by ranged GETs,
1 MiB blocks, read-ahead 4) and warm (all from the cache). CPU is this process's CPU time (the
S3 server's is not counted); both sides decode every record. Figures are appended to
``bench/results/tier_read.jsonl`` with the load average: on a shared machine compare runs taken
side by side.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import results_log
from e2e.tier import seaweedfs
from gannet.node.store.log import records
from gannet.node.store.tier import buckets, naming, reading, uploading

BODY = b"b" * 1024


def write_files(directory: Path, files: int, file_bytes: int) -> list[int]:
    """Commit-log files of 1 KiB records; returns every record's physical offset."""
    offsets: list[int] = []
    for index in range(files):
        base = index * file_bytes
        data = bytearray()
        while True:
            msg = records.Message(
                "TierBench", BODY, queue_offset=len(offsets), physical_offset=base + len(data)
            )
            record = records.encode(msg, body_size_max_bytes=1 << 20)
            if len(data) + len(record) + 8 > file_bytes:
                break
            offsets.append(base + len(data))
            data += record
        data += records.blank_record(file_bytes - len(data))
        data += bytes(file_bytes - len(data))
        (directory / naming.commitlog_file_name(base)).write_bytes(bytes(data))
    return offsets


def measure(read_record: Callable[[int], bytes], offsets: list[int]) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    total_bytes = 0
    for offset in offsets:
        record = read_record(offset)
        total_bytes += len(record)
        if records.decode(record).body != BODY:
            raise AssertionError(f"record at {offset} read back wrong")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "mb_per_s": round(total_bytes / wall / 1e6, 1),
        "cpu_us_per_msg": round(cpu / len(offsets) * 1e6, 2),
        "messages": len(offsets),
    }


def local_reader(directory: Path, file_bytes: int) -> Callable[[int], bytes]:
    files: dict[int, bytes] = {}

    def read_record(offset: int) -> bytes:
        base = offset - offset % file_bytes
        if base not in files:
            files[base] = (directory / naming.commitlog_file_name(base)).read_bytes()
        data, at = files[base], offset - base
        size = int.from_bytes(data[at : at + 4], "big")
        return data[at : at + size]

    return read_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=16)
    args = parser.parse_args()
    file_bytes = args.file_mib << 20
    with (
        tempfile.TemporaryDirectory(prefix="gannet-tier-bench-") as tmp,
        seaweedfs.SeaweedS3() as server,
    ):
        directory = Path(tmp) / "commitlog"
        directory.mkdir()
        offsets = write_files(directory, args.files, file_bytes)
        local = measure(local_reader(directory, file_bytes), offsets)
        bucket = buckets.S3Bucket(server.bucket_config(seaweedfs.BUCKET, timeout_s=30.0))
        log = uploading.FileManifestLog(Path(tmp) / "manifest.json", "bench/tier/g0")
        started = time.perf_counter()
        for path in sorted(directory.iterdir()):
            uploading.offload(path, bucket=bucket, log=log, now_ms=0)
        offload_mb_per_s = round(args.files * file_bytes / (time.perf_counter() - started) / 1e6, 1)
        reader = reading.TierReader(bucket, log.current, cache_bytes_max=args.files * file_bytes)
        cold = measure(reader.read_record, offsets)
        stats = reader.statistics()
        warm = measure(reader.read_record, offsets)
    result = {
        "bench": "tier_read",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": os.getloadavg()[0],
        "files": args.files,
        "file_mib": args.file_mib,
        "local": local,
        "tier_cold": cold,
        "tier_warm": warm,
        "tier_fetches": stats.fetches,
        "offload_mb_per_s": offload_mb_per_s,
    }
    results_log.append("tier_read", result)
    print(result)


if __name__ == "__main__":
    main()
