#!/usr/bin/env python3
"""PyTorch's mixed/float32 training-step ratio for the workloads of `examples/bench`.

The same models as `examples/bench/models.rs` (the Keras guide's MLP 784-4096-4096-10 at
batch 128, a Transformer encoder d=256 x4, seq 128, batch 16, a small CNN, and the GPT
example's default preset: a byte-level causal decoder d=128 x4, 4 heads, context 64,
batch 12), the same optimizer
(Adam, lr 1e-4; PyTorch's fastest, `fused=True`) and the same timing method: float32 and mixed steps timed alternately
(ABAB...), the median of several runs with min and max. Mixed precision is PyTorch's
own recipe: `torch.autocast` plus `torch.amp.GradScaler` for float16 (bfloat16 needs no
scaler). The ratio printed is mixed time / float32 time, as in BENCHMARKS.md (under 1 is
faster).

    python3 benches/pytorch_mlp.py                 # CUDA when present, else CPU
    python3 benches/pytorch_mlp.py --device cpu --policies mixed_bfloat16 --workloads mlp
    python3 benches/pytorch_mlp.py --device cpu --policies float32 --workloads cnn

The policy `float32` times the float32 step alone (its mixed columns read `-`): PyTorch's
fastest step on a CPU whose bf16 and f16 matmuls take a slow path.

With `--steps-on-stdin` (one workload, one policy) another program sets the pace, to
interleave these steps with its own: after the warm-up the script prints `ready`; each
line `N` read from stdin runs N more timed steps and prints `done`; at the end of input it
prints the table of all the steps timed.

Prints a Markdown table, ready to paste under BENCHMARKS.md's PyTorch section.
"""

import argparse
import statistics
import sys
import time

import torch
from torch import nn


def mlp(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    )


def stack(width: int, layers: int) -> nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks, nn.Linear(width, 10))


class Encoder(nn.Module):
    def __init__(self, d_model: int, layers: int):
        super().__init__()
        self.embed = nn.Linear(32, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, nhead=8, dim_feedforward=4 * d_model, dropout=0.1, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 10)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


class Cnn(nn.Module):
    """Three 3x3 convolutions (3 -> 32, 32 -> 64 and 64 -> 64 with stride 2), ReLU after
    each, and a linear head on the 64 x 8 x 8 features (examples/bench's Cnn)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.convs(x).flatten(1))


class Gpt(nn.Module):
    """The GPT example's model (examples/gpt/model.rs): token and position embeddings, a
    pre-norm GELU Transformer encoder under a causal mask, a final LayerNorm and a linear
    head without bias over the 256 byte values. Takes tokens [batch, time]; returns the
    logits flattened to [batch * time, 256], as the example's loss takes them."""

    def __init__(self, d_model: int = 128, layers: int = 4, heads: int = 4, seq: int = 64):
        super().__init__()
        self.tokens = nn.Embedding(256, d_model)
        self.positions = nn.Embedding(seq, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, nhead=heads, dim_feedforward=4 * d_model, dropout=0.0,
            activation="gelu", batch_first=True, norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, x):
        time_ = x.shape[1]
        h = self.tokens(x) + self.positions(torch.arange(time_, device=x.device))
        mask = self.mask[:time_, :time_]
        h = self.blocks(h, mask=mask, is_causal=True)
        return self.head(self.norm(h)).flatten(0, 1)


