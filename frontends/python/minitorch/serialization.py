"""minitorch.save / minitorch.load: dictionaries of named tensors in safetensors files, written
and read by the library (mt_save_safetensors, mt_safetensors_count, mt_safetensors_name,
mt_load_safetensors). The format holds tensors only: a state_dict saves as is; anything else
(optimizer state_dicts included) is flattened to dotted names first by the caller."""

import json
import os
import struct
from collections import OrderedDict
from ctypes import byref, c_char_p, c_int64, c_void_p, create_string_buffer

from . import _dtype as D
from ._core import _new
from ._lib import lib
from ._tensor import Tensor

_NAME_CAP = 4096


def _path(f):
    if not isinstance(f, (str, bytes, os.PathLike)):
        raise TypeError("minitorch.save/load take a file path (safetensors files are written by the library), "
                        "got %s" % type(f).__name__)
    return os.fsencode(f)


def save(obj, f):
    """Saves a mapping of str -> Tensor (a state_dict) to the safetensors file f, in the
    mapping's order (tensors are copied to the host; f is replaced if it exists)."""
    if isinstance(obj, Tensor) or not hasattr(obj, "items"):
        raise TypeError("minitorch.save saves a dict of name -> Tensor (e.g. model.state_dict()); "
                        "got %s" % type(obj).__name__)
    items = list(obj.items())
    for k, v in items:
        if not isinstance(k, str) or not isinstance(v, Tensor):
            raise TypeError("minitorch.save: every entry must be str -> Tensor, got %s -> %s"
                            % (type(k).__name__, type(v).__name__))
        if "\0" in k:  # C would end the name there
            raise ValueError("minitorch.save: the name %r has a NUL character" % k)
    n = len(items)
    names = (c_char_p * max(n, 1))(*[k.encode("utf-8") for k, _ in items])
    tensors = (c_void_p * max(n, 1))(*[v._h for _, v in items])
    lib.mt_save_safetensors(_path(f), names, tensors, n)


def names(f):
    """The tensor names of a safetensors file, in file order."""
    path = _path(f)
    count = c_int64()
    lib.mt_safetensors_count(path, byref(count))
    cap = _NAME_CAP
    buf = create_string_buffer(cap)
    name_of = lib.unchecked("mt_safetensors_name")
    out = []
    for i in range(count.value):
        # a name longer than the buffer (save takes any): grow it, up to 16 MiB
        while name_of(path, i, buf, cap) != 0 and cap < (1 << 24):
            cap *= 4
            buf = create_string_buffer(cap)
        lib.mt_safetensors_name(path, i, buf, cap)  # raises what is still wrong
        out.append(buf.value.decode("utf-8"))
    return out


def load(f, map_location=None, weights_only=None):
    """An OrderedDict name -> Tensor of every tensor in the safetensors file f, on
    map_location (a device or device string; default: the default device)."""
    path = _path(f)
    device = D.as_device(map_location)
    out = OrderedDict()
    for name in names(f):
        out[name] = _new(lib.mt_load_safetensors, path, name.encode("utf-8"), device.code)
    return out


_ST_DTYPES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int32": "I32",
              "int64": "I64", "uint8": "U8"}


def save_with_metadata(tensors, f, metadata):
    """Writes a safetensors file with a __metadata__ block (str -> str), which
    mt_save_safetensors does not take; used for the optimizer state files that mt_optim_load
    reads (it checks their "optimizer" and "params" entries). Same layout as the library
    writes: little-endian header length, JSON header padded to 8 bytes, raw row-major data."""
    header, blobs, offset = {"__metadata__": dict(metadata)}, [], 0
    for name, t in tensors.items():
        raw = bytes(t._host_buffer())
        header[name] = {"dtype": _ST_DTYPES[t.dtype.name], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(f, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for raw in blobs:
            out.write(raw)
