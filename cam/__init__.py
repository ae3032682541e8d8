"""cam: operators for asynchronous Attention-FFN disaggregated MoE prefill on Ascend NPU.

``cam.ops`` holds the torch-facing operators, ``cam.reference`` their independent goldens. Without an Ascend
toolkit the kernels run on the twin, a CPU implementation of the Ascend C subset they use.
"""

import os as _os
import sys as _sys
import time as _time

# When this package began importing (before torch): the `cam-run` command's own start for its wall-time profile.
_import_started = _time.time()


def _has_extension(directory: str) -> bool:
    return any(name.startswith("_C.") for name in _os.listdir(directory))


def _installed_package_this_checkout_shadows():
    """The installed cam's directory when this ``cam/`` is an uncompiled source checkout found first on sys.path.

    ``python -c``, ``python -m`` and ``python -m pytest`` put the working directory first on ``sys.path``, so
    typing them at the root of a clone finds the clone's ``cam/`` (sources, no compiled ``_C``) before the
    installed package the README's ``pip install .`` put in site-packages."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _has_extension(here):
        return None
    for entry in _sys.path:
        candidate = _os.path.join(_os.path.abspath(entry or _os.curdir), "cam")
        if candidate != here and _os.path.isdir(candidate) and _has_extension(candidate):
            return candidate
    return None


_installed = _installed_package_this_checkout_shadows()
if _installed is not None:
    # Everything below (the extension, every submodule, the SDK paths derived from __file__) then comes from the
    # installed package; only this file is read from the checkout. cam's own processes (cam-run workers, the test
    # suite) keep the checkout off sys.path altogether.
    __path__[:] = [_installed]
    __file__ = _os.path.join(_installed, "__init__.py")

# The package itself imports neither torch nor the extension: the command-line tools (cam-run, cam-sim, cam-bench)
# parse and refuse their flags first, and the simulator runs without kernels. The first use of a public name below,
# or the import of any submodule that is not one of those light ones, loads the rest (_load) before it runs.
_LIGHT = {"__main__", "_C", "_proc", "errors", "run", "run.cli", "run.bound", "run.run_dir", "run.start", "run.timeline",
          "run.trace", "bench",
          "bench.common", "bench.dataplane", "bench.dynamic_quant", "bench.ffn_loop", "bench.fixed_cost", "bench.gmm",
          "bench.expert_bytes", "bench.predict", "bench.bounds", "bench.floors",
          "models", "models.config", "sim", "ffn_server", "integrations", "placement", "qualify", "serve",
          "serve.policy", "serve.server", "checkpoint_config", "checkpoint_identity", "serve.launch"}
_LAZY = {
    "LayerWeights": ".layer_weights", "FfnWeights": ".ffn_weights", "ExpertWeights": ".ffn_weights",
    "Topology": ".topology", "Comm": ".comm", "LostReplica": ".comm",
    "Graph": ".graph", "serve_ffn": ".serve.server", "ServePolicy": ".serve.policy", "WorkItem": ".work_item",
    "quantize_weight": ".convert", "dequantize_weight": ".convert", "plan_memory": ".memory", "MemoryPlan": ".memory",
    "UnsupportedModelError": ".convert", "ops": None, "reference": None, "errors": None, "_C": None, "_npu": None,
    "_runtime": None,
    **{name: ".errors" for name in ("CamError", "CaptureInvalidatedError", "GraphInvalidError", "CommAbortedError",
                                    "CommJoinError", "CommProtocolError", "CommTimeoutError", "DeviceArgumentError",
                                    "FFNNotServingError", "InvalidArgumentError", "InvalidDtypeError", "KernelFaultError",
                                    "ReplicaLostError", "SyncTimeoutError")},
}
_state = {"core": False, "loaded": False, "loading": False}


def _core() -> None:
    """torch, the extension and its error factory: what every heavy submodule needs before it runs."""
    if _state["core"]:
        return
    import importlib

    try:  # first: an uninstalled checkout is told so before anything else can fail
        _C = importlib.import_module(__name__ + "._C")
    except ImportError:
        if _has_extension(_os.path.dirname(_os.path.abspath(__file__))):
            raise  # a compiled package whose _C failed for another reason: keep the real error
        raise ImportError(
            f"cam is not installed: the source checkout at {_os.path.dirname(_os.path.abspath(__file__))} holds "
            f"no compiled extension; run `pip install .` first (README)") from None
    import torch  # noqa: F401  (registers torch.library before the ops module uses it)
    errors = importlib.import_module(__name__ + ".errors")
    _C._set_error_factory(errors.from_status)
    globals().update(_C=_C, errors=errors)
    _state["core"] = True


def _finish() -> None:
    """The public names, the ops and their NPU registration (only where torch_npu is importable)."""
    import importlib

    names = {}
    for name, module in _LAZY.items():
        if module is not None:
            names[name] = getattr(importlib.import_module(__name__ + module), name)
    for module in ("_runtime", "ops", "reference", "_npu"):
        names[module] = importlib.import_module(f"{__name__}.{module}")
    names["_npu"].register()
    globals().update(names)
    _state["loaded"] = True


def _load(around=None) -> None:
    """What ``import cam`` did at once before it became lazy, in one go; with ``around`` (a submodule's own
    execution, see _LoadFirst), that runs between the core and the rest, so the submodule is executed once, by
    the import that asked for it. A failure leaves the package unloaded: the next use raises it again."""
    if _state["loaded"] or _state["loading"]:
        if around is not None:
            around()
        return
    _state["loading"] = True
    try:
        _core()
        if around is not None:
            around()
        _finish()
    finally:
        _state["loading"] = False


def __getattr__(name: str):
    if name in _LAZY and not _state["loading"]:
        _load()
        return globals()[name]
    # During _load a submodule's own `from . import _C` lands here: the import system then imports the submodule.
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _LoadFirst:
    """A finder for heavy ``cam.`` submodules imported directly (``from cam.comm import Comm``) while the package
    is not loaded yet: it hands back the normal finders' spec with its loader wrapped, so that the submodule runs
    on a package that looks as ``import cam`` used to leave it (extension, error factory; then the ops)."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname == "torch" and not (_state["loaded"] or _state["loading"]):
            # `import cam` then `import torch`: torch.ops.cam.* must exist once torch does, as when cam was imported
            # after torch (below), so the package loads right after torch's own module has run.
            import importlib.machinery

            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _LoadAfter(spec.loader)
            return spec
        sub = fullname[len(__name__) + 1:] if fullname.startswith(__name__ + ".") else None
        if (not sub or sub in _LIGHT or sub.startswith("sim.") or _state["loaded"] or _state["loading"]):
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoadAround(spec.loader)
        return spec


