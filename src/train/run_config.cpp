#include "train/run_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "train/sha256.h"

namespace fp4 {
namespace {

enum class Kind { kInt, kFloat, kBool, kString };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kBool:
      return "a boolean (true or false)";
    case Kind::kString:
      return "a string";
  }
  return "?";
}

// A parsed scalar before it is checked against the field it goes to.
using Value = std::variant<int64_t, double, bool, std::string>;

std::string describe(const Value& v) {
  if (std::holds_alternative<int64_t>(v)) return "integer " + std::to_string(std::get<int64_t>(v));
  if (std::holds_alternative<double>(v)) {
    std::ostringstream os;
    os << "number " << std::get<double>(v);
    return os.str();
  }
  if (std::holds_alternative<bool>(v)) return std::get<bool>(v) ? "boolean true" : "boolean false";
  return "string \"" + std::get<std::string>(v) + "\"";
}

template <typename T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, bool>)
    return Kind::kBool;
  else if constexpr (std::is_integral_v<T>)
    return Kind::kInt;
  else if constexpr (std::is_floating_point_v<T>)
    return Kind::kFloat;
  else
    return Kind::kString;
}

// Converts a value to the member's type; `where` prefixes the error ("file:3: 'optim.lr'").
template <typename T>
T convert(const Value& v, const std::string& where) {
  constexpr Kind kind = kind_of<T>();
  const auto wrong = [&]() { FP4_THROW(where, " expects ", kind_name(kind), ", got ", describe(v)); };
  if constexpr (kind == Kind::kBool) {
    if (!std::holds_alternative<bool>(v)) wrong();
    return std::get<bool>(v);
  } else if constexpr (kind == Kind::kString) {
    if (!std::holds_alternative<std::string>(v)) wrong();
    return std::get<std::string>(v);
  } else if constexpr (kind == Kind::kFloat) {
    double d = 0;
    if (std::holds_alternative<int64_t>(v))
      d = static_cast<double>(std::get<int64_t>(v));
    else if (std::holds_alternative<double>(v))
      d = std::get<double>(v);
    else
      wrong();
    // A finite value beyond the member's range would become infinity (or be undefined to convert).
    FP4_CHECK(!std::isfinite(d) || std::abs(d) <= static_cast<double>(std::numeric_limits<T>::max()), where,
              " is out of range: ", d, " (a ", sizeof(T) == 4 ? "32" : "64", "-bit float holds at most ",
              std::numeric_limits<T>::max(), ")");
    return static_cast<T>(d);
  } else {
    int64_t i = 0;
    if (std::holds_alternative<int64_t>(v)) {
      i = std::get<int64_t>(v);
    } else if (std::holds_alternative<double>(v)) {
      // 5e7 tokens reads as a float in TOML; accept it when it is a whole number.
      const double d = std::get<double>(v);
      if (!(std::floor(d) == d && std::abs(d) < 9.0e18)) wrong();
      i = static_cast<int64_t>(d);
    } else {
      wrong();
    }
    if constexpr (std::is_unsigned_v<T>) {
      FP4_CHECK(i >= 0, where, " must not be negative, got ", i);
    } else {
      FP4_CHECK(i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max(), where,
                " is out of range: ", i);
    }
    return static_cast<T>(i);
  }
}

template <typename T>
nlohmann::json to_json_value(const T& v) {
  if constexpr (std::is_same_v<T, float>) {
    // The shortest decimal that reads back as this float: 0.02, not 0.019999999552965164.
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
  } else {
    return nlohmann::json(v);
  }
}

struct Field {
  std::string key;  // "section.name"
  Kind kind;
  std::function<void(RunConfig&, const Value&, const std::string& where)> set;
  std::function<nlohmann::json(const RunConfig&)> get;
};

template <typename Section, typename T>
Field field(std::string key, Section RunConfig::*section, T Section::*member) {
  return Field{std::move(key), kind_of<T>(),
               [section, member](RunConfig& c, const Value& v, const std::string& where) {
                 c.*section.*member = convert<T>(v, where);
               },
               [section, member](const RunConfig& c) { return to_json_value(c.*section.*member); }};
}

