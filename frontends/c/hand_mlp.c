/* hand_mlp.c - Linear(2,3) -> Sigmoid -> Linear(3,1) with hand-set weights on the
 * input [[1,2],[3,4]]; prints the two outputs. */
#include "common.h"

int main(void) {
  const float x[4] = {1, 2, 3, 4};
  const float w1[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, b1[3] = {0.1f, 0.2f, 0.3f};
  const float w2[3] = {0.7f, 0.8f, 0.9f}, b2[1] = {0.1f};
  const int64_t xs[2] = {2, 2}, w1s[2] = {3, 2}, b1s[1] = {3}, w2s[2] = {1, 3}, b2s[1] = {1};
  mt_device dev = mt_default_device();
  mt_tensor *tx, *tw1, *tb1, *tw2, *tb2, *h, *a, *y;
  float out[2];
  CHECK(mt_tensor_from_data(&tx, x, xs, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&tw1, w1, w1s, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&tb1, b1, b1s, 1, MT_F32, dev));
  CHECK(mt_tensor_from_data(&tw2, w2, w2s, 2, MT_F32, dev));
  CHECK(mt_tensor_from_data(&tb2, b2, b2s, 1, MT_F32, dev));
  CHECK(mt_linear(&h, tx, tw1, tb1));
  CHECK(mt_sigmoid(&a, h));
  CHECK(mt_linear(&y, a, tw2, tb2));
  CHECK(mt_tensor_copy_to_host(y, out, sizeof out));
  printf("output %.7f %.7f\n", out[0], out[1]);
  mt_tensor_release(tx); mt_tensor_release(tw1); mt_tensor_release(tb1);
  mt_tensor_release(tw2); mt_tensor_release(tb2);
  mt_tensor_release(h); mt_tensor_release(a); mt_tensor_release(y);
  return mt_live_tensors() == 0 ? 0 : 1;
}
