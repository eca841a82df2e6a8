"""abi_util - ctypes bindings to libminitorch.so shared by the ABI suites.

Contents
  loading       lib_path(), load(), LIB, MISSING, SIGNATURES, parse_header()
  constants     status / dtype / device values of abi/minitorch.h
  calls         MTError, check(), last_error(), out-parameter helpers
  tensors       from_list(), to_list(), shape_of(), ... (flat Python lists in,
                flat Python lists out; shapes are tuples)
  reference     pure-Python math the tests compare against: broadcasting,
                matmul, reductions, permutes, relative error
  test base     ABITestCase: per-test seeded RNG (seed printed on failure),
                handle bookkeeping, and a leak check after every test

The library is $MINITORCH_LIB, else build/libminitorch.so of this checkout.
Everything here goes through abi/minitorch.h only. Handles are c_void_p.
"""
import array
import ctypes
import math
import os
import random
import re
import struct
import unittest
from ctypes import POINTER, byref, c_char_p, c_double, c_int, c_int64, c_void_p

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HEADER = os.path.join(REPO, "abi", "minitorch.h")

# ------------------------------------------------------------------ constants
MT_OK = 0
MT_ERR_INVALID_ARGUMENT = 1
MT_ERR_SHAPE = 2
MT_ERR_DTYPE = 3
MT_ERR_DEVICE = 4
MT_ERR_OUT_OF_MEMORY = 5
MT_ERR_CUDA = 6
MT_ERR_IO = 7
MT_ERR_STATE = 8
MT_ERR_UNSUPPORTED = 9
MT_ERR_INTERNAL = 10
STATUS_NAMES = ["MT_OK", "MT_ERR_INVALID_ARGUMENT", "MT_ERR_SHAPE", "MT_ERR_DTYPE", "MT_ERR_DEVICE",
                "MT_ERR_OUT_OF_MEMORY", "MT_ERR_CUDA", "MT_ERR_IO", "MT_ERR_STATE",
                "MT_ERR_UNSUPPORTED", "MT_ERR_INTERNAL"]

MT_F32, MT_F64, MT_F16, MT_BF16, MT_I32, MT_I64, MT_U8 = range(7)
DTYPE_NAMES = {MT_F32: "float32", MT_F64: "float64", MT_F16: "float16", MT_BF16: "bfloat16",
               MT_I32: "int32", MT_I64: "int64", MT_U8: "uint8"}
DTYPE_SIZES = {MT_F32: 4, MT_F64: 8, MT_F16: 2, MT_BF16: 2, MT_I32: 4, MT_I64: 8, MT_U8: 1}
# array typecodes for the dtypes a test moves through host memory
TYPECODE = {MT_F32: "f", MT_F64: "d", MT_I32: "i", MT_I64: "q", MT_U8: "B"}
assert array.array("i").itemsize == 4 and array.array("q").itemsize == 8

MT_CPU, MT_CUDA = 0, 1

