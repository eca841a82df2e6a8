"""The loader and the C signature table: header sync, ABI version, error translation."""

import ctypes
import os
import re
import subprocess
import sys
import unittest
from ctypes import POINTER, c_char_p, c_double, c_int32, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import HEADER, PACKAGE_DIR, ROOT, TestCase, mt  # noqa: E402

from minitorch import _dtype, _errors, _lib  # noqa: E402
from minitorch._lib import lib  # noqa: E402
from minitorch._tensor import _new  # noqa: E402

# How each C type of the header crosses ctypes. A type missing here fails the test:
# decide its mapping, then add it here and to minitorch/_lib.py.
PARAM_TYPES = {
    "int64_t": c_int64,
    "double": c_double,
    "mt_dtype": c_int32,
    "mt_device": c_int32,
    "mt_status": c_int32,
    "mt_activation": c_int32,
    "mt_tensor*": c_void_p,
    "mt_optimizer*": c_void_p,
    "void*": c_void_p,
    "mt_tensor**": POINTER(c_void_p),
    "mt_tensor*const*": POINTER(c_void_p),
    "mt_optimizer**": POINTER(c_void_p),
    "void**": POINTER(c_void_p),
    "int64_t*": POINTER(c_int64),
    "double*": POINTER(c_double),
    "char*": c_char_p,
    "char*const*": POINTER(c_char_p),
    "mt_dtype*": POINTER(c_int32),
    "mt_device*": POINTER(c_int32),
}
# Opaque handle types (mt_tensor, mt_optimizer, mt_graph, ...) cross as pointers.
for _handle in ("mt_graph",):
    PARAM_TYPES[_handle + "*"] = c_void_p
    PARAM_TYPES[_handle + "**"] = POINTER(c_void_p)
RESULT_TYPES = {
    "mt_status": _lib.STATUS,
    "int64_t": c_int64,
    "char*": c_char_p,
    "mt_device": c_int32,
    "mt_dtype": c_int32,
}


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _norm_type(t):
    """'const mt_tensor *' -> 'mt_tensor*'; keeps an inner const ('mt_tensor *const *')."""
    t = re.sub(r"^\s*const\s+", "", t.strip())
    return re.sub(r"\s+", "", t)


def parse_header(path=HEADER):
    """{name: (result, (params...))} for every MT_API function of the header, as ctypes types."""
    with open(path) as f:
        text = _strip_comments(f.read())
    out = {}
    for m in re.finditer(r"MT_API\s+([^;(]+?)\s*\(([^)]*)\)\s*;", text, flags=re.S):
        head, params = m.group(1), m.group(2)
        hm = re.match(r"(.*?)(\w+)$", head.strip(), flags=re.S)
        result_c, name = _norm_type(hm.group(1)), hm.group(2)
        if result_c not in RESULT_TYPES:
            raise AssertionError("%s: result type %r has no mapping in this test" % (name, result_c))
        ptypes = []
        params = params.strip()
        if params and params != "void":
            for p in params.split(","):
                pm = re.match(r"(.*?)(\w+)$", p.strip(), flags=re.S)
                ptype = _norm_type(pm.group(1))
                if ptype not in PARAM_TYPES:
                    raise AssertionError("%s: parameter type %r has no mapping in this test" % (name, ptype))
                ptypes.append(PARAM_TYPES[ptype])
        out[name] = (RESULT_TYPES[result_c], tuple(ptypes))
    return out


def header_enums(path=HEADER):
    with open(path) as f:
        text = _strip_comments(f.read())
    enums = {k: int(v) for k, v in re.findall(r"\b(MT_[A-Z0-9_]+)\s*=\s*(\d+)", text)}
    defines = {k: int(v) for k, v in re.findall(r"#define\s+(MT_[A-Z_]+)\s+(\d+)", text)}
    return enums, defines


def _type_name(t):
    return t if isinstance(t, str) else t.__name__


