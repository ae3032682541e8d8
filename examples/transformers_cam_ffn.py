"""The transformers block adapter with the FFN ranks as ``cam-ffn`` processes (docs/integrations.md §2): a tiny
random Qwen3-MoE checkpoint (written here, no download) served by two ``cam-ffn`` processes over shared memory,
this process its Attention rank (the model's MoE blocks replaced by cam's) and the host of the world's store. Both
sides publish the checkpoint's identity (cam.checkpoint_identity), so an FFN rank on another checkpoint would be
refused by name in the handshake. The logits of each prompt must agree with the model run natively within the W8A8
bound (docs/numerics.md).

    python examples/transformers_cam_ffn.py     # prints the tokens and "ok"; exit code 1 on a mismatch
"""

import os
import subprocess
import sys
import tempfile

import torch
import transformers

import cam
from cam import checkpoint_identity
from cam.connector import AsyncAFDConnector, ConnectorConfig, loopback_store
from cam.integrations import transformers as camtf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tiny_moe import TOKENS, compare_with_native, tiny_checkpoint, verdict  # noqa: E402 - beside this file

TIMEOUT_S = 120.0  # the FFN processes' start (torch's import: seconds, more on a loaded machine) and every wait
F = 2


def main():
    with tempfile.TemporaryDirectory() as path:
        tiny_checkpoint(path)
        native = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        topo = cam.Topology.from_checkpoint(path, D=1, F=F, Bmax=TOKENS)
        store = loopback_store(0, TIMEOUT_S)  # this process hosts the store: it outlives every rank
        secret = os.urandom(16)
        env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
        # `cam-ffn ...` from a shell; through this interpreter here, so the example runs without its venv activated
        ffn = [subprocess.Popen([sys.executable, "-m", "cam.ffn_server", "--checkpoint", path, "--rank", str(r),
                                 "-D", "1", "-F", str(F), "--max-tokens", str(TOKENS), "--master-port",
                                 str(store.port), "--group", "example-cam-ffn", "--timeout", str(TIMEOUT_S),
                                 "--idle-poll", "0.02"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
               for r in range(topo.A, topo.world_size)]
        cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group="example-cam-ffn", secret=secret, checkpoint=checkpoint_identity.published(path))
        attention = AsyncAFDConnector(0, "attention", cfg)
        ok = True
        try:
            attention.init_afd_connector(store)
            try:
                attention.wait_ffn_serving(TIMEOUT_S)
                camtf.wrap_moe_blocks(model, camtf.AttentionPlane(attention))
                ok = compare_with_native(model, native)
            finally:
                attention.finish()  # the cam-ffn ranks stop once every Attention rank finished
                attention.close()
        finally:
            for p in ffn:
                try:
                    out, _ = p.communicate(timeout=TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, _ = p.communicate()
                if p.returncode != 0:
                    print(f"cam-ffn exited {p.returncode}:\n{out}")
                    ok = False
    return verdict(ok)


if __name__ == "__main__":
    sys.exit(main())
