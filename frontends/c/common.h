/* common.h - the error check every demo uses: print the status and mt_last_error(), exit 1. */
#ifndef MINITORCH_DEMO_COMMON_H
#define MINITORCH_DEMO_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "minitorch.h"

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    mt_status s_ = (call);                                                                               \
    if (s_ != MT_OK) {                                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, mt_status_string(s_), mt_last_error());   \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

#endif
