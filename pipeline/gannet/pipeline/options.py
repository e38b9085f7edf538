"""Options of the ``gannet`` Spark data source, parsed and checked before any job runs.

Option names are case-insensitive (Spark lower-cases them). Reading (``spark.read`` and
``spark.readStream``):

==========================  ===============================================================
``endpoints``               required; ``host:port`` of a broker (several: ``;``-separated,
                            tried in order)
``topic``                   required
``queues``                  queue ids, e.g. ``0,2`` (in every broker group); default every
                            readable queue of every group (QueryRoute)
``startingOffsets``         ``earliest`` (default), ``latest``, or JSON ``{"0": 12, "1": -2}``
                            (-2 earliest, -1 latest; a queue left out starts at earliest;
                            a queue id applies in every broker group)
``endingOffsets``           batch only: ``latest`` (default) or JSON as above (exclusive; a
                            queue left out ends at latest)
``startingTimestamp``       instead of ``startingOffsets``: epoch milliseconds or ISO-8601;
                            each queue starts at its first message stored at or after it
``endingTimestamp``         batch only, instead of ``endingOffsets``
``filter``                  tag expression, e.g. ``TagA || TagB`` (default ``*``)
``group``                   an existing consumer group to pull as (default anonymous); pulls
                            never commit group offsets
``maxPartitionMessages``    split a queue's range into partitions of at most this many
                            offsets (default 100000)
``maxMessagesPerTrigger``   streaming: at most this many offsets per micro-batch, shared
                            fairly by the queues (default unlimited)
``pullBatchSize``           messages per PullMessage (default and most: 1024)
``failOnDataLoss``          ``true`` (default): fail when a start offset was cleaned up;
                            ``false``: continue at the queue's earliest offset
``requestTimeoutSeconds``   per-RPC deadline (default 30)
==========================  ===============================================================

Reading without a broker, from a broker group's tier (its bucket) and/or its store directory
(``spark.read`` only; :mod:`gannet.pipeline.tierreading`):

==========================  ===============================================================
``tierBucket``              the bucket holding the group's offloaded commit-log files; with
``tierEndpoint``            its S3 endpoint URL (http or https),
``tierCredentialsFile``     an AWS shared-credentials file with its access key and secret
                            (read on the driver), and
``tierPrefix``              the group's key prefix (``gannet/<cluster>/<group>``): all four
                            or none
``tierManifest``            the tier manifest file (``<store>/tier/manifest.json``); default
                            the bucket's ``<prefix>/manifest.json``
``storeDir``                the group's store directory (or a folder of segment copies): its
                            files after the tier's end are read too; alone, only they are
``topic``                   required
``queues``                  as above
``startingTimestamp``       store time from (inclusive), epoch ms or ISO-8601
``endingTimestamp``         store time to (exclusive)
``broker``                  the value of the ``broker`` column (default empty)
==========================  ===============================================================

Writing (``df.write``): ``endpoints``, ``topic``, ``requestTimeoutSeconds``, and
``batchSize`` (messages per SendMessage, default 64, at most 1024), ``batchBytes`` (body bytes
per SendMessage, default 4 MiB), ``maxRetries`` (per batch on retryable codes, default 5),
``retryBackoffMs`` (first backoff, doubled each retry, default 100).

Every problem raises :class:`OptionError` naming the option and what is allowed. Pure apart from
reading the tier credentials file (on the driver); used by
:mod:`datasource`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gannet.node.store.tier import buckets, credentials_file
from gannet.pipeline import calling
from gannet.pipeline.sources import TierBucket

EARLIEST = -2
LATEST = -1
PULL_BATCH_MAX = 1024
SEND_BATCH_MAX = 1024

READ_OPTIONS = frozenset(
    {
        "endpoints",
        "topic",
        "queues",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "filter",
        "group",
        "maxpartitionmessages",
        "maxmessagespertrigger",
        "pullbatchsize",
        "failondataloss",
        "requesttimeoutseconds",
    }
)
WRITE_OPTIONS = frozenset(
    {
        "endpoints",
        "topic",
        "batchsize",
        "batchbytes",
        "maxretries",
        "retrybackoffms",
        "requesttimeoutseconds",
    }
)
TIER_OPTIONS = frozenset(
    {"tierbucket", "tierendpoint", "tiercredentialsfile", "tierprefix", "tiermanifest", "storedir"}
)
TIER_READ_OPTIONS = TIER_OPTIONS | {
    "topic",
    "queues",
    "startingtimestamp",
    "endingtimestamp",
    "broker",
}
IGNORED_OPTIONS = frozenset({"path"})


class OptionError(ValueError):
    """A data-source option is missing or wrong; the message names it."""


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a queue range starts or ends: per-queue offsets (EARLIEST/LATEST allowed) with a
    default for queues not named, or a store time in epoch ms."""

    offsets: Mapping[int, int]
    default: int
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ReadOptions:
    endpoints: tuple[str, ...]
    topic: str
    queues: tuple[int, ...] | None
    start: Bound
    end: Bound
    expression: str
    group: str
    partition_messages_max: int
    trigger_messages_max: int | None
    pull_batch_size: int
    fail_on_data_loss: bool
    timeout_s: float


