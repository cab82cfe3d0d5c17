// StateIndex: the tensors of a saved engine state by name, with the checks every engine's load_state needs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/engine.h"

namespace fp4 {

class StateIndex {
 public:
  explicit StateIndex(const std::vector<StateTensor>& state);
  // The tensor `name`; throws fp4::Error naming it when it is missing or its dtype, shape or byte size
  // disagree ("F32" and "I64" element sizes are known).
  const StateTensor& require(const std::string& name, const char* dtype, const std::vector<int64_t>& shape) const;

 private:
  std::map<std::string, const StateTensor*> by_name_;
};

}  // namespace fp4
