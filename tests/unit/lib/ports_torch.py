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
after each step, registered in PORTS. A word hyperparameter (true, ADAM)
arrives as a string, and the C side ignores a number where it reads a
word, so the functions here do too.
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


# ---- Shampoo with Adam grafting (Gupta et al., 2018; Shi et al., 2023) -------

def _inverse_root(factor, p, ridge):
    """(S + ridge I)^(-1/p) for S the symmetric part of a float32 factor:
    eigendecomposition in float64, eigenvalues at most n 2^-52 of the
    largest magnitude (below 0, or rounding's zeros) taken as 0, as
    apf's inverse root defines it."""
    s = factor.double()
    s = (s + s.T) / 2
    lam, q = torch.linalg.eigh(s)
    tol = s.shape[0] * 2.0 ** -52 * float(lam.abs().max())
    lam = torch.where(lam > tol, lam, torch.zeros_like(lam))
    return ((q * (lam + ridge) ** (-1.0 / p)) @ q.T).to(torch.float32)


def _word(hp, name, default):
    v = hp.get(name, default)
    return v if isinstance(v, str) else default


def shampoo(params, hp, step_hint, grad, table):
    # Defaults: point 1 of the published v0.5 search space.
    lr0 = hp.get("learning_rate", 0.0017486387539278373)
    b1 = 1 - hp.get("one_minus_beta1", 0.06733926164)
    b2 = 1 - hp.get("one_minus_beta2", 0.00448403102)
    ridge = hp.get("epsilon", 1e-8)
    use_momentum = _word(hp, "use_momentum", "false") == "true"
    mu = 1 - hp.get("one_minus_momentum", 0.0) if use_momentum else 0.0
    wd = hp.get("weight_decay", 0.08121616522670176)
    size = int(hp.get("max_preconditioner_dim", 1024))
    every = int(hp.get("precondition_frequency", 100))
    start = int(hp.get("start_preconditioning_step", -1))
    start = every if start == -1 else start
    override = int(hp.get("inv_root_override", 0))
    exponent = hp.get("exponent_multiplier", 1.0)
    adam_graft = _word(hp, "grafting_type", "ADAM") == "ADAM"
    graft_eps = hp.get("grafting_epsilon", 1e-8)
    cosine = _word(hp, "use_cosine_decay", "true") == "true"
    warmup = hp.get("warmup_factor", 0.02)
    nadam = _word(hp, "use_nadam", "true") == "true"
    total = hp.get("step_hint_factor", 1.0) * step_hint

    # Blocks of each parameter's matrix view (shape[0] x the rest): order 2
    # when both sides exceed 1 and the whole exceeds `size`, cut into
    # size x size tiles with one factor per side; otherwise order 1, the
    # flat values cut into runs of `size`, one factor each. A dimension of a
    # million or more: Adam alone.
    def plan(size):
        blocks = []   # (tensor index, order, (rows, cols) or None, slice(s))
        for i, info in enumerate(table):
            shape = info["shape"]
            if any(d >= 1_000_000 for d in shape):
                continue
            rows = shape[0] if len(shape) > 1 else 1
            cols = info["numel"] // rows
            if rows > 1 and cols > 1 and rows * cols > size:
                for r0 in range(0, rows, size):
                    for c0 in range(0, cols, size):
                        blocks.append((i, 2, (rows, cols),
                                       (slice(r0, min(r0 + size, rows)),
                                        slice(c0, min(c0 + size, cols)))))
            else:
                for o in range(0, info["numel"], size):
                    blocks.append((i, 1, None,
                                   slice(o, min(o + size, info["numel"]))))
        return blocks

    def factor_floats(blocks):
        out = 0
        for i, order, _, sl in blocks:
            sides = sl if order == 2 else (sl,)
            out += sum((s.stop - s.start) ** 2 for s in sides)
        return out

    # Factors, roots and the parameter-sized moments must fit apf's slot
    # space, 16 times the parameters: halve the block size until they do.
    n = sum(info["numel"] for info in table)
    vectors = 3 if mu != 0 else 2
    while True:
        blocks = plan(size)
        if size == 1 or 2 * factor_floats(blocks) + vectors * n <= 16 * n:
            break
        size //= 2

    def view(tensors, b):
        i, order, rc, sl = b
        if order == 2:
            return tensors[i].reshape(rc)[sl]
        return tensors[i].reshape(-1)[sl].reshape(-1, 1)

    factors = []
    for b in blocks:
        shape = view(params, b).shape
        sides = shape if b[1] == 2 else shape[:1]
        factors.append([torch.zeros(n, n) for n in sides])
    roots = [[torch.zeros_like(f) for f in fs] for fs in factors]
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    moms = [torch.zeros_like(p) for p in params]

    def schedule(k):
        if cosine:
            return warmup_cosine(lr0, k, total, warmup)
        warm = math.floor(warmup * total)
        return lr0 * k / warm if k < warm else lr0

    t = 0
    while True:
        gs = grad(params, t)
        lr = schedule(t)
        t += 1
        bc1 = 1 - b1 ** t
        bc2 = 1 - b2 ** t if b2 < 1 else 1.0
        refresh = t == start or (t > start and t % every == 0)
        alpha = 1 - b2 if b2 != 1 else 1.0
        for b, fs, rs in zip(blocks, factors, roots):
            g = view(gs, b)
            fs[0].copy_(alpha * (g @ g.T) + b2 * fs[0])
            if b[1] == 2:
                fs[1].copy_(alpha * (g.T @ g) + b2 * fs[1])
            if refresh:
                p = (override or 2 * b[1]) / exponent
                for f, r in zip(fs, rs):
                    r.copy_(_inverse_root(f * (1 / bc2), p, ridge))
        filtered, grafted = [], []
        for m, v, g in zip(ms, vs, gs):
            m.copy_(b1 * m + (1 - b1) * g)
            v.copy_(b2 * v + (1 - b2) * g * g)
            f = b1 * m + (1 - b1) * g if nadam else m.clone()
            f = f * (1 / bc1)
            filtered.append(f)
            grafted.append(f / (torch.sqrt(v * (1 / bc2)) + graft_eps)
                           if adam_graft else f.clone())
        if t >= start:
            for b, rs in zip(blocks, roots):
                f = view(filtered, b)
                d = rs[0] @ f
                if b[1] == 2:
                    d = d @ rs[1]
                target = view(grafted, b)
                norm = float(target.double().norm())
                scale = norm / (float(d.double().norm()) + 1e-16)
                target.copy_(d * scale)
        for p, d, mom in zip(params, grafted, moms):
            d = d + wd * p
            if mu != 0:
                mom.copy_((1 - mu) * d + mu * mom)
                d = mu * mom + (1 - mu) * d
            p.copy_(p - lr * d)
        yield params


