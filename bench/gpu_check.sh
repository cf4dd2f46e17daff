#!/usr/bin/env bash
# The GPU check: everything the CPU-only CI cannot prove, in one call of a few minutes on a CUDA machine.
#
#   bash bench/gpu_check.sh            # from the repository root, on a machine with a CUDA GPU
#
# It imports the package from src/ (no install, no network), then:
#   1. fused attention: our MultiHeadAttention runs on the efficient/flash SDPA kernels in bf16, with masks;
#   2. training on CUDA: configs/tiny.toml (2 epochs) with bf16 autocast; the same run stopped after 10
#      steps and resumed to the end must end with the same weights; a run with torch.compile;
#   3. DDP with NCCL: torchrun on 2 GPUs (only when the machine has 2 or more);
#   4. the paper's base model on Multi30k (configs/multi30k-base.toml) for 150 steps: tokens/s;
#   5. bench/train_step.py on CUDA (fp32 and bf16): ours versus torch.nn.Transformer;
#   6. decoding on CUDA: the key/value cache gives the tokens of full recomputation (greedy and beam), and
#      bench/decode.py --device cuda (cache ratios; beam-4 throughput with the shipped model).
# Results are printed and written under $OUT (or a temporary folder). Exit status 0 = every check passed.
#
# The corpora are in the repository's data/ (tracked, so they travel with the working tree); the loaders
# find them there through the package in src/ (PYTHONPATH below).
#
# The package needs safetensors. If the GPU machine lacks it and has no network, carry a wheel along:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl safetensors==0.8.0
# This script installs wheels found in .whl/ into a temporary folder when an import fails.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
status=0
section() { echo; echo "=== $* ($(date +%T))"; }
check() {  # check NAME COMMAND...: run, report PASS/FAIL, remember failures
    local name="$1"; shift
    if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; status=1; fi
}

section "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if ! "$PY" -c "import safetensors, tqdm, sentencepiece" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-check-site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/gpu-check-site"
fi
"$PY" - <<'EOF' || { echo "FAIL: the package does not import; see above"; exit 1; }
import sys, torch, transformer, transformer.train
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPUs {torch.cuda.device_count()}, bf16 {torch.cuda.is_available() and torch.cuda.is_bf16_supported()}")
print("transformer from", transformer.__file__)
assert torch.cuda.is_available(), "no CUDA GPU visible"
EOF
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")

section "1. fused attention kernels with our masks, bf16"
check "fused attention" "$PY" - <<'EOF'
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformer.masking import causal_mask, padding_mask
from transformer.model import Transformer, TransformerConfig
torch.manual_seed(0)
cfg = TransformerConfig(src_vocab_size=1000, tgt_vocab_size=1000, d_model=256, num_heads=8, num_encoder_layers=2,
                        num_decoder_layers=2, d_ff=1024, dropout=0.0)
model = Transformer(cfg).cuda()
src = torch.randint(4, 1000, (16, 30), device="cuda"); src[:, 25:] = 0
tgt = torch.randint(4, 1000, (16, 20), device="cuda"); tgt[:, 15:] = 0
with torch.no_grad():
    ref = model(src, tgt).float()  # float32, default kernel choice
ok = False
for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
    try:
        with sdpa_kernel([backend]), torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(src, tgt)
            out.float().sum().backward()
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        print(f"  {backend.name:<20} runs our masked attention in bf16, max relative difference to fp32 {err:.3f}")
        ok = ok or (backend != SDPBackend.MATH and err < 0.05)
    except RuntimeError as e:
        print(f"  {backend.name:<20} not usable here: {str(e).splitlines()[0][:100]}")
    model.zero_grad()
assert ok, "no fused kernel ran our attention"
EOF

section "2. training on CUDA: bf16, checkpoint, exact resume, torch.compile"
run_tiny() {  # run_tiny OUT_DIR EXTRA_ARGS...
    local dir="$1"; shift
    "$PY" -m transformer train --config configs/tiny.toml --device cuda --out-dir "$dir" --no-progress "$@"
}
check "tiny: both epochs in one go" run_tiny "$OUT/tiny-full"
check "tiny: stopped after 10 steps (mid-epoch), then --resume to the end" bash -c "$(declare -f run_tiny); PY='$PY'; \
    run_tiny '$OUT/tiny-resumed' --max-steps 10 && run_tiny '$OUT/tiny-resumed' --resume"
