"""Parameter: a Tensor that a Module registers and an optimizer updates."""

from .._lib import lib
from .._core import _new
from .._tensor import Tensor


class Parameter(Tensor):
    """Parameter(data, requires_grad=True): a leaf on data's storage (data is not changed)."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from .._factory import zeros
            data = zeros(0)
        if not isinstance(data, Tensor):
            raise TypeError("Parameter expects a Tensor, got %s" % type(data).__name__)
        leaf = _new(lib.mt_tensor_detach, data)
        p = cls._from_handle(leaf._h)
        leaf._h = None                       # the handle now belongs to p
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self):
        return (Parameter, (Tensor.detach(self), self.requires_grad))