# ---- Muon (Jordan et al., 2024; AlgoPerf's self-tuning MuonTorch) ------------

NS_COEFFS = (3.4445, -4.7750, 2.0315)


def _orthogonalize(u, steps, eps):
    """Newton-Schulz's quintic iteration on u / ||u||_F, the wide way round."""
    a, b, c = NS_COEFFS
    tall = u.shape[0] > u.shape[1]
    x = u.T if tall else u
    x = x * (1.0 / (float(x.double().norm()) + eps))
    for _ in range(steps):
        gram = x @ x.T
        poly = b * gram + c * (gram @ gram)
        x = a * x + poly @ x
    return x.T if tall else x


def muon(params, hp, step_hint, grad, table):
    # Defaults: MuonTorch's published HPARAMS.
    lr0 = hp.get("learning_rate", 0.01)
    muon_wd = hp.get("muon_weight_decay", 0.0)
    beta = hp.get("muon_beta", 0.9)
    adjust = _word(hp, "muon_adjust_lr", "spectral_norm")
    nesterov = _word(hp, "muon_nesterov", "true") == "true"
    ns_steps = int(hp.get("muon_ns_steps", 5))
    ns_eps = hp.get("muon_ns_eps", 1e-7)
    adam_wd = hp.get("adamw_weight_decay", 0.0)
    b1 = hp.get("adamw_beta1", 0.9)
    b2 = hp.get("adamw_beta2", 0.999)
    adam_eps = hp.get("adamw_eps", 1e-8)
    warmup = hp.get("warmup_factor", 0.05)
    reduce = hp.get("step_reduce", 1.0)

    def orthogonal(info):
        return len(info["shape"]) >= 2 and info["kind"] != "embedding"

    def scale(info):
        # fan_out, fan_in as PyTorch's first two dimensions: (out, in)
        out = info["shape"][0]
        fan_in = (info["shape"][3] if info["kind"] == "conv_weight"
                  else info["shape"][1])
        if adjust == "spectral_norm":
            return max(1.0, math.sqrt(out / fan_in))
        if adjust == "match_adam":
            return 0.2 * math.sqrt(max(out, fan_in))
        return 1.0

    def schedule(k):
        warm = math.floor(warmup * step_hint)
        total = math.floor(step_hint * reduce)
        if k < warm:
            return lr0 * k / warm
        x = min((k - warm) / max(total - warm, 1), 1.0)
        return lr0 * 0.5 * (1 + math.cos(math.pi * x))

    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    t = 0
    while True:
        gs = grad(params, t)
        lr = schedule(t)
        t += 1
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for p, m, v, g, info in zip(params, ms, vs, gs, table):
            if not orthogonal(info):
                if adam_wd != 0:
                    p.copy_(p * (1 - lr * adam_wd))
                m.copy_(b1 * m + (1 - b1) * g)
                v.copy_(b2 * v + (1 - b2) * g * g)
                d = (m * (1 / bc1)) / (torch.sqrt(v * (1 / bc2)) + adam_eps)
                p.copy_(p - lr * d)
                continue
            m.copy_((1 - beta) * g + beta * m)
            u = beta * m + (1 - beta) * g if nesterov else m
            rows = info["shape"][0]
            o = _orthogonalize(u.reshape(rows, -1), ns_steps, ns_eps)
            if muon_wd != 0:
                p.copy_(p * (1 - lr * muon_wd))
            p.copy_(p - (lr * scale(info)) * o.reshape(p.shape))
        yield params


PORTS = {
    "lion": lion,
    "ademamix": ademamix,
    "cautious_nadamw": cautious_nadamw,
    "shampoo": lambda pb: shampoo(pb.params, pb.hp, pb.step_hint, pb.grad, pb.info),
    "muon": lambda pb: muon(pb.params, pb.hp, pb.step_hint, pb.grad, pb.info),
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
