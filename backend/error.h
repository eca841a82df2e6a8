// error.h - the one error type the library throws internally.
//
// Codes equal the C ABI's mt_status values; abi/ turns an Error into a status
// and a thread-local message. Two macros:
//   MT_CHECK(cond, code, fmt, ...)  bad user input: message built only on failure
//   MT_ASSERT(cond)                 a broken invariant ("internal error, please report")
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

namespace mt {

enum class Code : int {
  OK = 0, INVALID_ARGUMENT = 1, SHAPE = 2, DTYPE = 3, DEVICE = 4, OUT_OF_MEMORY = 5,
  CUDA = 6, IO = 7, STATE = 8, UNSUPPORTED = 9, INTERNAL = 10
};

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string &msg) : std::runtime_error(msg), code_(code) {}
  Code code() const { return code_; }
 private:
  Code code_;
};

// printf-style formatting into a std::string.
std::string strprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fail(Code code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace mt

#define MT_CHECK(cond, code, ...)                 \
  do {                                            \
    if (!(cond)) ::mt::fail(::mt::Code::code, __VA_ARGS__); \
  } while (0)

#define MT_ASSERT(cond)                                                                      \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::mt::fail(::mt::Code::INTERNAL, "internal error, please report: %s at %s:%d", #cond, \
                 __FILE__, __LINE__);                                                        \
  } while (0)
