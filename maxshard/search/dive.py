"""Fast Lagrangian rounds: a good answer within seconds, and multipliers to go on from.

The Lagrangian loops (:mod:`.lagrange`) solve each priced, memory-free
problem with toulbar2: good relaxed solutions, at 3-6 s a round (and more
for the first, which also preprocesses). At a tenth of the contest limits
that is one or two rounds, and the loops' first answers are the local
search's descent from the minimum-usage start, several times the optimum.

A *dive* makes each round cheap by solving the relaxed problem roughly:

1. a few sweeps of min-sum diffusion (:class:`~maxshard.bound.Diffusion`)
   on the priced costs, the messages kept from round to round;
2. a solution decoded from the messages (:meth:`~maxshard.bound.Diffusion.decode`:
   each variable's best reparametrised value; TRW-S's in sweep order);
3. a memory-free descent (iterated conditional modes) on the priced costs
   settles what the rounding left inconsistent along the edges.

The rest of a round is the loops': the relaxed solution is repaired greedily
until it fits and descended (the candidate answer), and the multipliers take
a subgradient step from where it overflows. Each diffusion value, with what
the multipliers promise back, is a proven lower bound. A round takes 0.1-0.4 s
on the large benchmarks. Measured alone from their presolved models (seed 0,
one core): after 6 s N 2.43e11 (0.84 of the contest's best), M 5.02e10
(0.99), and after 3.5 s S 1.83e9, U 3.07e9 (0.84 each), where the loops'
first toulbar2 round had not ended.
"""

from __future__ import annotations

import math

import numpy as np

from .. import work
from ..bound import Diffusion
from ..instance import FORBIDDEN
from ..model import Model, segment_argmin
from . import kernels
from .local import Search

#: diffusion sweeps per round (each ~10 ms on S's 2.7 million table entries)
SWEEPS = 5


class Rounding:
    """Rough solutions of the priced, memory-free problem (steps 1-3 above)."""

    def __init__(self, model: Model, diffusion: Diffusion, seed: int) -> None:
        self.model, self.diffusion = model, diffusion
        self.free = Search(model, seed)
        self.free.limit = np.iinfo(np.int64).max // 4  # memory ignored
        self.graph = self.free.g._replace(limit=self.free.limit)

    def solve(self, pen: np.ndarray) -> tuple[np.ndarray, float | None]:
        """A solution of the problem with unary costs raised by ``pen`` (float per
        value), and the diffusion's value of that problem (a lower bound on its
        optimum; None where forbidden unary costs keep the diffusion out)."""
        model = self.model
        work.count("call", 2)  # its Python around the kernels, and the caller's step
        unary = np.where(model.unary >= FORBIDDEN, model.unary, model.unary + pen)
        unary = unary.astype(np.float64)
        value = None
        if self.diffusion.usable:
            for _ in range(SWEEPS):
                self.diffusion.sweep(unary)
            value = self.diffusion.value(unary)
            x = self.diffusion.decode(unary)
        else:
            x = segment_argmin(unary, model.dom_off)
        self.free.g = self.graph._replace(unary=unary)
        self.free.x = x
        self.free.ld = kernels.new_load(model.load(x))
        self.free.descend(math.inf)
        return self.free.x.copy(), value
