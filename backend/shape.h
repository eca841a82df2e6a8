// shape.h - shape arithmetic both backends and autograd share: numpy
// broadcasting, folding broadcast plans, printing shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "small_vector.h"

namespace mt {

// Sizes of a tensor's dims, outermost first. Inline up to kMaxDims (every tensor's shape), so
// building one on an op's path allocates nothing; vector-like, and converts to and from
// std::vector<int64_t>.
using Shape = SmallVector<int64_t, kMaxDims>;

int64_t shape_numel(const Shape &s);
// The most elements a tensor may have: 2^60, so that its byte count (8 bytes an element at most),
// its strides and every index stay within int64.
constexpr int64_t kMaxNumel = int64_t(1) << 60;
// Whether the product of s's sizes, with 0 counted as 1 (a zero-size tensor still has strides),
// is at most kMaxNumel; s's sizes must be >= 0. Callers check it before shape_numel on a shape
// from outside (the ABI, a file, a DLPack capsule).
bool shape_fits(const Shape &s);
std::string shape_str(const Shape &s);  // "[3,4]"; "[]" for a scalar
// The numpy broadcast of a and b; throws Error(SHAPE) naming both when they do not broadcast.
Shape broadcast_shapes(const Shape &a, const Shape &b);
// A plan for out = f(a, b) where out has shape `out` and a, b broadcast to it.
BroadcastPlan make_broadcast_plan(const Shape &out, const Shape &a, const Shape &b);
// Row-major strides in elements.
Shape contiguous_strides(const Shape &s);
// Wraps a possibly negative dim into [0, ndim); throws Error(INVALID_ARGUMENT) when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim);

}  // namespace mt
