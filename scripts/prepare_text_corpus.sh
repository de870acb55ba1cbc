#!/usr/bin/env bash
# Prepares the English corpus of the language-model examples: Debian's `fortunes` package (about
# 2.6 MB of quotations, jokes and aphorisms in /usr/share/games/fortunes), installed with apt-get
# when missing, turned into byte-level token files (include/edp/data/tokens.h) with a
# train/validation split:
#   OUT/train.tok        every fortune but every 20th (95 %), files in name order
#   OUT/val.tok          every 20th fortune (5 %): whole fortunes, so no text is in both
#   OUT/corpus.json      sizes and provenance
# Fortunes are separated by a blank line in the token stream. Idempotent: nothing is redone when
# the outputs exist and are newer than the package's files.
#   scripts/prepare_text_corpus.sh [OUT]
# OUT defaults to $EDP_CORPUS_DIR, else .cache/corpus of the source tree the script is in, else
# (the installed copy, <prefix>/share/edp/scripts) ${XDG_CACHE_HOME:-~/.cache}/edp/corpus: the
# places gpt_text looks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${1:-}" ]; then
  OUT=$(realpath -m -- "$1")
elif [ -n "${EDP_CORPUS_DIR:-}" ]; then
  OUT=$(realpath -m -- "$EDP_CORPUS_DIR")
elif [ -f "$here/CMakeLists.txt" ] && [ -d "$here/src" ]; then
  OUT=$here/.cache/corpus
else
  OUT=${XDG_CACHE_HOME:-$HOME/.cache}/edp/corpus
fi
cd "$here"
SRC=/usr/share/games/fortunes
if [ ! -d "$SRC" ]; then
  if [ -f "$here/CMakeLists.txt" ]; then
    ./scripts/setup.sh fortunes >&2
  else  # the installed copy: only the corpus's package
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq --no-install-recommends fortunes >&2
  fi
fi
mkdir -p "$OUT"
if [ -s "$OUT/train.tok" ] && [ -s "$OUT/val.tok" ] && [ -z "$(find "$SRC" -newer "$OUT/train.tok" -print -quit)" ]; then
  echo "prepare_text_corpus: $OUT is up to date" >&2
  exit 0
fi
python3 - "$SRC" "$OUT" <<'PY'
import json, os, struct, subprocess, sys
src, out = sys.argv[1], sys.argv[2]
files = sorted(f for f in os.listdir(src)
               if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(src, f)))
train, val, n = [], [], 0
for name in files:
    text = open(os.path.join(src, name), "rb").read()
    for fortune in text.split(b"\n%\n"):
        fortune = fortune.strip(b"\n%")
        if not fortune:
            continue
        (val if n % 20 == 19 else train).append(fortune + b"\n\n")
        n += 1
def write(path, chunks):
    data = b"".join(chunks)  # byte-level tokens: id = byte value, vocabulary 256, 1 byte each
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"EDPTOK01" + struct.pack("<IIQ", 1, 256, len(data)) + data)
        f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(data)
nt, nv = write(os.path.join(out, "train.tok"), train), write(os.path.join(out, "val.tok"), val)
version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "fortunes"], capture_output=True, text=True).stdout
info = {"corpus": "fortunes", "debian_package": "fortunes", "version": version, "source": src, "files": len(files),
        "fortunes": n, "train_tokens": nt, "val_tokens": nv, "tokenizer": "bytes (vocabulary 256)",
        "split": "every 20th fortune to validation"}
json.dump(info, open(os.path.join(out, "corpus.json"), "w"), indent=1)
print(f"prepare_text_corpus: {n} fortunes from {len(files)} files: {nt} train / {nv} validation tokens in {out}",
      file=sys.stderr)
PY
