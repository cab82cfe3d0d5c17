# pick_data: the token shards the data-parallel scripts train on (sourced; needs $B and $out): $DATA, else
# the full GPT-2 set, else a small one prepared now from the corpus's Gutenberg books (seconds).
pick_data() {
  if [ -n "${DATA:-}" ]; then echo "$DATA"; return; fi
  if [ -f data/shards-gpt2/manifest.json ]; then echo data/shards-gpt2; return; fi
  local small=data/shards-gpt2-small
  if [ ! -f "$small/manifest.json" ]; then
    [ -d data/corpus ] || { mkdir -p data && tar xJf .carry/corpus.tar.xz -C data; } >&2
    "$B/fp4train" prepare --input data/corpus/train/gutenberg --val data/corpus/val/gutenberg \
      --tokenizer data/tokenizers/gpt2 --out "$small" >"$out/prepare.log" 2>&1 || { tail -3 "$out/prepare.log" >&2; return 1; }
  fi
  echo "$small"
}
