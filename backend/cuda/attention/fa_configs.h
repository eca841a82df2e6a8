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

// Generation 5 (fa_v5: the Hopper forward on wgmma, fa_forward_wgmma.cuh, sm_90a only) runs
// row `config` of its head dim's table; its backward is production's:
//   X(index, key tile BC, warpgroups (BR = 64 per warpgroup))
#define MT_FA_WGMMA_D64(X) \
  X(0, 128, 2)             \
  X(1, 128, 3)             \
  X(2, 64, 2)

#define MT_FA_WGMMA_D128(X) \
  X(0, 128, 2)              \
  X(1, 64, 2)               \
  X(2, 64, 3)

namespace mt {
namespace cuda {
namespace fa {

constexpr int kNumTunedConfigs = 4;  // rows of each tuned table above
constexpr int kNumWgmmaConfigs = 3;  // rows of each wgmma table above
constexpr int kNumGenerations = 5;   // 1 fa_v1, 2 fa_v2, 3 fa_v3, 4 tuned, 5 fa_v5 (wgmma)

// Production (generation 0): generation 4 with the rows tune_attention.py measured best
// (H200, bf16, 2026-11-26; docs/flash_attention.md): row 1 for both head dims, forward
// (264 / 262 TFLOP/s geomean at D 64 / 128) and backward (dQ by a separate pass: 113 / 115
// TFLOP/s against 77 / 82 with atomics, row 0).
constexpr int default_forward_config(int) { return 1; }
// On a compute capability 9.0 device production's forward is generation 5 (wgmma), row 0 of
// both head dims (BC 128, 2 warpgroups: 323 / 411 TFLOP/s geomean at D 64 / 128 on the H200,
// 2026-11-26, against tuned row 1's 265 / 261 and PyTorch flash's 277 / 324).
constexpr int default_wgmma_config(int) { return 0; }
constexpr int default_backward_config(int) { return 1; }
template <int D>
constexpr int kGenBackwardBR = D == 64 ? 64 : 32;

// The generation and row a launch uses: the study selection (mt_study_flash_config), or
// production when it is 0. Read by the launchers of flash_forward.cu / flash_backward.cu.
struct Selection {
  int generation;
  int config;
};
Selection selected(bool forward, int d);

}  // namespace fa
}  // namespace cuda
}  // namespace mt
