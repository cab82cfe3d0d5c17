#!/usr/bin/env python3
"""Checks fp4train's GPT-2 tokenizer against tiktoken and Hugging Face tokenizers, offline.

For each text file, the ids fp4train gives (from tests/reference/tokenize_dump, run here with
--tokenize-dump, or read from a dump with --ids) are compared with
  * tiktoken: an Encoding built from the local encoder.json + vocab.bpe and the GPT-2 split pattern;
  * tokenizers: models.BPE from the same files with the ByteLevel pre-tokenizer and decoder;
  * optionally a reference dump given with --reference-ids (e.g. from another encoder).
Differences are reported as regions of the text where the two tokenizations disagree (first few
in full), then one summary line per reference. Exit status: 0 all agree, 1 a mismatch, 2 nothing
could be compared (no reference available) or bad input.

  check_tokenizer.py --gpt2-dir data/tokenizers/gpt2 --tokenize-dump build/tokenize_dump \\
      --text data/corpus/val/sotu/sotu-1990s.txt --max-bytes 4000000
  check_tokenizer.py --gpt2-dir DIR --text sample.txt --ids sample.u32 --ids-format u32
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# The GPT-2 pre-tokenizer pattern (the same one src/data/pretokenizer.cpp compiles).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def byte_decoder():
    """GPT-2's vocabulary character -> byte map (printable Latin-1 as itself, the rest from U+0100)."""
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table = {chr(b): b for b in keep}
    shifted = 0
    for b in range(256):
        if b not in table.values():
            table[chr(0x100 + shifted)] = b
            shifted += 1
    return table


def load_vocab(gpt2_dir):
    """id -> bytes of the GPT-2 vocabulary in gpt2_dir, and the paths of its two files."""
    vocab_path = os.path.join(gpt2_dir, "encoder.json")
    merges_path = os.path.join(gpt2_dir, "vocab.bpe")
    for p in (vocab_path, merges_path):
        if not os.path.isfile(p):
            sys.exit(f"check_tokenizer: {p} is missing (scripts/fetch_corpus.sh puts the GPT-2 files there)")
    with open(vocab_path, encoding="utf-8") as f:
        encoder = json.load(f)
    dec = byte_decoder()
    id_bytes = {}
    for token, i in encoder.items():
        id_bytes[i] = token.encode() if token == EOT else bytes(dec[c] for c in token)
    return id_bytes, encoder, vocab_path, merges_path


def read_ids(path, fmt):
    with open(path, "rb") as f:
        data = f.read()
    if fmt in ("u16", "u32"):
        width = 2 if fmt == "u16" else 4
        if len(data) % width:
            sys.exit(f"check_tokenizer: {path} has {len(data)} bytes, not a multiple of {width} ({fmt} ids)")
        return list(memoryview(data).cast("H" if width == 2 else "I"))
    return [int(x) for x in data.split()]


def sample_text(path, max_bytes):
    """The file's first max_bytes bytes, cut back to the end of a line; must be UTF-8."""
    with open(path, "rb") as f:
        data = f.read()
    if max_bytes and len(data) > max_bytes:
        cut = data.rfind(b"\n", 0, max_bytes)
        data = data[: cut + 1 if cut > 0 else max_bytes]
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as e:
        sys.exit(f"check_tokenizer: {path} is not UTF-8 at byte {e.start} (tiktoken and tokenizers take str): "
                 "pass a UTF-8 file")


def spans(ids, id_bytes):
    """(start byte, end byte, id) of each token."""
    out, pos = [], 0
    for i in ids:
        if i not in id_bytes:
            raise ValueError(f"id {i} is not in the vocabulary")
        n = len(id_bytes[i])
        out.append((pos, pos + n, i))
        pos += n
    return out


def mismatch_regions(ours, theirs, id_bytes):
    """Regions where two tokenizations of the same bytes differ: (start, end, our ids, their ids).

    Both token lists are walked by byte offset; a region runs from the first differing token to the
    next offset where both have a token boundary."""
    a, b = spans(ours, id_bytes), spans(theirs, id_bytes)
    regions, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            i += 1
            j += 1
            continue
        start, i0, j0 = min(a[i][0], b[j][0]), i, j
        end_a, end_b = a[i][1], b[j][1]
        i += 1
        j += 1
        while end_a != end_b:
            if end_a < end_b and i < len(a):
                end_a = a[i][1]
                i += 1
            elif j < len(b):
                end_b = b[j][1]
                j += 1
            else:
                break
        regions.append((start, max(end_a, end_b), ours[i0:i], theirs[j0:j]))
    if i < len(a) or j < len(b):
        tail_a, tail_b = ours[i:], theirs[j:]
        start = a[i][0] if i < len(a) else b[j][0]
        regions.append((start, max(a[-1][1] if a else 0, b[-1][1] if b else 0), tail_a, tail_b))
    return regions


def tiktoken_encoder(vocab_path, merges_path, encoder):
    try:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", "")  # read the local files, cache nothing
        import tiktoken
        import tiktoken.load
    except ImportError:
        return None, "tiktoken is not installed"
    try:
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=merges_path, encoder_json_file=vocab_path)
    except ImportError as e:
        # Some versions read local paths through blobfile. For GPT-2 the ranks are the encoder.json
        # ids (data_gym_to_mergeable_bpe_ranks itself asserts this), so build them from there.
        dec = byte_decoder()
        ranks = {bytes(dec[c] for c in t): i for t, i in encoder.items() if t != EOT}
        print(f"check_tokenizer: tiktoken could not read local files ({e}); ranks from encoder.json", file=sys.stderr)
    enc = tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={EOT: encoder[EOT]})
    return (lambda text: enc.encode_ordinary(text)), f"tiktoken {getattr(tiktoken, '__version__', '?')}"


