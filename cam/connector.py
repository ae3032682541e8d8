"""``cam.connector``: where users import the AFD connector from; its parts live in :mod:`cam.serve`.

:class:`AsyncAFDConnector` and :class:`ConnectorConfig` are :mod:`cam.serve.connector`'s, the FFN iteration
(:class:`CapturedFFN`, :func:`ffn_iteration`, ...) :mod:`cam.serve.iteration`'s, the store's messages and
:class:`SignedStore` :mod:`cam.serve.store`'s (docs/connector.md).
"""

from __future__ import annotations

from .errors import ReplicaLostError
from .serve.connector import (AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig, Failover,
                              JoinRefusedError, RoundsLostError, WorldEndedError, split_tokens)
from .serve.iteration import (CapturedFFN, FFNWorkItem, expert_weights, ffn_batch_iteration, ffn_compute,
                              ffn_iteration, ffn_work_item)
from .serve.store import (DONE_KEY, RUN_SECRET_ENV, SERVING_KEY, SHUTDOWN_KEY, Shutdown, SignedStore,
                          loopback_store, post_shutdown, shutdown_reason)
from .work_item import WorkItem

# The layer word of the device work item (docs/protocol.md §4.2), as window_layout.h numbers it.
WORK_ITEM_LAYER_WORD = WorkItem.WORDS["layer"]

__all__ = [
    "AFDTransferMetadata",
    "AFDTransferContext",
    "AsyncAFDConnector",
    "CapturedFFN",
    "ConnectorConfig",
    "DONE_KEY",
    "Failover",
    "SERVING_KEY",
    "FFNWorkItem",
    "JoinRefusedError",
    "ReplicaLostError",
    "RoundsLostError",
    "RUN_SECRET_ENV",
    "SHUTDOWN_KEY",
    "Shutdown",
    "SignedStore",
    "WORK_ITEM_LAYER_WORD",
    "WorkItem",
    "WorldEndedError",
    "expert_weights",
    "ffn_batch_iteration",
    "ffn_compute",
    "ffn_iteration",
    "ffn_work_item",
    "loopback_store",
    "post_shutdown",
    "shutdown_reason",
    "split_tokens",
]