class _LoadAround:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        _load(around=lambda: self.loader.exec_module(module))

    def __getattr__(self, name):  # get_source, get_filename, is_package, ...: the real loader's
        return getattr(self.loader, name)


class _LoadAfter(_LoadAround):
    def exec_module(self, module):
        self.loader.exec_module(module)
        _load()


if not any(isinstance(f, _LoadFirst) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _LoadFirst())

if "torch" in _sys.modules:
    # A torch program imports cam for its ops: they are registered now, as `import cam` always did. Only a process
    # without torch (a command-line tool parsing its flags, the simulator) stays light.
    _load()

__version__ = "0.1.0"


def backend() -> str:
    """"twin" (the kernels run on the CPU twin) or "ascend" (libcam_aclnn is built for Ascend and the torch ops have
    their NPU implementations, i.e. torch_npu is importable). A build for Ascend without torch_npu reports
    "ascend (torch_npu not importable)": its C API works, the torch ops do not take NPU tensors."""
    _load()
    name = _C.backend()
    if name == "ascend" and not _npu.registered():
        return "ascend (torch_npu not importable)"
    return name


def cmake_dir() -> str:
    """Directory holding camConfig.cmake: ``cmake -Dcam_DIR=$(python -m cam --cmake-dir)``."""
    return _os.path.join(_os.path.dirname(__file__), "lib", "cmake", "cam")


def include_dir() -> str:
    return _os.path.join(_os.path.dirname(__file__), "include")


__all__ = [
    "LayerWeights",
    "FfnWeights",
    "ExpertWeights",
    "Topology",
    "Comm",
    "LostReplica",
    "Graph",
    "serve_ffn",
    "ServePolicy",
    "WorkItem",
    "quantize_weight",
    "plan_memory",
    "MemoryPlan",
    "dequantize_weight",
    "UnsupportedModelError",
    "ops",
    "reference",
    "backend",
    "cmake_dir",
    "include_dir",
    "CamError",
    "CaptureInvalidatedError",
    "CommAbortedError",
    "CommJoinError",
    "CommProtocolError",
    "CommTimeoutError",
    "DeviceArgumentError",
    "FFNNotServingError",
    "GraphInvalidError",
    "InvalidDtypeError",
    "ReplicaLostError",
    "InvalidArgumentError",
    "KernelFaultError",
    "SyncTimeoutError",
]
