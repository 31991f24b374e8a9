"""The communication model: what a placement change costs, alpha-beta per
mesh dimension.

Moving a tensor from placements ``src`` to ``dst`` runs, on each mesh
dimension ``i`` (``n`` devices) where they differ, one collective over the
slab a device holds of the other dimensions (``b`` bytes):

=================  ==================  =========================================
from -> to         collective          microseconds
=================  ==================  =========================================
Shard -> Replicate all-gather          ``a + (n-1)/n * b / bw``
Partial -> Shard   reduce-scatter      ``a + (n-1)/n * b / bw``
Partial -> Repl.   all-reduce          ``2a + 2(n-1)/n * b / bw``
Shard(i)->Shard(j) all-to-all          ``a + (n-1)/n * b / bw`` (as an all-gather)
Replicate -> any   local slice         0
Shard -> Partial   (impossible)        inf
=================  ==================  =========================================

with ``a = COLLECTIVE_US + (n-1) * latency`` and ``bw``, ``latency`` the
mesh dimension's own. These are the steps DTensor's ``redistribute_cost``
prices; ours is a closed form, 30 times faster, and its constants are
parameters. By default the last mesh dimension is inside a host (NVLink
class) and the others between hosts (a 200 Gb/s network): DTensor itself, on
a CPU mesh, prices every dimension as between hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Fixed cost of launching one collective (µs), DTensor's figure.
COLLECTIVE_US = 6.6
#: Bandwidth of a mesh dimension between hosts (GB/s): 200 Gb/s.
INTER_HOST_GBS = 25.0
#: Latency per hop between hosts (µs), DTensor's figure.
INTER_HOST_US = 2.7
#: Bandwidth of the mesh dimension inside a host (GB/s): NVLink class.
INTRA_HOST_GBS = 150.0
#: Latency per hop inside a host (µs), DTensor's figure.
INTRA_HOST_US = 0.6


@dataclass(frozen=True)
class Network:
    """Bandwidth (GB/s) and latency (µs) of each mesh dimension."""

    mesh: tuple[int, ...]
    bandwidth: tuple[float, ...]
    latency: tuple[float, ...]

    @classmethod
    def default(cls, mesh: tuple[int, ...]) -> Network:
        """The last dimension inside a host, the others between hosts."""
        inter = len(mesh) - 1
        return cls(
            mesh,
            (INTER_HOST_GBS,) * inter + (INTRA_HOST_GBS,),
            (INTER_HOST_US,) * inter + (INTRA_HOST_US,),
        )

    def cost(self, src: tuple, dst: tuple, nbytes: int) -> float:
        """Microseconds to move a tensor of ``nbytes`` (whole) from placement
        codes ``src`` to ``dst`` (see :func:`code`)."""
        total = 0.0
        for i, (a, b) in enumerate(zip(src, dst, strict=True)):
            if a == b or a[0] == "R":
                continue
            if b[0] == "P":  # nothing becomes partial but a replica
                return math.inf
            n = self.mesh[i]
            slab = nbytes / math.prod(
                self.mesh[j]
                for j in range(len(self.mesh))
                if j != i and "S" in (src[j][0], dst[j][0])
            )
            alpha = COLLECTIVE_US + (n - 1) * self.latency[i]
            beta = (n - 1) / n * slab / (self.bandwidth[i] * 1e3)  # GB/s = 1e3 bytes/µs
            total += 2 * (alpha + beta) if (a[0], b[0]) == ("P", "R") else alpha + beta
        return total


def code(placements: Any) -> tuple:
    """Placements as hashable plain tuples: ``("R",)``, ``("S", dim)``, ``("P", op)``."""
    out = []
    for p in placements:
        if p.is_shard():
            out.append(("S", p.dim))
        elif p.is_partial():
            out.append(("P", p.reduce_op))
        else:
            out.append(("R",))
    return tuple(out)
