// Master weights held in host memory, as OsciReset's WeightAccess, for the OsciReset tests of every area;
// every write is also logged.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "optim/osci_reset.h"

namespace fp4::testing {

class MemoryWeights final : public WeightAccess {
 public:
  std::map<std::string, std::vector<float>> w;
  std::vector<std::pair<std::string, std::vector<float>>> writes;
  void read(const std::string& name, std::span<float> out) override {
    const auto& v = w.at(name);
    ASSERT_EQ(v.size(), out.size()) << name;
    std::copy(v.begin(), v.end(), out.begin());
  }
  void write(const std::string& name, std::span<const float> in) override {
    w.at(name).assign(in.begin(), in.end());
    writes.emplace_back(name, w.at(name));
  }
};

}  // namespace fp4::testing
