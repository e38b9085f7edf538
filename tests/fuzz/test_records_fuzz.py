"""Fuzz the commit-log record decoders (:mod:`gannet.node.store.log.records`).

Contract: :func:`check_record` and :func:`check_structure` return a verdict for any bytes and
never raise; a record they accept decodes with :func:`decode` to the same topic and size;
:func:`decode` of arbitrary bytes raises only ``ValueError``.
"""

from __future__ import annotations

import contextlib
import struct

from hypothesis import given
from hypothesis import strategies as st

from gannet.node.store.log import record_checks, records

from .conftest import SEEDED, fuzz_settings


def _valid_record(topic: str, body: bytes, props: dict[str, str], crc: bool, v6: bool) -> bytes:
    message = records.Message(topic=topic, body=body, queue_id=1, properties=props)
    if v6:
        message.born_host = ("::1", 1234)
    record = records.encode(message, body_size_max_bytes=1 << 20, append_crc=crc)
    if crc:
        records.seal_crc(record)
    return bytes(record)


names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=20)
valid = st.builds(
    _valid_record,
    names.filter(lambda t: len(t.encode()) <= 127),
    st.binary(max_size=300),
    st.dictionaries(names, names, max_size=4),
    st.booleans(),
    st.booleans(),
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid record with bytes overwritten, a length field set, or a cut tail."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["byte", "int", "cut", "grow"]))
        if how == "byte":
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif how == "int":
            pos = draw(st.integers(0, len(data) - 4))
            value = draw(st.sampled_from([0, -1, 1, 91, 2**31 - 1, -(2**31), len(data) + 1]))
            struct.pack_into(">i", data, pos, value)
        elif how == "cut":
            del data[draw(st.integers(8, len(data))) :]
        else:
            data += draw(st.binary(max_size=64))
    return bytes(data)


def _check(data: bytes) -> None:
    verdict = record_checks.check_record(data, 0, len(data), check_crc=True)
    head, size, error = record_checks.check_structure(data, 0, len(data), check_crc=True)
    if verdict.ok and verdict.size > 0:
        assert verdict.info is not None
        assert head is not None, error
        message = records.decode(data, 0)
        assert message.topic == verdict.info.topic == head.topic
        assert size == verdict.size
    elif not verdict.ok:
        assert verdict.error
    with contextlib.suppress(ValueError):
        records.decode(data, 0)


@SEEDED
@fuzz_settings(250)
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    _check(data)


@SEEDED
@fuzz_settings(250)
@given(mutated())
def test_mutated_records(data: bytes) -> None:
    _check(data)


@SEEDED
@fuzz_settings(50)
@given(valid)
def test_valid_records_pass(data: bytes) -> None:
    verdict = record_checks.check_record(data, 0, len(data), check_crc=True)
    assert verdict.ok, verdict.error
    assert verdict.size == len(data)
