"""Backends by name: discovery and loading.

The registered entry points of :data:`maxshard.backend.GROUP` (maxshard's own
backends register there exactly as a plugin does), then the command-line
solvers declared in config files or with ``--solver``
(:mod:`maxshard.backends.external`; a declared name hides an entry point).
Loading never lets a broken plugin take the solver down: it becomes a
:class:`~maxshard.backend.BackendError` naming the backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import entry_points

from .backend import GROUP, Backend, BackendError
from .backends.external import External, Spec, declared


def available() -> dict[str, object]:
    """Backends by name, not yet loaded (see the module docstring)."""
    found: dict[str, object] = {ep.name: ep for ep in entry_points(group=GROUP)}
    found.update(declared())
    return found


def _unknown(name: str, eps: dict) -> BackendError:
    known = ", ".join(sorted(eps)) or "none"
    return BackendError(f"unknown backend {name!r} (known: {known})")


def check_names(names: Iterable[str]) -> None:
    """Raise BackendError naming the first of ``names`` that is not registered."""
    eps = available()
    for name in names:
        if name not in eps:
            raise _unknown(name, eps)


def load(name: str) -> Backend:
    """Import and instantiate backend ``name``; BackendError says why not."""
    eps = available()
    if name not in eps:
        raise _unknown(name, eps)
    if isinstance(eps[name], Spec):
        return External(eps[name])
    try:
        backend = eps[name].load()()
    except BackendError:
        raise
    except Exception as exc:  # a broken plugin must never take the solver down
        raise BackendError(f"backend {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, Backend):
        raise BackendError(f"backend {name!r} does not implement the Backend interface")
    return backend
