"""Tiered storage: sealed commit-log files offloaded to an S3-compatible bucket.

The design is in ``docs/tiered-storage.md``. The room is split like the rest of the store: pure
cores (:mod:`.naming` for object keys, :mod:`.manifests` for what the tier holds,
:mod:`.planning` for what to offload, delete and expire, :mod:`.caching` for the bounded block
cache) and IO edges (:mod:`.buckets`, the only
module that talks S3; :mod:`.uploading`, the crash-safe offload of one file; :mod:`.reading`,
ranged reads of offloaded offsets through a bounded cache). Nothing of the broker calls this room
yet: it is the first slice of issue 37, built and tested against a real SeaweedFS S3 server.
"""
