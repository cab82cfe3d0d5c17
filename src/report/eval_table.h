// The evaluation suite's results (eval.json of `fp4train eval`, in each run directory) as a Markdown
// table for `fp4train report`: one row per run, pooled validation perplexity, zero-shot accuracies, and
// the perplexity of each held-out source.
#pragma once

#include <string>
#include <vector>

namespace fp4 {

// Empty when no run has an eval.json. Throws fp4::Error naming a malformed file.
std::string eval_suite_table(const std::vector<std::string>& run_dirs,
                             const std::vector<std::string>& labels);

}  // namespace fp4
