// Helpers shared by the report tests over several seeds: run directories as the trainer leaves them, the
// cells of a Markdown row, and the polylines of an SVG.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fp4::testing {

namespace fs = std::filesystem;

// A run directory as the trainer leaves it: metrics.jsonl, recipe.toml and config.json. `config` is
// the config.json text; empty: no config.json (a run from before the trainer wrote one).
// "s<seed>", built by appending (GCC 12 warns falsely on "literal" + std::string&&).
inline std::string seed_name(int seed) {
  std::string n = "s";
  n += std::to_string(seed);
  return n;
}

inline fs::path make_run_dir(const fs::path& root, const std::string& name, const std::string& recipe,
                             double final_val, const std::string& config, std::mt19937& rng) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.toml") << "name = \"" << recipe << "\"\n";
  if (!config.empty()) std::ofstream(dir / "config.json") << config;
  std::ofstream m(dir / "metrics.jsonl");
  m.precision(17);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  std::uniform_int_distribution<int> speed(4000, 6000);
  for (int step = 1; step <= 60; ++step)
    m << "{\"type\":\"train\",\"step\":" << step << ",\"tokens\":" << step * 2048
      << ",\"loss\":" << final_val + 2.0 / step + noise(rng) << ",\"tokens_per_s\":" << speed(rng) << "}\n";
  for (int step : {20, 40, 60}) {
    const double v = step == 60 ? final_val : final_val + 0.3 / step + noise(rng);
    m << "{\"type\":\"eval\",\"step\":" << step << ",\"tokens\":" << step * 2048 << ",\"val_loss\":" << v
      << ",\"val_ppl\":" << std::exp(v) << "}\n";
  }
  return dir;
}

// The shape of the trainer's config.json (docs/results/runs-*/bf16.config.json), with the given seed.
inline std::string config_with_seed(uint64_t seed, const std::string& recipe) {
  return "{\n  \"model\": {\"preset\": \"olmo2-30m\", \"d_model\": 384},\n  \"recipe\": {\"name\": \"" +
         recipe + "\", \"overrides\": {}},\n  \"train\": {\n    \"eval_every\": 20,\n    \"seed\": " +
         std::to_string(seed) + ",\n    \"steps\": 60\n  }\n}\n";
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The cells of the Markdown row whose first cells are `first` (label, then seed when given).
inline std::vector<std::string> row_cells(const std::string& table, const std::vector<std::string>& first) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line);
    std::getline(ls, cell, '|');  // before the first bar
    while (std::getline(ls, cell, '|')) {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    if (cells.size() >= first.size() && std::equal(first.begin(), first.end(), cells.begin())) return cells;
  }
  ADD_FAILURE() << "no row starting with " << first[0] << " in\n" << table;
  return {};
}

inline std::string printf_str(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Each polyline of an SVG: (legend label, stroke colour, dash attribute or "").
struct Line {
  std::string label, color, dash;
};
inline std::vector<Line> polylines(const std::string& svg) {
  std::vector<Line> out;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    const size_t end = svg.find("/>", p);
    const std::string tag = svg.substr(p, end - p);
    Line l;
    const size_t c = tag.find("stroke='") + 8;
    l.color = tag.substr(c, tag.find('\'', c) - c);
    const size_t d = tag.find("stroke-dasharray='");
    if (d != std::string::npos) l.dash = tag.substr(d + 18, tag.find('\'', d + 18) - d - 18);
    const size_t t = svg.find("<text", end), open = svg.find('>', t) + 1;  // its legend entry follows it
    l.label = svg.substr(open, svg.find("</text>", open) - open);
    out.push_back(l);
  }
  return out;
}

inline constexpr const char* kRecipes[] = {"bf16", "nvidia-nvfp4", "tetrajet-v2-base"};

}  // namespace fp4::testing
