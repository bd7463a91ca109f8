#!/usr/bin/python3
"""ports_torch.py DIR: the ported submissions' algorithms in PyTorch.

Reads what tests/unit/lib/portmodel.c wrote into DIR (model.json, w0.bin,
a.bin, targets.bin; see portmodel.h), runs the algorithm model.json names
for its steps on the same moving quadratic, and writes torch.bin: the
parameters after every step, float32[steps][n] in the table's order.

Each algorithm is written here from its paper and the published AlgoPerf
submission's description, in float32 like apf's, not from apf's C. The
arithmetic is plain tensor expressions: a scalar times a float32 tensor
rounds the scalar to float32 and the product once, as a C float multiply
does, while PyTorch's fused forms (add_ with alpha, addcmul_) contract to
an fma on vector CPUs and would round differently. Where an algorithm
makes a discrete choice (Lion's sign, the Cautious mask), that is what
keeps both sides choosing alike.

A new algorithm is one function of a Problem, yielding the parameters
after each step, registered in PORTS.
"""
import json
import math
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)


def warmup_cosine(peak, k, total, warmup_factor):
    """The learning rate of update k (from 0): linear warmup over
    floor(warmup_factor * total) updates from 0, then a half cosine to 0
    at `total` updates, 0 after it."""
    warm = math.floor(warmup_factor * total)
    if k < warm:
        return peak * k / warm
    span = max(total - warm, 1)
    return peak * (1 + math.cos(math.pi * min(k - warm, span) / span)) / 2


class Problem:
    """What an algorithm gets: params, the tensors it updates in place
    (float32, in their shapes); info, each one's {name, kind, shape,
    offset, numel} from model.json (kind: "weight", "bias",
    "conv_weight", "embedding", "norm_scale"; a tensor's matrix view is
    shape[0] x the rest); hp, the trial's hyperparameters; step_hint; and
    grad(params, step), the gradients of the step's batch at params."""

    def __init__(self, params, info, hp, step_hint, grad):
        self.params, self.info, self.hp = params, info, hp
        self.step_hint, self.grad = step_hint, grad


def global_norm(tensors):
    return math.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors))


# ---- Lion (Chen et al., 2023, Algorithm 2) -----------------------------------

def lion(pb):
    params, hp, step_hint, grad = pb.params, pb.hp, pb.step_hint, pb.grad
    lr0 = hp["learning_rate"]
    b1 = 1 - hp["one_minus_beta1"]
    b2 = hp["beta2"]
    wd = hp["weight_decay"]
    ms = [torch.zeros_like(p) for p in params]
    k = 0
    while True:
        gs = grad(params, k)
        lr = warmup_cosine(lr0, k, step_hint, hp["warmup_factor"])
        for p, m, g in zip(params, ms, gs):
            update = torch.sign(b1 * m + (1 - b1) * g)
            p.copy_(p * (1 - lr * wd) - lr * update)
            m.copy_(b2 * m + (1 - b2) * g)
        k += 1
        yield params


# ---- AdEMAMix (Pagliardini et al., 2024, Algorithm 1) ------------------------

