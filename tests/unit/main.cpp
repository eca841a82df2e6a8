// main.cpp - the doctest runner for the unit suites; prints the device under test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "minitorch.h"

int main(int argc, char **argv) {
  std::printf("unit tests on %s (%s), minitorch %s\n", mt_default_device() == MT_CUDA ? "cuda" : "cpu",
              mt_device_name(mt_default_device()), mt_version());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
