"""``cam-run``: end-to-end asynchronous AFD prefill on the twin (processes as ranks)."""
