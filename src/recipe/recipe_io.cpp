#include "recipe/recipe_io.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "recipe/optimizer_names.h"

namespace fp4 {
namespace {

namespace fs = std::filesystem;

const char* const kOperandKeys[kNumOperands] = {"q1", "q2", "q3", "q4", "q5", "q6"};
const char* const kOperandNames[kNumOperands] = {"Q1 (X)",   "Q2 (W)",    "Q3 (dY for dX)",
                                                 "Q4 (W^T)", "Q5 (dY^T)", "Q6 (X^T)"};

int operand_index(const std::string& key, const std::string& origin) {
  for (int i = 0; i < kNumOperands; ++i)
    if (key == kOperandKeys[i]) return i;
  FP4_THROW(origin, ": unknown operand 'linear.", key, "' (expected q1..q6)");
}

// A whole decimal number in [lo, hi]; anything else (a fraction, trailing text, a value that would wrap
// when narrowed to int) is an error naming `what` and the range.
int parse_int_in(const std::string& text, long long lo, long long hi, const std::string& where,
                 const char* what) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  FP4_CHECK(!text.empty() && end && *end == '\0' && errno != ERANGE && v >= lo && v <= hi, where,
            ": expected ", what, ", an integer in [", lo, ", ", hi, "], got '", text, "'");
  return static_cast<int>(v);
}

// Sets one QuantSpec field from its text form.
void set_spec_field(QuantSpec& s, const std::string& field, const std::string& value,
                    const std::string& where) {
  if (field == "format")
    s.format = parse_quant_format(value, where);
  else if (field == "block")
    s.block = parse_block_shape(value, where);
  else if (field == "outer")
    s.outer = parse_outer_scale(value, where);
  else if (field == "rounding")
    s.rounding = parse_rounding(value, where);
  else if (field == "four_over_six")
    s.four_over_six = parse_four_over_six(value, where);
  else if (field == "source")
    s.source = parse_quant_source(value, where);
  else if (field == "rht") {
    s.rht_n = parse_int_in(value, 0, 1 << 16, where, "an RHT size");
  } else if (field == "sr_headroom") {
    FP4_CHECK(value == "true" || value == "false", where, ": expected true or false, got '", value, "'");
    s.sr_headroom = value == "true";
  } else {
    FP4_THROW(where,
              ": unknown key (expected format, block, outer, rounding, rht, four_over_six, source, "
              "sr_headroom)");
  }
}

// The shortest decimal text that reads back as v.
std::string float_text(double v) {
  for (int precision = 1;; ++precision) {
    std::ostringstream os;
    os << std::setprecision(precision) << v;
    if (std::strtod(os.str().c_str(), nullptr) == v || precision >= 17) return os.str();
  }
}

std::string node_text(const toml::node& n, const std::string& where) {
  // Booleans first: toml++ also converts a boolean to an integer.
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  if (n.is_floating_point()) return float_text(*n.value<double>());
  if (auto v = n.value<std::string>()) return *v;
  if (auto v = n.value<int64_t>()) return std::to_string(*v);
  FP4_THROW(where, ": expected a string, integer or boolean");
}

// A block index of bf16_layers: -kMaxBf16Layer..kMaxBf16Layer (negative counts from the last block); the
// model's own bound is checked where the recipe meets the model (check_bf16_layers).
constexpr int kMaxBf16Layer = 1 << 20;

// "[0, -1]", "0,-1" or "[]": comma-separated integers, optionally in brackets. Spaces only around items,
// so "[1 0]" is an error rather than the block 10.
std::vector<int> parse_layer_list(const std::string& text, const std::string& where) {
  const auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  std::string s = trim(text);
  if (!s.empty() && s.front() == '[') {
    FP4_CHECK(s.back() == ']' && s.size() >= 2, where, ": '", text, "' lacks its closing ']'");
    s = trim(s.substr(1, s.size() - 2));
  }
  std::vector<int> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    FP4_CHECK(!item.empty(), where, ": empty entry in '", text, "' (expected block indices, e.g. [0, -1])");
    out.push_back(parse_int_in(item, -kMaxBf16Layer, kMaxBf16Layer, where, "a block index"));
  }
  FP4_CHECK(s.back() != ',', where, ": trailing ',' in '", text, "'");
  return out;
}