# ------------------------------------------------------------------ loading
_P = POINTER
_out = _P(c_void_p)     # mt_tensor **out / void **out
_i64p = _P(c_int64)
# name -> (restype, argtypes); enums (mt_status, mt_dtype, mt_device) are int-sized.
SIGNATURES = {
    "mt_abi_version": (c_int64, []),
    "mt_version": (c_char_p, []),
    "mt_last_error": (c_char_p, []),
    "mt_status_string": (c_char_p, [c_int]),
    "mt_dtype_name": (c_char_p, [c_int]),
    "mt_dtype_size": (c_int64, [c_int]),
    "mt_cuda_device_count": (c_int64, []),
    "mt_default_device": (c_int, []),
    "mt_device_name": (c_char_p, [c_int]),
    "mt_malloc": (c_int, [_out, c_int64, c_int]),
    "mt_free": (c_int, [c_void_p, c_int]),
    "mt_memcpy_h2d": (c_int, [c_void_p, c_void_p, c_int64]),
    "mt_memcpy_d2h": (c_int, [c_void_p, c_void_p, c_int64]),
    "mt_memcpy_d2d": (c_int, [c_void_p, c_void_p, c_int64]),
    "mt_synchronize": (c_int, []),
    "mt_live_bytes": (c_int64, [c_int]),
    "mt_tensor_from_data": (c_int, [_out, c_void_p, _i64p, c_int64, c_int, c_int]),
    "mt_tensor_from_blob": (c_int, [_out, c_void_p, _i64p, c_int64, c_int, c_int]),
    "mt_tensor_zeros": (c_int, [_out, _i64p, c_int64, c_int, c_int]),
    "mt_tensor_ones": (c_int, [_out, _i64p, c_int64, c_int, c_int]),
    "mt_tensor_full": (c_int, [_out, _i64p, c_int64, c_double, c_int, c_int]),
    "mt_tensor_rand": (c_int, [_out, _i64p, c_int64, c_int64, c_int, c_int]),
    "mt_tensor_randn": (c_int, [_out, _i64p, c_int64, c_int64, c_int, c_int]),
    "mt_tensor_arange": (c_int, [_out, c_double, c_double, c_double, c_int, c_int]),
    "mt_tensor_copy_to_host": (c_int, [c_void_p, c_void_p, c_int64]),
    "mt_tensor_copy_from_host": (c_int, [c_void_p, c_void_p, c_int64]),
    "mt_tensor_item": (c_int, [c_void_p, _P(c_double)]),
    "mt_tensor_ndim": (c_int, [c_void_p, _i64p]),
    "mt_tensor_shape": (c_int, [c_void_p, _i64p]),
    "mt_tensor_numel": (c_int, [c_void_p, _i64p]),
    "mt_tensor_dtype": (c_int, [c_void_p, _P(c_int)]),
    "mt_tensor_device": (c_int, [c_void_p, _P(c_int)]),
    "mt_tensor_data_ptr": (c_int, [c_void_p, _out]),
    "mt_tensor_retain": (c_int, [c_void_p]),
    "mt_tensor_release": (c_int, [c_void_p]),
    "mt_live_tensors": (c_int64, []),
    "mt_tensor_set_requires_grad": (c_int, [c_void_p, c_int64]),
    "mt_tensor_requires_grad": (c_int, [c_void_p, _i64p]),
    "mt_tensor_grad": (c_int, [_out, c_void_p]),
    "mt_tensor_zero_grad": (c_int, [c_void_p]),
    "mt_tensor_detach": (c_int, [_out, c_void_p]),
    "mt_set_grad_enabled": (c_int64, [c_int64]),
    "mt_is_grad_enabled": (c_int64, []),
    "mt_backward": (c_int, [c_void_p]),
    "mt_tape_clear": (c_int, []),
    "mt_tape_size": (c_int64, []),
    "mt_add": (c_int, [_out, c_void_p, c_void_p]),
    "mt_sub": (c_int, [_out, c_void_p, c_void_p]),
    "mt_mul": (c_int, [_out, c_void_p, c_void_p]),
    "mt_div": (c_int, [_out, c_void_p, c_void_p]),
    "mt_matmul": (c_int, [_out, c_void_p, c_void_p]),
    "mt_linear": (c_int, [_out, c_void_p, c_void_p, c_void_p]),
    "mt_add_scalar": (c_int, [_out, c_void_p, c_double]),
    "mt_mul_scalar": (c_int, [_out, c_void_p, c_double]),
    "mt_pow_scalar": (c_int, [_out, c_void_p, c_double]),
    "mt_neg": (c_int, [_out, c_void_p]),
    "mt_relu": (c_int, [_out, c_void_p]),
    "mt_sigmoid": (c_int, [_out, c_void_p]),
    "mt_tanh": (c_int, [_out, c_void_p]),
    "mt_exp": (c_int, [_out, c_void_p]),
    "mt_log": (c_int, [_out, c_void_p]),
    "mt_sum": (c_int, [_out, c_void_p]),
    "mt_mean": (c_int, [_out, c_void_p]),
    "mt_sum_dim": (c_int, [_out, c_void_p, c_int64, c_int64]),
    "mt_mean_dim": (c_int, [_out, c_void_p, c_int64, c_int64]),
    "mt_mse_loss": (c_int, [_out, c_void_p, c_void_p]),
    "mt_reshape": (c_int, [_out, c_void_p, _i64p, c_int64]),
    "mt_transpose": (c_int, [_out, c_void_p, c_int64, c_int64]),
    "mt_permute": (c_int, [_out, c_void_p, _i64p, c_int64]),
    "mt_tensor_to": (c_int, [_out, c_void_p, c_int]),
    "mt_tensor_cast": (c_int, [_out, c_void_p, c_int]),
    "mt_tensor_clone": (c_int, [_out, c_void_p]),
    "mt_optim_sgd": (c_int, [_out, _P(c_void_p), c_int64, c_double, c_double, c_double, c_int64]),
    "mt_optim_step": (c_int, [c_void_p]),
    "mt_optim_zero_grad": (c_int, [c_void_p]),
    "mt_optim_set_lr": (c_int, [c_void_p, c_double]),
    "mt_optim_get_lr": (c_int, [c_void_p, _P(c_double)]),
    "mt_optim_free": (c_int, [c_void_p]),
    "mt_softmax": (c_int, [_out, c_void_p, c_int64]),
    "mt_log_softmax": (c_int, [_out, c_void_p, c_int64]),
    "mt_cross_entropy": (c_int, [_out, c_void_p, c_void_p]),
    "mt_nll_loss": (c_int, [_out, c_void_p, c_void_p]),
    "mt_max_dim": (c_int, [_out, _out, c_void_p, c_int64, c_int64]),
    "mt_argmax": (c_int, [_out, c_void_p, c_int64, c_int64]),
    "mt_index_select": (c_int, [_out, c_void_p, c_void_p]),
    "mt_slice": (c_int, [_out, c_void_p, c_int64, c_int64, c_int64]),
    "mt_init_uniform": (c_int, [c_void_p, c_double, c_double, c_int64]),
    "mt_init_normal": (c_int, [c_void_p, c_double, c_double, c_int64]),
    "mt_init_xavier_uniform": (c_int, [c_void_p, c_double, c_int64]),
    "mt_init_xavier_normal": (c_int, [c_void_p, c_double, c_int64]),
    "mt_init_kaiming_uniform": (c_int, [c_void_p, c_double, c_int64]),
    "mt_init_kaiming_normal": (c_int, [c_void_p, c_double, c_int64]),
    "mt_load_idx": (c_int, [_out, c_char_p, c_int]),
    "mt_load_tsv": (c_int, [_out, _out, c_char_p, c_char_p, c_int64, c_int]),
    "mt_randperm": (c_int, [_out, c_int64, c_int64, c_int]),
    "mt_optim_adam": (c_int, [_out, _P(c_void_p), c_int64, c_double, c_double, c_double, c_double, c_double]),
    "mt_optim_adamw": (c_int, [_out, _P(c_void_p), c_int64, c_double, c_double, c_double, c_double, c_double]),
    "mt_clip_grad_norm": (c_int, [_out, _P(c_void_p), c_int64, c_double]),
}


def lib_path():
    return os.environ.get("MINITORCH_LIB") or os.path.join(REPO, "build", "libminitorch.so")


def load(path=None):
    """Loads the library and declares every known signature.

    Returns (lib, missing): missing lists the SIGNATURES names the library does not
    export (the suites report them; the rest of the suites still run)."""
    lib = ctypes.CDLL(path or lib_path())
    missing = []
    sigs = dict(SIGNATURES)
    # functions the header gained after this table was written: declared from the header itself
    for name, (ret, params) in parse_header().items():
        if name not in sigs:
            try:
                sigs[name] = (ctype_of_c(ret), [ctype_of_c(t) for t in params])
            except KeyError:
                pass                 # a type this loader does not know: left undeclared
    for name, (restype, argtypes) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    return lib, missing


def _norm_type(text, drop_name):
    toks = re.sub(r"\*", " * ", text).split()
    if drop_name and len(toks) > 1 and re.match(r"^[A-Za-z_]\w*$", toks[-1]):
        toks = toks[:-1]
    return " ".join(toks)


