"""GPU gauges through NVML (libnvidia-ml) with ctypes; nothing without it.

open_device(local_rank) -> Device or None. Device.sample() -> a dict of the
vocabulary's GPU metrics: gpu.temp (C), gpu.power (W), gpu.util (%),
gpu.sm_clock (MHz), gpu.mem.used (bytes), gpu.ecc.correctable and
gpu.ecc.uncorrectable (volatile counts since the driver loaded). A reading
the GPU does not support is left out. Called from the heartbeat thread,
never from the training thread.

The library is RANKDB_NVML_LIB if set, else libnvidia-ml.so.1. The device is
picked like CUDA picks it: entry `local_rank` of CUDA_VISIBLE_DEVICES (an
index or a GPU-/MIG- UUID), else index local_rank.
"""

import ctypes
import os

NVML_SUCCESS = 0
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class _Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


_lib = None


def _load(env):
    global _lib
    if _lib is not None:
        return _lib
    name = env.get("RANKDB_NVML_LIB") or "libnvidia-ml.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    init = getattr(lib, "nvmlInit_v2", None) or getattr(lib, "nvmlInit", None)
    if init is None or init() != NVML_SUCCESS:
        return None
    _lib = lib
    return lib


def _device_handle(lib, local_rank, env):
    h = ctypes.c_void_p()
    vis = env.get("CUDA_VISIBLE_DEVICES")
    entry = None
    if vis:
        items = [x.strip() for x in vis.split(",") if x.strip()]
        if local_rank < len(items):
            entry = items[local_rank]
    if entry and not entry.isdigit():
        fn = getattr(lib, "nvmlDeviceGetHandleByUUID", None)
        if fn is not None and fn(entry.encode(), ctypes.byref(h)) == NVML_SUCCESS:
            return h
        return None
    index = int(entry) if entry else local_rank
    fn = getattr(lib, "nvmlDeviceGetHandleByIndex_v2", None) or \
        getattr(lib, "nvmlDeviceGetHandleByIndex", None)
    if fn is None or fn(ctypes.c_uint(index), ctypes.byref(h)) != NVML_SUCCESS:
        return None
    return h


class Device:
    def __init__(self, lib, handle):
        self.lib, self.h = lib, handle
        buf = ctypes.create_string_buffer(96)
        self.name = None
        if getattr(lib, "nvmlDeviceGetName", None) and \
                lib.nvmlDeviceGetName(handle, buf, ctypes.c_uint(96)) == NVML_SUCCESS:
            self.name = buf.value.decode("utf-8", "replace")
        self.driver = None
        if getattr(lib, "nvmlSystemGetDriverVersion", None) and \
                lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == NVML_SUCCESS:
            self.driver = buf.value.decode("utf-8", "replace")

    def _call(self, fname, *args):
        fn = getattr(self.lib, fname, None)
        return fn is not None and fn(self.h, *args) == NVML_SUCCESS

    def sample(self):
        out = {}
        u = ctypes.c_uint()
        if self._call("nvmlDeviceGetTemperature", ctypes.c_int(NVML_TEMPERATURE_GPU), ctypes.byref(u)):
            out["gpu.temp"] = u.value
        if self._call("nvmlDeviceGetPowerUsage", ctypes.byref(u)):
            out["gpu.power"] = u.value / 1000.0  # mW -> W
        util = _Util()
        if self._call("nvmlDeviceGetUtilizationRates", ctypes.byref(util)):
            out["gpu.util"] = util.gpu
        if self._call("nvmlDeviceGetClockInfo", ctypes.c_int(NVML_CLOCK_SM), ctypes.byref(u)):
            out["gpu.sm_clock"] = u.value
        mem = _Mem()
        if self._call("nvmlDeviceGetMemoryInfo", ctypes.byref(mem)):
            out["gpu.mem.used"] = mem.used
        ull = ctypes.c_ulonglong()
        for kind, name in ((NVML_MEMORY_ERROR_TYPE_CORRECTED, "gpu.ecc.correctable"),
                           (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "gpu.ecc.uncorrectable")):
            if self._call("nvmlDeviceGetTotalEccErrors", ctypes.c_int(kind),
                          ctypes.c_int(NVML_VOLATILE_ECC), ctypes.byref(ull)):
                out[name] = ull.value
        return out


def open_device(local_rank=0, env=None):
    """The NVML device of this rank, or None (no NVML, no such GPU)."""
    env = os.environ if env is None else env
    lib = _load(env)
    if lib is None:
        return None
    h = _device_handle(lib, int(local_rank), env)
    return None if h is None else Device(lib, h)
