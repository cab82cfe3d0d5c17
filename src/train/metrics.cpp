#include "train/metrics.h"

#include <unistd.h>

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "train/file_io.h"

namespace fp4 {

nlohmann::json to_json(const TrainRecord& r) {
  return {
      {"type", "train"},      {"step", r.step}, {"tokens", r.tokens},       {"loss", r.loss},
      {"ce_loss", r.ce_loss}, {"lr", r.lr},     {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s},
      {"elapsed", r.elapsed}};
}

nlohmann::json to_json(const EvalRecord& r) {
  return {{"type", "eval"},         {"step", r.step},       {"tokens", r.tokens},
          {"val_loss", r.val_loss}, {"val_ppl", r.val_ppl}, {"val_tokens", r.val_tokens},
          {"elapsed", r.elapsed}};
}

MetricsFile::MetricsFile(const std::filesystem::path& path, int64_t keep_through_step) : path_(path) {
  std::string kept;
  if (keep_through_step > 0 && std::filesystem::exists(path)) {
    std::istringstream in(read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
        continue;
      if (j["step"].get<int64_t>() <= keep_through_step) kept += line + "\n";
    }
  }
  write_file_atomically(path, kept);
  out_.open(path, std::ios::app);
  FP4_CHECK(out_, path.string(), ": cannot open for appending");
}

void MetricsFile::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  FP4_CHECK(out_, path_.string(), ": write failed");
}

std::vector<nlohmann::json> read_metrics(const std::filesystem::path& path) {
  std::istringstream in(read_file(path));
  std::vector<nlohmann::json> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      FP4_THROW(path.string(), ":", n, ": not a JSON object: ", e.what());
    }
  }
  return out;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  return buf;
}

std::string format_count(double n) {
  char buf[32];
  if (!std::isfinite(n)) return "?";
  if (n < 1e3)
    std::snprintf(buf, sizeof buf, "%.0f", n);
  else if (n < 1e6)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else if (n < 1e9)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  return buf;
}

bool stderr_is_tty() {
  return ::isatty(STDERR_FILENO) == 1;
}

Progress::Progress(int64_t first_step, int64_t total_steps, bool bar, std::FILE* stream)
    : first_step_(first_step),
      total_steps_(total_steps),
      bar_(bar),
      stream_(stream),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  finish();
}

double Progress::eta_seconds(int64_t step) const {
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - first_step_;
  if (done <= 0) return NAN;
  return spent / static_cast<double>(done) * static_cast<double>(total_steps_ - step);
}

void Progress::clear_bar() {
  if (!bar_visible_) return;
  std::fputs("\r\033[2K", stream_);
  bar_visible_ = false;
}

void Progress::draw_bar() {
  constexpr int kWidth = 24;
  const double frac =
      total_steps_ > 0 ? static_cast<double>(last_.step) / static_cast<double>(total_steps_) : 1.0;
  const int filled = static_cast<int>(std::clamp(frac, 0.0, 1.0) * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stream_, "\r\033[2K[%s] step %lld/%lld | %s tok/s | loss %.4f | ETA %s", bar.c_str(),
               static_cast<long long>(last_.step), static_cast<long long>(total_steps_),
               format_count(last_.tokens_per_s).c_str(), last_.loss,
               format_duration(eta_seconds(last_.step)).c_str());
  std::fflush(stream_);
  bar_visible_ = true;
}

void Progress::step(const TrainRecord& r, bool log) {
  if (bar_) {
    last_ = r;
    const auto now = std::chrono::steady_clock::now();
    if (log || r.step == total_steps_ || now - last_draw_ > std::chrono::milliseconds(100)) {
      draw_bar();
      last_draw_ = now;
    }
    return;
  }
  last_ = r;
  if (!log) return;
  std::fprintf(stream_,
               "step %lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %s tok/s | %s elapsed | ETA %s\n",
               static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr,
               r.grad_norm, format_count(r.tokens_per_s).c_str(), format_duration(r.elapsed).c_str(),
               format_duration(eta_seconds(r.step)).c_str());
  std::fflush(stream_);
}

void Progress::eval(const EvalRecord& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "eval step %lld | val loss %.4f | val ppl %.3f (%s tokens)",
                static_cast<long long>(r.step), r.val_loss, r.val_ppl,
                format_count(static_cast<double>(r.val_tokens)).c_str());
  message(buf);
}

void Progress::message(const std::string& line) {
  const bool redraw = bar_visible_;
  clear_bar();
  std::fprintf(stream_, "%s\n", line.c_str());
  if (redraw) draw_bar();
  std::fflush(stream_);
}

void Progress::finish() {
  if (bar_visible_) {
    std::fputs("\n", stream_);
    std::fflush(stream_);
    bar_visible_ = false;
  }
}

}  // namespace fp4
