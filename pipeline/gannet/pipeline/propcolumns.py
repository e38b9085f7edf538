"""The PROPERTIES strings of many records parsed together, with numpy over the column's one
buffer: no Python object per record.

A record's properties are ``name\\x01value\\x02`` pairs (``docs/formats/commitlog.md`` §5). The
store's decoder (:func:`gannet.node.store.properties.decode`) splits at ``\\x02``, then each
piece at its first ``\\x01``, and drops pieces with an empty name or value; a repeated name
keeps its first position and its last value (a ``dict``). :func:`parse` does the same for a
whole column: one pass finds every pair separator and name separator, the pieces and their
first name separator are matched with ``searchsorted``, and names and values are taken from one
Arrow array cut at those positions; lookups (:meth:`PropertyColumns.value`) and the maps
(:meth:`PropertyColumns.maps`) are gathers and offsets built with numpy. What it cannot do in
bulk it leaves to the store's decoder, so the result always equals the decoder's:

* a column that is not valid UTF-8 (the decoder replaces bad bytes): every row decoded;
* a row that repeats a name (the store never writes one): that chunk's maps built row by row.

Pure; used by :mod:`gannet.pipeline.columns` (segments and PullRecords replies alike) and the
readers' batches (:mod:`gannet.pipeline.rows`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gannet.node.store import properties as props

PAIR_SEPARATOR = props.PROPERTY_SEPARATOR
NAME_SEPARATOR = props.NAME_VALUE_SEPARATOR
MAP_TYPE = pa.map_(pa.string(), pa.string())
KEYS_TYPE = pa.list_(pa.string())
_PAIR_BYTE = ord(PAIR_SEPARATOR)
_NAME_BYTE = ord(NAME_SEPARATOR)
_PAIRS_COUNTED_MAX = 1 << 22  # (row, name) pairs counted in one array; else sorted


@dataclass(frozen=True, slots=True)
class PropertyColumns:
    """Every (row, name, value) of a column of property strings, in row order; entries with an
    empty name or value are already gone (as the decoder drops them)."""

    rows: int
    parents: npt.NDArray[np.int64]
    names: pa.StringArray
    values: pa.StringArray
    unique: bool
    """No row repeats a name (else :meth:`maps` falls back to the decoder's dicts)."""

    def value(self, name: str) -> pa.StringArray:
        """The value of ``name`` per row (null where absent; the last one where repeated)."""
        picked = np.flatnonzero(pc.equal(self.names, name).to_numpy(zero_copy_only=False))
        where = np.full(self.rows, -1, dtype=np.int64)
        where[self.parents[picked]] = picked  # ascending: a repeated name keeps the last
        index = pa.array(where, mask=where < 0)
        return self.values.take(index)

    def maps(self, hidden: Collection[str] = (), hidden_prefix: str | None = None) -> pa.MapArray:
        """The rows as maps (the decoder's dicts, in their order), without the names in
        ``hidden`` or starting with ``hidden_prefix``."""
        keep = np.ones(len(self.names), dtype=bool)
        if hidden:
            keep &= ~pc.is_in(self.names, value_set=pa.array(list(hidden), pa.string())).to_numpy(
                zero_copy_only=False
            )
        if hidden_prefix:
            keep &= ~pc.starts_with(self.names, hidden_prefix).to_numpy(zero_copy_only=False)
        if not self.unique:
            return _maps_by_row(self, keep)
        chosen = np.flatnonzero(keep)
        offsets = _offsets(self.parents[chosen], self.rows)
        index = pa.array(chosen)
        return pa.MapArray.from_arrays(
            pa.array(offsets), self.names.take(index), self.values.take(index), type=MAP_TYPE
        )


def parse(raw: pa.BinaryArray) -> PropertyColumns:
    """The properties of each element of ``raw`` (see the module docstring)."""
    try:
        raw.cast(pa.string())  # validates the UTF-8 of every element
    except pa.ArrowInvalid:  # not UTF-8: the decoder's replacement characters, row by row
        decoded = [props.decode(b.decode("utf-8", errors="replace")) for b in raw.to_pylist()]
        raw = pa.array(
            [PAIR_SEPARATOR.join(f"{k}{NAME_SEPARATOR}{v}" for k, v in d.items()) for d in decoded],
            pa.binary(),
        )
    rows = len(raw)
    if not rows or not raw.buffers()[2]:
        return _empty(rows)
    bounds = np.frombuffer(raw.buffers()[1], dtype=np.int32)[raw.offset : raw.offset + rows + 1]
    bounds = bounds.astype(np.int64)
    data = np.frombuffer(raw.buffers()[2], dtype=np.uint8)[: int(bounds[-1])]
    # Pieces between pair separators and row bounds: the k-th start pairs with the k-th end.
    pair_ends = np.flatnonzero(data == _PAIR_BYTE)
    starts = np.sort(np.concatenate([bounds[:-1], pair_ends + 1]), kind="stable")
    ends = np.sort(np.concatenate([pair_ends, bounds[1:]]), kind="stable")
    # Each piece's first name separator, if it has one before its end.
    name_ends = np.flatnonzero(data == _NAME_BYTE)
    if not len(name_ends):
        return _empty(rows)
    first = np.searchsorted(name_ends, starts)
    found = first < len(name_ends)
    at = np.where(found, name_ends[np.minimum(first, len(name_ends) - 1)], ends)
    good = (at < ends) & (at > starts) & (at + 1 < ends)  # a name and a value, both non-empty
    starts, at, ends = starts[good], at[good], ends[good]
    if not len(starts):
        return _empty(rows)
    parents = np.searchsorted(bounds, starts, side="right") - 1
    # One array over the data whose elements are name, separator, value, gap, name, ...
    cuts = np.stack([starts, at, at + 1, ends], axis=1).reshape(-1)
    pieces = pa.StringArray.from_buffers(
        max(len(cuts) - 1, 0), pa.py_buffer(cuts.astype(np.int32)), raw.buffers()[2]
    )
    names = pieces.take(pa.array(np.arange(0, len(cuts) - 1, 4)))
    values = pieces.take(pa.array(np.arange(2, len(cuts) - 1, 4)))
    return PropertyColumns(rows, parents, names, values, _unique_per_row(parents, names))


def _empty(rows: int) -> PropertyColumns:
    none = pa.array([], pa.string())
    return PropertyColumns(rows, np.zeros(0, dtype=np.int64), none, none, True)


def keys_lists(keys: pa.StringArray) -> pa.ListArray:
    """The tokens of each ``KEYS`` value (:func:`gannet.node.store.properties.split_keys`:
    single-space separated, empty tokens dropped; an empty list for a null)."""
    tokens = pc.split_pattern(keys, props.KEY_SEPARATOR)
    parents = pc.list_parent_indices(tokens).to_numpy().astype(np.int64)
    flat = pc.list_flatten(tokens)
    chosen = np.flatnonzero(pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False))
    offsets = _offsets(parents[chosen], len(keys))
    return pa.ListArray.from_arrays(pa.array(offsets), flat.take(pa.array(chosen)), type=KEYS_TYPE)


