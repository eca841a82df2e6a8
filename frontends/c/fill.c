/* fill.c - a 4x4 tensor filled with 3.14 on the default device, copied back and printed. */
#include "common.h"

int main(void) {
  const int64_t shape[2] = {4, 4};
  mt_device dev = mt_default_device();
  mt_tensor *t;
  float host[16];
  int i, j;
  CHECK(mt_tensor_full(&t, shape, 2, 3.14, MT_F32, dev));
  CHECK(mt_tensor_copy_to_host(t, host, sizeof host));
  printf("4x4 tensor on %s:\n", mt_device_name(dev));
  for (i = 0; i < 4; i++) {
    for (j = 0; j < 4; j++) printf("%s%.2f", j ? " " : "", host[i * 4 + j]);
    printf("\n");
  }
  CHECK(mt_tensor_release(t));
  return mt_live_tensors() == 0 ? 0 : 1;
}
