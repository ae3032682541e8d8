"""``cam.serve``: the FFN serving tier, one job per module.

- :mod:`cam.serve.policy`: :class:`ServePolicy`, how an FFN rank serves, validated once against the topology
  (the row-budget rule is C's).
- :mod:`cam.serve.iteration`: the FFN iteration (receive -> W1 -> W2 -> send), eager or captured.
- :mod:`cam.serve.store`: the store's serving messages and the store signed with the run secret.
- :mod:`cam.serve.connector`: :class:`AsyncAFDConnector`, one rank of an async AFD world.
- :mod:`cam.serve.server`: :func:`serve_ffn`, the one loop every FFN rank runs (cam-ffn, cam-run, the
  integrations).

Importing this package (policy, server) does not import torch; the other modules load on first use.
"""

from .policy import ServePolicy
from .server import Iteration, ServeResult, serve_ffn

__all__ = ["Iteration", "ServePolicy", "ServeResult", "serve_ffn"]