def ademamix(pb):
    params, hp, step_hint, grad = pb.params, pb.hp, pb.step_hint, pb.grad
    lr0 = hp["learning_rate"]
    b1 = 1 - hp["one_minus_beta1"]
    b2, b3, alpha = hp["beta2"], hp["beta3"], hp["alpha"]
    wd, clip, eps = hp["weight_decay"], hp["grad_clip"], 1e-8

    def warmup(name):
        # in steps, or as a fraction of the step hint
        if name + "_factor" in hp:
            return hp[name + "_factor"] * step_hint
        return hp[name]

    t_alpha, t_beta3 = warmup("alpha_warmup"), warmup("beta3_warmup")

    def half_life(beta):
        # steps for beta^n to fall to 1/2, less one (the paper's f)
        return math.log(0.5) / math.log(beta + 1e-8) - 1

    def beta_of(h):
        return 0.5 ** (1 / (h + 1))

    fast = [torch.zeros_like(p) for p in params]
    slow = [torch.zeros_like(p) for p in params]
    sq = [torch.zeros_like(p) for p in params]
    t = 0
    while True:
        gs = grad(params, t)
        t += 1
        norm = global_norm(gs)
        if clip / (norm + 1e-6) < 1:
            gs = [g * (clip / (norm + 1e-6)) for g in gs]
        lr = warmup_cosine(lr0, t - 1, step_hint, hp["warmup_factor"])
        a_t = alpha * t / t_alpha if t < t_alpha else alpha
        if t < t_beta3:
            x = t / t_beta3
            b3_t = beta_of((1 - x) * half_life(b1) + x * half_life(b3))
        else:
            b3_t = b3
        for p, m1, m2, v, g in zip(params, fast, slow, sq, gs):
            m1.copy_(b1 * m1 + (1 - b1) * g)
            m2.copy_(b3_t * m2 + (1 - b3_t) * g)
            v.copy_(b2 * v + (1 - b2) * g * g)
            num = m1 / (1 - b1 ** t) + a_t * m2
            den = torch.sqrt(v / (1 - b2 ** t)) + eps
            p.copy_(p - lr * (num / den + wd * p))
        yield params


# ---- Cautious NAdamW (Liang et al., 2024, on AlgoPerf's NAdamW) --------------

def cautious_nadamw(pb):
    params, hp, step_hint, grad = pb.params, pb.hp, pb.step_hint, pb.grad
    lr0 = hp["learning_rate"]
    b1 = 1 - hp["one_minus_beta1"]
    b2, wd, eps = hp["beta2"], hp["weight_decay"], 1e-8
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    t = 0
    while True:
        gs = grad(params, t)
        t += 1
        lr = warmup_cosine(lr0, t - 1, step_hint, hp["warmup_factor"])
        for p, m, v, g in zip(params, ms, vs, gs):
            m.copy_(b1 * m + (1 - b1) * g)
            v.copy_(b2 * v + (1 - b2) * g * g)
            nesterov = (b1 * m + (1 - b1) * g) / (1 - b1 ** t)
            # the update only where it agrees in sign with the gradient,
            # scaled back up by the fraction kept (at most 1000x)
            mask = (nesterov * g > 0).to(torch.float32)
            mask = mask / max(float(mask.mean()), 1e-3)
            u = nesterov * mask / (torch.sqrt(v / (1 - b2 ** t)) + eps)
            p.copy_(p - lr * (u + wd * p))
        yield params


PORTS = {
    "lion": lion,
    "ademamix": ademamix,
    "cautious_nadamw": cautious_nadamw,
}


def main(d):
    with open(os.path.join(d, "model.json")) as f:
        model = json.load(f)
    n = sum(p["numel"] for p in model["params"])
    steps = model["steps"]
    w0 = np.fromfile(os.path.join(d, "w0.bin"), dtype=np.float32)
    a = torch.from_numpy(np.fromfile(os.path.join(d, "a.bin"), dtype=np.float64))
    c = torch.from_numpy(np.fromfile(os.path.join(d, "targets.bin"),
                                     dtype=np.float64).reshape(steps, n))
    assert w0.size == n and a.numel() == n
    table = sorted(model["params"], key=lambda p: p["offset"])
    params = [torch.from_numpy(w0[p["offset"]:p["offset"] + p["numel"]].copy())
              .reshape(p["shape"]) for p in table]

    def grad(ps, step):
        # g = a (w - c_step) in float64, rounded once to float32
        out = []
        for p, info in zip(ps, table):
            lo, hi = info["offset"], info["offset"] + info["numel"]
            g = a[lo:hi] * (p.reshape(-1).double() - c[step, lo:hi])
            out.append(g.to(torch.float32).reshape(p.shape))
        return out

    port = PORTS[model["port"]]
    trace = np.empty((steps, n), dtype=np.float32)
    with torch.no_grad():
        run = port(Problem(params, table, model["hparams"], model["step_hint"], grad))
        for s in range(steps):
            ps = next(run)
            trace[s] = torch.cat([p.reshape(-1) for p in ps]).numpy()
    trace.tofile(os.path.join(d, "torch.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