def _offsets(parents: npt.NDArray[np.int64], rows: int) -> npt.NDArray[np.int32]:
    """List offsets of entries whose rows are ``parents`` (ascending)."""
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents, minlength=rows), out=offsets[1:])
    return offsets


def _unique_per_row(parents: npt.NDArray[np.int64], names: pa.StringArray) -> bool:
    if len(names) < 2:
        return True
    codes = pc.dictionary_encode(names).indices.to_numpy().astype(np.int64)
    width = int(codes.max()) + 1
    pairs = parents * width + codes
    if len(parents) and (int(parents[-1]) + 1) * width <= _PAIRS_COUNTED_MAX:
        return int(np.bincount(pairs).max()) <= 1
    return len(np.unique(pairs)) == len(pairs)


def _maps_by_row(columns: PropertyColumns, keep: npt.NDArray[np.bool_]) -> pa.MapArray:
    """The maps the decoder's dicts give (first position, last value per name)."""
    rows: list[dict[str, str]] = [{} for _ in range(columns.rows)]
    names, values = columns.names.to_pylist(), columns.values.to_pylist()
    for parent, name, value, kept in zip(
        columns.parents.tolist(), names, values, keep.tolist(), strict=True
    ):
        if kept:
            rows[parent][name] = value
    return pa.array([list(d.items()) for d in rows], MAP_TYPE)