void set_osci_field(OsciResetConfig& c, const std::string& field, const std::string& value,
                    const std::string& where) {
  char* end = nullptr;
  if (field == "enabled") {
    FP4_CHECK(value == "true" || value == "false", where, ": expected true or false, got '", value, "'");
    c.enabled = value == "true";
  } else if (field == "window" || field == "period") {
    const long v = std::strtol(value.c_str(), &end, 10);
    FP4_CHECK(!value.empty() && *end == '\0' && v >= 1 && v <= 1'000'000'000, where,
              ": expected a positive number of steps, got '", value, "'");
    (field == "window" ? c.window : c.period) = static_cast<int>(v);
  } else if (field == "threshold" || field == "start") {
    const double v = std::strtod(value.c_str(), &end);
    FP4_CHECK(!value.empty() && *end == '\0' && std::isfinite(v) && v > 0, where,
              ": expected a positive number, got '", value, "'");
    FP4_CHECK(field != "start" || v <= 1e12, where,
              ": expected a fraction of the schedule (< 1) or a step number up to 1e12, got '", value, "'");
    (field == "threshold" ? c.threshold : c.start) = v;
  } else if (field == "track_fraction") {
    const double v = std::strtod(value.c_str(), &end);
    FP4_CHECK(!value.empty() && *end == '\0' && v > 0 && v <= 1, where,
              ": expected a fraction in (0, 1], got '", value, "'");
    c.track_fraction = v;
  } else {
    FP4_THROW(where, ": unknown key (expected enabled, window, threshold, period, start, track_fraction)");
  }
}

void set_out_control_field(OutControlConfig& c, const std::string& field, const std::string& value,
                           const std::string& where) {
  char* end = nullptr;
  if (field == "enabled") {
    FP4_CHECK(value == "true" || value == "false", where, ": expected true or false, got '", value, "'");
    c.enabled = value == "true";
  } else if (field == "calib_start" || field == "calib_steps") {
    const long v = std::strtol(value.c_str(), &end, 10);
    FP4_CHECK(!value.empty() && *end == '\0' && v >= 1 && v <= 1'000'000'000, where,
              ": expected a positive number of steps, got '", value, "'");
    (field == "calib_start" ? c.calib_start : c.calib_steps) = static_cast<int>(v);
  } else if (field == "ratio") {
    const double v = std::strtod(value.c_str(), &end);
    FP4_CHECK(!value.empty() && *end == '\0' && v > 0 && v < 1, where,
              ": expected a fraction in (0, 1), got '", value, "'");
    c.ratio = v;
  } else if (field == "round_to") {
    const long v = std::strtol(value.c_str(), &end, 10);
    FP4_CHECK(!value.empty() && *end == '\0' && v >= 16 && v % 16 == 0 && v <= 65536, where,
              ": expected a positive multiple of 16 (NVFP4 blocks stay whole), got '", value, "'");
    c.round_to = static_cast<int>(v);
  } else {
    FP4_THROW(where, ": unknown key (expected enabled, calib_start, calib_steps, ratio, round_to)");
  }
}

void set_attention_field(AttentionConfig& c, const std::string& field, const std::string& value,
                         const std::string& where) {
  FP4_CHECK(field == "q_attn", where, ": unknown key (expected q_attn)");
  FP4_CHECK(value == "true" || value == "false", where, ": expected true or false, got '", value, "'");
  c.q_attn = value == "true";
}

