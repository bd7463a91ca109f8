#!/usr/bin/python3
"""PyTorch peer of bench/train_step: the same models, shapes, optimizer and
thread count as apf's, timed the same way (warm-up, then the median of
several repetitions of a fixed number of steps).

    peer_torch.py {mlp|cnn|dlrm|lm|unet} BATCH THREADS STEPS REPS [THREADING [serve]]

Prints `samples_per_s <median>` and `peak_rss_mib <this process's peak>`
(serve: the samples/s on request, as often as asked: serve() below). The models mirror
workloads/fmnist_mlp (784-1024-1024-10, ReLU) and workloads/fmnist_cnn (the
small ResNet: stem, three stages of one basic block at 16-32-64 channels,
batch norm, global average pool, linear head), in channels-last layout as
apf computes them, and workloads/clicks_dlrm (DLRM: bottom MLP 13-64-16, 26
embedding tables of 16 in one stacked table as apf keeps them, the dot
interaction's 351 pairwise dots, top MLP 367-256-128-1, sigmoid
cross-entropy; dense embedding gradients, as apf computes them), and
workloads/text_lm (a GPT-2-style decoder: byte embedding 256 x 128 and
learned positions over 64 tokens, two pre-LN blocks of 4-head causal
attention (masked softmax of q k^T, as nanoGPT computes it where PyTorch
has no fused attention: Debian 12's PyTorch 1.13 has none) and a GELU
MLP of 512, final norm, untied head, next-token cross-entropy), and
workloads/fmnist_unet (the U-Net: blocks of two 3x3 convolutions without
bias, instance norm and ReLU at 16-32-64 channels over 28-14-7, average-pool
down-sampling, 2x2 stride-2 transposed convolutions, skip concatenation,
1x1 output, L1 loss), in NCHW, PyTorch's faster layout for it.

THREADING is how Debian's PyTorch shares the cores between its two thread
pools, OpenMP's (ATen's parallel loops, oneDNN's convolutions) and
OpenBLAS's (its GEMMs), each THREADS wide: `spin` (the default: libgomp's
threads spin a while after each parallel loop), `passive` (they sleep at
once, OMP_WAIT_POLICY=PASSIVE) or `blas1` (OpenBLAS runs each GEMM on the
calling thread, OPENBLAS_NUM_THREADS=1). On two cores the default has the
two pools' spinning threads take the cores from one another: a DLRM step's
rate moved between 6,000 and 50,000 samples/s from one repetition to the
next, where `passive` held it at 45,000-53,000 (issue 36). Which one is
fastest depends on the model, so bench/train_step/run tries each and times
PyTorch with its best. Set here, before torch loads the libraries that read
them.
"""
import os
import sys

THREADING = {"spin": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
             "blas1": {"OPENBLAS_NUM_THREADS": "1"}}


def threading_env(name):
    """The environment of threading `name`: what it sets, and none of the
    variables it could have inherited that would change it."""
    if name not in THREADING:
        sys.exit(f"apf: peer_torch: threading {name!r}: not one of "
                 f"{', '.join(THREADING)}")
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
              "OPENBLAS_NUM_THREADS"):
        os.environ.pop(k, None)
    os.environ.update(THREADING[name])


if __name__ == "__main__":
    threading_env(sys.argv[6] if len(sys.argv) > 6 else "spin")

import math  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.an = nn.BatchNorm2d(cout)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.an(self.a(x)))
        y = self.bn(self.b(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class ResNet(nn.Module):
    def __init__(self, width=16, stages=3):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.stem_n = nn.BatchNorm2d(width)
        blocks, c = [], width
        for s in range(stages):
            blocks.append(Block(c, width << s, 2 if s > 0 else 1))
            c = width << s
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        x = F.relu(self.stem_n(self.stem(x)))
        x = self.blocks(x)
        return self.head(x.mean((2, 3)))


# workloads/clicks_dlrm's categorical_rows
CLICK_ROWS = [487, 194, 1000, 667, 102, 24, 400, 211, 3, 300, 183, 833, 600,
              100, 567, 1000, 10, 367, 140, 4, 967, 18, 15, 933, 105, 142]


class DLRM(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(),
                                    nn.Linear(64, dim), nn.ReLU())
        self.emb = nn.Embedding(sum(CLICK_ROWS), dim)
        self.register_buffer("offsets", torch.tensor(
            [sum(CLICK_ROWS[:i]) for i in range(len(CLICK_ROWS))]))
        f = len(CLICK_ROWS) + 1
        li, lj = zip(*[(i, j) for i in range(f) for j in range(i)])
        # the lower triangle as flat indices: index_select's backward is
        # an index_add, much faster on CPU than advanced indexing's
        self.register_buffer("pairs", torch.tensor([i * f + j for i, j in zip(li, lj)]))
        self.top = nn.Sequential(nn.Linear(dim + len(li), 256), nn.ReLU(),
                                 nn.Linear(256, 128), nn.ReLU(),
                                 nn.Linear(128, 1))

    def forward(self, x, cat):
        d = self.bottom(x)
        v = torch.cat([d.unsqueeze(1), self.emb(cat + self.offsets)], dim=1)
        z = torch.bmm(v, v.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.top(torch.cat([d, z], dim=1)).squeeze(1)


class LM(nn.Module):
    def __init__(self, T=64, D=128, heads=4, layers=2, hidden=512, V=256):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(T, D))
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"ln1": nn.LayerNorm(D), "qkv": nn.Linear(D, 3 * D),
                           "proj": nn.Linear(D, D), "ln2": nn.LayerNorm(D),
                           "up": nn.Linear(D, hidden), "down": nn.Linear(hidden, D)})
            for _ in range(layers))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok(idx) + self.pos
        for b in self.blocks:
            q, k, v = b["qkv"](b["ln1"](x)).split(x.shape[2], dim=2)
            q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            s = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(q.shape[3]))
            a = torch.softmax(s.masked_fill(self.mask, float("-inf")), dim=-1) @ v
            x = x + b["proj"](a.transpose(1, 2).reshape(B, T, -1))
            x = x + b["down"](F.gelu(b["up"](b["ln2"](x)), approximate="tanh"))
        return self.head(self.ln_f(x))


