"""Loads libminitorch.so and declares the C signature of every mt_ function.

Where the library comes from, first match wins:
  1. the file named by the environment variable MINITORCH_LIB (nothing else is tried
     when it is set, so a typo is an error rather than a silent fallback);
  2. build/libminitorch.so of the repository this package sits in;
  3. the system loader (ctypes.util.find_library("minitorch"), then "libminitorch.so").

The library must report mt_abi_version() == ABI_VERSION, the MT_ABI_VERSION of the
header this package was written for; any other version is refused at import.

SIGNATURES below mirrors abi/minitorch.h one line per function. A test parses the
header and fails on any drift (a function added, removed or changed on one side
only). Functions returning mt_status get an errcheck that turns a non-zero status
into a MinitorchError subclass carrying mt_last_error(), so no status is ever
dropped. Adding a C function to the frontend is one line in SIGNATURES.
"""

import ctypes
import ctypes.util
import os
from ctypes import POINTER, c_char_p, c_double, c_int32, c_int64, c_void_p

from ._errors import error_for_status

ABI_VERSION = 1  # MT_ABI_VERSION of abi/minitorch.h this package speaks

# C types as ctypes sees them.
STATUS = "mt_status"     # c_int32 result checked by errcheck
I64 = c_int64            # int64_t
F64 = c_double           # double
ENUM = c_int32           # mt_dtype, mt_device, mt_status parameters (int32-sized enums)
STR = c_char_p           # const char * (results owned by the library; parameters borrowed)
PTR = c_void_p           # mt_tensor *, mt_optimizer *, void * (borrowed handles and buffers)
PPTR = POINTER(c_void_p) # mt_tensor **out, mt_optimizer **out, void **out, mt_tensor *const *
PI64 = POINTER(c_int64)  # int64_t * (shape, perm, out)
PF64 = POINTER(c_double) # double *out
PENUM = POINTER(c_int32) # mt_dtype *out, mt_device *out
PSTR = POINTER(c_char_p) # const char *const * (borrowed arrays of strings)


class I64ARG(c_int64):
    """How an int64_t parameter is bound: ctypes' c_int64 keeps the low 64 bits of a Python int
    (2**64 + 3 passes as 3), so a value outside int64 raises OverflowError instead (through
    ctypes.ArgumentError, which names the argument)."""

    @classmethod
    def from_param(cls, value):
        if isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
            raise OverflowError("%d does not fit int64_t" % value)
        return c_int64.from_param(value)


def bound_params(params):
    """The argtypes a SIGNATURES row is bound with: int64_t through I64ARG, const char *
    through STRARG (checked conversions), the rest as declared."""
    return tuple(I64ARG if p is I64 else STRARG if p is STR else p for p in params)


class STRARG(c_char_p):
    """How a const char * parameter is bound: C would read up to the first NUL byte, so a path
    or name with one inside ('x\\0y') raises ValueError, as Python's open() does, instead of
    naming the file x."""

    @classmethod
    def from_param(cls, value):
        if isinstance(value, bytes) and b"\0" in value:
            raise ValueError("embedded NUL byte in %r" % value)
        return c_char_p.from_param(value)