const std::vector<Field>& schema() {
  static const std::vector<Field> kFields = [] {
    using R = RunConfig;
    std::vector<Field> f;
    f.push_back(
        Field{"model.preset", Kind::kString,
              [](R& c, const Value& v, const std::string& w) { c.model_preset = convert<std::string>(v, w); },
              [](const R& c) { return nlohmann::json(c.model_preset); }});
    f.push_back(field("model.name", &R::model, &ModelConfig::name));
    f.push_back(field("model.n_layers", &R::model, &ModelConfig::n_layers));
    f.push_back(field("model.d_model", &R::model, &ModelConfig::d_model));
    f.push_back(field("model.n_heads", &R::model, &ModelConfig::n_heads));
    f.push_back(field("model.d_ff", &R::model, &ModelConfig::d_ff));
    f.push_back(field("model.vocab_size", &R::model, &ModelConfig::vocab_size));
    f.push_back(field("model.vocab_real", &R::model, &ModelConfig::vocab_real));
    f.push_back(field("model.max_seq_len", &R::model, &ModelConfig::max_seq_len));
    f.push_back(field("model.rope_theta", &R::model, &ModelConfig::rope_theta));
    f.push_back(field("model.norm_eps", &R::model, &ModelConfig::norm_eps));
    f.push_back(field("model.init_std", &R::model, &ModelConfig::init_std));
    f.push_back(field("model.z_loss", &R::model, &ModelConfig::z_loss));

    f.push_back(field("data.train_dir", &R::data, &DataConfig::train_dir));
    f.push_back(field("data.val_dir", &R::data, &DataConfig::val_dir));
    f.push_back(field("data.tokenizer", &R::data, &DataConfig::tokenizer));
    f.push_back(field("data.train_text", &R::data, &DataConfig::train_text));
    f.push_back(field("data.val_text", &R::data, &DataConfig::val_text));
    f.push_back(field("data.batch", &R::data, &DataConfig::batch));
    f.push_back(field("data.seq", &R::data, &DataConfig::seq));
    f.push_back(field("data.grad_accum", &R::data, &DataConfig::grad_accum));

    f.push_back(field("optim.lr", &R::optim, &OptimConfig::lr));
    f.push_back(field("optim.beta1", &R::optim, &OptimConfig::beta1));
    f.push_back(field("optim.beta2", &R::optim, &OptimConfig::beta2));
    f.push_back(field("optim.eps", &R::optim, &OptimConfig::eps));
    f.push_back(field("optim.weight_decay", &R::optim, &OptimConfig::weight_decay));
    f.push_back(field("optim.grad_clip", &R::optim, &OptimConfig::grad_clip));
    f.push_back(field("optim.schedule", &R::optim, &OptimConfig::schedule));
    f.push_back(field("optim.warmup", &R::optim, &OptimConfig::warmup));
    f.push_back(field("optim.total_steps", &R::optim, &OptimConfig::total_steps));
    f.push_back(field("optim.total_tokens", &R::optim, &OptimConfig::total_tokens));
    f.push_back(field("optim.final_ratio", &R::optim, &OptimConfig::final_ratio));
    f.push_back(field("optim.decay_fraction", &R::optim, &OptimConfig::decay_fraction));
    f.push_back(field("optim.decay_shape", &R::optim, &OptimConfig::decay_shape));

    f.push_back(field("train.seed", &R::train, &TrainConfig::seed));
    f.push_back(field("train.steps", &R::train, &TrainConfig::steps));
    f.push_back(field("train.log_every", &R::train, &TrainConfig::log_every));
    f.push_back(field("train.eval_every", &R::train, &TrainConfig::eval_every));
    f.push_back(field("train.eval_batches", &R::train, &TrainConfig::eval_batches));
    f.push_back(field("train.ckpt_every", &R::train, &TrainConfig::ckpt_every));
    f.push_back(field("train.keep_checkpoints", &R::train, &TrainConfig::keep_checkpoints));
    f.push_back(field("train.out_dir", &R::train, &TrainConfig::out_dir));
    f.push_back(field("train.device", &R::train, &TrainConfig::device));

    f.push_back(field("dist.overlap", &R::dist, &DistConfig::overlap));

    f.push_back(field("recipe.name", &R::recipe, &RecipeConfig::name));
    return f;
  }();
  return kFields;
}

