// hf_tokenizer_files: writes the tokenizer files `fp4train export` would write for a tokenizer spec
// (tokenizer.json, tokenizer_config.json, ...) into a directory, without a checkpoint, so a tokenizer
// whose runs are elsewhere can be checked against transformers (check_export_transformers.py).
//   hf_tokenizer_files <tokenizer spec> <out dir>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data/tokenizer.h"
#include "train/export_hf_tokenizer.h"
#include "train/file_io.h"

int main(int argc, char** argv) {
  try {
    FP4_CHECK(argc == 3, "usage: hf_tokenizer_files <tokenizer spec> <out dir>");
    fp4::ModelConfig cfg = fp4::model_preset("tiny");
    cfg.vocab_real = fp4::load_tokenizer(argv[1])->vocab_size();  // the tokenizer alone decides
    cfg.max_seq_len = 1024;
    const fp4::HfTokenizerFiles t = fp4::hf_tokenizer_files(argv[1], cfg);
    std::filesystem::create_directories(argv[2]);
    for (const auto& [name, text] : t.files)
      fp4::write_file_synced(std::filesystem::path(argv[2]) / name, text);
    std::printf("%d\n", t.eot);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_tokenizer_files: %s\n", e.what());
    return 1;
  }
}
