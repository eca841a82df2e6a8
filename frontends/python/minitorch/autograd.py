"""Grad mode and the tape.

minitorch records ops on a per-thread tape while grad mode is on and an input requires
grad; Tensor.backward() walks it in reverse and then clears it. A forward pass that is
never followed by backward() keeps its tape entries (and the tensors they hold) alive,
so evaluation code belongs under no_grad(), or the tape is dropped with clear_tape().
"""

import functools

from ._lib import lib

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "tape_size",
           "clear_tape", "backward"]


def is_grad_enabled():
    """True when ops are recorded on this thread's tape."""
    return bool(lib.mt_is_grad_enabled())


class _GradMode:
    """Context manager and decorator that sets grad mode, restoring the previous one."""

    _enabled = None

    def __init__(self):
        self._saved = []

    def __enter__(self):
        self._saved.append(lib.mt_set_grad_enabled(self._enabled))
        return self

    def __exit__(self, *exc):
        lib.mt_set_grad_enabled(self._saved.pop())
        return False

    def __call__(self, fn):
        cls = type(self)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with cls():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Ops run inside do not record on the tape: `with minitorch.no_grad(): ...` or @no_grad()."""
    _enabled = 0


class enable_grad(_GradMode):
    """Turns recording back on inside a no_grad() region."""
    _enabled = 1


class set_grad_enabled:
    """set_grad_enabled(mode): sets grad mode now; used with `with`, restores it on exit."""

    def __init__(self, mode):
        if not isinstance(mode, bool):  # "no" is truthy
            raise TypeError("set_grad_enabled(): mode must be a bool, got %s" % type(mode).__name__)
        self._prev = lib.mt_set_grad_enabled(1 if mode else 0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.mt_set_grad_enabled(self._prev)
        return False


def tape_size():
    """Entries on this thread's tape now."""
    return int(lib.mt_tape_size())


def clear_tape():
    """Drops every recorded entry without running backward."""
    lib.mt_tape_clear()


def backward(tensor, grad_tensor=None):
    """minitorch.autograd.backward(loss) is loss.backward()."""
    from ._tensor import Tensor
    if not isinstance(tensor, Tensor):
        raise TypeError("backward(): argument 'tensor' must be a Tensor, not %s" % type(tensor).__name__)
    tensor.backward(grad_tensor)
