"""Exceptions raised when a call into libminitorch.so fails.

Every fallible C function returns an mt_status; a non-zero status becomes one of
the classes below, carrying the thread's mt_last_error() text. Each class is a
MinitorchError and also the built-in exception a Python user expects:

    MT_ERR_INVALID_ARGUMENT  InvalidArgumentError  ValueError
    MT_ERR_SHAPE             ShapeError            ValueError
    MT_ERR_DTYPE             DTypeError            TypeError
    MT_ERR_DEVICE            DeviceError           RuntimeError
    MT_ERR_OUT_OF_MEMORY     OutOfMemoryError      MemoryError
    MT_ERR_CUDA              CudaError             RuntimeError
    MT_ERR_IO                InputOutputError      RuntimeError
    MT_ERR_STATE             StateError            RuntimeError
    MT_ERR_UNSUPPORTED       UnsupportedError      NotImplementedError (a RuntimeError)
    MT_ERR_INTERNAL          InternalError         RuntimeError
"""

# Status codes of mt_status; they never renumber (checked against the header by a test).
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

STATUS_NAMES = {
    MT_OK: "MT_OK",
    MT_ERR_INVALID_ARGUMENT: "MT_ERR_INVALID_ARGUMENT",
    MT_ERR_SHAPE: "MT_ERR_SHAPE",
    MT_ERR_DTYPE: "MT_ERR_DTYPE",
    MT_ERR_DEVICE: "MT_ERR_DEVICE",
    MT_ERR_OUT_OF_MEMORY: "MT_ERR_OUT_OF_MEMORY",
    MT_ERR_CUDA: "MT_ERR_CUDA",
    MT_ERR_IO: "MT_ERR_IO",
    MT_ERR_STATE: "MT_ERR_STATE",
    MT_ERR_UNSUPPORTED: "MT_ERR_UNSUPPORTED",
    MT_ERR_INTERNAL: "MT_ERR_INTERNAL",
}


class MinitorchError(Exception):
    """Base of every error reported by libminitorch.so.

    Attributes: status (the mt_status code), status_name ("MT_ERR_SHAPE", ...),
    function (the C function that failed, when known).
    """

    status = None

    def __init__(self, message, status=None, function=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.function = function

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status, "MT_ERR_UNKNOWN")


class InvalidArgumentError(MinitorchError, ValueError):
    status = MT_ERR_INVALID_ARGUMENT


class ShapeError(MinitorchError, ValueError):
    status = MT_ERR_SHAPE


class DTypeError(MinitorchError, TypeError):
    status = MT_ERR_DTYPE


class DeviceError(MinitorchError, RuntimeError):
    status = MT_ERR_DEVICE


class OutOfMemoryError(MinitorchError, MemoryError):
    status = MT_ERR_OUT_OF_MEMORY


class CudaError(MinitorchError, RuntimeError):
    status = MT_ERR_CUDA


class InputOutputError(MinitorchError, RuntimeError):
    status = MT_ERR_IO


class StateError(MinitorchError, RuntimeError):
    status = MT_ERR_STATE


class UnsupportedError(MinitorchError, NotImplementedError):
    status = MT_ERR_UNSUPPORTED


class InternalError(MinitorchError, RuntimeError):
    status = MT_ERR_INTERNAL


class UnknownStatusError(MinitorchError, RuntimeError):
    """A status code this package does not know (a newer library?)."""


_BY_STATUS = {
    cls.status: cls
    for cls in (InvalidArgumentError, ShapeError, DTypeError, DeviceError, OutOfMemoryError,
                CudaError, InputOutputError, StateError, UnsupportedError, InternalError)
}


def error_for_status(status, message, function=None):
    """The exception object for a failed call (not raised here)."""
    cls = _BY_STATUS.get(status, UnknownStatusError)
    if not message:
        message = "%s failed with %s" % (function or "a minitorch call",
                                          STATUS_NAMES.get(status, "status %d" % status))
    return cls(message, status=status, function=function)
