"""Module, Sequential and ModuleList: containers of parameters, buffers and submodules,
with torch.nn.Module's names and behaviour."""

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from .._factory import tensor as _to_tensor
from .._tensor import Tensor
from ..autograd import no_grad
from .parameter import Parameter

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of every layer. Subclasses set attributes in __init__ (after calling
    super().__init__()) and define forward(); calling the module calls forward."""

    training = True

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError('Module [%s] is missing the required "forward" function'
                                  % type(self).__name__)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------ attributes

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name)
            params[name] = value
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name)
            self._modules[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError("cannot assign '%s' as parameter '%s' (minitorch.nn.Parameter or None "
                                "expected)" % (type(value).__name__, name))
            params[name] = None
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError("cannot assign '%s' as child module '%s' (minitorch.nn.Module or None "
                                "expected)" % (type(value).__name__, name))
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError("cannot assign '%s' as buffer '%s' (minitorch.Tensor or None expected)"
                                % (type(value).__name__, name))
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name):
        self.__dict__.pop(name, None)
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        self._non_persistent.discard(name)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            t = d.get(table)
            if t is not None and name in t:
                return t[name]
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    @staticmethod
    def _check_name(kind, name):
        """torch's rules for a registered name: a non-empty str without '.' (state_dict keys and
        named_* walks join names with dots)."""
        if not isinstance(name, str):
            raise TypeError("%s name should be a string, got %s" % (kind, type(name).__name__))
        if not name or "." in name:
            raise KeyError("%s name must be non-empty and hold no dot, got %r" % (kind, name))

    def register_parameter(self, name, param):
        self._check_name("parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError("cannot assign '%s' object to parameter '%s' (minitorch.nn.Parameter or "
                            "None required)" % (type(param).__name__, name))
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._check_name("buffer", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError("cannot assign '%s' object to buffer '%s' (minitorch.Tensor or None "
                            "required)" % (type(tensor).__name__, name))
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        self._check_name("module", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError("%s is not a Module subclass" % type(module).__name__)
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # ----------------------------------------------------------------- walks

    def named_modules(self, memo=None, prefix=""):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, table, prefix, recurse):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, v in getattr(m, table).items():
                if v is None or id(v) in seen:
                    continue
                seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + name, v

    def named_parameters(self, prefix="", recurse=True):
        """(name, Parameter) pairs, each parameter once, in registration order."""
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ----------------------------------------------------------------- state

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """OrderedDict name -> tensor of every parameter and persistent buffer. The tensors
        share storage with the module's (detached unless keep_vars)."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies values into the existing parameters and buffers (in place, so optimizers
        keep working). strict: every key must match both ways, else RuntimeError."""
        if not isinstance(state_dict, Mapping):
            raise TypeError("Expected state_dict to be dict-like, got %s" % type(state_dict).__name__)
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: %s. "
                              % ", ".join('"%s"' % k for k in unexpected))
            if missing:
                errors.append("Missing key(s) in state_dict: %s. " % ", ".join('"%s"' % k for k in missing))
        for k, target in own.items():
            if k not in state_dict:
                continue
            value = state_dict[k]
            if not isinstance(value, Tensor):
                value = _to_tensor(value, dtype=target.dtype)
            if tuple(value.shape) != tuple(target.shape):
                errors.append("size mismatch for %s: copying a param with shape %s from checkpoint, the "
                              "shape in current model is %s." % (k, value.shape, target.shape))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s"
                               % (type(self).__name__, "\n\t".join(errors)))
        with no_grad():
            for k, target in own.items():
                if k in state_dict:
                    value = state_dict[k]
                    if not isinstance(value, Tensor):
                        value = _to_tensor(value, dtype=target.dtype)
                    target.copy_(value)
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ modes

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Drops every parameter's gradient (set_to_none=True, as torch), or zeroes it in place."""
        for p in self.parameters():
            if set_to_none:
                p._clear_grad()
            else:
                p._zero_grad()

    # ---------------------------------------------------------- device/dtype

    def to(self, *args, **kwargs):
        """Moves/casts parameters and buffers. Parameters that change become new Parameter
        objects, so build optimizers after calling to()."""
        for m in self.modules():
            for name, p in list(m._parameters.items()):
                if p is None:
                    continue
                moved = p.to(*args, **kwargs)
                if moved is not p:
                    m._parameters[name] = Parameter(moved, requires_grad=p.requires_grad)
            for name, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[name] = b.to(*args, **kwargs)
        return self

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def float(self):
        from .. import _dtype
        return self.to(_dtype.float32)

    def double(self):
        from .. import _dtype
        return self.to(_dtype.float64)

    # ------------------------------------------------------------------- repr

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            mod = repr(m).replace("\n", "\n  ")
            lines.append("(" + name + "): " + mod)
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


class Sequential(Module):
    """Sequential(m1, m2, ...) or Sequential(OrderedDict(name=module)): runs them in order."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        items = list(self._modules.values())
        return items[idx]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules whose parameters the parent module sees."""

    def __init__(self, modules=None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        items = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(items[idx])
        return items[idx]
