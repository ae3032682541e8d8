"""The tests' one topology maker: a test file names its defaults once, ``topo = topology_with(D=1, P=1, ...)``, and
each test overrides the fields it is about, ``topo(E=8)``."""

from __future__ import annotations

import cam


def topology_with(**defaults):
    """A ``topo(**fields)`` that makes ``cam.Topology(**{**defaults, **fields})``."""

    def topo(**fields) -> cam.Topology:
        return cam.Topology(**{**defaults, **fields})

    return topo