class HeaderSyncTest(TestCase):
    """minitorch/_lib.py SIGNATURES must match abi/minitorch.h exactly."""

    def test_every_function_matches_the_header(self):
        header = parse_header()
        self.assertGreater(len(header), 50, "the header parser found too few functions")
        table = {name: (res, tuple(params)) for name, res, params in _lib.SIGNATURES}
        self.assertEqual(len(table), len(_lib.SIGNATURES), "a function is listed twice in SIGNATURES")
        only_header = sorted(set(header) - set(table))
        only_table = sorted(set(table) - set(header))
        self.assertEqual(only_header, [], "functions in abi/minitorch.h missing from minitorch/_lib.py")
        self.assertEqual(only_table, [], "functions in minitorch/_lib.py that abi/minitorch.h lacks")
        for name, (res, params) in header.items():
            t_res, t_params = table[name]
            self.assertIs(t_res, res, "%s: result %s in the table, %s in the header"
                          % (name, _type_name(t_res), _type_name(res)))
            self.assertEqual(len(t_params), len(params), "%s: parameter count differs" % name)
            for i, (a, b) in enumerate(zip(t_params, params)):
                self.assertIs(a, b, "%s: parameter %d is %s in the table, %s in the header"
                              % (name, i, _type_name(a), _type_name(b)))

    def test_table_follows_header_order(self):
        header = list(parse_header())
        self.assertEqual([s[0] for s in _lib.SIGNATURES], header)

    def test_library_exports_every_function(self):
        self.assertEqual(lib.missing, [])
        for name, _, _ in _lib.SIGNATURES:
            self.assertTrue(hasattr(ctypes.CDLL(lib.path), name), name)

    def test_bound_functions_carry_the_declared_types(self):
        for name, res, params in _lib.SIGNATURES:
            if name in lib.missing:
                continue                      # reported by test_library_exports_every_function
            fn = getattr(lib, name)
            # int64_t and const char * parameters are bound through checked conversions
            self.assertEqual(tuple(fn.argtypes), _lib.bound_params(params), name)
            self.assertEqual(len(fn.argtypes), len(params), name)
            for p, b in zip(params, fn.argtypes):
                self.assertTrue(b is p or issubclass(b, p), (name, p, b))
            if res is _lib.STATUS:
                self.assertIs(fn.restype, c_int32, name)
                self.assertIsNotNone(fn.errcheck, name)
            else:
                self.assertIs(fn.restype, res, name)

    def test_enums_and_versions_match_the_header(self):
        enums, defines = header_enums()
        self.assertEqual(defines["MT_ABI_VERSION"], _lib.ABI_VERSION)
        self.assertEqual(lib.mt_abi_version(), _lib.ABI_VERSION)
        version = "%d.%d.%d" % (defines["MT_VERSION_MAJOR"], defines["MT_VERSION_MINOR"],
                                defines["MT_VERSION_PATCH"])
        self.assertEqual(mt.__version__, version)
        for code, name in _errors.STATUS_NAMES.items():
            self.assertEqual(enums[name], code, name)
            self.assertEqual(lib.mt_status_string(code).decode(), name)
        statuses = {k: v for k, v in enums.items() if k.startswith("MT_ERR_") or k == "MT_OK"}
        self.assertEqual(statuses, {n: c for c, n in _errors.STATUS_NAMES.items()})
        dtypes = {k: v for k, v in enums.items()
                  if k in ("MT_F32", "MT_F64", "MT_F16", "MT_BF16", "MT_I32", "MT_I64", "MT_U8")}
        self.assertEqual(len(dtypes), 7)
        self.assertEqual(len(_dtype.ALL_DTYPES), len(dtypes), "a dtype of the header is missing")
        for d in _dtype.ALL_DTYPES:
            self.assertEqual(lib.mt_dtype_name(d.code).decode(), d.name)
            self.assertEqual(lib.mt_dtype_size(d.code), d.itemsize)
        self.assertEqual(enums["MT_F32"], mt.float32.code)
        self.assertEqual(enums["MT_F64"], mt.float64.code)
        self.assertEqual(enums["MT_F16"], mt.float16.code)
        self.assertEqual(enums["MT_BF16"], mt.bfloat16.code)
        self.assertEqual(enums["MT_I32"], mt.int32.code)
        self.assertEqual(enums["MT_I64"], mt.int64.code)
        self.assertEqual(enums["MT_U8"], mt.uint8.code)
        self.assertEqual(enums["MT_CPU"], mt.device("cpu").code)
        self.assertEqual(enums["MT_CUDA"], mt.device("cuda").code)