def parse_header(path=HEADER):
    """{name: (return type, [parameter types])} of every MT_API function in the header.

    Types are token-normalised C spellings without parameter names, e.g. 'const int64_t *'."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out = {}
    for m in re.finditer(r"MT_API\s+([^;{}()]*?)\b(mt_\w+)\s*\(([^)]*)\)\s*;", text):
        params = [_norm_type(p, True) for p in m.group(3).split(",")]
        params = [p for p in params if p not in ("", "void")]
        out[m.group(2)] = (_norm_type(m.group(1), False), params)
    return out


def ctype_of_c(ctype):
    """The ctypes type that a (normalised) C type of the header maps onto."""
    t = " ".join(tok for tok in ctype.split() if tok != "const")
    table = {
        "int64_t": c_int64, "double": c_double, "void": None,
        "mt_status": c_int, "mt_dtype": c_int, "mt_device": c_int, "mt_activation": c_int,
        "char *": c_char_p, "int64_t *": _i64p, "double *": _P(c_double),
        "mt_dtype *": _P(c_int), "mt_device *": _P(c_int),
        "void *": c_void_p, "mt_tensor *": c_void_p, "mt_optimizer *": c_void_p,
        "void * *": _out, "mt_tensor * *": _out, "mt_optimizer * *": _out,
    }
    if t not in table and re.match(r"^mt_\w+ \*$", t):
        return c_void_p           # a handle type added later (mt_graph *, ...)
    if t not in table and re.match(r"^mt_\w+ \* \*$", t):
        return _out
    return table[t]


LIB, MISSING = load()


# ------------------------------------------------------------------ calls
class MTError(Exception):
    def __init__(self, status, message, fn=""):
        super().__init__("%s failed: %s (%s)" % (fn, message, status_name(status)))
        self.status = status
        self.message = message


def status_name(s):
    return STATUS_NAMES[s] if 0 <= s < len(STATUS_NAMES) else "status %d" % s


def last_error():
    msg = LIB.mt_last_error()
    return msg.decode() if msg is not None else None


def check(status, fn=""):
    if status != MT_OK:
        raise MTError(status, last_error(), fn)


def call(name, *args):
    """Calls an op whose first parameter is mt_tensor **out; returns the new handle."""
    out = c_void_p()
    check(getattr(LIB, name)(byref(out), *args), name)
    if not out.value:
        raise MTError(MT_ERR_INTERNAL, "returned MT_OK but *out is NULL", name)
    return out.value


def shape_array(shape):
    shape = tuple(shape)
    return (c_int64 * len(shape))(*shape) if shape else None


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def host_buffer(values, dtype):
    """An array.array of the dtype holding values (floats round to the dtype)."""
    tc = TYPECODE[dtype]
    if tc in "fd":
        return array.array(tc, [float(v) for v in values])
    return array.array(tc, [int(v) for v in values])


def buffer_ptr(buf):
    return buf.buffer_info()[0] if len(buf) else None


def from_list(values, shape, dtype=MT_F32, device=None):
    """A new tensor (caller releases) holding values, laid out row-major."""
    device = DEFAULT_DEVICE if device is None else device
    values = list(values)
    assert len(values) == numel(shape), (len(values), shape)
    buf = host_buffer(values, dtype)
    # a zero-element tensor still gets a valid (non-NULL) data pointer
    ptr = buffer_ptr(buf) if len(buf) else ctypes.addressof(ctypes.c_char())
    return call("mt_tensor_from_data", c_void_p(ptr), shape_array(shape), len(tuple(shape)), dtype, device)


def from_list_buffer(buf, shape, dtype, device=None):
    """A new tensor from an array.array whose typecode matches dtype (no per-element Python work)."""
    device = DEFAULT_DEVICE if device is None else device
    assert buf.typecode == TYPECODE[dtype] and len(buf) == numel(shape)
    return call("mt_tensor_from_data", c_void_p(buffer_ptr(buf)), shape_array(shape), len(tuple(shape)), dtype, device)


def ndim_of(h):
    v = c_int64()
    check(LIB.mt_tensor_ndim(h, byref(v)), "mt_tensor_ndim")
    return v.value


def shape_of(h):
    n = ndim_of(h)
    arr = (c_int64 * max(n, 1))()
    check(LIB.mt_tensor_shape(h, arr), "mt_tensor_shape")
    return tuple(arr[i] for i in range(n))


def numel_of(h):
    v = c_int64()
    check(LIB.mt_tensor_numel(h, byref(v)), "mt_tensor_numel")
    return v.value


def dtype_of(h):
    v = c_int()
    check(LIB.mt_tensor_dtype(h, byref(v)), "mt_tensor_dtype")
    return v.value


def device_of(h):
    v = c_int()
    check(LIB.mt_tensor_device(h, byref(v)), "mt_tensor_device")
    return v.value


def requires_grad_of(h):
    v = c_int64()
    check(LIB.mt_tensor_requires_grad(h, byref(v)), "mt_tensor_requires_grad")
    return v.value


def data_ptr_of(h):
    v = c_void_p()
    check(LIB.mt_tensor_data_ptr(h, byref(v)), "mt_tensor_data_ptr")
    return v.value


def item_of(h):
    v = c_double()
    check(LIB.mt_tensor_item(h, byref(v)), "mt_tensor_item")
    return v.value


def to_list(h):
    """The tensor's elements as a flat list of Python numbers (copied to the host)."""
    n, dt = numel_of(h), dtype_of(h)
    buf = array.array(TYPECODE[dt], bytes(n * DTYPE_SIZES[dt]))
    ptr = buffer_ptr(buf) if n else ctypes.addressof(ctypes.c_char())
    check(LIB.mt_tensor_copy_to_host(h, c_void_p(ptr), n * DTYPE_SIZES[dt]), "mt_tensor_copy_to_host")
    return list(buf)


def grad_of(h):
    """New reference to h's gradient (caller releases) or None."""
    out = c_void_p()
    check(LIB.mt_tensor_grad(byref(out), h), "mt_tensor_grad")
    return out.value


def release(h):
    if h:
        check(LIB.mt_tensor_release(c_void_p(h)), "mt_tensor_release")


