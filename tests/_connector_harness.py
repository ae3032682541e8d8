"""Connector test helpers shared by the connector and FFN-server tests."""
import threading


def init_connectors(conns, store, timeout_s: float) -> None:
    """Initialise every connector on its own thread (the rendezvous needs them all at once); fails naming the
    errors if any rank raised or did not finish within ``timeout_s``."""
    errors = []

    def init(conn):
        try:
            conn.init_afd_connector(store=store)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=init, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not errors and all(c.is_initialized for c in conns), errors


class ServingFFNRanks:
    """The F FFN ranks of an in-process world as threads, each joining ``store`` and running ``cam.serve_ffn`` on
    its experts of ``layers`` (a list of ``cam.convert.ExpertFFN``) until a serving message, with
    ``serve_ffn``'s ``graph``, ``row_budget`` and ``swiglu_limit``. ``results`` and ``errors`` are keyed by rank,
    ``stopped_at`` is each rank's end (``time.monotonic()``)."""

    def __init__(self, cfg, store, layers, *, timeout_s: float, graph=False, row_budget=None, swiglu_limit=None,
                 connector=None):
        from cam.connector import AsyncAFDConnector

        self.cfg, self.store, self.layers, self.timeout_s = cfg, store, layers, timeout_s
        self.graph, self.row_budget, self.swiglu_limit = graph, row_budget, swiglu_limit
        self.connector = connector or AsyncAFDConnector
        self.results, self.errors, self.stopped_at = {}, {}, {}
        topo = cfg.topology
        self.threads = [threading.Thread(target=self._serve, args=(f,), daemon=True) for f in range(topo.F)]

    def _serve(self, f):
        import time

        import cam
        from cam import convert

        topo = self.cfg.topology
        rank = topo.A + f
        conn = self.connector(rank, "ffn", self.cfg)
        try:
            conn.init_afd_connector(self.store)
            w1, w2 = convert.layer_weights(self.layers, range(f * topo.R, (f + 1) * topo.R))
            # Bounded: a rank no message reaches stops on its own, after the waits it could have served.
            self.results[rank] = cam.serve_ffn(conn, w1, w2, graph=self.graph, row_budget=self.row_budget,
                                               swiglu_limit=self.swiglu_limit, max_serve_s=4 * self.timeout_s)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            self.errors[rank] = e
        finally:
            self.stopped_at[rank] = time.monotonic()
            conn.close()

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        for t in self.threads:
            t.join(self.timeout_s)
        assert not any(t.is_alive() for t in self.threads), "an FFN rank did not stop within its bound"