def hf_encoder(vocab_path, merges_path):
    try:
        import tokenizers
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        return None, "tokenizers is not installed"
    tok = Tokenizer(models.BPE.from_file(vocab_path, merges_path))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return (lambda text: tok.encode(text).ids), f"tokenizers {tokenizers.__version__}"


def our_ids(args, path, data, tmpdir):
    if args.ids:
        return read_ids(args.ids, args.ids_format)
    sample = os.path.join(tmpdir, "sample.txt")
    out = os.path.join(tmpdir, "ids.u32")
    with open(sample, "wb") as f:
        f.write(data)
    cmd = [args.tokenize_dump, args.gpt2_dir, sample, "--format", "u32", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_tokenizer: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return read_ids(out, "u32")


def show(region, text_bytes, id_bytes):
    start, end, mine, theirs = region
    ctx = text_bytes[max(0, start - 30): end + 30].decode("utf-8", "replace")
    pieces = lambda ids: [id_bytes[i].decode("utf-8", "replace") for i in ids]
    return (f"  bytes [{start}, {end}) in ...{ctx!r}...\n"
            f"    fp4train: {mine} {pieces(mine)}\n"
            f"    reference: {theirs} {pieces(theirs)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2-dir", required=True, help="folder with encoder.json and vocab.bpe")
    ap.add_argument("--text", required=True, action="append", help="UTF-8 text file (repeatable)")
    ap.add_argument("--tokenize-dump", help="path of the tokenize_dump executable (runs fp4train's tokenizer)")
    ap.add_argument("--ids", help="fp4train's ids of the (single, whole) --text file, instead of --tokenize-dump")
    ap.add_argument("--ids-format", choices=["text", "u16", "u32"], default="text")
    ap.add_argument("--reference-ids", help="another encoder's ids of the (single, whole) --text file")
    ap.add_argument("--reference-format", choices=["text", "u16", "u32"], default="text")
    ap.add_argument("--max-bytes", type=int, default=8 << 20, help="bytes of each file to check (0: all)")
    ap.add_argument("--show", type=int, default=5, help="mismatch regions to print per reference")
    args = ap.parse_args()
    if bool(args.ids) == bool(args.tokenize_dump):
        ap.error("give exactly one of --tokenize-dump and --ids")
    if (args.ids or args.reference_ids) and len(args.text) != 1:
        ap.error("--ids and --reference-ids describe one --text file")
    if args.ids or args.reference_ids:
        args.max_bytes = 0  # the dumps cover the whole file

    id_bytes, encoder, vocab_path, merges_path = load_vocab(args.gpt2_dir)
    references = []
    for make in (lambda: tiktoken_encoder(vocab_path, merges_path, encoder), lambda: hf_encoder(vocab_path, merges_path)):
        fn, label = make()
        if fn is None:
            print(f"check_tokenizer: {label}: skipped", file=sys.stderr)
        else:
            references.append((label, fn))
    if args.reference_ids:
        ref = read_ids(args.reference_ids, args.reference_format)
        references.append((f"ids from {args.reference_ids}", lambda text: ref))
    if not references:
        print("check_tokenizer: no reference to compare with (install tiktoken or tokenizers, or give --reference-ids)",
              file=sys.stderr)
        return 2

    failed = False
    totals = {label: [0, 0, 0] for label, _ in references}  # tokens, regions, seconds
    with tempfile.TemporaryDirectory() as tmpdir:
        for path in args.text:
            data, text = sample_text(path, args.max_bytes)
            mine = our_ids(args, path, data, tmpdir)
            decoded = b"".join(id_bytes[i] for i in mine if i in id_bytes)
            if decoded != data or any(i not in id_bytes for i in mine):
                print(f"check_tokenizer: {path}: fp4train's ids do not decode to the text", file=sys.stderr)
                failed = True
                continue
            for label, fn in references:
                t0 = time.perf_counter()
                theirs = list(fn(text))
                totals[label][2] += time.perf_counter() - t0
                totals[label][0] += len(theirs)
                try:
                    regions = mismatch_regions(mine, theirs, id_bytes)
                except ValueError as e:
                    print(f"check_tokenizer: {path}: {label}: {e}", file=sys.stderr)
                    failed = True
                    continue
                totals[label][1] += len(regions)
                if regions:
                    failed = True
                    print(f"{path}: {label}: {len(regions)} mismatched regions "
                          f"({len(mine)} fp4train ids, {len(theirs)} reference ids); first {min(args.show, len(regions))}:")
                    for r in regions[: args.show]:
                        print(show(r, data, id_bytes))
                else:
                    print(f"{path}: {label}: {len(mine)} ids identical ({len(data)} bytes)")
    for label, (tokens, regions, secs) in totals.items():
        verdict = "OK" if regions == 0 else "MISMATCH"
        print(f"summary: {label}: {verdict}: {regions} mismatched regions over {tokens} tokens of "
              f"{len(args.text)} file(s) ({secs:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