void set_lora_svd_field(LoraSvdConfig& c, const std::string& field, const std::string& value,
                        const std::string& where) {
  char* end = nullptr;
  if (field == "enabled") {
    FP4_CHECK(value == "true" || value == "false", where, ": expected true or false, got '", value, "'");
    c.enabled = value == "true";
  } else if (field == "rank" || field == "realign_every") {
    const long v = std::strtol(value.c_str(), &end, 10);
    FP4_CHECK(!value.empty() && *end == '\0' && v >= 1 && v <= 1'000'000'000, where, ": expected a positive ",
              field == "rank" ? "rank" : "number of steps", ", got '", value, "'");
    (field == "rank" ? c.rank : c.realign_every) = static_cast<int>(v);
  } else if (field == "beta") {
    const double v = std::strtod(value.c_str(), &end);
    FP4_CHECK(!value.empty() && *end == '\0' && std::isfinite(v) && v != 0, where,
              ": expected a finite nonzero number, got '", value, "'");
    c.beta = v;
  } else {
    FP4_THROW(where, ": unknown key (expected enabled, rank, beta, realign_every)");
  }
}

void set_rht_signs(Recipe& r, const std::string& v, const std::string& where) {
  FP4_CHECK(v == "fixed" || v == "per_call", where, ": expected 'fixed' or 'per_call', got '", v, "'");
  r.linear.rht_fresh_signs = v == "per_call";
}

}  // namespace

std::string recipe_directory() {
  if (const char* env = std::getenv("FP4_RECIPE_DIR")) return env;
  std::vector<fs::path> candidates = {fs::path("configs/recipes")};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "../configs/recipes");
    candidates.push_back(exe.parent_path() / "../../configs/recipes");
  }
#ifdef FP4_CONFIG_DIR
  candidates.push_back(fs::path(FP4_CONFIG_DIR) / "recipes");
#endif
  for (const auto& c : candidates)
    if (fs::is_directory(c, ec)) return fs::weakly_canonical(c, ec).string();
  return "configs/recipes";
}