const std::vector<std::string> kSections = {"model", "data", "optim", "train", "dist", "recipe"};
constexpr std::string_view kOverridesPrefix = "recipe.overrides.";

const Field* find_field(const std::string& key) {
  for (const auto& f : schema())
    if (f.key == key) return &f;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = edit_distance(key, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best.empty() || best_d > std::max<size_t>(2, key.size() / 3)) return "";
  return " (did you mean '" + best + "'?)";
}

[[noreturn]] void unknown_key(const std::string& origin, const std::string& key) {
  std::vector<std::string> candidates = run_config_keys();
  const bool is_section = key.find('.') == std::string::npos;
  if (is_section) candidates = kSections;
  FP4_THROW(origin, ": unknown ", is_section ? "section" : "key", " '", key, "'",
            suggestion(key, candidates));
}

// One assignment, from a file line or a --set argument, before it is applied.
struct Entry {
  std::string key;
  Value value;
  std::string origin;  // "configs/x.toml:12" or "--set optim.lr=1"
  std::string raw;     // recipe overrides: the value in TOML syntax
};

std::string toml_text(const toml::node& node) {
  std::ostringstream os;
  node.visit([&](const auto& n) { os << n; });
  std::string s = os.str();
  return s;
}

std::string origin_of(const std::string& file, const toml::node& node) {
  const auto line = node.source().begin.line;
  return line > 0 ? file + ":" + std::to_string(line) : file;
}

void collect_overrides(const toml::table& table, const std::string& prefix, const std::string& file,
                       std::vector<Entry>& out) {
  for (const auto& [k, node] : table) {
    const std::string key = prefix + std::string(k.str());
    if (const auto* sub = node.as_table()) {
      collect_overrides(*sub, key + ".", file, out);
    } else {
      // Strings go through bare ("16x16"), other values in TOML syntax ("[0, -1]").
      const auto str = node.value<std::string>();
      out.push_back(Entry{key, Value{}, origin_of(file, node), str ? *str : toml_text(node)});
    }
  }
}

std::vector<Entry> entries_from_toml(const toml::table& root, const std::string& file) {
  std::vector<Entry> out;
  for (const auto& [sk, snode] : root) {
    const std::string section(sk.str());
    if (std::find(kSections.begin(), kSections.end(), section) == kSections.end())
      unknown_key(origin_of(file, snode), section);
    const auto* table = snode.as_table();
    FP4_CHECK(table, origin_of(file, snode), ": '", section, "' must be a table ([", section, "])");
    for (const auto& [k, node] : *table) {
      const std::string key = section + "." + std::string(k.str());
      const std::string origin = origin_of(file, node);
      if (key == "recipe.overrides") {
        const auto* sub = node.as_table();
        FP4_CHECK(sub, origin, ": 'recipe.overrides' must be a table of key = value");
        collect_overrides(*sub, std::string(kOverridesPrefix), file, out);
        continue;
      }
      const Field* f = find_field(key);
      if (!f) unknown_key(origin, key);
      Value v;
      if (auto i = node.value<int64_t>(); i && node.is_integer())
        v = *i;
      else if (node.is_floating_point())
        v = *node.value<double>();
      else if (node.is_boolean())
        v = *node.value<bool>();
      else if (node.is_string())
        v = *node.value<std::string>();
      else
        FP4_THROW(origin, ": '", key, "' expects ", kind_name(f->kind), ", got a ", node.type());
      out.push_back(Entry{key, std::move(v), origin, ""});
    }
  }
  return out;
}

[[noreturn]] void bad_override(const Field& f, const std::string& text, const std::string& origin) {
  FP4_THROW(origin, ": '", f.key, "' expects ", kind_name(f.kind), ", got '", text, "'");
}

