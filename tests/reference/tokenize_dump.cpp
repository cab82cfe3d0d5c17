// tokenize_dump: prints the token ids fp4train's tokenizer gives for a file, for comparison with
// other tokenizers (scripts/check_tokenizer.py).
//   tokenize_dump <tokenizer spec> <text file> [--format text|u32] [--out PATH]
// text: ids separated by spaces, one line; u32: little-endian uint32 per id. The file is encoded as
// one text (no end-of-text added). Exits 1 with a message on error, 2 if decode(encode(x)) != x.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizer.h"

int main(int argc, char** argv) {
  try {
    FP4_CHECK(argc >= 3,
              "usage: tokenize_dump <tokenizer spec> <text file> [--format text|u32] [--out PATH]");
    std::string format = "text";
    std::string out_path;
    for (int i = 3; i < argc; ++i) {
      std::string a = argv[i];
      FP4_CHECK(i + 1 < argc, "tokenize_dump: ", a, " needs a value");
      if (a == "--format") {
        format = argv[++i];
      } else if (a == "--out") {
        out_path = argv[++i];
      } else {
        FP4_THROW("tokenize_dump: unknown argument ", a);
      }
    }
    FP4_CHECK(format == "text" || format == "u32", "tokenize_dump: --format must be text or u32, got ",
              format);
    auto tok = fp4::load_tokenizer(argv[1]);
    std::string text = fp4::read_whole_file(argv[2]);
    auto ids = tok->encode(text);
    std::ofstream file;
    if (!out_path.empty()) {
      file.open(out_path, std::ios::binary);
      FP4_CHECK(file.good(), "tokenize_dump: cannot create ", out_path);
    }
    std::ostream& out = out_path.empty() ? std::cout : file;
    if (format == "u32") {
      for (int32_t id : ids) {
        uint32_t v = static_cast<uint32_t>(id);
        out.write(reinterpret_cast<const char*>(&v), sizeof(v));
      }
    } else {
      for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
      out << '\n';
    }
    out.flush();
    FP4_CHECK(out.good(), "tokenize_dump: cannot write the ids");
    std::fprintf(stderr, "tokenize_dump: %s: %zu bytes -> %zu tokens (%s)\n", argv[2], text.size(),
                 ids.size(), tok->name().c_str());
    if (tok->decode(ids) != text) {
      std::fprintf(stderr, "tokenize_dump: decode(encode(text)) differs from the text\n");
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
