"""The serving messages of an AFD world's store, and the store signed with the run secret.

Its one job is what ranks say to each other through the ``torch.distributed`` store, on the host and never from
device values (docs/protocol.md, "Shutdown"; docs/connector.md, "Trust model"): the keys, the shutdown message
(its reason and, optionally, the Attention ranks the supervisor saw die), :class:`SignedStore` and the loopback-only
store rank 0 hosts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import socket
from datetime import timedelta
from typing import Optional, Tuple

__all__ = ["DONE_KEY", "FAILED_PREFIX", "RUN_SECRET_ENV", "SERVING", "SERVING_KEY", "SHUTDOWN_KEY", "Shutdown",
           "SignedStore", "loopback_store", "post_shutdown", "shutdown_message", "shutdown_reason"]

# The run secret (hex) of a world, when the config names none: how cam-run hands it to its ranks (never the store).
RUN_SECRET_ENV = "CAM_RUN_SECRET"

# Host-side serving messages in the store (docs/protocol.md, "Shutdown"): an Attention rank that will send no more
# rounds, and a request that every FFN rank stop. Signed like every rendezvous value when the run has a secret.
# Every key is world ``world``'s of group ``group`` (cam.world: ``Comm.world_id``), so a store that outlives a plane, or
# holds another plane of the same group, never stops or starts this one.
DONE_KEY = "{group}/{world}/serve/done/{rank}"
SHUTDOWN_KEY = "{group}/{world}/serve/shutdown"
# An FFN rank's serving state: "serving" once its loop runs its first iteration (a graph-mode rank after its capture),
# "failed: ..." when it failed before. Attention ranks wait for it before their first round (wait_ffn_serving).
SERVING_KEY = "{group}/{world}/serve/serving/{rank}"
SERVING, FAILED_PREFIX = "serving", "failed: "


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """One shutdown message: why the FFN ranks stop, the Attention ranks a supervisor saw die (``--keep-going``:
    each FFN rank fences them before it reports, so its dropped-round counts are final), and the world it is for.

    Its text in the store is the bare reason, or JSON ``{"reason": ..., "lost": [ranks], "world": id}`` when ranks
    were lost or it names its world (``{"lost": [...]}`` alone, cam-run's form, reads as reason ``"run over"``).
    The serving tier's messages always name their world (:func:`post_shutdown`), and a reader in a world refuses
    a message of another (:meth:`parse` with ``world``), so a signed message recorded in one world never stops
    another, even one signed with the same secret."""

    reason: str
    lost: Tuple[int, ...] = ()
    world: Optional[str] = None

    def text(self) -> str:
        if not self.lost and self.world is None:
            return self.reason
        message = {"reason": self.reason, "lost": sorted(self.lost)}
        return json.dumps(message if self.world is None else {**message, "world": self.world})

    @classmethod
    def parse(cls, text: str, world: Optional[str] = None) -> "Shutdown":
        """The message ``text`` holds; with ``world``, refused (``PermissionError``) unless it names that world."""
        message = None
        if text.startswith("{"):
            try:
                message = json.loads(text)
            except ValueError:
                message = None
        if isinstance(message, dict):
            lost = message.get("lost", [])
            if not isinstance(lost, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in lost):
                raise ValueError(f"shutdown message: lost must be a list of ranks, got {lost!r}")
            parsed = cls(str(message.get("reason", "run over")), tuple(lost), message.get("world"))
        else:
            parsed = cls(text)
        if world is not None and parsed.world != world:
            raise PermissionError(f"shutdown message of world {parsed.world!r} read in world {world!r}: refused (a "
                                  f"message recorded in another world of this group, replayed into this one)")
        return parsed


class SignedStore:
    """A ``torch.distributed`` store whose values are authenticated with the run secret: ``set`` prefixes
    HMAC-SHA256(secret, group, key, value); ``get`` and ``check`` refuse (``PermissionError`` naming the key) a value
    whose tag does not verify. Anyone who can reach the store can still read values, delete keys, bump counters or
    write garbage (a denial of service); what it cannot do without the secret is write a value a rank accepts, so it
    cannot join as a rank, name a segment, or mark a rank as left."""

    # A value is stored as b"cam-mac1:" + hex tag + b":" + value: the tag first, so a reader that does not verify
    # gets no usable value (a NUL-truncated C string of a suffixed form would still be the bare value).
    _HEAD = b"cam-mac1:"

    def __init__(self, store, secret: bytes, group: str):
        self._store = store
        self._secret = secret
        self._group = group.encode()

    def _tag(self, key: str, value: bytes) -> bytes:
        msg = b"%d:%s%d:%s" % (len(self._group), self._group, len(key.encode()), key.encode()) + value
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest().encode()

    def _open(self, key: str, raw: bytes) -> Optional[bytes]:
        if not raw.startswith(self._HEAD):
            return None
        tag, sep, value = raw[len(self._HEAD):].partition(b":")
        if sep and hmac.compare_digest(tag, self._tag(key, value)):
            return value
        return None

    def set(self, key: str, value) -> None:
        value = value.encode() if isinstance(value, str) else bytes(value)
        self._store.set(key, self._HEAD + self._tag(key, value) + b":" + value)

    def get(self, key: str) -> bytes:
        value = self._open(key, self._store.get(key))
        if value is None:
            raise PermissionError(f"rendezvous: store key {key!r} was not written by a member of this run (its value "
                                  f"carries no valid tag of the run secret): refused. Another process reaching the "
                                  f"store tried to stand in for a rank, or the ranks do not share one secret")
        return value

    def compare_set(self, key: str, expected, desired) -> bytes:
        """Sets the signed ``desired`` if ``key`` is absent and ``expected`` is empty (write-once: a rebalance
        decision, docs/protocol.md §15; a world's slot) or if it holds the signed ``expected`` (a world replaced,
        cam.world), and returns the verified value the key holds. The tag is a function of key and value, so the
        signed ``expected`` is the exact bytes a member wrote."""
        desired = desired.encode() if isinstance(desired, str) else bytes(desired)
        expected = expected.encode() if isinstance(expected, str) else bytes(expected)
        signed = (self._HEAD + self._tag(key, expected) + b":" + expected) if expected else b""
        self._store.compare_set(key, signed, self._HEAD + self._tag(key, desired) + b":" + desired)
        return self.get(key)

    def check(self, keys) -> bool:
        """True when every key is present; a present key whose value does not verify raises (as ``get``), so a
        forged rendezvous value fails the handshake at once, naming the key, instead of passing for a joined rank."""
        for key in keys:
            if not self._store.check([key]):
                return False
            self.get(key)
        return True

    def __getattr__(self, name):
        # add / wait / delete_key / set_timeout ...: counters and waits carry no value to sign (docs/connector.md)
        return getattr(self._store, name)


def loopback_store(port: int, timeout_s: float, world_size: Optional[int] = None):
    """The master side of a TCPStore that listens on 127.0.0.1 only. ``TCPStore(host, port, is_master=True)``
    binds every interface (``host`` only tells clients where to connect); a socket bound to loopback and handed
    over as ``master_listen_fd`` (torch.distributed.TCPStore) is reachable from this host only."""
    import torch.distributed

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(1024)
        store = torch.distributed.TCPStore("127.0.0.1", sock.getsockname()[1], world_size, is_master=True,
                                           timeout=timedelta(seconds=timeout_s), wait_for_workers=False,
                                           master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store's server owns the descriptor now
    return store


def post_shutdown(store, group: str, reason: str = "requested", lost=(), *, world: str) -> None:
    """Writes the shutdown request of world ``world`` of group ``group`` into ``store`` (the run's signed store when
    it has a secret: an unsigned request is then refused by the FFN ranks, naming the key). ``world``: the world's
    id (``Comm.world_id``; a supervisor without a Comm reads it with :func:`cam.world.current`); the message carries
    it, and an FFN rank of another world refuses it. ``lost``: Attention ranks the caller saw die, which every FFN
    rank fences before it reports (:class:`Shutdown`)."""
    if not isinstance(reason, str) or not reason:
        raise ValueError("post_shutdown: reason must be a non-empty str")
    if not isinstance(world, str) or not world:
        raise ValueError(f"post_shutdown: world must be the world id (a non-empty str), got {world!r}")
    message = Shutdown(reason, tuple(int(r) for r in lost), world)
    store.set(SHUTDOWN_KEY.format(group=group, world=world), message.text())


def shutdown_message(store, group: str, attention_ranks: int, *, world: str) -> Optional[Shutdown]:
    """Why world ``world`` of ``group``'s FFN ranks stop: the shutdown request (refused, ``PermissionError``, when
    it names another world), ``"attention finished"`` once all ``attention_ranks`` ranks finished, else None."""
    key = SHUTDOWN_KEY.format(group=group, world=world)
    if store.check([key]):
        return Shutdown.parse(store.get(key).decode(errors="replace"), world)
    if store.check([DONE_KEY.format(group=group, world=world, rank=r) for r in range(attention_ranks)]):
        return Shutdown("attention finished", (), world)
    return None


def shutdown_reason(store, group: str, attention_ranks: int, *, world: str) -> Optional[str]:
    """The reason of :func:`shutdown_message`, else None."""
    message = shutdown_message(store, group, attention_ranks, world=world)
    return None if message is None else message.reason