@dataclass(frozen=True, slots=True)
class TierReadOptions:
    """A read from a tier and/or a store directory. ``tier`` is None without the ``tier*``
    options; ``manifest`` None means the bucket's ``<prefix>/manifest.json``."""

    tier: TierBucket | None
    manifest: Path | None
    store: Path | None
    topic: str
    queues: tuple[int, ...] | None
    since_ms: int | None
    until_ms: int | None
    broker: str


@dataclass(frozen=True, slots=True)
class WriteOptions:
    endpoints: tuple[str, ...]
    topic: str
    batch_messages_max: int
    batch_bytes_max: int
    retries_max: int
    backoff_ms_first: int
    timeout_s: float


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(options) - known - IGNORED_OPTIONS)
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for {what}; known: {', '.join(sorted(known))}"
        )


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower(), "").strip()
    if not value:
        raise OptionError(f"option {name!r} is required")
    return value


def _int(options: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {text!r}") from None
    if not low <= value <= high:
        raise OptionError(f"option {name!r} must be in {low}..{high}, not {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise OptionError(f"option {name!r} must be true or false, not {text!r}")


def _timeout(options: Mapping[str, str]) -> float:
    return float(_int(options, "requestTimeoutSeconds", 30, 1, 3600))


def _endpoints(options: Mapping[str, str]) -> tuple[str, ...]:
    try:
        return calling.parse_endpoints(_required(options, "endpoints"))
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def parse_timestamp_ms(name: str, text: str) -> int:
    """Epoch milliseconds from ``1700000000000`` or ISO-8601 (``Z`` or offset; naive = UTC)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        value = int(text)
    else:
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise OptionError(
                f"option {name!r} must be epoch milliseconds or ISO-8601 "
                f"(e.g. 2026-11-22T08:00:00Z), not {text!r}"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        value = int(parsed.timestamp() * 1000)
    if value < 0:
        raise OptionError(f"option {name!r} is before 1970: {text!r}")
    return value


def parse_offsets(name: str, text: str, default: int) -> Bound:
    """``earliest`` / ``latest`` / JSON object of queue id → offset (-2 earliest, -1 latest)."""
    word = text.strip().lower()
    if word == "earliest":
        return Bound({}, EARLIEST)
    if word == "latest":
        return Bound({}, LATEST)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raw = None
    if not isinstance(raw, dict):
        raise OptionError(
            f"option {name!r} must be 'earliest', 'latest' or a JSON object of queue id to "
            f'offset such as {{"0": 12, "1": -2}}, not {text!r}'
        )
    offsets: dict[int, int] = {}
    for key, value in raw.items():
        if not str(key).isdigit():
            raise OptionError(f"option {name!r}: queue id {key!r} is not a non-negative integer")
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
            raise OptionError(
                f"option {name!r}: offset {value!r} of queue {key} must be an integer >= 0, "
                "or -2 (earliest) / -1 (latest)"
            )
        offsets[int(key)] = value
    return Bound(offsets, default)


def _bound(options: Mapping[str, str], offsets_name: str, time_name: str, default: int) -> Bound:
    offsets_text = options.get(offsets_name.lower())
    time_text = options.get(time_name.lower())
    if offsets_text is not None and time_text is not None:
        raise OptionError(f"give either {offsets_name!r} or {time_name!r}, not both")
    if time_text is not None:
        return Bound({}, default, parse_timestamp_ms(time_name, time_text))
    if offsets_text is not None:
        return parse_offsets(offsets_name, offsets_text, default)
    return Bound({}, default)


def _queues(options: Mapping[str, str]) -> tuple[int, ...] | None:
    text = options.get("queues")
    if text is None or not text.strip():
        return None
    ids: list[int] = []
    for part in text.split(","):
        if not part.strip().isdigit():
            raise OptionError(
                f"option 'queues' must list queue ids such as 0,2,5; {part.strip()!r} is not one"
            )
        ids.append(int(part))
    return tuple(sorted(set(ids)))


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _lower(options)
    what = "spark.readStream" if streaming else "spark.read"
    _check_known(opts, READ_OPTIONS, f"{what}.format('gannet')")
    if streaming:
        for name in ("endingOffsets", "endingTimestamp"):
            if name.lower() in opts:
                raise OptionError(f"option {name!r} is for batch reads; a stream has no end")
    elif "maxmessagespertrigger" in opts:
        raise OptionError("option 'maxMessagesPerTrigger' is for spark.readStream")
    start = _bound(opts, "startingOffsets", "startingTimestamp", EARLIEST)
    end = _bound(opts, "endingOffsets", "endingTimestamp", LATEST)
    if (
        start.timestamp_ms is not None
        and end.timestamp_ms is not None
        and start.timestamp_ms > end.timestamp_ms
    ):
        raise OptionError("option 'startingTimestamp' is after 'endingTimestamp'")
    trigger = opts.get("maxmessagespertrigger")
    return ReadOptions(
        endpoints=_endpoints(opts),
        topic=_required(opts, "topic"),
        queues=_queues(opts),
        start=start,
        end=end,
        expression=opts.get("filter", "*").strip() or "*",
        group=opts.get("group", "").strip(),
        partition_messages_max=_int(opts, "maxPartitionMessages", 100_000, 1, 2**62),
        trigger_messages_max=(
            None if trigger is None else _int(opts, "maxMessagesPerTrigger", 0, 1, 2**62)
        ),
        pull_batch_size=_int(opts, "pullBatchSize", PULL_BATCH_MAX, 1, PULL_BATCH_MAX),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        timeout_s=_timeout(opts),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    _check_known(opts, WRITE_OPTIONS, "df.write.format('gannet')")
    return WriteOptions(
        endpoints=_endpoints(opts),
        topic=_required(opts, "topic"),
        batch_messages_max=_int(opts, "batchSize", 64, 1, SEND_BATCH_MAX),
        batch_bytes_max=_int(opts, "batchBytes", 4 * 1024 * 1024, 1, 128 * 1024 * 1024),
        retries_max=_int(opts, "maxRetries", 5, 0, 100),
        backoff_ms_first=_int(opts, "retryBackoffMs", 100, 1, 60_000),
        timeout_s=_timeout(opts),
    )


def is_tier_read(options: Mapping[str, str]) -> bool:
    """Whether the options ask for a read without a broker (any ``tier*`` or ``storeDir``)."""
    return bool(TIER_OPTIONS & set(_lower(options)))


def tier_read_options(options: Mapping[str, str], *, streaming: bool) -> TierReadOptions:
    """The options of a read from the tier and/or a store directory (module docstring); the
    credentials file is read here, on the driver."""
    opts = _lower(options)
    if streaming:
        raise OptionError(
            "spark.readStream needs a broker (option 'endpoints'); the tier* and storeDir "
            "options are for spark.read"
        )
    if "endpoints" in opts:
        raise OptionError(
            "give either 'endpoints' (a read through a broker) or the tier* / storeDir options "
            "(a read from the bucket and store files), not both"
        )
    unknown = sorted(set(opts) - TIER_READ_OPTIONS - IGNORED_OPTIONS)
    if unknown:
        raise OptionError(
            f"option(s) {', '.join(unknown)} need a broker (option 'endpoints'); a read from the "
            f"tier or a store directory takes {', '.join(sorted(TIER_READ_OPTIONS))}"
        )
    names = ("tierBucket", "tierEndpoint", "tierCredentialsFile", "tierPrefix")
    given = {name: opts.get(name.lower(), "").strip() for name in names}
    tier: TierBucket | None = None
    if any(given.values()):
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise OptionError(f"a read from the tier needs {', '.join(names)}; missing {missing}")
        tier = _tier_bucket(given)
    elif "tiermanifest" in opts:
        raise OptionError(f"option 'tierManifest' needs the tier options {', '.join(names)}")
    store = opts.get("storedir", "").strip()
    if tier is None and not store:
        raise OptionError("give the tier options (tierBucket, ...), option 'storeDir', or both")
    since = opts.get("startingtimestamp")
    until = opts.get("endingtimestamp")
    since_ms = None if since is None else parse_timestamp_ms("startingTimestamp", since)
    until_ms = None if until is None else parse_timestamp_ms("endingTimestamp", until)
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise OptionError("option 'startingTimestamp' is after 'endingTimestamp'")
    manifest = opts.get("tiermanifest", "").strip()
    return TierReadOptions(
        tier=tier,
        manifest=Path(manifest) if manifest else None,
        store=Path(store).expanduser() if store else None,
        topic=_required(opts, "topic"),
        queues=_queues(opts),
        since_ms=since_ms,
        until_ms=until_ms,
        broker=opts.get("broker", "").strip(),
    )


def _tier_bucket(given: Mapping[str, str]) -> TierBucket:
    try:
        credentials = credentials_file.load(Path(given["tierCredentialsFile"]).expanduser())
    except ValueError as exc:
        raise OptionError(f"option 'tierCredentialsFile': {exc}") from None
    try:
        config = buckets.BucketConfig(
            endpoint_url=given["tierEndpoint"],
            bucket=given["tierBucket"],
            access_key=credentials.access_key,
            secret_key=credentials.secret_key,
        )
        return TierBucket(config, given["tierPrefix"])
    except ValueError as exc:
        raise OptionError(f"tier options: {exc}") from None
