// The communicator's timeouts from FP4_DIST_TIMEOUT: unset or empty gives the defaults, a positive number
// of seconds (fractions too) sets both, anything else is an error naming the variable and its value.
#include "dist/make_communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "core/error.h"

namespace fp4 {
namespace {

// Sets FP4_DIST_TIMEOUT for one scope and puts back what was there.
class TimeoutEnv {
 public:
  explicit TimeoutEnv(const char* value) {
    if (const char* old = std::getenv("FP4_DIST_TIMEOUT")) old_ = old, had_ = true;
    if (value)
      ::setenv("FP4_DIST_TIMEOUT", value, 1);
    else
      ::unsetenv("FP4_DIST_TIMEOUT");
  }
  ~TimeoutEnv() {
    if (had_)
      ::setenv("FP4_DIST_TIMEOUT", old_.c_str(), 1);
    else
      ::unsetenv("FP4_DIST_TIMEOUT");
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(MakeCommunicator, TimeoutsFromTheEnvironment) {
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    const TimeoutEnv env(unset);
    const CommTimeouts t = comm_timeouts_from_env();
    EXPECT_EQ(t.setup, std::chrono::minutes(5));
    EXPECT_EQ(t.op, std::chrono::minutes(30));
  }
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const int ms = 1 + static_cast<int>(rng() % 1000000);
    const std::string text = std::to_string(ms / 1000) + "." + std::to_string(1000 + ms % 1000).substr(1);
    const TimeoutEnv env(text.c_str());
    const CommTimeouts t = comm_timeouts_from_env();
    EXPECT_NEAR(static_cast<double>(t.setup.count()), ms, 1.0) << text;
    EXPECT_EQ(t.op, t.setup) << text;
  }
  for (const char* bad : {"abc", "0", "-3", "5s", "1e", " "}) {
    const TimeoutEnv env(bad);
    try {
      comm_timeouts_from_env();
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("FP4_DIST_TIMEOUT='") + bad +
                                           "' is not a positive number of seconds"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4
