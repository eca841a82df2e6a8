// ops_fused.cpp - placeholder: the fused family's forward ops and backward rules land here.
#include "ops.h"

namespace mt {

void backward_fused(const Node &node, const Ref &, std::vector<Ref> &) {
  fail(Code::INTERNAL, "internal error, please report: no backward rule for %s", op_name(node.op));
}

}  // namespace mt