def set_requires_grad(h, flag=1):
    check(LIB.mt_tensor_set_requires_grad(h, flag), "mt_tensor_set_requires_grad")


DEFAULT_DEVICE = LIB.mt_default_device() if "mt_default_device" not in MISSING else MT_CPU
HAVE_CUDA = ("mt_cuda_device_count" not in MISSING) and LIB.mt_cuda_device_count() > 0


def device_supports(dtype, device):
    """Whether the device can hold a tensor of the dtype (CUDA may lack float64)."""
    out = c_void_p()
    one = (c_int64 * 1)(1)
    st = LIB.mt_tensor_zeros(byref(out), one, 1, dtype, device)
    if st == MT_OK:
        LIB.mt_tensor_release(out)
        return True
    return False


# ------------------------------------------------------------------ reference math
def f32(values):
    """values rounded to float32 (as the library stores them)."""
    return list(array.array("f", values))


def round_to(dtype, values):
    return f32(values) if dtype == MT_F32 else [float(v) for v in values]


def broadcast_shape(s1, s2):
    s1, s2 = tuple(s1), tuple(s2)
    n = max(len(s1), len(s2))
    a = (1,) * (n - len(s1)) + s1
    b = (1,) * (n - len(s2)) + s2
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError("shapes %s and %s do not broadcast" % (s1, s2))
        out.append(y if x == 1 else x)
    return tuple(out)


