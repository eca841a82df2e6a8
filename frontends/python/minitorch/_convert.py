"""Host-side conversions: nested Python data and buffers to bytes, bytes back to lists."""

import array
import numbers
import struct
import sys

from . import _dtype as D


def _is_sequence(x):
    return isinstance(x, (list, tuple))


def flatten(data):
    """Nested lists/tuples of numbers -> (shape tuple, flat list of elements), row-major."""
    shape = []
    x = data
    while _is_sequence(x):
        shape.append(len(x))
        if not x:
            break
        x = x[0]
    ndim = len(shape)
    flat = []

    def walk(x, d):
        if d == ndim:
            if _is_sequence(x):
                raise ValueError("too many dimensions: expected a number at dim %d, got a sequence" % d)
            flat.append(x)
            return
        if not _is_sequence(x):
            raise ValueError("expected a sequence at dim %d, got %s" % (d, type(x).__name__))
        if len(x) != shape[d]:
            raise ValueError("expected sequence of length %d at dim %d (got %d)" % (shape[d], d, len(x)))
        if d == ndim - 1:
            for y in x:
                if _is_sequence(y):
                    raise ValueError("too many dimensions: expected a number at dim %d, got a sequence"
                                     % (d + 1))
            flat.extend(x)
        else:
            for y in x:
                walk(y, d + 1)

    walk(data, 0)
    return tuple(shape), flat


def scalarize(flat):
    """Replaces one-element tensors and numpy scalars in flat by Python numbers."""
    out = flat
    for i, x in enumerate(flat):
        t = type(x)
        if t is float or t is int or t is bool:
            continue
        if out is flat:
            out = list(flat)
        if hasattr(x, "item") and not isinstance(x, numbers.Number):
            x = x.item()                       # a one-element tensor
        if isinstance(x, bool) or isinstance(x, numbers.Integral):
            out[i] = int(x) if not isinstance(x, bool) else x
        elif isinstance(x, numbers.Real):
            out[i] = float(x)
        else:
            raise TypeError("can't convert %s to a tensor element" % type(x).__name__)
    return out


def infer_dtype(flat):
    """torch's rule: any float -> default float dtype; ints -> int64; only bools -> uint8
    (minitorch has no bool dtype); empty -> default float dtype."""
    if not flat:
        return D.get_default_dtype()
    kind = 0
    for x in flat:
        t = type(x)
        if t is float:
            return D.get_default_dtype()
        if t is int:
            kind = 1
    return D.int64 if kind else D.uint8


def encode(flat, dt):
    """Flat numbers -> (bytes, dtype of those bytes). float16/bfloat16 travel as float64 and
    are converted on the device by mt_tensor_cast (one rounding)."""
    if dt.is_floating_point:
        vals = [float(x) for x in flat]
        if dt is D.float32:
            return array.array("f", vals).tobytes(), D.float32
        return array.array("d", vals).tobytes(), D.float64
    vals = [int(x) for x in flat]
    try:
        return array.array(dt.format, vals).tobytes(), dt
    except OverflowError:
        raise OverflowError("a value does not fit %s" % dt.name) from None


def decode(raw, dt, n):
    """Bytes of n elements of dtype dt -> flat list of Python numbers."""
    if dt is D.float16:
        return list(struct.unpack("=%de" % n, raw))
    if dt is D.bfloat16:
        halves = array.array("H")
        halves.frombytes(raw)
        words = array.array("I", [h << 16 for h in halves])
        out = array.array("f")
        out.frombytes(words.tobytes())
        return out.tolist()
    a = array.array(dt.format)
    a.frombytes(raw)
    return a.tolist()


def nest(flat, shape):
    """Flat row-major list -> nested lists of the given shape (a scalar for shape ())."""
    if not shape:
        return flat[0]
    if 0 in shape:
        def empty(d):
            return [] if shape[d] == 0 or d == len(shape) - 1 else [empty(d + 1) for _ in range(shape[d])]
        return empty(0)
    out = flat
    for d in reversed(shape[1:]):
        out = [out[i:i + d] for i in range(0, len(out), d)]
    return out


_SIGNED = {4: D.int32, 8: D.int64}


def from_buffer(obj):
    """Anything with the buffer protocol -> (shape, bytes or None, dtype, flat or None).

    Native float32/float64/float16/int32/int64/uint8/bool buffers cross as bytes; other
    integer widths come back as a flat list of ints (to be stored as int64)."""
    mv = memoryview(obj)
    fmt = mv.format
    if fmt[:1] in ("<", ">", "!", "=", "@"):
        order, fmt = fmt[0], fmt[1:]
        if (order in (">", "!") and sys.byteorder == "little") or (order == "<" and sys.byteorder == "big"):
            raise TypeError("buffers of non-native byte order are not supported (format %r)" % mv.format)
    shape = tuple(mv.shape) if mv.shape is not None else (mv.nbytes // max(mv.itemsize, 1),)
    if fmt == "f" and mv.itemsize == 4:
        return shape, mv.tobytes(), D.float32, None
    if fmt == "d" and mv.itemsize == 8:
        return shape, mv.tobytes(), D.float64, None
    if fmt == "e" and mv.itemsize == 2:
        return shape, mv.tobytes(), D.float16, None
    if fmt in ("B", "?") and mv.itemsize == 1:
        return shape, mv.tobytes(), D.uint8, None
    if fmt in ("b", "h", "i", "l", "q", "n") and mv.itemsize in _SIGNED:
        return shape, mv.tobytes(), _SIGNED[mv.itemsize], None
    if fmt in ("b", "h", "H", "i", "I", "l", "L", "q", "Q"):
        flat = array.array(fmt)
        flat.frombytes(mv.tobytes())
        return shape, None, D.int64, flat.tolist()
    raise TypeError("unsupported buffer format %r" % mv.format)
