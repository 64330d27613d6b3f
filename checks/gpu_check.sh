#!/usr/bin/env bash
# The check of podium's training on a GPU, prepared to run once in a few minutes of GPU time.
#
#   bash checks/gpu_check.sh prepare   # on a machine with the venv and PyPI: .gpu/ holds the
#                                          # wheels a bare GPU machine lacks and the tokenizer
#   bash checks/gpu_check.sh cpu       # the same runs with no GPU: 2 processes under torchrun
#   bash checks/gpu_check.sh gpu       # on one GPU: accelerate launch, DeepSpeed ZeRO-3, bf16
#
# The runs: a tiny Llama (built from a config with the bundled tokenizer) trains 2 GRPO steps
# on sums with grammar-held rollouts and function workers, checkpointing every step; --resume
# takes it to step 3; 4 steps with a worker 2 s late, synchronous and overlapped ([grpo]
# overlap; the report has each run's generation, waiting and training a step); under DeepSpeed
# ZeRO-3 (cpu: 2 processes on gloo, DeepSpeed installed for the check), a probe says whether
# the policy was partitioned as it loaded, and 2 overlapped steps checkpointed every step are
# taken to step 4 by --resume; the recursion fine-tune runs from its final/; where vLLM is
# installed, 2 steps with grammar-held rollouts by colocated vLLM; `podium ask` reloads final/
# and answers.
# Every figure goes to one log, $OUT/gpu_check.log (else runs/gpu_check/gpu_check.log), and
# report.json beside it. The GPU machine fetches nothing: it installs the carried wheels;
# cpu fetches DeepSpeed from PyPI into $WORK-deepspeed where the venv lacks it.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-cpu}
GPU_DIR=.gpu
LOG_DIR=${OUT:-runs/gpu_check}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/gpu_check.log
WORK=${WORK:-/tmp/podium-gpu-check}
PY=${PY:-python3}
[ -x .venv/bin/python ] && [ "$MODE" != gpu ] && PY=.venv/bin/python

# The packages a bare GPU image lacks (it has torch, accelerate, aiohttp, pyarrow, rich, typer,
# ...: docs/training.md), or has at other versions than podium's: each is carried at the
# version this machine's venv resolved (podium's pins), so the GPU runs what the tests ran.
# hjson is DeepSpeed's alone (not in the venv): its newest wheel.
PACKAGES="trl datasets dill multiprocess pydantic pydantic_core annotated-types typing-inspection
typing_extensions xgrammar apache-tvm-ffi openai jiter httpx2 httpcore2 truststore sniffio
distro transformers tokenizers"
DEEPSPEED=deepspeed==0.19.8

prepare() {
    mkdir -p "$GPU_DIR/wheels"
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    local specs=hjson version
    for name in $PACKAGES; do
        version=$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))") ||
            { echo "$name is not installed in $PY: make venv first"; exit 1; }
        specs="$specs $name==$version"
    done
    rm -rf "$GPU_DIR/wheels"; mkdir -p "$GPU_DIR/wheels"
    for spec in $specs; do
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform manylinux1_x86_64 -d "$GPU_DIR/wheels" "$spec" || { echo "no wheel: $spec"; exit 1; }
    done
    # DeepSpeed is a source archive: built here as a pure-Python wheel, its ops left to JIT
    # (none is used: the optimizer is torch's AdamW, handed to DeepSpeed by the Trainer)
    DS_BUILD_OPS=0 DS_SKIP_CUDA_CHECK=1 "$PY" -m pip wheel -q --no-deps --no-build-isolation \
        -w "$GPU_DIR/wheels" "$DEEPSPEED" || { echo "deepspeed wheel failed"; exit 1; }
    "$PY" checks/gpu_check.py tokenizer "$GPU_DIR/tokenizer"
    du -sh "$GPU_DIR"; ls "$GPU_DIR/wheels"
}

install_wheels() {  # on the GPU machine: the carried wheels into /tmp/site
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$GPU_DIR"/wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
}

step() {  # step NAME COMMAND...: run, time and log one part
    local name=$1; shift
    echo "== $name: $*"
    local start=$SECONDS
    "$@"
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s"
    return $rc
}

zero3_yaml() {  # zero3_yaml PROCESSES PRECISION USE_CPU: accelerate's DeepSpeed ZeRO-3 config
    cat > "$WORK-zero3.yaml" <<EOF
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  zero3_init_flag: true
  zero3_save_16bit_model: true
  offload_optimizer_device: none
  offload_param_device: none
mixed_precision: '$2'
machine_rank: 0
num_machines: 1
num_processes: $1
main_training_function: main
rdzv_backend: static
same_network: true
use_cpu: $3
EOF
}

deepspeed_cpu() {  # cpu: DeepSpeed (its CPU accelerator, gloo) in $WORK-deepspeed unless $PY has it
    "$PY" -c "import deepspeed" 2>/dev/null && return 0
    local site=$WORK-deepspeed
    PYTHONPATH=$site "$PY" -c "import deepspeed" 2>/dev/null ||
        DS_BUILD_OPS=0 "$PY" -m pip install -q --no-deps --no-build-isolation --target "$site" \
            "$DEEPSPEED" hjson msgpack ninja py-cpuinfo nvidia-ml-py einops || return 1
    export PYTHONPATH=$site:$PYTHONPATH
}