def strides_of(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


def broadcast_index_map(in_shape, out_shape):
    """For each flat index of out_shape, the flat index of in_shape it reads."""
    in_shape = tuple(in_shape)
    pad = len(out_shape) - len(in_shape)
    full = (1,) * pad + in_shape
    st = strides_of(full)
    st = [0 if full[i] == 1 else st[i] for i in range(len(full))]
    out = []
    for flat in range(numel(out_shape)):
        idx, rem = 0, flat
        for i in range(len(out_shape) - 1, -1, -1):
            c = rem % out_shape[i]
            rem //= out_shape[i]
            idx += c * st[i]
        out.append(idx)
    return out


def ref_binary(fn, a, a_shape, b, b_shape):
    out_shape = broadcast_shape(a_shape, b_shape)
    ia = broadcast_index_map(a_shape, out_shape)
    ib = broadcast_index_map(b_shape, out_shape)
    return [fn(a[i], b[j]) for i, j in zip(ia, ib)], out_shape


def ref_matmul(a, a_shape, b, b_shape):
    """[m,k]@[k,n], [B,m,k]@[B,k,n] and [B,m,k]@[k,n]."""
    a3 = tuple(a_shape) if len(a_shape) == 3 else (1,) + tuple(a_shape)
    b3 = tuple(b_shape) if len(b_shape) == 3 else (1,) + tuple(b_shape)
    B = max(a3[0], b3[0])
    m, k, n = a3[1], a3[2], b3[2]
    assert k == b3[1]
    out = []
    for bi in range(B):
        ao = (bi if a3[0] > 1 else 0) * m * k
        bo = (bi if b3[0] > 1 else 0) * k * n
        for i in range(m):
            for j in range(n):
                s = 0.0
                for p in range(k):
                    s += a[ao + i * k + p] * b[bo + p * n + j]
                out.append(s)
    shape = (B, m, n) if (len(a_shape) == 3 or len(b_shape) == 3) else (m, n)
    return out, shape


def ref_linear(x, x_shape, w, w_shape, bias):
    out_f, in_f = w_shape
    rows = numel(x_shape) // in_f
    out = []
    for r in range(rows):
        for o in range(out_f):
            s = 0.0
            for i in range(in_f):
                s += x[r * in_f + i] * w[o * in_f + i]
            out.append(s + (bias[o] if bias is not None else 0.0))
    return out, tuple(x_shape[:-1]) + (out_f,)


def ref_sum_dim(x, shape, dim, keepdim, mean=False):
    nd = len(shape)
    d = dim + nd if dim < 0 else dim
    outer = numel(shape[:d])
    red = shape[d]
    inner = numel(shape[d + 1:])
    out = []
    for o in range(outer):
        for i in range(inner):
            s = 0.0
            for r in range(red):
                s += x[(o * red + r) * inner + i]
            out.append(s / red if mean else s)
    oshape = tuple(shape[:d]) + ((1,) if keepdim else ()) + tuple(shape[d + 1:])
    return out, oshape


def ref_permute(x, shape, perm):
    oshape = tuple(shape[p] for p in perm)
    st = strides_of(shape)
    out = []
    for flat in range(numel(oshape)):
        rem, src = flat, 0
        for i in range(len(oshape) - 1, -1, -1):
            c = rem % oshape[i]
            rem //= oshape[i]
            src += c * st[perm[i]]
        out.append(x[src])
    return out, oshape


def ref_transpose(x, shape, d0, d1):
    nd = len(shape)
    perm = list(range(nd))
    d0, d1 = d0 % nd, d1 % nd
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ref_permute(x, shape, perm)


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def rel_err(got, want):
    """||got - want|| / ||want|| (||got-want|| when want is all zero)."""
    assert len(got) == len(want), (len(got), len(want))
    d = math.sqrt(sum((g - w) ** 2 for g, w in zip(got, want)))
    n = norm(want)
    return d / n if n > 0 else d


# ------------------------------------------------------------------ test base
def _initial_seed():
    env = os.environ.get("MT_TEST_SEED")
    return int(env) if env else random.SystemRandom().randrange(1 << 31)


SEED = _initial_seed()


class ABITestCase(unittest.TestCase):
    """Base of the ABI suites.

    self.rng       random.Random seeded from SEED and the test id; every failure
                   message says how to reproduce (MT_TEST_SEED=...).
    self.keep(h)   releases h when the test ends (before the leak check).
    Leak check     after every test (and after its handles are released): the tape
                   is cleared, grad mode restored, and mt_live_tensors() and
                   mt_live_bytes() of every device must be back at their start."""

    DEV = DEFAULT_DEVICE
    longMessage = True

    def setUp(self):
        self.rng = random.Random("%d:%s" % (SEED, self.id()))
        LIB.mt_tape_clear()
        LIB.mt_set_grad_enabled(1)
        self._devices = [MT_CPU] + ([MT_CUDA] if HAVE_CUDA else [])
        if HAVE_CUDA:
            LIB.mt_synchronize()
        self._live0 = LIB.mt_live_tensors()
        self._bytes0 = {d: LIB.mt_live_bytes(d) for d in self._devices}
        self.addCleanup(self._leak_check)

    def _leak_check(self):
        LIB.mt_tape_clear()
        LIB.mt_set_grad_enabled(1)
        if HAVE_CUDA:
            LIB.mt_synchronize()
        live = LIB.mt_live_tensors()
        self.assertEqual(live, self._live0, "mt_live_tensors() not back to its start: leaked %d handle(s)"
                         % (live - self._live0))
        for d in self._devices:
            b = LIB.mt_live_bytes(d)
            self.assertEqual(b, self._bytes0[d], "mt_live_bytes(%d) not back to its start: %+d bytes"
                             % (d, b - self._bytes0[d]))

    def _formatMessage(self, msg, standardMsg):
        text = super()._formatMessage(msg, standardMsg)
        return "%s\n[reproduce with MT_TEST_SEED=%d]" % (text, SEED)

    # ---- handles
    def keep(self, h):
        if h:
            self.addCleanup(release, h)
        return h

    def tensor(self, values, shape, dtype=MT_F32, device=None, requires_grad=False):
        h = self.keep(from_list(values, shape, dtype, self.DEV if device is None else device))
        if requires_grad:
            set_requires_grad(h, 1)
        return h

    def op(self, name, *args):
        return self.keep(call(name, *args))

    def grad(self, h):
        return self.keep(grad_of(h))

    # ---- random inputs
    def rand_values(self, n, domain="any"):
        r = self.rng
        if domain == "pos":
            return [r.uniform(0.5, 2.0) for _ in range(n)]
        if domain == "away0":      # |x| >= 0.1: keeps relu and friends off their kink
            return [r.choice((-1, 1)) * r.uniform(0.1, 2.0) for _ in range(n)]
        if domain == "nonzero":
            return [r.choice((-1, 1)) * r.uniform(0.5, 2.0) for _ in range(n)]
        return [r.uniform(-2.0, 2.0) for _ in range(n)]

    # ---- assertions
    def assertStatus(self, status, expected, fn=None, contains=()):
        """status is expected (one value or a tuple), and the message names fn and each of contains
        (compared with whitespace removed, so '[3, 4]' matches '[3,4]')."""
        exp = expected if isinstance(expected, tuple) else (expected,)
        msg = last_error() if status != MT_OK else ""
        self.assertIn(status, exp, "expected %s, got %s; mt_last_error(): %r"
                      % ("/".join(status_name(e) for e in exp), status_name(status), msg))
        if status == MT_OK:
            return
        self.assertIsNotNone(msg)
        squeezed = "".join(msg.split())
        for needle in ((fn,) if fn else ()) + tuple(contains):
            self.assertIn("".join(str(needle).split()), squeezed,
                          "mt_last_error() should mention %r: %r" % (needle, msg))

    def assertAllClose(self, got, want, rtol, atol, what=""):
        self.assertEqual(len(got), len(want), "%s: %d elements, expected %d" % (what, len(got), len(want)))
        for i, (g, w) in enumerate(zip(got, want)):
            if not (abs(g - w) <= atol + rtol * abs(w)) or g != g:
                self.fail("%s: element %d is %r, expected %r (rtol %g, atol %g)\n got  %s\n want %s"
                          % (what, i, g, w, rtol, atol, _short(got), _short(want)))

    def assertRelErr(self, got, want, tol, what=""):
        self.assertEqual(len(got), len(want), what)
        e = rel_err(got, want)
        if not (e < tol):
            self.fail("%s: relative error %.3g >= %g\n got  %s\n want %s" % (what, e, tol, _short(got), _short(want)))


def _short(v, n=8):
    v = list(v)
    s = ", ".join("%.7g" % x if isinstance(x, float) else str(x) for x in v[:n])
    return "[" + s + (", ... (%d)" % len(v) if len(v) > n else "") + "]"


# ------------------------------------------------------------------ raw device memory from the host
def write_device(ptr, host_buf, nbytes, device):
    """Host -> memory from mt_malloc(device). CPU memory is plain host memory."""
    if device == MT_CUDA:
        check(LIB.mt_memcpy_h2d(c_void_p(ptr), c_void_p(buffer_ptr(host_buf)), nbytes), "mt_memcpy_h2d")
    else:
        ctypes.memmove(ptr, buffer_ptr(host_buf), nbytes)


def read_device(host_buf, ptr, nbytes, device):
    if device == MT_CUDA:
        check(LIB.mt_memcpy_d2h(c_void_p(buffer_ptr(host_buf)), c_void_p(ptr), nbytes), "mt_memcpy_d2h")
    else:
        ctypes.memmove(buffer_ptr(host_buf), ptr, nbytes)


# ------------------------------------------------------------------ the op table
# One entry per op of the header, shared by the forward suite (test_abi_ops), the
# gradchecks (test_abi_grad) and the GPU parity suite (tests/gpu/test_parity.py).
#
#   name     label;  fn: the ABI function
#   kind     what shapes fit it: binary unary reduce reduce_dim matmul linear mse reshape
#            transpose permute identity
#   domains  one per tensor input: any | pos | away0 | nonzero
#   cases    [(input shapes, params)]: small cases with exact references
#   call(hs, p) -> new handle;  ref(vals, shapes, p) -> (flat values, shape)
#   torch(torch, ts, p) -> torch tensor (for the GPU suite)
#   long     a reduction over many terms (looser float32 tolerance)
#   grad     differentiable (gradchecked)
#   out_dtype  the output's dtype when it is not the inputs' (argmax: int64)
# Integer inputs (indices, targets) are params, made into MT_I64 tensors inside call().
class OpSpec:
    def __init__(self, name, fn, kind, domains, cases, call_fn, ref, torch_fn, long=False, grad=True, out_dtype=None):
        self.name, self.fn, self.kind, self.domains = name, fn, kind, domains
        self.cases, self.call, self.ref, self.torch = cases, call_fn, ref, torch_fn
        self.long, self.grad, self.out_dtype = long, grad, out_dtype

    def __repr__(self):
        return "OpSpec(%s)" % self.name


BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 5), (3, 1)), ((1,), (2, 3)), ((), (2, 3)),
                 ((4, 1), (1, 5)), ((2, 3, 1, 2), (3, 4, 1)), ((5,), ()), ((33,), (33,)), ((), ())]
