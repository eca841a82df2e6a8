#!/usr/bin/env python3
"""gen_fa_wgmma.py - writes backend/cuda/attention/fa_wgmma_ops.inc, the inline-assembly
wrappers of the Hopper warpgroup MMA (wgmma.mma_async m64nNk16, f32 accumulators) that the
FlashAttention wgmma kernels use: A from shared memory (SS) or from registers (RS), B from
shared memory, N = 64 and 128, bf16 and f16; and the TF32 ones (m64nNk8, both operands
K-major, the only layout TF32 has) of the float32 GEMM (gemm_f32_wgmma.cu) and the float32
attention (attention_f32_wgmma.cu, which also takes N = 32 from registers). Every accumulator
register is an asm operand, so the list is long; it is generated rather than typed.

    python3 scripts/gen_fa_wgmma.py           (rewrites the file; commit the result)
    python3 scripts/gen_fa_wgmma.py --check   (exit 1 if the committed file differs from its output)
"""
import argparse
import os
import sys

TYPES = (("__nv_bfloat16", "bf16"), ("__half", "f16"))


def regs(a, b):
    return ", ".join("%%%d" % i for i in range(a, b))


def accs(n):
    return ", ".join('"+f"(d[%d])' % i for i in range(n))


def asm(n, rs, ptx, k, trans, indent):
    """The asm statement of one wgmma; trans: TRANS_B template operands, and TRANS_A with A in
    shared memory (16-bit types only)."""
    nr, pad = n // 2, " " * indent
    if rs:  # operands after the accumulators: a[0..3], db, accumulate (, TRANS_B)
        args = "{%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1" % (nr, nr + 1, nr + 2, nr + 3, nr + 4)
        pred, operands = nr + 5, '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate)'
        args += ", %%%d" % (nr + 6) if trans else ""
    else:  # da, db, accumulate (, TRANS_A, TRANS_B)
        args = "%%%d, %%%d, p, 1, 1" % (nr, nr + 1)
        pred, operands = nr + 2, '"l"(da), "l"(db), "r"(accumulate)'
        args += ", %%%d, %%%d" % (nr + 3, nr + 4) if trans else ""
        operands += ', "n"(TRANS_A)' if trans else ""
    operands += ', "n"(TRANS_B)' if trans else ""
    return [pad + "asm volatile(",
            pad + '    "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % pred,
            pad + '    "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s "' % (n, k, ptx, ptx),
            pad + '    "{%s}, "' % regs(0, nr),
            pad + '    "%s;\\n}\\n"' % args,
            pad + "    : %s" % accs(nr),
            pad + "    : %s" % operands,
            pad + '    : "memory");']


def function(n, rs):
    """wgmma_ss_n<n> / wgmma_rs_n<n> for bf16 and f16 (k16, B K- or N-major)."""
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
        out.append("// (16 x %d) in shared memory (descs da, db), A K-major (TRANS_A 0) or M-major (1), B K-major" % n)
        out.append("// (TRANS_B 0) or N-major (1).")
        out.append("template <class T, int TRANS_B, int TRANS_A = 0>")
        out.append("__device__ __forceinline__ void wgmma_ss_n%d(float (&d)[%d], uint64_t da, uint64_t db, "
                   "int accumulate) {" % (n, nr))
    for i, (ctype, ptx) in enumerate(TYPES):
        out.append("  %sif constexpr (std::is_same<T, %s>::value) {" % ("" if i == 0 else "} else ", ctype))
        out.extend(asm(n, rs, ptx, 16, True, 4))
    out.append("  }")
    out.append("}")
    return out


def tf32_function(n, rs):
    """wgmma_ss_tf32_n<n> / wgmma_rs_tf32_n<n> (k8; TF32 reads both operands K-major only)."""
    nr = n // 2
    if rs:
        out = ["// D (64 x %d f32, %d per thread) = A * B (+ D when accumulate != 0), TF32; A (64 x 8) in" % (n, nr),
               "// registers (each warp's 16 rows as the m16n8k8 TF32 A fragment), B (8 x %d) in shared" % n,
               "// memory (desc db), K-major.",
               "__device__ __forceinline__ void wgmma_rs_tf32_n%d(float (&d)[%d], const uint32_t (&a)[4], "
               "uint64_t db, int accumulate) {" % (n, nr)]
    else:
        out = ["// D (64 x %d f32, %d per thread) = A * B (+ D when accumulate != 0), TF32; A (64 x 8) and" % (n, nr),
               "// B (8 x %d) in shared memory (descs da, db), both K-major." % n,
               "__device__ __forceinline__ void wgmma_ss_tf32_n%d(float (&d)[%d], uint64_t da, uint64_t db, "
               "int accumulate) {" % (n, nr)]
    return out + asm(n, rs, "tf32", 8, False, 2) + ["}"]


def main():
    ap = argparse.ArgumentParser(description="Writes backend/cuda/attention/fa_wgmma_ops.inc (the wgmma wrappers).")
    ap.add_argument("--check", action="store_true", help="compare with the file instead of writing it; exit 1 if stale")
    args = ap.parse_args()
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
    out.extend(tf32_function(32, rs=True))  # attention_f32_wgmma.cu's products over the head dim 32
    out.append("")
    path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "backend", "cuda",
                                         "attention", "fa_wgmma_ops.inc"))
    text = "\n".join(out)
    if args.check:
        try:
            with open(path) as f:
                same = f.read() == text
        except OSError as e:
            sys.exit("gen_fa_wgmma.py: cannot read %s: %s" % (path, e))
        if not same:
            sys.exit("gen_fa_wgmma.py: %s is stale: run python3 scripts/gen_fa_wgmma.py and commit it" % path)
        print(path, "is up to date")
        return
    with open(path, "w") as f:
        f.write(text)
    print("wrote", path)


if __name__ == "__main__":
    main()
