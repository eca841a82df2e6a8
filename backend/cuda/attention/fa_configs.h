// fa_configs.h - which FlashAttention kernels exist: the one list of instantiated
// configurations (the generations' fixed tiles and the tuned table), and the production
// choice. scripts/bench/tune_attention.py sweeps the tuned rows through
// mt_study_flash_config (flash_attention.cu); docs/flash_attention.md has the results.
//
// Generations 1-3 (fa_v1, fa_v2, fa_v3) run one fixed configuration each:
//   forward BR 64, BC 64, 4 warps; backward BR kGenBackwardBR(D), BC 64, 4 warps, dQ by
//   atomics (BR 32 at D = 128: at 64, dK + dV + S^T + dP^T need more than 255 registers).
// Generation 4 (the tuned kernel: fa_v3's policy, tiles as template parameters) runs the
// row `config` of its head dim's table:
//   X(index, forward BR, BC, warps,  backward BR (query tile), BC (key tile = 16 warps), warps, dQ by atomics)
// The forward gives each warp BR / (16 warps) blocks of 16 query rows (1 or 2); the
// backward keeps dK and dV of 16 key rows per warp in registers (2 x D / 2 f32 per thread).
#pragma once

#include <cstdint>

#define MT_FA_TUNED_D64(X)                    \
  X(0, 64, 64, 4, 64, 64, 4, true)            \
  X(1, 128, 64, 4, 64, 64, 4, false)          \
  X(2, 128, 64, 8, 64, 128, 8, true)          \
  X(3, 128, 128, 8, 32, 64, 4, true)

#define MT_FA_TUNED_D128(X)                   \
  X(0, 64, 64, 4, 32, 64, 4, true)            \
  X(1, 128, 64, 8, 32, 64, 4, false)          \
  X(2, 64, 32, 4, 32, 128, 8, true)           \
  X(3, 128, 32, 8, 64, 64, 4, true)

// Generation 5 (fa_v5: Hopper's warpgroup MMA, fa_forward_wgmma.cuh and fa_backward_wgmma.cuh,
// sm_90a only) runs row `config` of its head dim's table:
//   X(index, forward BC, forward warpgroups (BR = 64 each; with a producer, the consumers),
//     backward key/value pass: query tile BR, warpgroups (BC = 64 keys each),
//     backward dQ pass: key tile BC, warpgroups (BR = 64 queries each),
//     forward stages of a producer warpgroup (0: none), persistent forward (1) or not (0))
// Rows 3 and 4 run the forward with one warpgroup a CTA (BR 64), so that two or more CTAs
// share an SM and one's softmax can run under another's products; their backward is the
// production row's. Rows 5 to 7 run the forward of fa_forward_ws.cuh: a producer warpgroup
// fills a ring of that many key/value stages by TMA and the consumer warpgroups (two, BR 128;
// three in row 7, BR 192) take turns on the tensor cores; their backward is the production
// row's too. Rows 8 to 11 have no dQ pass (a dQ key tile of 0): the key/value pass adds dQ
// itself (FUSED_DQ in fa_backward_wgmma.cuh), by atomics where the dQ warpgroups column is 1
// (kDqAtomic) and by bulk reductions where it is 2 (kDqBulk). Their forward copies row 7 at
// D 64 and row 5 at D 128. Rows 12 and 13 are rows 5 and 7 (at D 128: row 5, and row 5 with BC 64)
// as persistent kernels: a grid of one CTA an SM takes the (query tile, head) items in turn and
// Q has two buffers, one at D 128 BC 128 (the last column, fa_forward_ws.cuh).
#define MT_FA_WGMMA_D64(X)        \
  X(0, 128, 2, 64, 2, 64, 2, 0, 0)   \
  X(1, 128, 3, 128, 1, 128, 1, 0, 0) \
  X(2, 64, 2, 64, 1, 128, 2, 0, 0)   \
  X(3, 128, 1, 128, 1, 128, 1, 0, 0) \
  X(4, 64, 1, 128, 1, 128, 1, 0, 0)  \
  X(5, 128, 2, 128, 1, 128, 1, 3, 0) \
  X(6, 128, 2, 128, 1, 128, 1, 2, 0) \
  X(7, 128, 3, 128, 1, 128, 1, 3, 0) \
  X(8, 128, 3, 128, 1, 0, 1, 3, 0)   \
  X(9, 128, 3, 128, 2, 0, 1, 3, 0)   \
  X(10, 128, 3, 128, 2, 0, 2, 3, 0)  \
  X(11, 128, 3, 128, 1, 0, 2, 3, 0) \
  X(12, 128, 2, 128, 1, 128, 1, 3, 1) \
  X(13, 128, 3, 128, 1, 128, 1, 3, 1)

