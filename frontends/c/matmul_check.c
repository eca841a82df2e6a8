/* matmul_check.c - a random 128x64 @ 64x128 product on the default device against
 * a triple loop on the host; prints the largest absolute difference. */
#include <math.h>

#include "common.h"

enum { M = 128, K = 64, N = 128 };

int main(void) {
  static float a[M * K], b[K * N], c[M * N];
  const int64_t as[2] = {M, K}, bs[2] = {K, N};
  mt_device dev = mt_default_device();
  mt_tensor *ta, *tb, *tc;
  double max_err = 0;
  int i, j, p;
  CHECK(mt_tensor_randn(&ta, as, 2, 11, MT_F32, dev));
  CHECK(mt_tensor_randn(&tb, bs, 2, 12, MT_F32, dev));
  CHECK(mt_matmul(&tc, ta, tb));
  CHECK(mt_tensor_copy_to_host(ta, a, sizeof a));
  CHECK(mt_tensor_copy_to_host(tb, b, sizeof b));
  CHECK(mt_tensor_copy_to_host(tc, c, sizeof c));
  for (i = 0; i < M; i++)
    for (j = 0; j < N; j++) {
      double ref = 0;
      for (p = 0; p < K; p++) ref += (double)a[i * K + p] * b[p * N + j];
      if (fabs(ref - c[i * N + j]) > max_err) max_err = fabs(ref - c[i * N + j]);
    }
  printf("%dx%d @ %dx%d on %s\n", M, K, K, N, mt_device_name(dev));
  printf("max abs error %.3g\n", max_err);
  mt_tensor_release(ta);
  mt_tensor_release(tb);
  mt_tensor_release(tc);
  return max_err < 1e-4 && mt_live_tensors() == 0 ? 0 : 1;
}
