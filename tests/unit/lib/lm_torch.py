#!/usr/bin/python3
"""The text_lm Transformer in PyTorch, for tests/unit/test_text_lm.c.

Reads DIR/model.json (the variant's shapes and apf's parameter table),
DIR/params.bin (apf's flat float32 parameters) and the batch (xi.bin int32
(B, T + 1) token windows); rebuilds the same network in float64 (token
embedding + learned positions, pre- or post-LN blocks of causal multi-head
attention and a plain or gated MLP, final layer norm for pre-LN, untied
head) and writes DIR/torch.bin: the mean next-token cross-entropy, then the
gradient of every parameter in apf's flat layout, all float64.
"""
import json
import math
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
    B, T, D, NH = m["batch"], m["context"], m["width"], m["heads"]
    xi = torch.tensor(np.fromfile(os.path.join(d, "xi.bin"), dtype=np.int32)
                      .reshape(B, T + 1).astype(np.int64))
    P = {}
    for p in m["params"]:
        a = flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
        P[p["name"]] = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    act = ACTS[m["activation"]]
    post = m["norm"] == "post"

    def ln(x, name):
        return F.layer_norm(x, (D,), P[name + ".scale"], P[name + ".bias"],
                            eps=1e-5)

    def lin(x, name):
        return F.linear(x, P[name + ".weight"], P[name + ".bias"])

    def attention(x, i):
        qkv = lin(x, f"block{i}.qkv")
        q, k, v = qkv.split(D, dim=2)
        hs = D // NH
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(2, 3) * (m["temperature"] / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        return lin(y.transpose(1, 2).reshape(B, T, D), f"block{i}.proj")

    def mlp(x, i):
        h = lin(x, f"block{i}.up")
        if m["mlp"] == "glu":
            a, g = h.chunk(2, dim=2)
            h = act(a) * g
        else:
            h = act(h)
        return lin(h, f"block{i}.down")

    x = P["tok.weight"][xi[:, :T]] + P["pos.weight"]
    for i in range(1, m["layers"] + 1):
        if post:
            x = ln(x + attention(x, i), f"block{i}.ln1")
            x = ln(x + mlp(x, i), f"block{i}.ln2")
        else:
            x = x + attention(ln(x, f"block{i}.ln1"), i)
            x = x + mlp(ln(x, f"block{i}.ln2"), i)
    if not post:
        x = ln(x, "ln_f")
    logits = lin(x, "head")
    loss = F.cross_entropy(logits.reshape(B * T, -1), xi[:, 1:].reshape(-1))
    loss.backward()
    out = np.zeros(1 + flat.size, dtype=np.float64)
    out[0] = loss.item()
    for p in m["params"]:
        g = P[p["name"]].grad.detach().numpy().reshape(-1)
        out[1 + p["offset"]:1 + p["offset"] + p["numel"]] = g
    out.tofile(os.path.join(d, "torch.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
