"""dtype, device and Size: the small value types of the frontend."""

import struct

from ._lib import lib


class dtype:
    """An element type; values mirror mt_dtype (checked against the header by a test)."""

    __slots__ = ("name", "code", "itemsize", "is_floating_point", "format")

    def __init__(self, name, code, itemsize, is_floating_point, format):
        self.name = name
        self.code = code                    # the mt_dtype value
        self.itemsize = itemsize            # bytes per element
        self.is_floating_point = is_floating_point
        self.format = format                # struct/array code of the host encoding; None for bfloat16

    def __repr__(self):
        return "minitorch." + self.name

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))


float32 = dtype("float32", 0, 4, True, "f")
float64 = dtype("float64", 1, 8, True, "d")
float16 = dtype("float16", 2, 2, True, "e")
bfloat16 = dtype("bfloat16", 3, 2, True, None)
int32 = dtype("int32", 4, 4, False, "i")
int64 = dtype("int64", 5, 8, False, "q")
uint8 = dtype("uint8", 6, 1, False, "B")

ALL_DTYPES = (float32, float64, float16, bfloat16, int32, int64, uint8)
_BY_CODE = {d.code: d for d in ALL_DTYPES}
_BY_NAME = {d.name: d for d in ALL_DTYPES}
assert struct.calcsize("i") == 4 and struct.calcsize("q") == 8


def _dtype_by_name(name):
    return _BY_NAME[name]


def dtype_from_code(code):
    return _BY_CODE[code]


_default_dtype = float32


def get_default_dtype():
    """The dtype of floating tensors created without one (float32 unless changed)."""
    return _default_dtype


def set_default_dtype(d):
    global _default_dtype
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError("set_default_dtype expects a floating minitorch dtype, got %r" % (d,))
    _default_dtype = d


MT_CPU = 0
MT_CUDA = 1
_TYPE_CODES = {"cpu": MT_CPU, "cuda": MT_CUDA}


class device:
    """A device: device("cpu"), device("cuda"), device("cuda:0") or device("cuda", 0).

    The C ABI addresses one GPU, so every CUDA device here is cuda:0.
    """

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        elif not isinstance(type, str):
            raise TypeError("device() expects a string like 'cpu' or 'cuda:0', got %r" % (type,))
        elif ":" in type:
            if index is not None:
                raise ValueError("device %r already names an index" % type)
            type, _, idx = type.partition(":")
            try:
                index = int(idx)
            except ValueError:
                raise ValueError("invalid device string %r" % (type + ":" + idx)) from None
        if type not in _TYPE_CODES:
            raise ValueError("unknown device type %r (expected 'cpu' or 'cuda')" % type)
        if type == "cpu":
            if index not in (None, 0):
                raise ValueError("cpu has no index %r" % index)
            index = None
        else:
            index = 0 if index is None else int(index)
            if index != 0:
                raise ValueError("minitorch addresses one GPU (cuda:0); got cuda:%d" % index)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name, value):
        raise AttributeError("device is immutable")

    @property
    def code(self):
        """The mt_device value."""
        return _TYPE_CODES[self.type]

    def __repr__(self):
        if self.index is None:
            return "device(type=%r)" % self.type
        return "device(type=%r, index=%d)" % (self.type, self.index)

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (ValueError, TypeError):
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (str(self),))


def device_from_code(code):
    return device("cuda") if code == MT_CUDA else device("cpu")


def as_device(d):
    """device, str or int (a CUDA index, as torch) -> device; None -> the default device."""
    if d is None:
        return get_default_device()
    if isinstance(d, device):
        return d
    if isinstance(d, int) and not isinstance(d, bool):
        return device("cuda", d)
    return device(d)


_default_device = None


def get_default_device():
    """Where factories put tensors: set_default_device's choice, else mt_default_device()
    (CUDA when usable, else CPU; the environment variable MT_DEVICE=cpu|cuda overrides)."""
    if _default_device is not None:
        return _default_device
    return device_from_code(lib.mt_default_device())


def set_default_device(d):
    """Sets the device of factories; None returns to the library's default."""
    global _default_device
    _default_device = None if d is None else as_device(d)


class Size(tuple):
    """The shape of a tensor: a tuple of ints."""

    def __repr__(self):
        return "minitorch.Size([%s])" % ", ".join(str(s) for s in self)

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):
        r = tuple.__getitem__(self, key)
        return Size(r) if isinstance(key, slice) else r
