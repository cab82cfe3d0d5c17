// The --json output the benchmarks share: one JSON object a line (JSON Lines), one file a run. Every line
// carries the run's identity (bench, UTC start time, device, command line) so scripts/bench_to_json.py can
// merge a run into docs/benchmarks/latest.json and refuse lines of another run in the same file.
#pragma once

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace fp4::bench {

class JsonRows {
 public:
  // An empty path: no output (the bench prints only its human table). The file is truncated: it holds this
  // run.
  JsonRows(const std::string& path, std::string bench, std::string device, int argc, char** argv)
      : bench_(std::move(bench)), device_(std::move(device)) {
    if (path.empty()) return;
    out_.open(path, std::ios::trunc);
    FP4_CHECK(out_.good(), bench_, ": cannot open --json file ", path);
    // The program's file name without its folder, as the docs quote commands.
    command_ = std::filesystem::path(argv[0]).filename().string();
    for (int i = 1; i < argc; ++i) command_ += std::string(" ") + argv[i];
    const std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    date_ = buf;
  }

  // Appends the run's identity to `row` and writes it as one line, flushed (a run stopped later keeps it).
  void write(nlohmann::json row) {
    if (!out_.is_open()) return;
    row["bench"] = bench_;
    row["date"] = date_;
    row["device"] = device_;
    row["command"] = command_;
    out_ << row.dump() << "\n";
    out_.flush();
    FP4_CHECK(out_.good(), bench_, ": writing the --json file failed");
  }

 private:
  std::string bench_, device_, command_, date_;
  std::ofstream out_;
};

}  // namespace fp4::bench