UNARY_SHAPES = [(7,), (3, 4), (2, 3, 5), (), (1, 1)]


def _binary(name, pyfn, tfn, bdomain="any"):
    return OpSpec(name, "mt_" + name, "binary", ["any", bdomain], [(s, {}) for s in BINARY_SHAPES],
                  lambda hs, p: call("mt_" + name, hs[0], hs[1]),
                  lambda v, s, p: ref_binary(pyfn, v[0], s[0], v[1], s[1]),
                  lambda torch, t, p: tfn(t[0], t[1]))


def _unary(name, pyfn, tfn, domain="any", fn=None, params=({},)):
    fn = fn or "mt_" + name
    cases = [((s,), dict(pp)) for pp in params for s in UNARY_SHAPES]
    if params == ({},):
        call_fn = lambda hs, p: call(fn, hs[0])
    else:
        key = list(params[0])[0]
        call_fn = lambda hs, p: call(fn, hs[0], c_double(p[key]))
    return OpSpec(name, fn, "unary", [domain], cases, call_fn,
                  lambda v, s, p: ([pyfn(x, **p) for x in v[0]], tuple(s[0])),
                  lambda torch, t, p: tfn(torch, t[0], **p))


def _ref_pow(x, p):
    return math.pow(x, p)


def _build_specs():
    S = []
    S.append(_binary("add", lambda a, b: a + b, lambda a, b: a + b))
    S.append(_binary("sub", lambda a, b: a - b, lambda a, b: a - b))
    S.append(_binary("mul", lambda a, b: a * b, lambda a, b: a * b))
    S.append(_binary("div", lambda a, b: a / b, lambda a, b: a / b, "nonzero"))
    S.append(OpSpec("matmul", "mt_matmul", "matmul", ["any", "any"],
                    [(s, {}) for s in [((3, 4), (4, 5)), ((1, 7), (7, 1)), ((2, 3, 4), (2, 4, 5)),
                                       ((3, 2, 5), (5, 4)), ((5, 1), (1, 6)), ((1, 3, 3), (1, 3, 3))]],
                    lambda hs, p: call("mt_matmul", hs[0], hs[1]),
                    lambda v, s, p: ref_matmul(v[0], s[0], v[1], s[1]),
                    lambda torch, t, p: torch.matmul(t[0], t[1]), long=True))
    S.append(OpSpec("linear", "mt_linear", "linear", ["any", "any", "any"],
                    [(s, {}) for s in [((4, 3), (5, 3), (5,)), ((2, 3, 3), (2, 3), (2,)), ((1, 2), (3, 2), (3,)),
                                       ((3,), (4, 3), (4,))]],
                    lambda hs, p: call("mt_linear", hs[0], hs[1], hs[2]),
                    lambda v, s, p: ref_linear(v[0], s[0], v[1], s[1], v[2]),
                    lambda torch, t, p: torch.nn.functional.linear(t[0], t[1], t[2]), long=True))
    S.append(OpSpec("linear_nobias", "mt_linear", "linear", ["any", "any"],
                    [(s, {}) for s in [((4, 3), (5, 3)), ((2, 2, 4), (3, 4))]],
                    lambda hs, p: call("mt_linear", hs[0], hs[1], None),
                    lambda v, s, p: ref_linear(v[0], s[0], v[1], s[1], None),
                    lambda torch, t, p: torch.nn.functional.linear(t[0], t[1]), long=True))
    S.append(_unary("add_scalar", lambda x, s: x + s, lambda torch, x, s: x + s,
                    params=({"s": 0.75}, {"s": -2.5})))
    S.append(_unary("mul_scalar", lambda x, s: x * s, lambda torch, x, s: x * s,
                    params=({"s": 1.5}, {"s": -0.25})))
    S.append(_unary("pow_scalar", lambda x, p: math.pow(x, p), lambda torch, x, p: torch.pow(x, p),
                    "pos", params=({"p": 0.5}, {"p": -1.5}, {"p": 2.5}, {"p": 2.0})))
    S.append(_unary("pow_scalar_int", lambda x, p: math.pow(x, p), lambda torch, x, p: torch.pow(x, p),
                    "any", fn="mt_pow_scalar", params=({"p": 2.0}, {"p": 3.0}, {"p": 1.0})))
    S.append(_unary("neg", lambda x: -x, lambda torch, x: -x))
    S.append(_unary("relu", lambda x: x if x > 0 else 0.0, lambda torch, x: torch.relu(x), "away0"))
    S.append(_unary("sigmoid", sigmoid, lambda torch, x: torch.sigmoid(x)))
    S.append(_unary("tanh", math.tanh, lambda torch, x: torch.tanh(x)))
    S.append(_unary("exp", math.exp, lambda torch, x: torch.exp(x)))
    S.append(_unary("log", math.log, lambda torch, x: torch.log(x), "pos"))
    S.append(OpSpec("sum", "mt_sum", "reduce", ["any"], [((s,), {}) for s in UNARY_SHAPES],
                    lambda hs, p: call("mt_sum", hs[0]),
                    lambda v, s, p: ([math.fsum(v[0])], ()),
                    lambda torch, t, p: t[0].sum(), long=True))
    S.append(OpSpec("mean", "mt_mean", "reduce", ["any"], [((s,), {}) for s in UNARY_SHAPES],
                    lambda hs, p: call("mt_mean", hs[0]),
                    lambda v, s, p: ([math.fsum(v[0]) / len(v[0])], ()),
                    lambda torch, t, p: t[0].mean(), long=True))
    dim_cases = [((3, 4), 0, 0), ((3, 4), 1, 1), ((2, 3, 4), -1, 0), ((2, 3, 4), 1, 1), ((2, 3, 4), -3, 1),
                 ((5,), 0, 0), ((5,), -1, 1), ((2, 1, 3), 1, 0)]
    for mean in (False, True):
        nm = "mean_dim" if mean else "sum_dim"
        S.append(OpSpec(nm, "mt_" + nm, "reduce_dim", ["any"],
                        [((s,), {"dim": d, "keepdim": k}) for s, d, k in dim_cases],
                        (lambda nm: lambda hs, p: call("mt_" + nm, hs[0], p["dim"], p["keepdim"]))(nm),
                        (lambda mean: lambda v, s, p: ref_sum_dim(v[0], s[0], p["dim"], p["keepdim"], mean))(mean),
                        (lambda mean: lambda torch, t, p: (t[0].mean if mean else t[0].sum)(p["dim"], keepdim=bool(p["keepdim"])))(mean),
                        long=True))
    S.append(OpSpec("mse_loss", "mt_mse_loss", "mse", ["any", "any"],
                    [(s, {}) for s in [((4, 1), (4, 1)), ((3, 5), (3, 5)), ((7,), (7,)), ((), ())]],
                    lambda hs, p: call("mt_mse_loss", hs[0], hs[1]),
                    lambda v, s, p: ([math.fsum((a - b) ** 2 for a, b in zip(v[0], v[1])) / len(v[0])], ()),
                    lambda torch, t, p: torch.nn.functional.mse_loss(t[0], t[1]), long=True))
    S.append(OpSpec("reshape", "mt_reshape", "reshape", ["any"],
                    [(((3, 4),), {"shape": (2, -1, 3)}), (((2, 3, 4),), {"shape": (24,)}), (((6,),), {"shape": (3, 2)}),
                     (((1,),), {"shape": ()}), (((2, 3),), {"shape": (3, 1, 2)})],
                    lambda hs, p: call("mt_reshape", hs[0], shape_array(p["shape"]), len(p["shape"])),
                    lambda v, s, p: (list(v[0]), _infer_shape(p["shape"], numel(s[0]))),
                    lambda torch, t, p: t[0].reshape(p["shape"])))
    S.append(OpSpec("transpose", "mt_transpose", "transpose", ["any"],
                    [(((3, 4),), {"d0": 0, "d1": 1}), (((2, 3, 4),), {"d0": 0, "d1": 2}),
                     (((2, 3, 4),), {"d0": -1, "d1": -2}), (((2, 3, 4),), {"d0": 1, "d1": 1}),
                     (((2, 3, 4, 5),), {"d0": 3, "d1": 1})],
                    lambda hs, p: call("mt_transpose", hs[0], p["d0"], p["d1"]),
                    lambda v, s, p: ref_transpose(v[0], s[0], p["d0"], p["d1"]),
                    lambda torch, t, p: t[0].transpose(p["d0"], p["d1"]).contiguous()))
    S.append(OpSpec("permute", "mt_permute", "permute", ["any"],
                    [(((2, 3, 4),), {"perm": (2, 0, 1)}), (((2, 3, 4, 5),), {"perm": (3, 1, 0, 2)}),
                     (((3, 4),), {"perm": (1, 0)}), (((5,),), {"perm": (0,)}), (((2, 3, 4),), {"perm": (0, 1, 2)}),
                     (((2, 3, 4),), {"perm": (-1, 0, 1)})],
                    lambda hs, p: call("mt_permute", hs[0], shape_array(p["perm"]), len(p["perm"])),
                    lambda v, s, p: ref_permute(v[0], s[0], [q % len(s[0]) for q in p["perm"]]),
                    lambda torch, t, p: t[0].permute(*p["perm"]).contiguous()))
    S.append(OpSpec("clone", "mt_tensor_clone", "identity", ["any"], [((s,), {}) for s in UNARY_SHAPES],
                    lambda hs, p: call("mt_tensor_clone", hs[0]),
                    lambda v, s, p: (list(v[0]), tuple(s[0])),
                    lambda torch, t, p: t[0].clone()))
    S.append(OpSpec("to_cpu", "mt_tensor_to", "identity", ["any"], [((s,), {}) for s in UNARY_SHAPES[:3]],
                    lambda hs, p: call("mt_tensor_to", hs[0], MT_CPU),
                    lambda v, s, p: (list(v[0]), tuple(s[0])),
                    lambda torch, t, p: t[0].cpu()))
    # ---- ops added with the MLP/classification work
    sm_cases = [((s,), {"dim": d}) for s, d in (((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((5,), 0), ((2, 1, 3), -1))]
    for log in (False, True):
        nm = "log_softmax" if log else "softmax"
        S.append(OpSpec(nm, "mt_" + nm, "softmax", ["any"], sm_cases,
                        (lambda nm: lambda hs, p: call("mt_" + nm, hs[0], p["dim"]))(nm),
                        (lambda log: lambda v, s, p: ref_softmax(v[0], s[0], p["dim"], log))(log),
                        (lambda log: lambda torch, t, p: (torch.log_softmax if log else torch.softmax)(t[0], p["dim"]))(log),
                        long=True))
    S.append(OpSpec("slice", "mt_slice", "slice", ["any"],
                    [(((5, 3),), {"dim": 0, "start": 1, "end": 4}), (((2, 6, 2),), {"dim": 1, "start": -4, "end": 100}),
                     (((2, 6, 2),), {"dim": -1, "start": 0, "end": 1}), (((7,),), {"dim": 0, "start": -100, "end": -2}),
                     (((4, 3),), {"dim": 1, "start": 2, "end": 2})],
                    lambda hs, p: call("mt_slice", hs[0], p["dim"], p["start"], p["end"]),
                    lambda v, s, p: ref_slice(v[0], s[0], p["dim"], p["start"], p["end"]),
                    lambda torch, t, p: torch.narrow(t[0], p["dim"], *_slice_narrow(t[0].shape[p["dim"]], p)).contiguous()))
    S.append(OpSpec("index_select", "mt_index_select", "index_select", ["any"],
                    [(((5, 3),), {"idx": [4, 0, 4, 2]}), (((3,),), {"idx": [2, 2, 1, 0, 1]}), (((2, 3, 2),), {"idx": [1]}),
                     (((4, 2),), {"idx": []})],
                    _with_indices("mt_index_select", "idx"),
                    lambda v, s, p: ref_index_select(v[0], s[0], p["idx"]),
                    lambda torch, t, p: torch.index_select(t[0], 0, torch.tensor(p["idx"], dtype=torch.int64, device=t[0].device))))
    ce_cases = [(((4, 3),), {"t": [0, 2, 1, 2]}), (((1, 5),), {"t": [4]}), (((6, 2),), {"t": [1, 0, 0, 1, 1, 1]})]
    S.append(OpSpec("cross_entropy", "mt_cross_entropy", "ce", ["any"], ce_cases,
                    _with_indices("mt_cross_entropy", "t"),
                    lambda v, s, p: (ref_cross_entropy(v[0], s[0], p["t"], False), ()),
                    lambda torch, t, p: torch.nn.functional.cross_entropy(
                        t[0], torch.tensor(p["t"], dtype=torch.int64, device=t[0].device)), long=True))
    S.append(OpSpec("nll_loss", "mt_nll_loss", "ce", ["any"], ce_cases,
                    _with_indices("mt_nll_loss", "t"),
                    lambda v, s, p: (ref_cross_entropy(v[0], s[0], p["t"], True), ()),
                    lambda torch, t, p: torch.nn.functional.nll_loss(
                        t[0], torch.tensor(p["t"], dtype=torch.int64, device=t[0].device)), long=True))
    mx_cases = [((s,), {"dim": d, "keepdim": k}) for s, d, k in (((3, 4), 1, 0), ((3, 4), 0, 1), ((2, 3, 4), -2, 0), ((5,), 0, 0))]
    S.append(OpSpec("max_dim", "mt_max_dim", "max_dim", ["any"], mx_cases,
                    lambda hs, p: _max_values(hs[0], p["dim"], p["keepdim"]),
                    lambda v, s, p: ref_max_dim(v[0], s[0], p["dim"], p["keepdim"], False),
                    lambda torch, t, p: torch.max(t[0], p["dim"], keepdim=bool(p["keepdim"])).values))
    S.append(OpSpec("argmax", "mt_argmax", "max_dim", ["any"], mx_cases,
                    lambda hs, p: call("mt_argmax", hs[0], p["dim"], p["keepdim"]),
                    lambda v, s, p: ref_max_dim(v[0], s[0], p["dim"], p["keepdim"], True),
                    lambda torch, t, p: torch.argmax(t[0], p["dim"], keepdim=bool(p["keepdim"])),
                    grad=False, out_dtype=MT_I64))
    return S


def _with_indices(fn, key):
    """call() of an op whose second input is an MT_I64 tensor made from params[key]."""
    def call_fn(hs, p):
        dev = device_of(hs[0]) if hs[0] else DEFAULT_DEVICE
        idx = from_list(p[key], (len(p[key]),), MT_I64, dev)
        try:
            return call(fn, hs[0], idx)
        finally:
            release(idx)
    return call_fn


def _max_values(x, dim, keepdim):
    out = c_void_p()
    check(LIB.mt_max_dim(byref(out), None, x, dim, keepdim), "mt_max_dim")
    return out.value


def _slice_narrow(n, p):
    s0, e0, _ = slice(p["start"], p["end"]).indices(n)
    return s0, max(0, e0 - s0)


def _reduce_layout(shape, dim):
    d = dim % len(shape)
    return d, numel(shape[:d]), shape[d], numel(shape[d + 1:])


def ref_softmax(x, shape, dim, log=False):
    d, outer, red, inner = _reduce_layout(shape, dim)
    out = [0.0] * len(x)
    for o in range(outer):
        for i in range(inner):
            idx = [(o * red + r) * inner + i for r in range(red)]
            m = max(x[j] for j in idx)
            e = [math.exp(x[j] - m) for j in idx]
            tot = math.fsum(e)
            for j, ej in zip(idx, e):
                out[j] = (x[j] - m - math.log(tot)) if log else ej / tot
    return out, tuple(shape)


def ref_max_dim(x, shape, dim, keepdim, want_index):
    d, outer, red, inner = _reduce_layout(shape, dim)
    out = []
    for o in range(outer):
        for i in range(inner):
            vals = [x[(o * red + r) * inner + i] for r in range(red)]
            best = max(range(red), key=lambda r: (vals[r], -r))     # the first maximum
            out.append(best if want_index else vals[best])
    oshape = tuple(shape[:d]) + ((1,) if keepdim else ()) + tuple(shape[d + 1:])
    return out, oshape


def ref_slice(x, shape, dim, start, end):
    d, outer, n, inner = _reduce_layout(shape, dim)
    s0, e0, _ = slice(start, end).indices(n)
    e0 = max(e0, s0)
    out = []
    for o in range(outer):
        for r in range(s0, e0):
            base = (o * n + r) * inner
            out.extend(x[base:base + inner])
    return out, tuple(shape[:d]) + (e0 - s0,) + tuple(shape[d + 1:])


def ref_index_select(x, shape, idx):
    row = numel(shape[1:])
    out = []
    for i in idx:
        out.extend(x[i * row:(i + 1) * row])
    return out, (len(idx),) + tuple(shape[1:])


def ref_cross_entropy(x, shape, targets, already_log):
    n, c = shape
    tot = []
    for r in range(n):
        row = x[r * c:(r + 1) * c]
        if already_log:
            tot.append(-row[targets[r]])
        else:
            m = max(row)
            lse = m + math.log(math.fsum(math.exp(v - m) for v in row))
            tot.append(lse - row[targets[r]])
    return [math.fsum(tot) / n]


def _infer_shape(shape, n):
    shape = list(shape)
    if -1 in shape:
        rest = numel([d for d in shape if d != -1])
        shape[shape.index(-1)] = n // rest
    return tuple(shape)


OP_SPECS = _build_specs()
SPEC = {s.name: s for s in OP_SPECS}
