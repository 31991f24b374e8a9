"""Read a contest JSON file (``.json`` or ``.json.gz``) into an :class:`Instance`.

msgspec decodes straight into typed lists and checks every number while it
parses (measured on benchmark A, 93 MB: 0.76 s and 360 MB peak; stdlib json
needs ~2x the time and memory), and its errors carry the JSON path of the
offending value, which makes the one-line messages below precise.
"""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np

from .csr import offsets
from .instance import Instance
from .nogc import paused

# Any non-negative 64-bit integer, as the contest allows; sums are taken exactly
# (evaluate.py) and memory is brought into a safe range by presolve (reduce/draft.py, memory_units).
Value = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class _Nodes(msgspec.Struct):
    intervals: list[tuple[Value, Value]]
    costs: list[list[Value]]
    usages: list[list[Value]]


class _Edges(msgspec.Struct):
    nodes: list[tuple[Value, Value]] = []
    costs: list[list[Value]] = []


class _Problem(msgspec.Struct):
    nodes: _Nodes
    edges: _Edges = msgspec.field(default_factory=_Edges)
    name: str = ""
    usage_limit: Value | None = None


class _File(msgspec.Struct):
    problem: _Problem


class InputError(ValueError):
    """A problem file that cannot be read or is not a valid instance."""


def read_bytes(path: str | Path) -> bytes:
    """A file's bytes, gunzipped if it is gzip-compressed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    return _gunzip(data, str(path))


def _gunzip(data: bytes, label: str) -> bytes:
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise InputError(f"{label}: corrupt gzip data ({exc})") from None
    return data


def read_instance(path: str | Path) -> Instance:
    """Read and validate a problem file; raise :class:`InputError` on any defect."""
    return parse_instance(read_bytes(path), str(path))


def parse_instance(data: bytes, label: str = "problem") -> Instance:
    """Validate the contents of a problem file (plain or gzipped JSON); ``label``
    names it in error messages."""
    data = _gunzip(data, label)
    with paused():  # the decoded lists hold no cycles (see nogc.py)
        try:
            problem = msgspec.json.decode(data, type=_File).problem
        except msgspec.ValidationError as exc:
            raise InputError(f"{label}: invalid instance: {exc}") from None
        except msgspec.DecodeError as exc:
            raise InputError(f"{label}: malformed JSON: {exc}") from None
        del data
        try:
            inst = _to_arrays(problem)
        except InputError as exc:
            raise InputError(f"{label}: {exc}") from None
        del problem  # freed here, else the collector's first pass after would walk it
    return inst


def _flatten(rows: list[list[int]], total: int) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)


def _to_arrays(p: _Problem) -> Instance:
    nodes, edges = p.nodes, p.edges
    n = len(nodes.costs)
    if n == 0:
        raise InputError("instance has no nodes")
    if len(nodes.usages) != n:
        raise InputError(f"{len(nodes.costs)} cost lists but {len(nodes.usages)} usage lists")
    if len(nodes.intervals) != n:
        raise InputError(f"{n} nodes but {len(nodes.intervals)} intervals")
    n_strat = np.fromiter(map(len, nodes.costs), dtype=np.int64, count=n)
    n_usage = np.fromiter(map(len, nodes.usages), dtype=np.int64, count=n)
    if (bad := np.flatnonzero(n_strat == 0)).size:
        raise InputError(f"node {bad[0]} has no strategy")
    if (bad := np.flatnonzero(n_strat != n_usage)).size:
        i = bad[0]
        raise InputError(f"node {i} has {n_strat[i]} costs but {n_usage[i]} usages")
    interval = np.array(nodes.intervals, dtype=np.int64).reshape(n, 2)
    if (bad := np.flatnonzero(interval[:, 0] > interval[:, 1])).size:
        i = bad[0]
        raise InputError(f"node {i} has interval {interval[i].tolist()} ending before it starts")

    m = len(edges.nodes)
    if len(edges.costs) != m:
        raise InputError(f"{m} edges but {len(edges.costs)} edge cost tables")
    ends = np.array(edges.nodes, dtype=np.int64).reshape(m, 2)
    if (bad := np.flatnonzero((ends >= n).any(axis=1))).size:
        e = bad[0]
        raise InputError(f"edge {e} {ends[e].tolist()} names a node outside 0..{n - 1}")
    table_len = np.fromiter(map(len, edges.costs), dtype=np.int64, count=m)
    expected = n_strat[ends[:, 0]] * n_strat[ends[:, 1]]
    if (bad := np.flatnonzero(table_len != expected)).size:
        e = bad[0]
        u, v = ends[e]
        raise InputError(
            f"edge {e} [{u}, {v}] has {table_len[e]} costs, expected "
            f"{n_strat[u]}x{n_strat[v]} = {expected[e]}"
        )

    strat_off = offsets(n_strat)
    usage = _flatten(nodes.usages, int(strat_off[-1]))
    edge_off = offsets(table_len)
    return Instance(
        name=p.name,
        strat_off=strat_off,
        cost=_flatten(nodes.costs, int(strat_off[-1])),
        usage=usage,
        lo=interval[:, 0].copy(),
        hi=interval[:, 1].copy(),
        edge_u=ends[:, 0].copy(),
        edge_v=ends[:, 1].copy(),
        edge_off=edge_off,
        edge_cost=_flatten(edges.costs, int(edge_off[-1])),
        usage_limit=p.usage_limit,
    )
