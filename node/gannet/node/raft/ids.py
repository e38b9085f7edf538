"""Identifier types of the Raft layer: terms, node ids and commit-log byte offsets.

The bottom of ``gannet.node.raft``: :mod:`messages`, :mod:`membership` and the core import
them from here, so that the messages (which carry a configuration in a log reset) and the
configurations (which name nodes and offsets) do not import each other.
"""

from __future__ import annotations

from typing import NewType

Term = NewType("Term", int)
ByteOffset = NewType("ByteOffset", int)
NodeId = NewType("NodeId", int)

NO_NODE = NodeId(0)
"""Node ids are positive; 0 means "nobody" (no vote cast, no leader known)."""
ZERO_OFFSET = ByteOffset(0)
ZERO_TERM = Term(0)