Value parse_override_value(const Field& f, const std::string& text, const std::string& origin) {
  if (f.kind == Kind::kString) {
    if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
      return text.substr(1, text.size() - 2);
    return text;
  }
  if (f.kind == Kind::kBool) {
    if (text == "true") return true;
    if (text == "false") return false;
    bad_override(f, text, origin);
  }
  const char* end = text.data() + text.size();
  if (f.kind == Kind::kInt) {
    int64_t i = 0;
    const auto [p, ec] = std::from_chars(text.data(), end, i);
    if (ec == std::errc() && p == end && !text.empty()) return i;
  }
  // A number (or a whole number written as 5e7 for an integer key: convert() checks it).
  double d = 0;
  const auto [p, ec] = std::from_chars(text.data(), end, d);
  if (ec != std::errc() || p != end || text.empty()) bad_override(f, text, origin);
  return d;
}

Entry entry_from_override(const std::string& arg) {
  const std::string origin = "--set " + arg;
  const auto eq = arg.find('=');
  FP4_CHECK(eq != std::string::npos && eq > 0, origin, ": expected section.key=value");
  const std::string key = arg.substr(0, eq), text = arg.substr(eq + 1);
  if (key.rfind(kOverridesPrefix, 0) == 0 && key.size() > kOverridesPrefix.size())
    return Entry{key, Value{}, origin, text};
  const Field* f = find_field(key);
  if (!f) unknown_key(origin, key);
  return Entry{key, parse_override_value(*f, text, origin), origin, ""};
}

// Applies entries: the model preset first (explicit [model] fields refine it), then the rest in order.
void apply_entries(RunConfig& cfg, const std::vector<Entry>& entries) {
  const Entry* preset = nullptr;
  for (const auto& e : entries)
    if (e.key == "model.preset") preset = &e;
  if (preset) {
    const std::string where = preset->origin + ": 'model.preset'";
    cfg.model_preset = convert<std::string>(preset->value, where);
    try {
      cfg.model = model_preset(cfg.model_preset);
    } catch (const Error& e) {
      FP4_THROW(preset->origin, ": ", e.what());
    }
  }
  for (const auto& e : entries) {
    if (e.key == "model.preset") continue;
    if (e.key.rfind(kOverridesPrefix, 0) == 0) {
      const std::string name = e.key.substr(kOverridesPrefix.size());
      auto& ov = cfg.recipe.overrides;
      const auto it = std::find_if(ov.begin(), ov.end(), [&](const auto& p) { return p.first == name; });
      if (it != ov.end())
        it->second = e.raw;
      else
        ov.emplace_back(name, e.raw);
      continue;
    }
    find_field(e.key)->set(cfg, e.value, e.origin + ": '" + e.key + "'");
  }
}

Value value_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  FP4_THROW(where, ": unsupported value ", j.dump());
}

}  // namespace

int64_t RunConfig::schedule_steps() const {
  if (optim.total_steps > 0) return optim.total_steps;
  if (optim.total_tokens > 0) {  // rounded up, without the overflow of total_tokens + tokens_per_step - 1
    const int64_t per_step = tokens_per_step();
    return optim.total_tokens / per_step + (optim.total_tokens % per_step != 0 ? 1 : 0);
  }
  return train.steps;
}

std::vector<std::string> run_config_keys() {
  std::vector<std::string> keys;
  for (const auto& f : schema()) keys.push_back(f.key);
  return keys;
}

RunConfig default_run_config() {
  RunConfig cfg;
  cfg.model = model_preset(cfg.model_preset);
  return cfg;
}

void apply_overrides(RunConfig& cfg, const std::vector<std::string>& overrides) {
  std::vector<Entry> entries;
  for (const auto& o : overrides) entries.push_back(entry_from_override(o));
  apply_entries(cfg, entries);
  validate(cfg);
}