check "the resumed run ends with the same weights (tolerance 1e-2 relative: GPU kernels need not be bitwise deterministic)" "$PY" - "$OUT" <<'EOF'
import sys, torch
from pathlib import Path
from safetensors.torch import load_file
from transformer.train import latest_checkpoint, read_metrics
out = Path(sys.argv[1])
a, b = (load_file(str(latest_checkpoint(out / d / "checkpoints") / "model.safetensors")) for d in ("tiny-full", "tiny-resumed"))
worst = max(((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-12)).item() for k in a)
exact = all(torch.equal(a[k], b[k]) for k in a)
rows = [r for r in read_metrics(out / "tiny-full") if r["kind"] == "step"]
assert len(rows) > 20, "tiny should run 2 epochs"
print(f"  bitwise equal: {exact}; worst relative difference {worst:.2e}; loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}; "
      f"tokens/s (last step) {rows[-1]['tokens_per_s']:.0f}")
assert worst < 1e-2 and rows[-1]["loss"] < rows[0]["loss"]
EOF
check "tiny with torch.compile" timeout 300 "$PY" - "$OUT" <<'EOF'
import sys, dataclasses
from transformer.train import TrainConfig, train
c = TrainConfig.from_toml("configs/tiny.toml")
c = dataclasses.replace(c, out_dir=sys.argv[1] + "/tiny-compiled", device="cuda", compile=True, progress=False)
c.optim.max_steps = 20
r = train(c)
print(f"  compiled run: {r.step} steps, last epoch row {r.history[-1]}")
EOF

section "3. DDP over NCCL"
if [ "$NGPU" -ge 2 ]; then
    check "torchrun, 2 GPUs" timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
        -m transformer train --config configs/tiny.toml --out-dir "$OUT/tiny-ddp" --max-steps 20 --no-progress
else
    echo "skipped: $NGPU GPU (NCCL needs one GPU per process); the gloo path is tested on the CPU by tests/test_train.py"
fi

section "4. the paper's base model on Multi30k, 150 steps"
check "multi30k-base, 150 steps" timeout 420 "$PY" -m transformer train --config configs/multi30k-base.toml \
    --out-dir "$OUT/base" --max-steps 150 --no-progress
"$PY" - "$OUT" <<'EOF' || true
import sys, statistics
from transformer.train import read_metrics
rows = [r for r in read_metrics(sys.argv[1] + "/base") if r["kind"] == "step"]
tps = statistics.median(r["tokens_per_s"] for r in rows[20:])
print(f"  median {tps:,.0f} target tokens/s; loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}; "
      f"an epoch of Multi30k (~443k target tokens) takes about {443e3 / tps:.0f} s at that rate")
EOF

section "5. benchmark: ours versus torch.nn.Transformer on CUDA"
check "bench fp32" timeout 300 "$PY" bench/train_step.py --device cuda
check "bench bf16" timeout 300 "$PY" bench/train_step.py --device cuda --bf16

section "6. decoding on CUDA: the cache equals recomputation; throughput"
check "cache == recompute on CUDA" timeout 300 "$PY" - <<'EOF'
import torch
from transformer.decoding import beam_search, greedy_decode
from transformer.model import Transformer, TransformerConfig
for norm_first in (False, True):
    torch.manual_seed(0)
    m = Transformer(TransformerConfig(60, 70, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=3,
                                      d_ff=64, dropout=0.0, max_len=48, norm_first=norm_first)).double().cuda().eval()
    src = torch.randint(4, 60, (8, 9), device="cuda")
    for search in (lambda **kw: [[h] for h in greedy_decode(m, src, **kw)], lambda **kw: beam_search(m, src, beam_size=4, **kw)):
        a, b = search(use_cache=True), search(use_cache=False)
        assert [[h.tokens for h in n] for n in a] == [[h.tokens for h in n] for n in b]
        assert max(abs(x[0].log_prob - y[0].log_prob) for x, y in zip(a, b)) < 1e-9
print("  same tokens, log P within 1e-9, both norm placements, greedy and beam")
EOF
check "bench/decode.py on CUDA" timeout 420 "$PY" bench/decode.py --device cuda

section "done"
[ "$status" -eq 0 ] && echo "ALL GPU CHECKS PASSED" || echo "SOME GPU CHECKS FAILED"
exit "$status"
