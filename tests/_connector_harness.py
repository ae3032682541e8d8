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
