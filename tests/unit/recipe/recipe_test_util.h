// Shared by the recipe-section tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace fp4::testing {

// Expects f to throw an fp4::Error whose message contains `part`.
template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error (expected one mentioning '" << part << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace fp4::testing