class NormCnn(nn.Module):
    """The bench's CNN with the layers image models usually have (examples/bench/models.rs):
    a 3x3 convolution and batch norm, a depthwise 3x3 and a pointwise convolution with
    batch norm, a 2x2 max pool, a 2x2 transposed convolution of stride 2, a 3x3
    convolution, ReLU after each block, a global average pool and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.stem_norm = nn.BatchNorm2d(32)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.pointwise = nn.Conv2d(32, 64, 1)
        self.block_norm = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(2, 2)
        self.up = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.conv = nn.Conv2d(32, 32, 3, padding=1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.stem_norm(self.stem(x)))
        x = self.pool(torch.relu(self.block_norm(self.pointwise(self.depthwise(x)))))
        x = torch.relu(self.up(x))
        x = torch.relu(self.conv(x))
        return self.head(x.mean((2, 3)))


def images(shape, device):
    """Uniform inputs of `shape` and one class in 0..10 per sample."""
    return torch.rand(*shape, device=device), torch.randint(0, 10, (shape[0],), device=device)


def tokens(shape, device):
    """Byte tokens of `shape` ([batch, time]) and a next byte for every position."""
    x = torch.randint(0, 256, shape, device=device)
    return x, torch.randint(0, 256, (shape[0] * shape[1],), device=device)


WORKLOADS = {
    "mlp": ("MLP 784-4096-4096-10, batch 128", lambda: mlp(4096), (128, 784)),
    "mlp-b1024": ("MLP 784-4096-4096-10, batch 1024", lambda: mlp(4096), (1024, 784)),
    "stack": ("linear stack 1024 x4, batch 512", lambda: stack(1024, 4), (512, 1024)),
    "encoder": (
        "Transformer encoder d=256 x4, seq 128, batch 16",
        lambda: Encoder(256, 4),
        (16, 128, 32),
    ),
    "cnn": ("CNN 3x3 convs 32-64-64 on 32x32x3, batch 64", Cnn, (64, 3, 32, 32)),
    "norm-cnn": (
        "CNN with batch norm, depthwise, max pool and transposed convs on 32x32x3, batch 32",
        NormCnn,
        (32, 3, 32, 32),
    ),
    "gpt": (
        "GPT example, cpu preset: decoder d=128 x4, 4 heads, context 64, batch 12",
        Gpt,
        (12, 64),
    ),
    "gpt-200": (
        "GPT-shaped burn-nn decoder d=200 x3, 4 heads, context 100, batch 24",
        lambda: Gpt(200, 3, 4, 100),
        (24, 100),
    ),
    # The GPU suite's shapes (examples/gpu_suite): the MLP at batch 1024 and the encoder
    # stack at d=1024 x8, seq 1024, batch 8.
    "mlp-gpu": ("MLP 784-4096-4096-10, batch 1024", lambda: mlp(4096), (1024, 784)),
    "encoder-gpu": (
        "Transformer encoder d=1024 x8, seq 1024, batch 8",
        lambda: Encoder(1024, 8),
        (8, 1024, 32),
    ),
}


def cpu_flags() -> str:
    """The CPU model and its 16-bit arithmetic flags, as every CPU row must name them."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown CPU"
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "unknown CPU")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    wanted = ["avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "avx512f", "f16c"]
    have = [f for f in wanted if f in flags]
    missing = [f for f in wanted if f not in flags]
    return f"{model} (has {', '.join(have) or 'none of them'}; lacks {', '.join(missing) or 'none'})"


def sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


class Trainer:
    """One training step of a model of its own, under a dtype (None = float32)."""

    def __init__(self, model: nn.Module, x, y, device: str, dtype):
        self.model = model.to(device)
        # PyTorch's fastest Adam: one fused kernel over all parameters (CPU and CUDA).
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4, fused=True)
        self.x, self.y, self.device, self.dtype = x, y, device, dtype
        use_scaler = dtype == torch.float16
        self.scaler = torch.amp.GradScaler(device, enabled=use_scaler)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            logits = self.model(self.x)
        loss = nn.functional.cross_entropy(logits.float(), self.y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        sync(self.device)


def time_pair(a, b, warmup: int, runs: int):
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(runs):
        t = time.perf_counter()
        a()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        b()
        tb.append(time.perf_counter() - t)
    return ta, tb


def ms(xs):
    return f"{statistics.median(xs) * 1e3:.1f} ({min(xs) * 1e3:.1f}-{max(xs) * 1e3:.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--workloads",
        default="mlp,encoder",
        help="comma-separated: mlp, mlp-b1024, stack, encoder, cnn, norm-cnn, gpt, gpt-200, mlp-gpu, encoder-gpu",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks the script runs, figures meaningless"
    )
    parser.add_argument(
        "--policies", default="mixed_float16,mixed_bfloat16", help="comma-separated policy names"
    )
    parser.add_argument(
        "--steps-on-stdin",
        action="store_true",
        help="one workload and policy: after the warm-up print `ready`, then for each line N "
        "on stdin time N more steps and print `done`; the table at the end of input",
    )
    args = parser.parse_args()
    device = args.device
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads, {cpu_flags()}"
    if args.quick:
        WORKLOADS.update(
            {w: (f"{label} (--quick: width 64, batch 8)", lambda: mlp(64), (8, 784)) for w, (label, _, _) in WORKLOADS.items()}
        )
    known = {"float32": None, "mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16}
    policies = args.policies.split(",")
    unknown = [p for p in policies if p not in known]
    if unknown:
        parser.error(f"unknown policy {unknown}; valid: {', '.join(known)}")
    dtypes = {p: known[p] for p in policies}
    names = args.workloads.split(",")
    if any(w not in WORKLOADS for w in names):
        parser.error(f"unknown workload in {names}; valid: {', '.join(WORKLOADS)}")
    if args.steps_on_stdin and (len(names) != 1 or len(policies) != 1):
        parser.error("--steps-on-stdin takes one workload and one policy")
    header = (
        f"PyTorch {torch.__version__} on {name}\n\n"
        "| Workload | Policy | float32 step, ms | mixed step, ms | mixed / float32 |\n"
        "|---|---|---|---|---|"
    )
    # Paced from stdin, the table waits for the end of input: stdout carries `ready` and
    # `done` until then.
    rows = []
    if not args.steps_on_stdin:
        print(header, flush=True)
    for policy, dtype in dtypes.items():
        for key in names:
            label, build, shape = WORKLOADS[key]
            torch.manual_seed(1)
            # The GPT workloads take byte tokens, the others images.
            x, y = (tokens if key.startswith("gpt") and not args.quick else images)(shape, device)
            torch.manual_seed(2)
            base = Trainer(build(), x, y, device, None)
            mixed = None
            if dtype is not None:
                torch.manual_seed(2)
                mixed = Trainer(build(), x, y, device, dtype)
            # float32 alone: nothing to alternate with, and no mixed step to time.
            other = mixed.step if mixed else (lambda: None)
            if args.steps_on_stdin:
                t32, tmix = time_pair(base.step, other, args.warmup, 0)
                print("ready", flush=True)
                for line in sys.stdin:
                    more32, moremix = time_pair(base.step, other, 0, int(line))
                    t32 += more32
                    tmix += moremix
                    print("done", flush=True)
                if not t32:
                    sys.exit("--steps-on-stdin: no steps were asked for")
            else:
                t32, tmix = time_pair(base.step, other, args.warmup, args.runs)
            if mixed is None:
                row = f"| {label} | {policy} | {ms(t32)} | - | - |"
            else:
                ratio = statistics.median(tmix) / statistics.median(t32)
                row = f"| {label} | {policy} | {ms(t32)} | {ms(tmix)} | {ratio:.3f} |"
            if args.steps_on_stdin:
                rows.append(row)
            else:
                print(row, flush=True)
    if args.steps_on_stdin:
        print(header)
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
