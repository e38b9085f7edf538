"""The PROPERTIES strings of many records parsed together, with Arrow compute: no Python
object per record.

A record's properties are ``name\\x01value\\x02`` pairs (``reference/store-format.md`` §1.2). The
store's decoder (:func:`gannet.node.store.properties.decode`) splits at ``\\x02``, then each
piece at its first ``\\x01``, and drops pieces with an empty name or value; a repeated name
keeps its first position and its last value (a ``dict``). :func:`parse` does the same for a
whole column: split kernels over the column's one buffer give every (row, name, value) at
once; lookups (:meth:`PropertyColumns.value`) and the maps (:meth:`PropertyColumns.maps`)
are gathers and offsets built with numpy. What Arrow cannot do in bulk, it leaves to the
store's decoder, so the result always equals the decoder's:

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
        text = raw.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: the decoder's replacement characters, row by row
        decoded = [props.decode(b.decode("utf-8", errors="replace")) for b in raw.to_pylist()]
        text = pa.array(
            [PAIR_SEPARATOR.join(f"{k}{NAME_SEPARATOR}{v}" for k, v in d.items()) for d in decoded],
            pa.string(),
        )
    pieces = pc.split_pattern(text, PAIR_SEPARATOR)
    parents = pc.list_parent_indices(pieces).to_numpy().astype(np.int64)
    flat = pc.list_flatten(pieces)
    # A separator appended to every piece: each splits into exactly two parts, the value then
    # ends with that separator (cut off below); a piece without one gets an empty value.
    pairs = pc.split_pattern(
        pc.binary_join_element_wise(flat, "", NAME_SEPARATOR), NAME_SEPARATOR, max_splits=1
    )
    names = pc.list_element(pairs, 0)
    values = pc.utf8_slice_codeunits(pc.list_element(pairs, 1), 0, -1)
    good = pc.and_(pc.greater(pc.binary_length(names), 0), pc.greater(pc.binary_length(values), 0))
    chosen = np.flatnonzero(good.to_numpy(zero_copy_only=False))
    index = pa.array(chosen)
    names, values, parents = names.take(index), values.take(index), parents[chosen]
    unique = _unique_per_row(parents, names)
    return PropertyColumns(len(raw), parents, names, values, unique)


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
