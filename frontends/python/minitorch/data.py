"""minitorch.data: dataset files read by the library (IDX for MNIST, TSV tables)."""

import operator
import os
from ctypes import byref, c_void_p

from . import _dtype as D
from ._core import _new
from ._lib import lib
from ._tensor import Tensor


def load_idx(path, device=None):
    """An IDX file (MNIST's format, raw or gzip) as a tensor of the file's dims: uint8 for
    bytes, int32 for int16/int32, float32/float64 for floats (mt_load_idx)."""
    return _new(lib.mt_load_idx, os.fsencode(path), D.as_device(device).code)


def load_tsv(path, columns, target_column, device=None):
    """A headerless tab-separated table -> (features float32 [rows, F], targets float32
    [rows, 1]). columns: "<index>:<kind>" items (kind num, cat = one-hot, date = day of
    year), as a comma-separated string or a list (mt_load_tsv)."""
    if not isinstance(columns, str):
        columns = ",".join(columns)
    features, targets = c_void_p(), c_void_p()
    lib.mt_load_tsv(byref(features), byref(targets), os.fsencode(path), columns.encode(),
                    operator.index(target_column), D.as_device(device).code)
    return Tensor._from_handle(features.value), Tensor._from_handle(targets.value)
