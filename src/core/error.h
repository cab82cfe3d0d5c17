// fp4::Error and the checking macros every part of fp4train uses.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace fp4 {

// Every failure fp4train reports: the message names the file, field, layer or shape at fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws fp4::Error built from the streamed arguments: FP4_THROW("shard ", path, " is truncated").
#define FP4_THROW(...) throw ::fp4::Error(::fp4::detail::concat(__VA_ARGS__))

// Checks a condition that depends on input (config, shapes, files): a user-facing error.
#define FP4_CHECK(cond, ...)             \
  do {                                   \
    if (!(cond)) FP4_THROW(__VA_ARGS__); \
  } while (0)

}  // namespace fp4