RunConfig load_run_config(const std::vector<std::filesystem::path>& files,
                          const std::vector<std::string>& overrides) {
  RunConfig cfg = default_run_config();
  std::vector<Entry> entries;
  for (const auto& file : files) {
    const std::string name = file.string();
    FP4_CHECK(std::filesystem::is_regular_file(file), name, ": config file not found");
    toml::table root;
    try {
      root = toml::parse_file(name);
    } catch (const toml::parse_error& e) {
      FP4_THROW(name, ":", e.source().begin.line, ": invalid TOML: ", e.description());
    }
    auto more = entries_from_toml(root, name);
    entries.insert(entries.end(), more.begin(), more.end());
  }
  for (const auto& o : overrides) entries.push_back(entry_from_override(o));
  apply_entries(cfg, entries);
  validate(cfg);
  return cfg;
}

void validate(const RunConfig& c) {
  try {
    validate(c.model);
  } catch (const Error& e) {
    FP4_THROW("[model] ", e.what());
  }
  const auto& m = c.model;
  FP4_CHECK(m.n_layers <= kMaxLayers, "model.n_layers must be at most ", kMaxLayers, ", got ", m.n_layers);
  FP4_CHECK(m.d_model <= kMaxWidth, "model.d_model must be at most ", kMaxWidth, ", got ", m.d_model);
  FP4_CHECK(m.d_ff <= kMaxWidth, "model.d_ff must be at most ", kMaxWidth, ", got ", m.d_ff);
  FP4_CHECK(m.vocab_size <= kMaxVocab, "model.vocab_size must be at most ", kMaxVocab, ", got ",
            m.vocab_size);
  FP4_CHECK(m.max_seq_len <= kMaxSeqLen, "model.max_seq_len must be at most ", kMaxSeqLen, ", got ",
            m.max_seq_len);
  FP4_CHECK(m.parameter_count() <= kMaxParameters, "[model] has ", m.parameter_count(),
            " parameters; at most ", kMaxParameters,
            " are accepted (model.n_layers, d_model, d_ff, vocab_size)");
  const auto& d = c.data;
  FP4_CHECK(!d.train_dir.empty(), "data.train_dir must not be empty");
  FP4_CHECK(d.batch > 0 && d.batch <= kMaxRows, "data.batch must be in [1, ", kMaxRows, "], got ", d.batch);
  FP4_CHECK(d.seq > 0, "data.seq must be positive, got ", d.seq);
  FP4_CHECK(d.seq <= c.model.max_seq_len, "data.seq ", d.seq, " exceeds model.max_seq_len ",
            c.model.max_seq_len);
  FP4_CHECK(d.grad_accum > 0 && d.grad_accum <= kMaxRows, "data.grad_accum must be in [1, ", kMaxRows,
            "], got ", d.grad_accum);
  FP4_CHECK(int64_t{d.batch} * d.seq <= kMaxMicroBatchTokens,
            "data.batch x data.seq = ", int64_t{d.batch} * d.seq, " tokens per micro-batch; at most ",
            kMaxMicroBatchTokens, " are accepted");
  const auto& o = c.optim;
  // The engine computes in FP32: each hyperparameter must be a finite float.
  const auto finite_float = [](double v) { return std::isfinite(v) && std::abs(v) <= 3.4028234663852886e38; };
  FP4_CHECK(o.lr > 0 && finite_float(o.lr), "optim.lr must be a positive finite number, got ", o.lr);
  FP4_CHECK(o.beta1 >= 0 && o.beta1 < 1, "optim.beta1 must be in [0, 1), got ", o.beta1);
  FP4_CHECK(o.beta2 >= 0 && o.beta2 < 1, "optim.beta2 must be in [0, 1), got ", o.beta2);
  FP4_CHECK(o.eps > 0 && o.eps <= 1, "optim.eps must be in (0, 1], got ", o.eps);
  FP4_CHECK(o.weight_decay >= 0 && finite_float(o.weight_decay),
            "optim.weight_decay must be a finite number >= 0, got ", o.weight_decay);
  FP4_CHECK(finite_float(o.grad_clip), "optim.grad_clip must be finite (<= 0 disables clipping), got ",
            o.grad_clip);
  FP4_CHECK(o.schedule == "cosine" || o.schedule == "wsd" || o.schedule == "constant",
            "optim.schedule must be cosine, wsd or constant, got '", o.schedule, "'");
  FP4_CHECK(o.warmup >= 0 && o.warmup <= kMaxSteps, "optim.warmup must be in [0, ", kMaxSteps, "], got ",
            o.warmup);
  FP4_CHECK(o.total_steps >= 0 && o.total_steps <= kMaxSteps, "optim.total_steps must be in [0, ", kMaxSteps,
            "] (0: from total_tokens or train.steps), got ", o.total_steps);
  FP4_CHECK(o.total_tokens >= 0 && o.total_tokens <= kMaxTokens, "optim.total_tokens must be in [0, ",
            kMaxTokens, "], got ", o.total_tokens);
  FP4_CHECK(o.final_ratio >= 0 && o.final_ratio <= 1, "optim.final_ratio must be in [0, 1], got ",
            o.final_ratio);
  FP4_CHECK(o.decay_fraction > 0 && o.decay_fraction <= 1, "optim.decay_fraction must be in (0, 1], got ",
            o.decay_fraction);
  FP4_CHECK(o.decay_shape == "linear" || o.decay_shape == "1-sqrt",
            "optim.decay_shape must be linear or 1-sqrt, got '", o.decay_shape, "'");
  const auto& t = c.train;
  FP4_CHECK(t.steps > 0 && t.steps <= kMaxSteps, "train.steps must be in [1, ", kMaxSteps, "], got ",
            t.steps);
  FP4_CHECK(t.steps <= kMaxTokens / c.tokens_per_step(), "train.steps ", t.steps, " x ", c.tokens_per_step(),
            " tokens per step exceeds the token counter's ", kMaxTokens);
  FP4_CHECK(t.log_every > 0, "train.log_every must be positive, got ", t.log_every);
  FP4_CHECK(t.eval_every >= 0, "train.eval_every must not be negative (0: only at the end)");
  FP4_CHECK(t.eval_batches >= 0, "train.eval_batches must not be negative (0: the whole split)");
  FP4_CHECK(t.ckpt_every >= 0, "train.ckpt_every must not be negative (0: only at the end)");
  FP4_CHECK(t.keep_checkpoints >= 1, "train.keep_checkpoints must be at least 1, got ", t.keep_checkpoints);
  FP4_CHECK(!t.out_dir.empty(), "train.out_dir must not be empty");
  FP4_CHECK(t.device == "cpu" || t.device == "cuda", "train.device must be cpu or cuda, got '", t.device,
            "'");
  FP4_CHECK(!c.recipe.name.empty(), "recipe.name must not be empty");
  FP4_CHECK(c.schedule_steps() <= kMaxSteps, "optim.total_tokens ", o.total_tokens, " makes a schedule of ",
            c.schedule_steps(), " steps; at most ", kMaxSteps, " are accepted");
  FP4_CHECK(o.warmup <= c.schedule_steps(), "optim.warmup ", o.warmup, " is longer than the schedule (",
            c.schedule_steps(), " steps)");
  try {
    make_lr_schedule(c);
  } catch (const Error& e) {
    FP4_THROW("[optim] ", e.what());
  }
}

