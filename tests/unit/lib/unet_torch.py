#!/usr/bin/python3
"""The fmnist_unet U-Net in PyTorch, for tests/unit/test_unet.c.

Reads DIR/model.json (the variant's shapes and apf's parameter table),
DIR/params.bin (apf's flat float32 parameters) and the batch (x.bin float32
(B, H, W) corrupted images, yf.bin float32 (B, H, W) targets); rebuilds the
same network in float64, channels-last weights transposed to PyTorch's
layout (down blocks of two 3x3 convolutions with instance norm, layer norm
over channels or none, average-pool down-sampling, transposed-convolution
up-sampling, skip concatenation, 1x1 output convolution), and writes
DIR/torch.bin: the mean L1 loss, then the gradient of every parameter in
apf's flat layout, all float64.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

ACTS = {"gelu": lambda x: F.gelu(x, approximate="tanh"), "relu": torch.relu,
        "silu": F.silu, "tanh": torch.tanh}


def main(d):
    with open(os.path.join(d, "model.json")) as f:
        m = json.load(f)
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype=np.float32)
    B, H, W = m["batch"], m["H"], m["W"]

    def image(name):
        a = np.fromfile(os.path.join(d, name), dtype=np.float32).reshape(B, 1, H, W)
        return torch.tensor(a, dtype=torch.float64)

    x, y = image("x.bin"), image("yf.bin")
    P = {}
    for p in m["params"]:
        a = flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
        P[p["name"]] = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    act, norm = ACTS[m["activation"]], m["norm"]

    def conv(t, name, pad):
        # apf (OC, K, K, C) -> PyTorch (OC, C, K, K)
        w = P[name + ".weight"].permute(0, 3, 1, 2)
        return F.conv2d(t, w, P.get(name + ".bias"), padding=pad)

    def upconv(t, name):
        # apf (OC, 2, 2, C) -> PyTorch's transposed (C, OC, 2, 2)
        w = P[name + ".weight"].permute(3, 0, 1, 2)
        return F.conv_transpose2d(t, w, P.get(name + ".bias"), stride=2)

    def norm_act(t, name):
        if norm == "instance":
            t = F.instance_norm(t, weight=P[name + ".scale"], bias=P[name + ".bias"],
                                eps=1e-5)
        elif norm == "layernorm":
            c = t.shape[1]
            t = F.layer_norm(t.permute(0, 2, 3, 1), (c,), P[name + ".scale"],
                             P[name + ".bias"], eps=1e-5).permute(0, 3, 1, 2)
        return act(t)

    def block(t, prefix):
        for j in (1, 2):
            t = norm_act(conv(t, f"{prefix}.conv{j}", 1), f"{prefix}.norm{j}")
        return t

    depth, t, skips = m["depth"], x, []
    for i in range(1, depth + 2):
        if i > 1:
            t = F.avg_pool2d(t, 2)
        t = block(t, f"down{i}")
        skips.append(t)
    for i in range(depth, 0, -1):
        t = norm_act(upconv(t, f"up{i}.conv"), f"up{i}.norm")
        t = block(torch.cat([skips[i - 1], t], dim=1), f"up{i}.block")
    out = conv(t, "out", 0)
    loss = (out - y).abs().mean()
    loss.backward()
    res = np.zeros(1 + flat.size, dtype=np.float64)
    res[0] = loss.item()
    for p in m["params"]:
        g = P[p["name"]].grad.detach().numpy().reshape(-1)
        res[1 + p["offset"]:1 + p["offset"] + p["numel"]] = g
    res.tofile(os.path.join(d, "torch.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