# (name, result, (parameters...)) in header order.
SIGNATURES = (
    # basics
    ("mt_abi_version", I64, ()),
    ("mt_version", STR, ()),
    ("mt_last_error", STR, ()),
    ("mt_status_string", STR, (ENUM,)),
    ("mt_dtype_name", STR, (ENUM,)),
    ("mt_dtype_size", I64, (ENUM,)),
    ("mt_cuda_device_count", I64, ()),
    ("mt_default_device", ENUM, ()),
    ("mt_device_name", STR, (ENUM,)),
    # raw memory
    ("mt_malloc", STATUS, (PPTR, I64, ENUM)),
    ("mt_free", STATUS, (PTR, ENUM)),
    ("mt_memcpy_h2d", STATUS, (PTR, PTR, I64)),
    ("mt_memcpy_d2h", STATUS, (PTR, PTR, I64)),
    ("mt_memcpy_d2d", STATUS, (PTR, PTR, I64)),
    ("mt_synchronize", STATUS, ()),
    ("mt_live_bytes", I64, (ENUM,)),
    # tensors
    ("mt_tensor_from_data", STATUS, (PPTR, PTR, PI64, I64, ENUM, ENUM)),
    ("mt_tensor_from_blob", STATUS, (PPTR, PTR, PI64, I64, ENUM, ENUM)),
    ("mt_tensor_zeros", STATUS, (PPTR, PI64, I64, ENUM, ENUM)),
    ("mt_tensor_ones", STATUS, (PPTR, PI64, I64, ENUM, ENUM)),
    ("mt_tensor_full", STATUS, (PPTR, PI64, I64, F64, ENUM, ENUM)),
    ("mt_tensor_rand", STATUS, (PPTR, PI64, I64, I64, ENUM, ENUM)),
    ("mt_tensor_randn", STATUS, (PPTR, PI64, I64, I64, ENUM, ENUM)),
    ("mt_tensor_arange", STATUS, (PPTR, F64, F64, F64, ENUM, ENUM)),
    ("mt_tensor_copy_to_host", STATUS, (PTR, PTR, I64)),
    ("mt_tensor_copy_from_host", STATUS, (PTR, PTR, I64)),
    ("mt_tensor_item", STATUS, (PTR, PF64)),
    ("mt_tensor_ndim", STATUS, (PTR, PI64)),
    ("mt_tensor_shape", STATUS, (PTR, PI64)),
    ("mt_tensor_numel", STATUS, (PTR, PI64)),
    ("mt_tensor_dtype", STATUS, (PTR, PENUM)),
    ("mt_tensor_device", STATUS, (PTR, PENUM)),
    ("mt_tensor_data_ptr", STATUS, (PTR, PPTR)),
    ("mt_tensor_retain", STATUS, (PTR,)),
    ("mt_tensor_release", STATUS, (PTR,)),
    ("mt_live_tensors", I64, ()),
    # autograd
    ("mt_tensor_set_requires_grad", STATUS, (PTR, I64)),
    ("mt_tensor_requires_grad", STATUS, (PTR, PI64)),
    ("mt_tensor_grad", STATUS, (PPTR, PTR)),
    ("mt_tensor_zero_grad", STATUS, (PTR,)),
    ("mt_tensor_clear_grad", STATUS, (PTR,)),
    ("mt_tensor_detach", STATUS, (PPTR, PTR)),
    ("mt_set_grad_enabled", I64, (I64,)),
    ("mt_is_grad_enabled", I64, ()),
    ("mt_backward", STATUS, (PTR,)),
    ("mt_tape_clear", STATUS, ()),
    ("mt_tape_size", I64, ()),
    # ops
    ("mt_add", STATUS, (PPTR, PTR, PTR)),
    ("mt_sub", STATUS, (PPTR, PTR, PTR)),
    ("mt_mul", STATUS, (PPTR, PTR, PTR)),
    ("mt_div", STATUS, (PPTR, PTR, PTR)),
    ("mt_set_allow_tf32", I64, (I64,)),
    ("mt_set_deterministic", I64, (I64,)),
    ("mt_matmul", STATUS, (PPTR, PTR, PTR)),
    ("mt_linear", STATUS, (PPTR, PTR, PTR, PTR)),
    ("mt_add_scalar", STATUS, (PPTR, PTR, F64)),
    ("mt_mul_scalar", STATUS, (PPTR, PTR, F64)),
    ("mt_pow_scalar", STATUS, (PPTR, PTR, F64)),
    ("mt_neg", STATUS, (PPTR, PTR)),
    ("mt_relu", STATUS, (PPTR, PTR)),
    ("mt_sigmoid", STATUS, (PPTR, PTR)),
    ("mt_tanh", STATUS, (PPTR, PTR)),
    ("mt_exp", STATUS, (PPTR, PTR)),
    ("mt_log", STATUS, (PPTR, PTR)),
    ("mt_sum", STATUS, (PPTR, PTR)),
    ("mt_mean", STATUS, (PPTR, PTR)),
    ("mt_sum_dim", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_mean_dim", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_mse_loss", STATUS, (PPTR, PTR, PTR)),
    ("mt_reshape", STATUS, (PPTR, PTR, PI64, I64)),
    ("mt_transpose", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_permute", STATUS, (PPTR, PTR, PI64, I64)),
    ("mt_tensor_to", STATUS, (PPTR, PTR, ENUM)),
    ("mt_tensor_cast", STATUS, (PPTR, PTR, ENUM)),
    ("mt_tensor_clone", STATUS, (PPTR, PTR)),
    ("mt_softmax", STATUS, (PPTR, PTR, I64)),
    ("mt_log_softmax", STATUS, (PPTR, PTR, I64)),
    ("mt_cross_entropy", STATUS, (PPTR, PTR, PTR)),
    ("mt_nll_loss", STATUS, (PPTR, PTR, PTR)),
    ("mt_max_dim", STATUS, (PPTR, PPTR, PTR, I64, I64)),
    ("mt_argmax", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_index_select", STATUS, (PPTR, PTR, PTR)),
    ("mt_slice", STATUS, (PPTR, PTR, I64, I64, I64)),
    # comparisons and selection
    ("mt_eq", STATUS, (PPTR, PTR, PTR)),
    ("mt_ne", STATUS, (PPTR, PTR, PTR)),
    ("mt_lt", STATUS, (PPTR, PTR, PTR)),
    ("mt_le", STATUS, (PPTR, PTR, PTR)),
    ("mt_gt", STATUS, (PPTR, PTR, PTR)),
    ("mt_ge", STATUS, (PPTR, PTR, PTR)),
    ("mt_where", STATUS, (PPTR, PTR, PTR, PTR)),
    ("mt_maximum", STATUS, (PPTR, PTR, PTR)),
    ("mt_minimum", STATUS, (PPTR, PTR, PTR)),
    ("mt_sqrt", STATUS, (PPTR, PTR)),
    ("mt_abs", STATUS, (PPTR, PTR)),
    ("mt_pow", STATUS, (PPTR, PTR, PTR)),
    ("mt_clamp", STATUS, (PPTR, PTR, F64, F64)),
    # DLPack
    ("mt_tensor_to_dlpack", STATUS, (PPTR, PTR)),
    ("mt_tensor_from_dlpack", STATUS, (PPTR, PTR)),
    # transformer blocks
    ("mt_layer_norm", STATUS, (PPTR, PTR, PTR, PTR, F64)),
    ("mt_gelu", STATUS, (PPTR, PTR)),
    ("mt_embedding", STATUS, (PPTR, PTR, PTR)),
    ("mt_scaled_dot_product_attention", STATUS, (PPTR, PTR, PTR, PTR, I64)),
    ("mt_scaled_dot_product_attention_scaled", STATUS, (PPTR, PTR, PTR, PTR, I64, F64)),
    ("mt_self_attention", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_dropout", STATUS, (PPTR, PTR, F64, I64)),
    ("mt_masked_fill", STATUS, (PPTR, PTR, PTR, F64)),
    ("mt_cat", STATUS, (PPTR, PPTR, I64, I64)),
    # fusions
    ("mt_bias_act", STATUS, (PPTR, PTR, PTR, ENUM)),
    ("mt_add_layer_norm", STATUS, (PPTR, PPTR, PTR, PTR, PTR, PTR, F64)),
    ("mt_dropout_add", STATUS, (PPTR, PTR, PTR, F64, I64)),
    # convolutional networks
    ("mt_conv2d", STATUS, (PPTR, PTR, PTR, PTR, I64, I64)),
    ("mt_conv2d_ex", STATUS, (PPTR, PTR, PTR, PTR, I64, I64, I64, I64, I64, I64)),
    ("mt_set_conv_algo", STATUS, (I64, PI64)),
    ("mt_max_pool2d", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_avg_pool2d", STATUS, (PPTR, PTR, I64, I64)),
    ("mt_batch_norm", STATUS, (PPTR, PTR, PTR, PTR, PTR, PTR, I64, F64, F64)),
    # initialization
    ("mt_init_uniform", STATUS, (PTR, F64, F64, I64)),
    ("mt_init_normal", STATUS, (PTR, F64, F64, I64)),
    ("mt_init_xavier_uniform", STATUS, (PTR, F64, I64)),
    ("mt_init_xavier_normal", STATUS, (PTR, F64, I64)),
    ("mt_init_kaiming_uniform", STATUS, (PTR, F64, I64)),
    ("mt_init_kaiming_normal", STATUS, (PTR, F64, I64)),
    # data
    ("mt_load_idx", STATUS, (PPTR, STR, ENUM)),
    ("mt_load_tsv", STATUS, (PPTR, PPTR, STR, STR, I64, ENUM)),
    ("mt_randperm", STATUS, (PPTR, I64, I64, ENUM)),
    # checkpoints
    ("mt_save_safetensors", STATUS, (STR, PSTR, PPTR, I64)),
    ("mt_safetensors_count", STATUS, (STR, PI64)),
    ("mt_safetensors_name", STATUS, (STR, I64, STR, I64)),
    ("mt_load_safetensors", STATUS, (PPTR, STR, STR, ENUM)),
    # graphs
    ("mt_graph_begin", STATUS, (ENUM,)),
    ("mt_graph_end", STATUS, (PPTR,)),
    ("mt_graph_replay", STATUS, (PTR,)),
    ("mt_graph_free", STATUS, (PTR,)),
    ("mt_graph_capture_begin", STATUS, ()),
    ("mt_graph_capture_end", STATUS, (PPTR,)),
    ("mt_graph_release", STATUS, (PTR,)),
    # optimizers
    ("mt_optim_sgd", STATUS, (PPTR, PPTR, I64, F64, F64, F64, I64)),
    ("mt_optim_adam", STATUS, (PPTR, PPTR, I64, F64, F64, F64, F64, F64)),
    ("mt_optim_adamw", STATUS, (PPTR, PPTR, I64, F64, F64, F64, F64, F64)),
    ("mt_optim_step", STATUS, (PTR,)),
    ("mt_optim_zero_grad", STATUS, (PTR,)),
    ("mt_optim_set_lr", STATUS, (PTR, F64)),
    ("mt_optim_get_lr", STATUS, (PTR, PF64)),
    ("mt_optim_free", STATUS, (PTR,)),
    ("mt_optim_save", STATUS, (PTR, STR)),
    ("mt_optim_load", STATUS, (PTR, STR)),
    ("mt_clip_grad_norm", STATUS, (PPTR, PPTR, I64, F64)),
)


class Library:
    """The loaded library: one attribute per mt_ function, plus path and missing."""

    def __init__(self, cdll, path):
        self._cdll = cdll
        self.path = path
        # Functions of SIGNATURES the library does not export; calling one raises.
        self.missing = []
        last_error = getattr(cdll, "mt_last_error", None)
        if last_error is not None:
            last_error.argtypes = ()
            last_error.restype = c_char_p

        def fail(status, name, args):
            """Raises the error of a non-zero status of mt_ function `name` called on args."""
            raw = last_error() if last_error is not None else b""
            message = (raw or b"").decode("utf-8", "replace")
            if not message.startswith(name):
                # Every message starts with the failing function's name; anything else
                # is left over from an earlier failure.
                message = ""
            if any(getattr(a, "closed", False) is True for a in args):
                message += " (a tensor passed to %s has been closed)" % name
            raise error_for_status(status, message, name)

        def errcheck(status, func, args):
            if status != 0:
                fail(status, func.__name__, args)
            return status

        self.fail = fail

        for name, result, params in SIGNATURES:
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                self.missing.append(name)
                setattr(self, name, _missing_function(name, path))
                continue
            fn.argtypes = bound_params(params)
            if result is STATUS:
                fn.restype = c_int32
                fn.errcheck = errcheck
            else:
                fn.restype = result
            setattr(self, name, fn)

    def unchecked(self, name):
        """A second ctypes object for the mt_ function `name` (a STATUS function of
        SIGNATURES) that returns its status as an int instead of raising: for callers that
        ignore failures anyway, such as Tensor.__del__, which then skip the Python-level
        status check of every call (about 0.1 us on the CPU backend), and for hot paths that
        test the status themselves and call fail(status, name, args) when it is not 0."""
        fn = getattr(self, name)
        if name in self.missing:
            return fn
        raw = self._cdll[name]            # item access makes a new object; attributes are cached
        raw.argtypes, raw.restype = fn.argtypes, fn.restype
        return raw

    def __repr__(self):
        return "<minitorch library %s>" % self.path


def _missing_function(name, path):
    def missing(*args):
        from ._errors import UnsupportedError
        raise UnsupportedError("%s is not exported by %s (a library older than abi/minitorch.h?)"
                               % (name, path), function=name)
    missing.__name__ = name
    return missing


def repo_library_path():
    """build/libminitorch.so of the repository holding this package (may not exist)."""
    here = os.path.dirname(os.path.abspath(__file__))      # frontends/python/minitorch
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    return os.path.join(root, "build", "libminitorch.so")


def candidate_paths(environ=None):
    """The paths load() tries, in order (see the module docstring)."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("MINITORCH_LIB")
    if explicit:
        return [explicit]
    paths = []
    repo = repo_library_path()
    if os.path.exists(repo):
        paths.append(repo)
    found = ctypes.util.find_library("minitorch")
    if found:
        paths.append(found)
    paths.append("libminitorch.so")
    return paths


def check_abi_version(found, path):
    """Raises ImportError unless the library speaks ABI_VERSION."""
    if found != ABI_VERSION:
        raise ImportError(
            "minitorch: %s reports ABI version %d, but this Python package was written for ABI "
            "version %d. Rebuild the library from the same source tree (make lib) or point "
            "MINITORCH_LIB at a matching libminitorch.so." % (path, found, ABI_VERSION))


def load(environ=None):
    environ = os.environ if environ is None else environ
    errors = []
    for path in candidate_paths(environ):
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            errors.append("  %s: %s" % (path, e))
            continue
        try:
            abi_version = cdll.mt_abi_version
        except AttributeError:
            raise ImportError("minitorch: %s does not export mt_abi_version; it is not libminitorch.so"
                              % path) from None
        abi_version.argtypes = ()
        abi_version.restype = c_int64
        check_abi_version(abi_version(), path)
        return Library(cdll, path)
    hint = ("MINITORCH_LIB is set, so nothing else was tried" if environ.get("MINITORCH_LIB")
            else "build it with `make lib` (CPU only: `make lib CUDA=0`) or set MINITORCH_LIB "
                 "to the path of libminitorch.so")
    raise ImportError("minitorch: could not load libminitorch.so; %s.\nTried:\n%s"
                      % (hint, "\n".join(errors)))


lib = load()