std::vector<std::string> recipe_preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(recipe_directory(), ec))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Applies the keys of one recipe file's table onto r: the defaults, or the recipe its `extends` names. A
// table of the file (linear.qN, osci_reset, ...) changes only the fields it names; bf16_layers is replaced.
void apply_recipe_table(Recipe& r, const toml::table& tbl, const std::string& origin) {
  for (const auto& [k, node] : tbl) {
    const std::string key(k.str());
    const std::string where = origin + ": '" + key + "'";
    if (key == "extends") continue;  // resolved by the caller
    if (key == "name")
      r.name = node_text(node, where);
    else if (key == "description")
      r.description = node_text(node, where);
    else if (key == "optimizer")
      r.optimizer = node_text(node, where);
    else if (key == "bf16_layers") {
      const toml::array* arr = node.as_array();
      FP4_CHECK(arr, where, ": expected an array of block indices, e.g. [0, -1]");
      r.bf16_layers.clear();
      for (const auto& el : *arr) {
        FP4_CHECK(el.is_integer(), where, ": entries must be integers (block indices, e.g. [0, -1])");
        const int64_t v = *el.value<int64_t>();
        FP4_CHECK(v >= -kMaxBf16Layer && v <= kMaxBf16Layer, where, ": block index ", v, " is out of range [",
                  -kMaxBf16Layer, ", ", kMaxBf16Layer, "]");
        r.bf16_layers.push_back(static_cast<int>(v));
      }
    } else if (key == "linear") {
      const toml::table* lin = node.as_table();
      FP4_CHECK(lin, where, ": expected a table");
      for (const auto& [lk, lnode] : *lin) {
        const std::string lkey(lk.str());
        const std::string lwhere = origin + ": 'linear." + lkey + "'";
        if (lkey == "rht_signs") {
          set_rht_signs(r, node_text(lnode, lwhere), lwhere);
          continue;
        }
        const int op = operand_index(lkey, origin);
        const toml::table* st = lnode.as_table();
        FP4_CHECK(st, lwhere, ": expected a table of quantizer fields");
        QuantSpec& spec = r.linear.q[op];
        for (const auto& [fk, fnode] : *st) {
          const std::string fw = lwhere.substr(0, lwhere.size() - 1) + "." + std::string(fk.str()) + "'";
          set_spec_field(spec, std::string(fk.str()), node_text(fnode, fw), fw);
        }
      }
    } else if (key == "osci_reset") {
      const toml::table* ot = node.as_table();
      FP4_CHECK(ot, where, ": expected a table");
      for (const auto& [ok, onode] : *ot) {
        const std::string ow = origin + ": 'osci_reset." + std::string(ok.str()) + "'";
        set_osci_field(r.osci_reset, std::string(ok.str()), node_text(onode, ow), ow);
      }
    } else if (key == "out_control") {
      const toml::table* ot = node.as_table();
      FP4_CHECK(ot, where, ": expected a table");
      for (const auto& [ok, onode] : *ot) {
        const std::string ow = origin + ": 'out_control." + std::string(ok.str()) + "'";
        set_out_control_field(r.out_control, std::string(ok.str()), node_text(onode, ow), ow);
      }
    } else if (key == "attention") {
      const toml::table* at = node.as_table();
      FP4_CHECK(at, where, ": expected a table");
      for (const auto& [ak, anode] : *at) {
        const std::string aw = origin + ": 'attention." + std::string(ak.str()) + "'";
        set_attention_field(r.attention, std::string(ak.str()), node_text(anode, aw), aw);
      }
    } else if (key == "lora_svd") {
      const toml::table* lt = node.as_table();
      FP4_CHECK(lt, where, ": expected a table");
      for (const auto& [lk, lnode] : *lt) {
        const std::string lw = origin + ": 'lora_svd." + std::string(lk.str()) + "'";
        set_lora_svd_field(r.lora_svd, std::string(lk.str()), node_text(lnode, lw), lw);
      }
    } else {
      FP4_THROW(origin, ": unknown key '", key,
                "' (expected extends, name, description, optimizer, bf16_layers, linear, osci_reset, "
                "out_control, attention, lora_svd)");
    }
  }
  FP4_CHECK(tbl.contains("name") && !r.name.empty(), origin, ": missing 'name'");
}

toml::table parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e;
    FP4_THROW(origin, ": invalid TOML: ", os.str());
  }
}

