"""The search machinery the backends share (not backends themselves).

- :mod:`.toulbar2`: the toulbar2 driver; every toulbar2 problem is built and
  solved through it (fork, pipe, limits, work counting).
- :mod:`.kernels` and :mod:`.local`: the compiled local search and its engine,
  :class:`~.local.Search`.
- :mod:`.tree`: exact dynamic programming over induced trees.
- :mod:`.dive`: the fast Lagrangian rounds on the local search's kernels.
- :mod:`.neighbourhood`: ``lns``'s neighbourhoods and their solves.
- :mod:`.multipliers`: prices on memory and the relaxed solve under them.
"""


def load() -> None:
    """Load the compiled kernels and toulbar2 into this process: what a backend
    that searches with both prepares (before the run forks its workers)."""
    from . import toulbar2
    from .local import warm_up

    warm_up()
    toulbar2.load()


class Searching:
    """Base of the backends that search with the compiled kernels and toulbar2
    (``lagrange``, ``lns``): they are :class:`~maxshard.backend.Preparable`,
    preparing by :func:`load`."""

    def prepare(self) -> None:
        load()
