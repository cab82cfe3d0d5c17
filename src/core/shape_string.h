// shape_string: a tensor shape as error messages print it, "[2, 3]".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4 {

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace fp4
