// StateIndex: the tensors of a saved engine state by name, with the checks every engine's load_state needs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/state_tensor.h"

namespace fp4 {

class StateIndex {
 public:
  // The index points into `state`, which must outlive it: a temporary is refused at compile time (an
  // index built from save_state()'s result read freed memory in a test).
  explicit StateIndex(const std::vector<StateTensor>& state);
  explicit StateIndex(std::vector<StateTensor>&&) = delete;
  // The tensor `name`; throws fp4::Error naming it when it is missing or its dtype, shape or byte size
  // disagree (element sizes of "U8", "BF16", "F32" and "I64" are known; another dtype is an error).
  const StateTensor& require(const std::string& name, const char* dtype,
                             const std::vector<int64_t>& shape) const;
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }

 private:
  std::map<std::string, const StateTensor*> by_name_;
};

}  // namespace fp4