class UNet(nn.Module):
    def __init__(self, C=16, depth=2):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.InstanceNorm2d(cout, affine=True),
                nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                nn.InstanceNorm2d(cout, affine=True), nn.ReLU())
        self.down = nn.ModuleList(block(1 if i == 0 else C << (i - 1), C << i)
                                  for i in range(depth + 1))
        self.up = nn.ModuleList(nn.Sequential(
            nn.ConvTranspose2d(C << (i + 1), C << i, 2, 2, bias=False),
            nn.InstanceNorm2d(C << i, affine=True), nn.ReLU()) for i in range(depth))
        self.dec = nn.ModuleList(block(2 * (C << i), C << i) for i in range(depth))
        self.out = nn.Conv2d(C, 1, 1)

    def forward(self, x):
        skips = []
        for i, d in enumerate(self.down):
            if i:
                x = F.avg_pool2d(x, 2)
            x = d(x)
            skips.append(x)
        for i in reversed(range(len(self.up))):
            x = self.dec[i](torch.cat([skips[i], self.up[i](x)], dim=1))
        return self.out(x)


def main():
    serving = len(sys.argv) == 8 and sys.argv[7] == "serve"
    if len(sys.argv) not in (6, 7) and not serving:
        sys.exit("usage: peer_torch.py {mlp|cnn|dlrm|lm|unet} BATCH THREADS STEPS "
                 "REPS [THREADING [serve]]")
    kind, batch, threads, steps, reps = sys.argv[1], *map(int, sys.argv[2:6])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cat = tokens = target = None
    if kind == "unet":
        # NCHW: PyTorch's instance norm and transposed convolution are
        # far slower channels-last on CPU (1.13), so it gets its own best
        model = UNet()
        x = torch.rand(batch, 1, 28, 28)
        target = torch.rand(batch, 1, 28, 28)
    elif kind == "lm":
        model = LM()
        tokens = torch.randint(0, 256, (batch, 65))
    elif kind == "dlrm":
        model = DLRM()
        x = torch.rand(batch, 13) * 4
        cat = torch.stack([torch.randint(0, r, (batch,)) for r in CLICK_ROWS], dim=1)
    elif kind == "mlp":
        model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(),
                              nn.Linear(1024, 1024), nn.ReLU(),
                              nn.Linear(1024, 10))
        x = torch.randn(batch, 784)
    else:
        model = ResNet().to(memory_format=torch.channels_last)
        x = torch.randn(batch, 1, 28, 28).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        if target is not None:
            loss = (model(x) - target).abs().mean()
        elif tokens is not None:
            loss = F.cross_entropy(model(tokens[:, :64]).reshape(-1, 256),
                                   tokens[:, 1:].reshape(-1))
        elif cat is not None:
            loss = F.binary_cross_entropy_with_logits(model(x, cat), (y % 2).float())
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    def median_rate():
        rates = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            rates.append(steps * batch / (time.perf_counter() - t0))
        return statistics.median(rates)

    for _ in range(max(2, steps // 4)):
        step()
    if serving:
        serve(median_rate)
    else:
        print(f"samples_per_s {median_rate():.1f}")
    print(f"peak_rss_mib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    if serving:
        print("done", flush=True)


def serve(median_rate):
    """After the warm-up, `ready`, then one command a line on stdin, as
    train_step.c's serve(): `steps` answered by `samples_per_s` (the
    median of REPS runs of STEPS steps) and `done`; the end of stdin ends
    it (peak_rss_mib and `done` follow)."""
    print("ready", flush=True)
    for line in iter(sys.stdin.readline, ""):
        if line != "steps\n":
            sys.exit(f"apf: peer_torch: serve: unknown command {line[:20]!r}")
        print(f"samples_per_s {median_rate():.1f}")
        print("done", flush=True)


if __name__ == "__main__":
    main()