#define MT_FA_WGMMA_D128(X)    \
  X(0, 128, 2, 64, 2, 64, 2, 0, 0) \
  X(1, 64, 2, 64, 1, 64, 1, 0, 0)  \
  X(2, 64, 3, 64, 1, 64, 3, 0, 0)  \
  X(3, 64, 1, 64, 2, 64, 2, 0, 0)  \
  X(4, 128, 1, 64, 2, 64, 2, 0, 0) \
  X(5, 128, 2, 64, 2, 64, 2, 3, 0) \
  X(6, 64, 2, 64, 2, 64, 2, 3, 0)  \
  X(7, 64, 3, 64, 2, 64, 2, 3, 0)  \
  X(8, 128, 2, 64, 2, 0, 1, 3, 0)  \
  X(9, 128, 2, 64, 1, 0, 1, 3, 0)  \
  X(10, 128, 2, 64, 2, 0, 2, 3, 0) \
  X(11, 128, 2, 64, 1, 0, 2, 3, 0) \
  X(12, 128, 2, 64, 1, 64, 1, 3, 1) \
  X(13, 64, 2, 64, 1, 64, 1, 3, 1)

namespace mt {
namespace cuda {
namespace fa {

constexpr int kNumTunedConfigs = 4;  // rows of each tuned table above
constexpr int kNumWgmmaConfigs = 14;  // rows of each wgmma table above
constexpr int kNumGenerations = 5;   // 1 fa_v1, 2 fa_v2, 3 fa_v3, 4 tuned, 5 fa_v5 (wgmma)

// Production (generation 0): generation 4 with the rows tune_attention.py measured best
// (H200, bf16, 2026-11-26; docs/flash_attention.md): row 1 for both head dims, forward
// (264 / 262 TFLOP/s geomean at D 64 / 128) and backward (dQ by a separate pass: 113 / 115
// TFLOP/s against 77 / 82 with atomics, row 0).
constexpr int default_forward_config(int) { return 1; }
// On a compute capability 9.0 device production is generation 5 (wgmma). Forward: at D 128
// row 5 (the TMA producer and two consumer warpgroups taking turns, BC 128, 3 stages), with
// row 12 (row 5 as a persistent kernel) up to 4096 keys. At D 64 row 4 (BC 64, one warpgroup a
// CTA, four CTAs an SM) below 512 keys without the causal mask and up to 1024 with it; above
// that row 7 (three consumer warpgroups, BR 192), with its persistent form row 13 up to 2048
// keys without the mask and row 12 for 1025-2048 keys with it. The rows' measurements follow,
// in the order they were taken (the end of this comment).
// tune_attention.py on an H200, 2026-11-29, bf16, TFLOP/s (causal second), row 5 against the
// rows production took before (row 0; row 4 at D 64 up to 2048 keys) and torch's cuDNN backend:
//   D 128: T 512 385 / 245 against 320 / 208 (cuDNN 529 / 340); T 4096 613 / 535 against
//     386 / 353 (661 / 570); T 16384 548 / 556 against 451 / 441 (592 / 525); geomean over
//     T 512-16384 461 against 346 (cuDNN 533);
//   D 64: T 2048 364 / 297 against row 4's 344 / 291; T 16384 411 / 414 against row 0's
//     363 / 354 (cuDNN 453 / 452); at T 1024 row 4 keeps 325 / 259 against 329 / 234, at
//     T 512 296 / 214 against 258 / 166.
// (docs/benchmarks.md, "The forward with a TMA producer and warpgroups taking turns".)
// Row 7 at D 64 without the mask, same tool and GPU, 2026-11-29, two runs: T 1024 339 / 339
// against row 4's 327 / 324, T 2048 413 / 406 against row 5's 370 / 366, T 16384 457 / 454
// against 412 / 409 (cuDNN 452-468). With the mask its 192-row tiles lose up to 2048 keys
// (T 1024 207 against row 4's 261) and gain at most 3% above, so causal keeps rows 4 and 5.
// (docs/benchmarks.md, "Three consumer warpgroups at D 64".)
// Backward: row 1 at D 64 (168; row 0: 151), row 0 at D 128 (199), against tuned row 1's
// 112 / 115 (H200, 2026-11-26, tune_attention.py --quick, geomean TFLOP/s).
// Then row 9 at D 64 from 2048 keys (dQ by atomics in the key/value pass): geomean 173 against
// row 1's 160 over T 1024-16384, causal and not, +19% at T 16384, even at T 1024 (H200,
// 2026-11-29, tune_attention.py, two runs); in make bench's shapes forward+backward took 6-12%
// less time from T 2048 and 1-5% more at T 512. Its dQ sums arrive in a varying order, so
// deterministic() keeps row 1. At D 128 the fused rows lost (rows 8 and 10: 179-181 against
// row 0's 186-188). (docs/benchmarks.md, "dQ in the key/value pass".)
// Then row 1 at D 128 up to 1024 keys, since lse and dvec came by cp.async: T 512 161-162 /
// 110-113 against row 0's 155-156 / 96-98, T 1024 183-191 / 150-152 against 172-183 / 133-136
// (causal second); row 0 keeps T 4096 (211-214 against 207-211; causal, row 1's 190-197 lead
// 186-189, but T 2048 was not measured) and T 16384 (220-221 / 219-221 against 213-216 /
// 209-211) (H200, 2026-11-29, tune_attention.py, four rounds over two calls; docs/benchmarks.md,
// "Where the backward's time goes, and lse and dvec by cp.async"). In make bench's shapes causal
// forward+backward at T 512 and 1024 took 8% and 5% less time, and the same without the mask
// (docs/benchmarks.md, "Row 1 at D 128 in make bench, ..."). Then up to 2048 keys: at T 2048
// row 1 gave 200-203 / 174-179 against row 0's 198-201 / 165-169 (H200, 2026-11-29,
// tune_attention.py, three rounds; same section).
// Then row 13 (row 7 as a persistent kernel) at D 64 without the mask from 1024 to 2048 keys:
// tune_attention.py, two runs in one call on an H200, 2026-11-29: T 1024 352-358 against row 7's
// 336-339, T 2048 413-417 against 405-414; from 4096 keys within 0-2% either way. In make bench
// (another call, each against cuDNN in its own process) the forward at T 1024 and 2048 went from
// 1.21x and 1.11x cuDNN's time to 1.14x and 1.07x, and at T 4096-16384 from 1.01-1.08x to
// 1.04-1.09x, so row 7 keeps those. The persistent rows lose where production keeps other rows:
// row 12 against row 5 at T 16384 with the mask 387-395 against 419-422, and at D 128 (fewer
// stages or a 64-key tile) by 5-33% (docs/benchmarks.md, "A persistent forward").
// Then row 12 at D 128 with row 5's 3 stages: Q in one buffer, which the next item's Q takes
// once the item's last scores are in (fa_forward_ws.cuh). tune_attention.py, two rounds in one
// call on an H200, 2026-11-29, row 12 against row 5 (causal second): T 512 445 / 286-289
// against 387-390 / 241-242, T 1024 537-538 / 397-399 against 485-503 / 354-356, T 2048
// 601-602 / 492 against 548-591 / 464-468, T 4096 615-631 / 558-561 against 557-560 /
// 504-538; T 16384 579-593 / 569-604 against 603-614 / 601-606, so row 5 keeps long sequences
// (docs/benchmarks.md, "One Q buffer in the persistent forward at D 128").
// Then row 13 at D 64 without the mask from 512 keys (was 1024): tune_attention.py, two rounds
// on an H200, 2026-11-29: T 512 327-328 against row 4's 304 (row 12 306); T 256 row 4 keeps
// 252-255 against 206-209. make bench's B32 H16 T512 D64 forward, each library in one call:
// 112.2 -> 104.6 us (cuDNN 94 and 91 us in the same processes). Same section.
// Then at D 64 with the mask, row 12 for 1025-2048 keys and row 7 above (were row 5):
// tune_attention.py, two rounds on an H200, 2026-11-29: T 2048 310-311 against row 5's 296-300,
// T 4096 row 7 349-350 against 344-350, T 8192 399 against 376-381, T 16384 421-427 against
// 414-416; row 4 keeps T 1024 (261-263 against row 12's 255). make bench's causal forward, the
// two libraries alternating twice in one call: T 2048 232.5 / 231.6 -> 225.2 / 224.7 us, T 4096
// 393.5 / 396.2 -> 391.4 / 388.3, T 8192 717.0 / 714.8 -> 693.7 / 683.8, T 16384 1.31 -> 1.28 ms
// (docs/benchmarks.md, "Rows 12 and 7 for the causal forward at D 64").
constexpr int default_wgmma_forward_config(int d, int64_t tk, bool causal) {
  if (d != 64) return tk <= 4096 ? 12 : 5;
  if (!causal) return tk < 512 ? 4 : tk <= 2048 ? 13 : 7;
  return tk <= 1024 ? 4 : tk <= 2048 ? 12 : 7;
}
// Then row 8 at D 128 above 8192 keys (dQ by atomics, so not under deterministic()):
// tune_attention.py, two rounds in one call on an H200, 2026-11-29 (causal second): T 16384
// 228-229 / 227 against row 0's 221-222 / 221; T 8192 223 / 207 against 221-222 / 205-207, a
// tie; T 4096 214-215 / 185 against 213-215 / 188-189, so row 0 keeps 2049-8192 keys.
constexpr int default_wgmma_backward_config(int d, int64_t tk, bool deterministic) {
  if (d == 64) return deterministic || tk < 2048 ? 1 : 9;
  return tk <= 2048 ? 1 : deterministic || tk <= 8192 ? 0 : 8;
}
constexpr int default_backward_config(int) { return 1; }
template <int D>
constexpr int kGenBackwardBR = D == 64 ? 64 : 32;

// The generation and row a launch uses for head dim d, tk keys and the mask: the study selection
// (mt_study_flash_config), or production when it is 0. Read by the launchers of
// flash_forward.cu / flash_backward.cu.
struct Selection {
  int generation;
  int config;
};
Selection selected(bool forward, int d, int64_t tk, bool causal);

}  // namespace fa
}  // namespace cuda
}  // namespace mt
