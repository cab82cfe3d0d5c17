// Training metrics: one JSON object per line in <run dir>/metrics.jsonl (what tools read) and
// human lines on stderr (what people read): a live progress bar on a terminal, plain lines otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace fp4 {

struct TrainRecord {
  int64_t step = 0;
  int64_t tokens = 0;  // tokens trained on so far (all steps)
  double loss = 0;     // mean loss of the step (cross-entropy + z-loss)
  double ce_loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;  // over the steps since the previous record
  double elapsed = 0;       // seconds of training, resumed runs included
};

struct EvalRecord {
  int64_t step = 0;
  int64_t tokens = 0;
  double val_loss = 0;  // token-weighted mean cross-entropy
  double val_ppl = 0;   // exp(val_loss)
  int64_t val_tokens = 0;
  double elapsed = 0;
};

nlohmann::json to_json(const TrainRecord& r);
nlohmann::json to_json(const EvalRecord& r);

// Appends records to a JSON-lines file, flushed per line so a crash loses nothing already logged.
class MetricsFile {
 public:
  // Keeps the lines of steps <= keep_through_step (a resumed run continues the file where its
  // checkpoint was taken; 0 starts it afresh) and drops the rest, including a torn last line.
  MetricsFile(const std::filesystem::path& path, int64_t keep_through_step);
  void write(const nlohmann::json& record);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// Reads every record of a metrics file (for tests and reports); throws fp4::Error naming the line.
std::vector<nlohmann::json> read_metrics(const std::filesystem::path& path);

std::string format_duration(double seconds);  // "42s", "3m05s", "2h07m"
std::string format_count(double n);           // "950", "35.2k", "1.48M"

// Human output on a stream (stderr by default).
class Progress {
 public:
  // total_steps: the step the run stops at; first_step: where this session starts (resume).
  Progress(int64_t first_step, int64_t total_steps, bool bar, std::FILE* stream = stderr);
  ~Progress();

  // Called after every step; a bar is redrawn (at most ~10 times a second), plain mode prints
  // a line when `log` is true.
  void step(const TrainRecord& r, bool log);
  void eval(const EvalRecord& r);
  void message(const std::string& line);  // any other line (checkpoint saved, resumed, ...)
  void finish();                          // ends the bar's line

  // Seconds per step and the resulting ETA (for the bar and tests).
  double eta_seconds(int64_t step) const;

 private:
  void clear_bar();
  void draw_bar();

  int64_t first_step_, total_steps_;
  bool bar_;
  std::FILE* stream_;
  std::chrono::steady_clock::time_point start_, last_draw_{};
  TrainRecord last_{};
  bool bar_visible_ = false;
};

// Whether stderr is a terminal (decides bar vs plain lines).
bool stderr_is_tty();

}  // namespace fp4
