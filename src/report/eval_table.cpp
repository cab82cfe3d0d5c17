#include "report/eval_table.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace fp4 {

std::string eval_suite_table(const std::vector<std::string>& run_dirs,
                             const std::vector<std::string>& labels) {
  std::vector<std::pair<std::string, nlohmann::json>> rows;
  std::vector<std::string> tasks, sources;
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    const std::filesystem::path p = std::filesystem::path(run_dirs[i]) / "eval.json";
    if (!std::filesystem::is_regular_file(p)) continue;
    std::ifstream f(p);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
      for (const auto& t : j.at("zero_shot")) {
        const auto task = t.at("task").get<std::string>();
        if (std::find(tasks.begin(), tasks.end(), task) == tasks.end()) tasks.push_back(task);
      }
      for (const auto& s : j.at("sources")) {
        const auto name = s.at("name").get<std::string>();
        if (std::find(sources.begin(), sources.end(), name) == sources.end()) sources.push_back(name);
      }
      j.at("val").at("perplexity").get<double>();
    } catch (const nlohmann::json::exception& e) {
      FP4_THROW(p.string(), ": not an eval.json of fp4train eval (", e.what(), ")");
    }
    rows.emplace_back(i < labels.size() ? labels[i] : run_dirs[i], j);
  }
  if (rows.empty()) return "";
  auto num = [](double v, const char* fmt) {
    char b[64];
    std::snprintf(b, sizeof(b), fmt, v);
    return std::string(b);
  };
  std::ostringstream o;
  o << "\n| run | val ppl |";
  for (const auto& t : tasks) o << " " << t << " acc (items) |";
  for (const auto& s : sources) o << " " << s << " ppl |";
  o << "\n|---|---|";
  for (size_t k = 0; k < tasks.size() + sources.size(); ++k) o << "---|";
  o << "\n";
  for (const auto& [label, j] : rows) {
    o << "| " << label << " | " << num(j["val"]["perplexity"].get<double>(), "%.3f") << " |";
    for (const auto& t : tasks) {
      std::string cell = " - |";
      for (const auto& r : j["zero_shot"])
        if (r["task"] == t)
          cell = " " + num(r["accuracy"].get<double>(), "%.3f") + " (" +
                 std::to_string(r["items"].get<int64_t>()) + ") |";
      o << cell;
    }
    for (const auto& s : sources) {
      std::string cell = " - |";
      for (const auto& r : j["sources"])
        if (r["name"] == s) cell = " " + num(r["perplexity"].get<double>(), "%.3f") + " |";
      o << cell;
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace fp4
