"""In-place ops of Tensor: copy_, zero_, fill_, add_/sub_/mul_/div_, uniform_, normal_
and the augmented operators (+= ...).

The tape cannot record an in-place op, so they run only when grad mode is off or no
tensor involved requires grad (torch's rule for leaves, applied to every tensor). They
write through the storage pointer, so views of the same storage see the change."""

import ctypes

from . import _core
from ._core import _full, _int64_array, _is_scalar, _new
from ._lib import lib
from .autograd import is_grad_enabled, no_grad


class InplaceMixin:
    # --------------------------------------------------------------- in-place

    def _check_inplace(self, *others):
        if is_grad_enabled() and (self.requires_grad or any(
                isinstance(o, _core.Tensor) and o.requires_grad for o in others)):
            raise RuntimeError(
                "in-place operations on tensors that require grad are not recorded on the tape; "
                "wrap the update in `with minitorch.no_grad():`")

    def _write(self, src, byte_offset=0, region=None):
        """Overwrites elements with src, a number or a tensor broadcast to region (default: the
        whole tensor), starting byte_offset bytes into this tensor's storage. Views of the same
        storage see the change. Call with grad mode off."""
        shape = tuple(self.shape if region is None else region)
        if _is_scalar(src):  # made at the shape (_core._full): any dtype, nothing read back
            src = _full(shape, src, self.dtype, self.device)
        if not self.dtype.is_floating_point and src.dtype.is_floating_point:
            raise TypeError("result type %s can't be cast to the desired output type %s"
                            % (src.dtype.name, self.dtype.name))
        src = src.to(self.device, self.dtype)
        add_broadcasts = self.dtype.is_floating_point and self.dtype.itemsize >= 4  # float32, float64
        if tuple(src.shape) != shape and src.numel() == 1 and not add_broadcasts:
            # a one-element tensor over an integer or half tensor: mt_add below broadcasts
            # float32/float64 only, so the value is read back and made at the shape
            src = _full(shape, src.item(), self.dtype, self.device)
        if tuple(src.shape) != shape:
            dims, n = _int64_array(shape)
            zeros = _new(lib.mt_tensor_zeros, dims, n, self.dtype.code, self.device.code)
            grown = _new(lib.mt_add, src, zeros)
            if tuple(grown.shape) != shape:
                raise ValueError("output with shape %s doesn't match the broadcast shape %s"
                                 % (list(shape), list(grown.shape)))
            src = grown
        nbytes = src.numel() * self.dtype.itemsize
        if nbytes == 0:
            return self
        dst, s = self.data_ptr() + byte_offset, src.data_ptr()
        if self.device.type == "cpu":
            ctypes.memmove(dst, s, nbytes)
        else:
            lib.mt_memcpy_d2d(dst, s, nbytes)
        return self

    def _inplace(self, compute, *others):
        self._check_inplace(*others)
        with no_grad():
            return self._write(compute())

    def copy_(self, src):
        """Copies src's values (broadcast, converted to this dtype and device) into self."""
        if not isinstance(src, _core.Tensor):
            raise TypeError("copy_() expects a Tensor, got %s" % type(src).__name__)
        return self._inplace(lambda: src, src)

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        # a number is made at the shape with nothing read back (_write); a tensor value is read
        if not (_is_scalar(value) or isinstance(value, _core.Tensor)):  # float("1") took a str
            raise TypeError("fill_() expects a number or a one-element Tensor, got %s" % type(value).__name__)
        return self._inplace(lambda: value if _is_scalar(value) else float(value))

    def add_(self, other, alpha=1):
        return self._inplace(lambda: self.add(other, alpha=alpha), other)

    def sub_(self, other, alpha=1):
        return self._inplace(lambda: self.sub(other, alpha=alpha), other)

    def mul_(self, other):
        return self._inplace(lambda: self.mul(other), other)

    def div_(self, other):
        return self._inplace(lambda: self.div(other), other)

    def _init(self, fn, *args, generator=None):
        from ._factory import default_generator
        self._check_inplace()
        gen = default_generator if generator is None else generator
        fn(self, *args, gen.next_seed())
        return self

    def uniform_(self, a=0.0, b=1.0, generator=None):
        """Fills with values uniform on [a, b) (mt_init_uniform, seeded by the generator)."""
        return self._init(lib.mt_init_uniform, float(a), float(b), generator=generator)

    def normal_(self, mean=0.0, std=1.0, generator=None):
        return self._init(lib.mt_init_normal, float(mean), float(std), generator=generator)

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)