void check_bf16_layers(const Recipe& recipe, const ModelConfig& model) {
  for (const int l : recipe.bf16_layers)
    FP4_CHECK(l >= -model.n_layers && l < model.n_layers, "recipe '", recipe.name,
              "': bf16_layers names block ", l, ", but model '", model.name, "' has ", model.n_layers,
              " blocks (accepted: ", -model.n_layers, " .. ", model.n_layers - 1, ")");
}

LrSchedule make_lr_schedule(const RunConfig& cfg) {
  const auto& o = cfg.optim;
  LrSchedule s;
  s.kind = parse_schedule_kind(o.schedule, "optim.schedule");
  s.peak_lr = o.lr;
  s.warmup_steps = o.warmup;
  s.total_steps = cfg.schedule_steps();
  s.final_ratio = o.final_ratio;
  if (s.kind == ScheduleKind::kWsd) {
    s.decay_steps = std::max<int64_t>(1, std::llround(o.decay_fraction * static_cast<double>(s.total_steps)));
    s.decay_shape = parse_decay_shape(o.decay_shape, "optim.decay_shape");
  }
  validate(s);
  return s;
}

nlohmann::json to_json(const RunConfig& cfg) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : schema()) {
    const auto dot = f.key.find('.');
    j[f.key.substr(0, dot)][f.key.substr(dot + 1)] = f.get(cfg);
  }
  nlohmann::json ov = nlohmann::json::object();
  for (const auto& [k, v] : cfg.recipe.overrides) ov[k] = v;
  j["recipe"]["overrides"] = ov;
  return j;
}

