#!/usr/bin/env python3
"""gen_fa_wgmma.py - writes backend/cuda/attention/fa_wgmma_ops.inc, the inline-assembly
wrappers of the Hopper warpgroup MMA (wgmma.mma_async m64nNk16, f32 accumulators) that the
FlashAttention wgmma kernels use: A from shared memory (SS) or from registers (RS), B from
shared memory, N = 64 and 128, bf16 and f16; and the TF32 ones (m64nNk8, both operands
K-major, the only layout TF32 has) of the float32 GEMM (gemm_f32_wgmma.cu). Every accumulator
register is an asm operand, so the list is long; it is generated rather than typed.

    python3 scripts/gen_fa_wgmma.py     (rewrites the file; commit the result)
"""
import os

TYPES = (("__nv_bfloat16", "bf16"), ("__half", "f16"))


def regs(a, b):
    return ", ".join("%%%d" % i for i in range(a, b))


def accs(n):
    return ", ".join('"+f"(d[%d])' % i for i in range(n))


def body(n, ptx_type, rs):
    nr = n // 2
    lines = ["    asm volatile("]
    if rs:
        lines.append('        "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % (nr + 5))
        lines.append('        "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "' % (n, ptx_type, ptx_type))
        lines.append('        "{%s}, "' % regs(0, nr))
        lines.append('        "{%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1, %%%d;\\n}\\n"' % (nr, nr + 1, nr + 2, nr + 3,
                                                                                     nr + 4, nr + 6))
        lines.append("        : %s" % accs(nr))
        lines.append('        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TRANS_B)')
        lines.append('        : "memory");')
    else:
        lines.append('        "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % (nr + 2))
        lines.append('        "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "' % (n, ptx_type, ptx_type))
        lines.append('        "{%s}, "' % regs(0, nr))
        lines.append('        "%%%d, %%%d, p, 1, 1, 0, %%%d;\\n}\\n"' % (nr, nr + 1, nr + 3))
        lines.append("        : %s" % accs(nr))
        lines.append('        : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B)')
        lines.append('        : "memory");')
    return lines


def function(n, rs):
    nr = n // 2
    out = []
    if rs:
        out.append("// D (64 x %d f32, %d per thread) = A * B (+ D when accumulate != 0); A (64 x 16) in" % (n, nr))
        out.append("// registers (each warp's 16 rows as the m16n8k16 A fragment), B (16 x %d) in shared memory" % n)
        out.append("// (desc db), K-major (TRANS_B 0) or N-major (1).")
        out.append("template <class T, int TRANS_B>")
        out.append("__device__ __forceinline__ void wgmma_rs_n%d(float (&d)[%d], const uint32_t (&a)[4], uint64_t db, "
                   "int accumulate) {" % (n, nr))
    else:
        out.append("// D (64 x %d f32, %d per thread) = A * B (+ D when accumulate != 0); A (64 x 16) and B" % (n, nr))
        out.append("// (16 x %d) in shared memory (descs da, db), A K-major, B K-major (TRANS_B 0) or N-major (1)." % n)
        out.append("template <class T, int TRANS_B>")
        out.append("__device__ __forceinline__ void wgmma_ss_n%d(float (&d)[%d], uint64_t da, uint64_t db, "
                   "int accumulate) {" % (n, nr))
    for i, (ctype, ptx) in enumerate(TYPES):
        out.append("  %sif constexpr (std::is_same<T, %s>::value) {" % ("" if i == 0 else "} else ", ctype))
        out.extend(body(n, ptx, rs))
    out.append("  }")
    out.append("}")
    return out


def tf32_function(n, rs):
    """wgmma_ss_tf32_n<n> / wgmma_rs_tf32_n<n>: TF32 takes no transpose operands."""
    nr = n // 2
    out = []
    if rs:
        out.append("// D (64 x %d f32, %d per thread) = A * B (+ D when accumulate != 0), TF32; A (64 x 8) in" % (n, nr))
        out.append("// registers (each warp's 16 rows as the m16n8k8 TF32 A fragment), B (8 x %d) in shared" % n)
        out.append("// memory (desc db), K-major.")
        out.append("__device__ __forceinline__ void wgmma_rs_tf32_n%d(float (&d)[%d], const uint32_t (&a)[4], "
                   "uint64_t db, int accumulate) {" % (n, nr))
        operands = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate)'
        pred, args = nr + 5, "{%%%d, %%%d, %%%d, %%%d}, %%%d" % (nr, nr + 1, nr + 2, nr + 3, nr + 4)
    else:
        out.append("// D (64 x %d f32, %d per thread) = A * B (+ D when accumulate != 0), TF32; A (64 x 8) and" % (n, nr))
        out.append("// B (8 x %d) in shared memory (descs da, db), both K-major." % n)
        out.append("__device__ __forceinline__ void wgmma_ss_tf32_n%d(float (&d)[%d], uint64_t da, uint64_t db, "
                   "int accumulate) {" % (n, nr))
        operands = '"l"(da), "l"(db), "r"(accumulate)'
        pred, args = nr + 2, "%%%d, %%%d" % (nr, nr + 1)
    out.append("  asm volatile(")
    out.append('      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % pred)
    out.append('      "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 "' % n)
    out.append('      "{%s}, "' % regs(0, nr))
    out.append('      "%s, p, 1, 1;\\n}\\n"' % args)
    out.append("      : %s" % accs(nr))
    out.append("      : %s" % operands)
    out.append('      : "memory");')
    out.append("}")
    return out


def main():
    out = ["// fa_wgmma_ops.inc - generated by scripts/gen_fa_wgmma.py; do not edit by hand.",
           "// Included by fa_wgmma.cuh inside namespace mt::cuda::fa (sm_90a only).", ""]
    for n in (64, 128):
        out.extend(function(n, rs=False))
        out.append("")
        out.extend(function(n, rs=True))
        out.append("")
    for n in (64, 128):
        out.extend(tf32_function(n, rs=False))
        out.append("")
        out.extend(tf32_function(n, rs=True))
        out.append("")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "backend", "cuda", "attention",
                        "fa_wgmma_ops.inc")
    with open(path, "w") as f:
        f.write("\n".join(out))
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
