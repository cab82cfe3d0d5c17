// Checkpoint save/load speed against a plain write+fsync of the same bytes (CPU only). A CPU engine
// sized so that its checkpoint tensors (model.safetensors + state.safetensors) come to about the
// requested size is saved and loaded; each measurement runs --runs times and the median is reported.
// Loads read files the save just wrote, so they come from the page cache. Nothing is asserted.
//
// usage: checkpoint_bench [--gib 1.0] [--dir /tmp] [--runs 3]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "model/cpu_engine.h"
#include "train/checkpoint.h"
#include "train/file_io.h"
#include "train/safetensors.h"
#include "train/sha256.h"
#include "train/unique_fd.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;

struct Options {
  double gib = 1.0;
  fs::path dir = fs::temp_directory_path();
  int runs = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    FP4_CHECK(i + 1 < argc, "checkpoint_bench: ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--gib") {
      o.gib = std::stod(v);
    } else if (a == "--dir") {
      o.dir = v;
    } else if (a == "--runs") {
      o.runs = std::stoi(v);
    } else {
      FP4_THROW("checkpoint_bench: unknown option ", a, " (known: --gib, --dir, --runs)");
    }
  }
  FP4_CHECK(o.gib > 0 && o.runs > 0, "checkpoint_bench: --gib and --runs must be positive");
  return o;
}

// olmo2-370m's layer shape with an 8192-token vocabulary and as many layers as bring 16 bytes per
// parameter (F32 model file, then F32 master, m and v in the state) to about the target.
ModelConfig sized_model(double target_bytes) {
  ModelConfig m = model_preset("olmo2-370m");
  m.name = "checkpoint-bench";
  m.vocab_size = m.vocab_real = 8192;
  m.n_layers = 1;
  while (16.0 * static_cast<double>(m.parameter_count()) < target_bytes) ++m.n_layers;
  return m;
}

// `prepare` runs untimed before each run (removing the previous run's files).
double median_seconds(int runs, const std::function<void()>& prepare, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    prepare();
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

uint64_t total_bytes(const std::vector<StateTensor>& tensors) {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes.size();
  return n;
}

std::vector<std::span<const uint8_t>> spans_of(const std::vector<StateTensor>& tensors) {
  std::vector<std::span<const uint8_t>> out;
  for (const auto& t : tensors) out.emplace_back(t.bytes.data(), t.bytes.size());
  return out;
}

// The baseline: each buffer handed to write() as it is, then fsync; no hashing, no writeback hints.
void plain_write_fsync(const fs::path& path, const std::vector<std::span<const uint8_t>>& parts) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  FP4_CHECK(fd.get() >= 0, path.string(), ": cannot create");
  for (auto part : parts) {
    for (size_t done = 0; done < part.size();) {
      const ssize_t n = ::write(fd.get(), part.data() + done, part.size() - done);
      FP4_CHECK(n > 0 || errno == EINTR, path.string(), ": write failed");
      if (n > 0) done += static_cast<size_t>(n);
    }
  }
  FP4_CHECK(::fsync(fd.get()) == 0, path.string(), ": fsync failed");
}

