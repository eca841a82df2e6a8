"""DLPack exchange (v0.8 "dltensor" capsules) over mt_tensor_to_dlpack / mt_tensor_from_dlpack.

A capsule made by Tensor.__dlpack__ owns one DLManagedTensor until a consumer takes it: the
consumer renames the capsule "used_dltensor" and calls the deleter itself later; a capsule
never consumed calls the deleter when it is garbage collected. from_dlpack does the consumer's
part for minitorch: it wraps the producer's memory without a copy, and the library calls the
producer's deleter when the last minitorch tensor on that memory goes.

The Python C API is reached through ctypes.pythonapi with private prototypes (the global
ctypes.pythonapi attributes are left untouched). The capsule destructor receives a capsule
being destroyed, so it handles it as a raw address and never makes a Python reference to it.
"""

import ctypes
from ctypes import (CFUNCTYPE, POINTER, PYFUNCTYPE, Structure, c_char_p, c_int, c_int32, c_int64, c_uint8,
                    c_uint16, c_uint64, c_void_p, py_object)

from ._core import _new
from ._lib import lib

KDL_CPU, KDL_CUDA = 1, 2
_NAME = b"dltensor"           # kept alive by the module: capsules point at these bytes
_USED_NAME = b"used_dltensor"


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


def _api(name, restype, *argtypes):
    return PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _api("PyCapsule_New", py_object, c_void_p, c_char_p, c_void_p)
_capsule_is_valid = _api("PyCapsule_IsValid", c_int, py_object, c_char_p)
_capsule_get_pointer = _api("PyCapsule_GetPointer", c_void_p, py_object, c_char_p)
_capsule_set_name = _api("PyCapsule_SetName", c_int, py_object, c_char_p)
# For the destructor: the same calls on a raw PyObject * (no reference taken).
_raw_is_valid = _api("PyCapsule_IsValid", c_int, c_void_p, c_char_p)
_raw_get_pointer = _api("PyCapsule_GetPointer", c_void_p, c_void_p, c_char_p)


def call_deleter(managed):
    """Calls a DLManagedTensor's deleter (if any) at address managed."""
    m = DLManagedTensor.from_address(managed)
    if m.deleter:
        m.deleter(managed)


@CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # Still named "dltensor": nobody consumed it, so the managed tensor is ours to delete.
    try:
        if _raw_is_valid(capsule, _NAME):
            call_deleter(_raw_get_pointer(capsule, _NAME))
    except Exception:   # at interpreter exit the module may be half torn down: leak, never crash
        pass


_DESTRUCTOR = ctypes.cast(_capsule_destructor, c_void_p)


def to_capsule(t):
    """A "dltensor" capsule sharing t's memory (mt_tensor_to_dlpack)."""
    out = c_void_p()
    lib.mt_tensor_to_dlpack(ctypes.byref(out), t)
    try:
        return _capsule_new(out.value, _NAME, _DESTRUCTOR)
    except BaseException:
        call_deleter(out.value)
        raise


def from_dlpack(ext):
    """A minitorch Tensor on the memory of ext (no copy): any object with __dlpack__ /
    __dlpack_device__ (torch, numpy >= 1.22, CuPy, JAX, minitorch) or a "dltensor" capsule.
    CPU and CUDA device 0; compact row-major only (call .contiguous() on the producer side)."""
    if hasattr(ext, "__dlpack__"):
        device_type, _ = ext.__dlpack_device__()
        if int(device_type) == KDL_CUDA:
            # The import waits for the whole device, so the producer's stream need not be named.
            capsule = ext.__dlpack__(stream=None)
        else:
            capsule = ext.__dlpack__()
    else:
        capsule = ext
    if type(capsule).__name__ != "PyCapsule" or not _capsule_is_valid(capsule, _NAME):
        raise TypeError("from_dlpack: expected an object with __dlpack__ or an unused \"dltensor\" capsule, "
                        "got %s" % type(ext).__name__)
    managed = _capsule_get_pointer(capsule, _NAME)
    t = _new(lib.mt_tensor_from_dlpack, c_void_p(managed))
    _capsule_set_name(capsule, _USED_NAME)   # the library owns it now: the capsule must not delete it
    return t
