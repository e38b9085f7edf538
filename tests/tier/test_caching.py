"""The tier's block cache: bounded in bytes, least recently used evicted first (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store.tier import caching

operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "get", "discard"]),
        st.integers(0, 3),
        st.integers(0, 5),
        st.integers(0, 40),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(st.integers(1, 100), operations)
def test_the_cache_is_an_lru_within_its_byte_bound(
    bytes_max: int, ops: list[tuple[str, int, int, int]]
) -> None:
    cache = caching.BlockCache(bytes_max)
    model: list[tuple[caching.BlockKey, bytes]] = []  # least recently used first
    for op, base, index, size in ops:
        key = (base, index)
        if op == "put":
            block = bytes([size % 256]) * size
            cache.put(key, block)
            model = [(k, b) for k, b in model if k != key]
            if size <= bytes_max:
                model.append((key, block))
                while sum(len(b) for _, b in model) > bytes_max:
                    model.pop(0)
        elif op == "get":
            found = dict(model).get(key)
            assert cache.get(key) == found
            if found is not None:
                model = [(k, b) for k, b in model if k != key] + [(key, found)]
        else:
            cache.discard_object(base)
            model = [(k, b) for k, b in model if k[0] != base]
        assert cache.used_bytes == sum(len(b) for _, b in model) <= bytes_max
        assert len(cache) == len(model)


def test_a_bad_bound_is_named() -> None:
    with pytest.raises(ValueError, match="bytes_max 0 <= 0"):
        caching.BlockCache(0)
