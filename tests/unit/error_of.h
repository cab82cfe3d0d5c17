// Shared by the unit tests of every area (included as "../error_of.h"): the message of the fp4::Error a
// callable throws, and a test failure when it throws nothing.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace fp4::testing {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an fp4::Error";
  return "";
}

}  // namespace fp4::testing