class LoaderTest(TestCase):
    def test_candidate_order(self):
        self.assertEqual(_lib.candidate_paths({"MINITORCH_LIB": "/x/libminitorch.so"}),
                         ["/x/libminitorch.so"])
        paths = _lib.candidate_paths({})
        repo = os.path.join(ROOT, "build", "libminitorch.so")
        if os.path.exists(repo):
            self.assertEqual(paths[0], repo)
        self.assertEqual(paths[-1], "libminitorch.so")

    def test_abi_mismatch_is_refused_with_a_clear_message(self):
        _lib.check_abi_version(_lib.ABI_VERSION, "/some/libminitorch.so")
        with self.assertRaises(ImportError) as cm:
            _lib.check_abi_version(_lib.ABI_VERSION + 1, "/some/libminitorch.so")
        text = str(cm.exception)
        self.assertIn("/some/libminitorch.so", text)
        self.assertIn("ABI version %d" % (_lib.ABI_VERSION + 1), text)
        self.assertIn("ABI version %d" % _lib.ABI_VERSION, text)

    def test_missing_library_names_what_was_tried(self):
        with self.assertRaises(ImportError) as cm:
            _lib.load({"MINITORCH_LIB": "/nonexistent/libminitorch.so"})
        self.assertIn("/nonexistent/libminitorch.so", str(cm.exception))
        self.assertIn("MINITORCH_LIB", str(cm.exception))

    def test_import_fails_cleanly_in_a_fresh_process(self):
        env = dict(os.environ, MINITORCH_LIB="/nonexistent/libminitorch.so", PYTHONPATH=PACKAGE_DIR)
        r = subprocess.run([sys.executable, "-c", "import minitorch"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError", r.stderr)
        self.assertIn("could not load libminitorch.so", r.stderr)

    def test_library_path_and_version(self):
        self.assertTrue(os.path.exists(mt.library_path()) or "/" not in mt.library_path())
        self.assertRegex(mt.__version__, r"^\d+\.\d+\.\d+$")


class ErrorTranslationTest(TestCase):
    """A failing status becomes the right exception carrying mt_last_error()."""

    def check(self, fn, exc_types, status, needle):
        with self.assertRaises(mt.MinitorchError) as cm:
            fn()
        e = cm.exception
        for t in exc_types:
            self.assertIsInstance(e, t)
        self.assertEqual(e.status, status)
        self.assertEqual(e.status_name, _errors.STATUS_NAMES[status])
        self.assertIn(needle, str(e))
        self.assertEqual(str(e), lib.mt_last_error().decode())
        return e

    def test_shape_is_value_error(self):
        a, b = mt.ones(2, 3), mt.ones(4, 5)
        e = self.check(lambda: a @ b, (ValueError, mt.ShapeError), _errors.MT_ERR_SHAPE, "mt_matmul")
        self.assertEqual(e.function, "mt_matmul")
        self.assertIn("[2,3]", str(e))
        self.check(lambda: a + b, (ValueError,), _errors.MT_ERR_SHAPE, "mt_add")

    def test_invalid_argument_is_value_error(self):
        self.check(lambda: _new(lib.mt_add, None, None), (ValueError, mt.InvalidArgumentError),
                   _errors.MT_ERR_INVALID_ARGUMENT, "mt_add")
        self.check(lambda: mt.zeros(-1), (ValueError,), _errors.MT_ERR_INVALID_ARGUMENT, "negative")

    def test_dtype_is_type_error(self):
        a64 = mt.ones(2, dtype=mt.float64)
        self.check(lambda: _new(lib.mt_add, mt.ones(2), a64), (TypeError, mt.DTypeError),
                   _errors.MT_ERR_DTYPE, "mt_add")
        self.check(lambda: mt.rand(3, dtype=mt.int64), (TypeError,), _errors.MT_ERR_DTYPE, "mt_tensor_rand")

    def test_out_of_memory_is_memory_error(self):
        # 2^42 float32 elements = 16 TiB: more than any host or GPU holds.
        self.check(lambda: mt.zeros(2 ** 42), (MemoryError, mt.OutOfMemoryError),
                   _errors.MT_ERR_OUT_OF_MEMORY, "mt_tensor_zeros")
        self.assertEqual(mt.ones(2).sum().item(), 2.0)   # the library stays usable

    def test_state_is_runtime_error(self):
        self.check(lambda: mt.ones(1).backward(), (RuntimeError, mt.StateError),
                   _errors.MT_ERR_STATE, "mt_backward")

    @unittest.skipIf(mt.cuda.is_available(), "a GPU is usable here")
    def test_device_is_runtime_error(self):
        self.check(lambda: mt.ones(1).to("cuda"), (RuntimeError, mt.DeviceError),
                   _errors.MT_ERR_DEVICE, "mt_tensor_to")

    def test_error_for_every_status(self):
        expected = {1: ValueError, 2: ValueError, 3: TypeError, 4: RuntimeError, 5: MemoryError,
                    6: RuntimeError, 7: RuntimeError, 8: RuntimeError, 9: RuntimeError, 10: RuntimeError,
                    99: RuntimeError}
        for status, base in expected.items():
            e = _errors.error_for_status(status, "boom", "mt_x")
            self.assertIsInstance(e, mt.MinitorchError)
            self.assertIsInstance(e, base)
            self.assertEqual(str(e), "boom")
        self.assertIsInstance(_errors.error_for_status(9, "", "mt_x"), NotImplementedError)
        self.assertIn("mt_x", str(_errors.error_for_status(2, "", "mt_x")))

    def test_no_status_is_dropped(self):
        # every status-returning function raises on failure, even ones called for effect
        with self.assertRaises(ValueError):
            lib.mt_tensor_zero_grad(None)


if __name__ == "__main__":
    unittest.main()