RunConfig run_config_from_json(const nlohmann::json& j, const std::string& origin) {
  FP4_CHECK(j.is_object(), origin, ": run config is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [section, body] : j.items()) {
    if (std::find(kSections.begin(), kSections.end(), section) == kSections.end())
      unknown_key(origin, section);
    FP4_CHECK(body.is_object(), origin, ": section '", section, "' is not an object");
    for (const auto& [k, v] : body.items()) {
      const std::string key = section + "." + k;
      if (key == "recipe.overrides") {
        FP4_CHECK(v.is_object(), origin, ": recipe.overrides is not an object");
        for (const auto& [ok, ov] : v.items()) {
          FP4_CHECK(ov.is_string(), origin, ": recipe.overrides.", ok, " is not a string");
          entries.push_back(
              Entry{std::string(kOverridesPrefix) + ok, Value{}, origin, ov.get<std::string>()});
        }
        continue;
      }
      if (!find_field(key)) unknown_key(origin, key);
      entries.push_back(Entry{key, value_from_json(v, origin + ": '" + key + "'"), origin, ""});
    }
  }
  RunConfig cfg = default_run_config();
  apply_entries(cfg, entries);
  validate(cfg);
  return cfg;
}

nlohmann::json training_identity(const RunConfig& cfg) {
  static const std::vector<std::string> kExcluded = {
      "train.steps",       "train.log_every",        "train.eval_every", "train.eval_batches",
      "train.ckpt_every",  "train.keep_checkpoints", "train.out_dir",    "train.device",
      "data.train_dir",    "data.val_dir",           "data.train_text",  "data.val_text",
      "optim.total_steps", "optim.total_tokens",     "dist.overlap"};
  nlohmann::json id = nlohmann::json::object();
  for (const auto& f : schema())
    if (std::find(kExcluded.begin(), kExcluded.end(), f.key) == kExcluded.end()) id[f.key] = f.get(cfg);
  // The schedule's resolved length matters, not how it was spelled (steps or tokens).
  id["optim.schedule_steps"] = cfg.schedule_steps();
  for (const auto& [k, v] : cfg.recipe.overrides) id[std::string(kOverridesPrefix) + k] = v;
  return id;
}

std::string config_hash(const RunConfig& cfg) {
  return sha256_hex(training_identity(cfg).dump());
}

std::vector<std::string> identity_differences(const RunConfig& before, const RunConfig& now) {
  const auto a = training_identity(before), b = training_identity(now);
  std::vector<std::string> out;
  for (const auto& [k, v] : a.items()) {
    const auto it = b.find(k);
    if (it == b.end())
      out.push_back(k + ": " + v.dump() + " -> (unset)");
    else if (*it != v)
      out.push_back(k + ": " + v.dump() + " -> " + it->dump());
  }
  for (const auto& [k, v] : b.items())
    if (!a.contains(k)) out.push_back(k + ": (unset) -> " + v.dump());
  return out;
}

std::string expand_recipe_shorthand(const std::string& assignment) {
  // The recipe's own keys and sections (recipe_io.cpp); none of them shares a name with a run section.
  static constexpr std::string_view kRecipeKeys[] = {
      "linear.", "bf16_layers=", "optimizer=", "osci_reset.", "out_control.", "attention.", "lora_svd."};
  for (std::string_view k : kRecipeKeys)
    if (assignment.rfind(k, 0) == 0) return std::string(kOverridesPrefix) + assignment;
  return assignment;
}

}  // namespace fp4