std::string hash_all(Sha256Impl impl, const std::vector<StateTensor>& a, const std::vector<StateTensor>& b) {
  Sha256 h(impl);
  for (const auto* set : {&a, &b})
    for (const auto& t : *set) h.update(t.bytes);
  return h.hex();
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const ModelConfig cfg = sized_model(o.gib * double(1 << 30));
  std::fprintf(stderr, "building a CPU engine: %d layers, %lld parameters\n", cfg.n_layers,
               static_cast<long long>(cfg.parameter_count()));
  const auto engine = make_cpu_engine(cfg, Recipe{}, 1);
  const std::vector<StateTensor> state = engine->save_state();
  std::vector<StateTensor> params;
  for (const auto& p : engine->parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    engine->read_parameter(p.name, v);
    params.push_back(make_f32_tensor(p.name, p.shape, v));
  }
  const uint64_t bytes = total_bytes(params) + total_bytes(state);
  const fs::path work = o.dir / ("fp4_checkpoint_bench_" + std::to_string(::getpid()));
  fs::create_directories(work);
  const nlohmann::json trainer = {{"step", 1}};

  struct Row {
    std::string what;
    double seconds;
  };
  std::vector<Row> rows;
  const auto measure = [&](const std::string& what, const std::function<void()>& prepare,
                           const std::function<void()>& fn) {
    std::fprintf(stderr, "%s ...\n", what.c_str());
    rows.push_back({what, median_seconds(o.runs, prepare, fn)});
  };
  const auto nothing = [] {};
  const auto remove_plain = [&] {
    fs::remove(work / "plain_model");
    fs::remove(work / "plain_state");
  };
  const auto params_parts = spans_of(params), state_parts = spans_of(state);
  const auto write_plain = [&] {
    plain_write_fsync(work / "plain_model", params_parts);
    plain_write_fsync(work / "plain_state", state_parts);
    fsync_directory(work);
  };
  measure("write+fsync of the same bytes, one thread (baseline)", remove_plain, write_plain);
  std::string portable, sha_ni;
  measure("SHA-256 portable, in memory", nothing,
          [&] { portable = hash_all(Sha256Impl::kPortable, params, state); });
  if (sha256_ni_available())
    measure("SHA-256 SHA-NI, in memory", nothing,
            [&] { sha_ni = hash_all(Sha256Impl::kShaNi, params, state); });
  measure("pre-change method: write+fsync, read back, portable hash", remove_plain, [&] {
    write_plain();
    sha256_file(work / "plain_model", Sha256Impl::kPortable);
    sha256_file(work / "plain_state", Sha256Impl::kPortable);
  });
  remove_plain();
  fs::path saved;
  measure(
      "save_checkpoint", [&] { fs::remove_all(work / "run"); },
      [&] { saved = save_checkpoint(work / "run", 1, *engine, trainer, state); });
  measure("load_checkpoint", nothing, [&] { load_checkpoint(saved); });
  // On disk: format version 2 keeps the state's copies of the parameters in model.safetensors alone.
  const uint64_t model_file = fs::file_size(saved / "model.safetensors");
  const uint64_t state_file = fs::file_size(saved / "state.safetensors");
  fs::remove_all(work);

  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M %Z", std::localtime(&now));
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += ' ';
    command += argv[i];
  }
  std::printf("\nCheckpoint speed, %s, %u threads, %s, `%s`\n", cpu_model().c_str(),
              std::max(1u, std::thread::hardware_concurrency()), date, command.c_str());
  std::printf(
      "%.3f GB of tensors (model %.3f GB + state %.3f GB), %d layers of d_model %d, median of %d runs\n\n",
      double(bytes) / 1e9, double(total_bytes(params)) / 1e9, double(total_bytes(state)) / 1e9, cfg.n_layers,
      cfg.d_model, o.runs);
  std::printf(
      "Files on disk: model %.3f GB + state %.3f GB = %.3f GB (version 1 wrote %.3f GB more: the\n"
      "parameters again in the state)\n\n",
      double(model_file) / 1e9, double(state_file) / 1e9, double(model_file + state_file) / 1e9,
      double(total_bytes(params)) / 1e9);
  std::printf("| operation | s | GB/s | time / baseline |\n|---|---:|---:|---:|\n");
  for (const auto& r : rows)
    std::printf("| %s | %.3f | %.2f | %.2f |\n", r.what.c_str(), r.seconds, double(bytes) / 1e9 / r.seconds,
                r.seconds / rows.front().seconds);
  if (!sha_ni.empty())
    std::printf("\nSHA-NI and portable digests of the tensor bytes %s.\n",
                sha_ni == portable ? "agree" : "DISAGREE");
  return 0;
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    return fp4::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    return 1;
  }
}