std::string read_recipe_file(const fs::path& path) {
  std::ifstream in(path);
  FP4_CHECK(in, "cannot read recipe file ", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string preset_list() {
  std::string known;
  for (const auto& n : recipe_preset_names()) known += (known.empty() ? "" : ", ") + n;
  return known.empty() ? "none found" : known;
}

// The file a preset name or .toml path stands for; `near` (a directory, may be empty) is searched before the
// recipe directory, so a recipe extends its neighbours. Empty when there is none.
fs::path find_recipe_file(const std::string& name_or_path, const fs::path& near) {
  std::error_code ec;
  const fs::path given(name_or_path);
  std::vector<fs::path> candidates;
  if (given.extension() == ".toml") {
    candidates.push_back(given);
    if (!near.empty() && given.is_relative()) candidates.push_back(near / given);
  } else if (!name_or_path.empty() && name_or_path.find('/') == std::string::npos) {
    if (!near.empty()) candidates.push_back(near / (name_or_path + ".toml"));
    candidates.push_back(fs::path(recipe_directory()) / (name_or_path + ".toml"));
  }
  for (const auto& c : candidates)
    if (fs::is_regular_file(c, ec)) return c;
  return {};
}

// The recipe of one file's text with everything it extends applied first. `chain` holds the files being
// resolved (outermost first) to refuse a cycle.
Recipe resolve_recipe(const std::string& text, const std::string& origin, const fs::path& dir,
                      std::vector<std::string>& chain) {
  const toml::table tbl = parse_toml(text, origin);
  Recipe r;
  r.name = "";
  if (const toml::node* parent = tbl.get("extends")) {
    const std::string where = origin + ": 'extends'";
    const std::optional<std::string> name = parent->value<std::string>();
    FP4_CHECK(name && !name->empty(), where, ": expected the name of a preset or a .toml path");
    const fs::path file = find_recipe_file(*name, dir);
    FP4_CHECK(!file.empty(), where, ": no recipe '", *name, "' (presets in ", recipe_directory(), ": ",
              preset_list(), ")");
    std::error_code ec;
    const std::string id = fs::weakly_canonical(file, ec).string();
    if (std::find(chain.begin(), chain.end(), id) != chain.end()) {
      std::string cycle;
      for (const auto& c : chain) cycle += c + " -> ";
      FP4_THROW(where, ": recipes extend each other in a cycle: ", cycle, id);
    }
    chain.push_back(id);
    r = resolve_recipe(read_recipe_file(file), file.string(), file.parent_path(), chain);
    chain.pop_back();
    r.description.clear();  // a description speaks for its own file
  }
  apply_recipe_table(r, tbl, origin);
  return r;
}

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& origin) {
  std::vector<std::string> chain;
  return resolve_recipe(text, origin, {}, chain);
}

void apply_recipe_override(Recipe& r, const std::string& assignment) {
  const auto eq = assignment.find('=');
  FP4_CHECK(eq != std::string::npos, "recipe override '", assignment, "': expected key=value");
  std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  if (key.rfind("recipe.", 0) == 0) key = key.substr(7);
  const std::string where = "recipe override '" + assignment + "'";
  if (key == "name")
    r.name = value;
  else if (key == "optimizer")
    r.optimizer = value;
  else if (key == "bf16_layers")
    r.bf16_layers = parse_layer_list(value, where);
  else if (key == "linear.rht_signs")
    set_rht_signs(r, value, where);
  else if (key.rfind("osci_reset.", 0) == 0)
    set_osci_field(r.osci_reset, key.substr(11), value, where);
  else if (key.rfind("out_control.", 0) == 0)
    set_out_control_field(r.out_control, key.substr(12), value, where);
  else if (key.rfind("attention.", 0) == 0)
    set_attention_field(r.attention, key.substr(10), value, where);
  else if (key.rfind("lora_svd.", 0) == 0)
    set_lora_svd_field(r.lora_svd, key.substr(9), value, where);
  else if (key.rfind("linear.", 0) == 0) {
    const std::string rest = key.substr(7);
    const auto dot = rest.find('.');
    FP4_CHECK(dot != std::string::npos, where, ": expected linear.qN.field");
    const int op = operand_index(rest.substr(0, dot), where);
    set_spec_field(r.linear.q[op], rest.substr(dot + 1), value, where);
  } else {
    FP4_THROW(where, ": unknown key '", key, "' (expected name, optimizer, bf16_layers, linear.rht_signs, ",
              "linear.q1..q6.<field>, osci_reset.<field>, out_control.<field>, attention.q_attn, ",
              "lora_svd.<field>)");
  }
}

void validate(const Recipe& r) {
  const LinearPolicy& p = r.linear;
  for (int i = 0; i < kNumOperands; ++i) {
    const QuantSpec& s = p.q[i];
    const std::string what = "recipe '" + r.name + "' " + kOperandNames[i];
    FP4_CHECK(s.format != QuantFormat::kMxfp8, what,
              ": mxfp8 is the format of OutControl's outlier channels, not of a whole linear operand");
    validate(s, what);
  }
  const auto& q1 = p[Operand::kQ1X];
  const auto& q2 = p[Operand::kQ2W];
  const auto& q3 = p[Operand::kQ3dY];
  const auto& q4 = p[Operand::kQ4Wt];
  const auto& q5 = p[Operand::kQ5dYt];
  const auto& q6 = p[Operand::kQ6Xt];
  const std::string name = "recipe '" + r.name + "'";
  FP4_CHECK(q1.source == QuantSource::kOriginal && q2.source == QuantSource::kOriginal &&
                q3.source == QuantSource::kOriginal && q5.source == QuantSource::kOriginal,
            name, ": only Q4 (W^T) and Q6 (X^T) can have source aligned or reuse");
  // The two operands of a GEMM are transformed with the same signs, so their RHT sizes must agree.
  FP4_CHECK(q1.rht_n == q2.rht_n, name, ": Q1 and Q2 (forward GEMM) need the same rht (", q1.rht_n, " vs ",
            q2.rht_n, ")");
  FP4_CHECK(q3.rht_n == q4.rht_n, name, ": Q3 and Q4 (dX GEMM) need the same rht (", q3.rht_n, " vs ",
            q4.rht_n, ")");
  FP4_CHECK(q5.rht_n == q6.rht_n, name, ": Q5 and Q6 (dW GEMM) need the same rht (", q5.rht_n, " vs ",
            q6.rht_n, ")");
  auto check_reuse = [&](const QuantSpec& bwd, const QuantSpec& fwd, const char* b, const char* f) {
    if (bwd.source == QuantSource::kReuse) {
      FP4_CHECK(fwd.quantized() && fwd.block == BlockShape::k16x16 && fwd.rht_n == 0 && bwd.rht_n == 0, name,
                ": ", b, " = reuse needs ", f, " quantized with 16x16 blocks and no RHT on either");
    }
    if (bwd.source == QuantSource::kAligned)
      FP4_CHECK(fwd.quantized(), name, ": ", b, " = aligned re-quantizes ", f, ", which is not quantized");
  };
  check_reuse(q4, q2, "Q4", "Q2");
  check_reuse(q6, q1, "Q6", "Q1");
  FP4_CHECK(is_known_optimizer(r.optimizer), name, ": optimizer '", r.optimizer,
            "' is not available (available: ", known_optimizers(), ")");
  const OsciResetConfig& o = r.osci_reset;
  if (o.enabled) {
    FP4_CHECK(o.period >= o.window, name, ": osci_reset.period (", o.period,
              ") must be at least its window (", o.window, ")");
    FP4_CHECK(q2.format == QuantFormat::kNvfp4, name, ": osci_reset tracks NVFP4 weights, but Q2 (W) is ",
              to_string(q2.format));
    FP4_CHECK(
        q2.rounding == Rounding::kRtn && q2.rht_n == 0, name,
        ": osci_reset needs Q2 (W) with RTN and no RHT (a weight's grid point must be a function of the "
        "weights)");
  }
  const OutControlConfig& c = r.out_control;
  if (c.enabled) {
    FP4_CHECK(c.ratio > 0 && c.ratio < 1, name, ": out_control.ratio (", c.ratio, ") must lie in (0, 1)");
    FP4_CHECK(c.round_to >= 16 && c.round_to % 16 == 0, name, ": out_control.round_to (", c.round_to,
              ") must be a positive multiple of 16");
    FP4_CHECK(c.calib_start >= 1 && c.calib_steps >= 1, name,
              ": out_control.calib_start and calib_steps must ", "be positive");
    FP4_CHECK(q1.format == QuantFormat::kNvfp4 && q2.format == QuantFormat::kNvfp4, name,
              ": out_control splits the NVFP4 forward, but Q1 (X) is ", to_string(q1.format),
              " and Q2 (W) is ", to_string(q2.format));
    FP4_CHECK(
        q4.source != QuantSource::kReuse && q6.source != QuantSource::kReuse, name,
        ": out_control needs Q4 (W^T) and Q6 (X^T) re-quantized (source aligned or original): reuse would ",
        "multiply the MXFP8 channels without re-quantizing them");
  }
  const LoraSvdConfig& l = r.lora_svd;
  if (l.enabled) {
    // The per-layer bound rank < min(in, out) is checked where the layers are built (it needs the model).
    FP4_CHECK(l.rank >= 1, name, ": lora_svd.rank (", l.rank, ") must be at least 1");
    FP4_CHECK(l.realign_every >= 1, name, ": lora_svd.realign_every (", l.realign_every,
              ") must be at least 1");
    FP4_CHECK(std::isfinite(l.beta) && l.beta != 0, name, ": lora_svd.beta (", l.beta,
              ") must be finite and nonzero");
    FP4_CHECK(p.quantized(), name,
              ": lora_svd protects the quantized linears, but this recipe quantizes none");
    FP4_CHECK(optimizer_resets_factor_moments(r.optimizer), name,
              ": lora_svd resets the optimizer moments of its factors at each realignment, which only ",
              "adamw and the root optimizers implement (got '", r.optimizer, "')");
  }
}

Recipe load_recipe(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  const fs::path path = find_recipe_file(name_or_path, {});
  FP4_CHECK(!path.empty(), "unknown recipe '", name_or_path, "' (presets in ", recipe_directory(), ": ",
            preset_list(), ")");
  std::error_code ec;
  std::vector<std::string> chain = {fs::weakly_canonical(path, ec).string()};
  Recipe r = resolve_recipe(read_recipe_file(path), path.string(), path.parent_path(), chain);
  for (const auto& o : overrides) apply_recipe_override(r, o);
  validate(r);
  return r;
}

std::string to_toml(const Recipe& r) {
  std::ostringstream os;
  os << "name = \"" << r.name << "\"\n";
  if (!r.description.empty()) os << "description = \"" << r.description << "\"\n";
  os << "optimizer = \"" << r.optimizer << "\"\nbf16_layers = [";
  for (size_t i = 0; i < r.bf16_layers.size(); ++i) os << (i ? ", " : "") << r.bf16_layers[i];
  os << "]\n\n[linear]\nrht_signs = \"" << (r.linear.rht_fresh_signs ? "per_call" : "fixed") << "\"\n";
  for (int i = 0; i < kNumOperands; ++i) {
    const QuantSpec& s = r.linear.q[i];
    os << "\n[linear." << kOperandKeys[i] << "]\nformat = \"" << to_string(s.format) << "\"\n";
    if (!s.quantized()) continue;
    os << "block = \"" << to_string(s.block) << "\"\nouter = \"" << to_string(s.outer) << "\"\nrounding = \""
       << to_string(s.rounding) << "\"\nrht = " << s.rht_n << "\nfour_over_six = \""
       << to_string(s.four_over_six) << "\"\nsource = \"" << to_string(s.source)
       << "\"\nsr_headroom = " << (s.sr_headroom ? "true" : "false") << "\n";
  }
  if (r.osci_reset.enabled) {  // only when on, so recipes without it keep their text (checkpoints compare it)
    const OsciResetConfig& o = r.osci_reset;
    os << "\n[osci_reset]\nenabled = true\nwindow = " << o.window
       << "\nthreshold = " << float_text(o.threshold) << "\nperiod = " << o.period
       << "\nstart = " << float_text(o.start) << "\ntrack_fraction = " << float_text(o.track_fraction)
       << "\n";
  }
  if (r.out_control.enabled) {  // only when on, as for osci_reset
    const OutControlConfig& c = r.out_control;
    os << "\n[out_control]\nenabled = true\ncalib_start = " << c.calib_start
       << "\ncalib_steps = " << c.calib_steps << "\nratio = " << float_text(c.ratio)
       << "\nround_to = " << c.round_to << "\n";
  }
  if (r.attention.q_attn) os << "\n[attention]\nq_attn = true\n";  // only when on, as above
  if (r.lora_svd.enabled) {                                        // only when on, as above
    const LoraSvdConfig& l = r.lora_svd;
    os << "\n[lora_svd]\nenabled = true\nrank = " << l.rank << "\nbeta = " << float_text(l.beta)
       << "\nrealign_every = " << l.realign_every << "\n";
  }
  return os.str();
}

}  // namespace fp4
