"""``cam.sim``: a discrete-event simulator of cam's asynchronous AFD schedule (``cam-sim``, docs/sim.md).

It runs no kernels: costs come from a cost file (a device's figures, or fitted from ``cam-run`` on the twin by
``cam.sim.calibrate``).
"""

from .costs import CostModel, OpCost, Work, device_files
from .engine import Simulation, chunks, expected_fanout
from .placement import Placement, RowSplit
from .report import simulate
from .shapes import DEEPSEEK_V3, ModelShape, SimTopology, model_presets
from .workload import SimWorkload, load_trace, split_stages

__all__ = ["CostModel", "OpCost", "Work", "device_files", "Simulation", "chunks", "expected_fanout", "Placement",
           "RowSplit", "simulate", "DEEPSEEK_V3", "ModelShape", "SimTopology", "model_presets", "SimWorkload",
           "load_trace", "split_stages"]
