// How the report's tables print numbers: a missing or non-finite value is "-".
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace fp4::report_format {

// v with the printf format f ("%.4f"), or "-" when v is not finite.
inline std::string number(double v, const char* f = "%.4f") {
  if (!std::isfinite(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A share in [0, 1] as a percentage with one decimal ("38.5%"), or "-" when not finite.
inline std::string percent(double share) {
  return std::isfinite(share) ? number(100.0 * share, "%.1f") + "%" : "-";
}

}  // namespace fp4::report_format