run_all() {
    local launch zero3=()
    if [ "$MODE" = gpu ]; then
        install_wheels
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
        zero3_yaml 1 bf16 false
        launch=("$PY" -m accelerate.commands.launch --config_file "$WORK-zero3.yaml")
        zero3=("${launch[@]}")
    else
        export PYTHONPATH=$PWD OMP_NUM_THREADS=1
        launch=("$PY" -m torch.distributed.run --nproc_per_node 2)
        if deepspeed_cpu; then
            zero3_yaml 2 no true
            zero3=("$PY" -m accelerate.commands.launch --config_file "$WORK-zero3.yaml")
        fi
    fi
    export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    "$PY" -c "import torch, transformers, trl, accelerate; print('torch', torch.__version__, \
'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'trl', \
trl.__version__, 'accelerate', accelerate.__version__)"
    local tok=$GPU_DIR/tokenizer
    [ -d "$tok" ] || { "$PY" checks/gpu_check.py tokenizer "$WORK-tokenizer"; tok=$WORK-tokenizer; }
    rm -rf "$WORK"
    step setup "$PY" checks/gpu_check.py setup "$WORK" "$tok" || return 1
    local failed=0
    step train "${launch[@]}" -m podium.cli.main train --config "$WORK/train.toml" || failed=1
    step resume "${launch[@]}" -m podium.cli.main train --config "$WORK/train.toml" \
        --set grpo.max_steps=3 --resume || failed=1
    # a worker 2 s late, 4 steps waiting for it, then 4 overlapped: the report has each
    # step's generation, wait and training
    step late-sync env PODIUM_TEST_LATE_S=2 "${launch[@]}" -m podium.cli.main train \
        --config "$WORK/late.toml" --set grpo.max_steps=4 --set grpo.save_steps=4 || failed=1
    step late-overlap env PODIUM_TEST_LATE_S=2 "${launch[@]}" -m podium.cli.main train \
        --config "$WORK/late.toml" --set grpo.max_steps=4 --set grpo.save_steps=4 \
        --set grpo.overlap=true --set "output.dir=$WORK/out-overlap" || failed=1
    if [ ${#zero3[@]} -gt 0 ]; then
        step zero3 "${zero3[@]}" checks/gpu_check.py zero3 "$WORK/train.toml" || failed=1
        # overlapped under ZeRO-3, checkpointed every step, then taken further by --resume
        step zero3-overlap env PODIUM_TEST_LATE_S=2 "${zero3[@]}" -m podium.cli.main train \
            --config "$WORK/late.toml" --set grpo.overlap=true --set grpo.max_steps=2 \
            --set grpo.save_steps=1 --set "output.dir=$WORK/out-zero3" || failed=1
        step zero3-resume env PODIUM_TEST_LATE_S=2 "${zero3[@]}" -m podium.cli.main train \
            --config "$WORK/late.toml" --set grpo.overlap=true --set grpo.max_steps=4 \
            --set grpo.save_steps=1 --set "output.dir=$WORK/out-zero3" --resume || failed=1
    else
        echo "== zero3: FAILED (DeepSpeed could not be installed for $PY: pip needs PyPI)"
        failed=1
    fi
    step recursion "${launch[@]}" -m podium.cli.main train --config "$WORK/recursion.toml" \
        || failed=1
    # Grammar-held rollouts generated by colocated vLLM (one process). vLLM's wheel is larger
    # than what this check carries: the step runs where vLLM is already installed
    # (PY=.venv-vllm/bin/python for its CPU build) and says so where it is not.
    if "$PY" -c "import vllm" 2>/dev/null; then
        step vllm "$PY" -m podium.cli.main train --config "$WORK/train.toml" \
            --set vllm.enabled=true --set vllm.mode=colocate \
            --set vllm.gpu_memory_utilization=0.3 \
            --set grpo.max_steps=2 \
            --set "output.dir=$WORK/out-vllm" || failed=1
    else
        echo "== vllm: skipped (vLLM is not installed for $PY; its wheel is larger than what" \
             "this check carries)"
    fi
    step reload "$PY" -m podium.cli.main ask "What is 4 + 7?" --conductor "$WORK/out/final" \
        --pool "$WORK/pool.toml" --no-cache || failed=1
    [ "$MODE" = gpu ] && nvidia-smi --query-gpu=memory.used --format=csv
    step report "$PY" checks/gpu_check.py report "$WORK"
    cp "$WORK/report.json" "$LOG_DIR/" 2>/dev/null
    echo "== gpu_check $MODE: $([ $failed = 0 ] && echo passed || echo FAILED)"
    return $failed
}

case "$MODE" in
    prepare) prepare ;;
    cpu|gpu) run_all 2>&1 | tee "$LOG"; exit "${PIPESTATUS[0]}" ;;
    *) echo "usage: bash checks/gpu_check.sh prepare|cpu|gpu"; exit 2 ;;
esac
