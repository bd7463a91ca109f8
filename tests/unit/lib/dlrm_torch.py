#!/usr/bin/python3
"""The clicks_dlrm model in PyTorch, for tests/unit/test_dlrm.c.

Reads DIR/model.json (the variant's shapes and apf's parameter table),
DIR/params.bin (apf's flat float32 parameters) and the batch (x.bin float32
(B, n_dense), xi.bin int32 (B, n_cat), y.bin int32 (B)); rebuilds the same
network in float64 (bottom MLP, one embedding table per feature stacked as
apf stacks them, DLRM's dot interaction over the lower triangle in apf's
order, top MLP with its residual joins, one logit, mean sigmoid
cross-entropy) and writes DIR/torch.bin: the loss, then the gradient of
every parameter in apf's flat layout, all float64.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def main(d):
    with open(os.path.join(d, "model.json")) as f:
        m = json.load(f)
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype=np.float32)
    B = m["batch"]
    x = torch.tensor(np.fromfile(os.path.join(d, "x.bin"), dtype=np.float32)
                     .reshape(B, m["n_dense"]), dtype=torch.float64)
    xi = torch.tensor(np.fromfile(os.path.join(d, "xi.bin"), dtype=np.int32)
                      .reshape(B, len(m["rows"])).astype(np.int64))
    y = torch.tensor(np.fromfile(os.path.join(d, "y.bin"), dtype=np.int32),
                     dtype=torch.float64)
    P = {}
    for p in m["params"]:
        a = flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
        P[p["name"]] = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    ln = m["norm"] == "layernorm"

    def hidden(h, prefix, i):
        name = f"{prefix}{i}"
        h = F.linear(h, P[name + ".weight"], None if ln else P[name + ".bias"])
        if ln:
            h = F.layer_norm(h, (h.shape[1],), P[name + ".norm.scale"],
                             P[name + ".norm.bias"], eps=1e-5)
        return torch.relu(h)

    h = x
    for i in range(len(m["bottom"])):
        h = hidden(h, "bottom", i + 1)
    offsets = torch.tensor(np.cumsum([0] + m["rows"][:-1]), dtype=torch.int64)
    emb = P["emb.weight"][xi + offsets]            # (B, n_cat, D)
    vecs = torch.cat([h.unsqueeze(1), emb], dim=1)  # (B, F, D)
    Fn = vecs.shape[1]
    z = torch.bmm(vecs, vecs.transpose(1, 2))       # (B, F, F)
    li = [i for i in range(Fn) for j in range(i)]
    lj = [j for i in range(Fn) for j in range(i)]
    t = torch.cat([h, z[:, li, lj]], dim=1)
    width = 0
    for i, w in enumerate(m["top"]):
        prev = t
        t = hidden(t, "top", i + 1)
        if m["top_residual"] and i > 0 and w == width:
            t = t + prev
        width = w
    logit = F.linear(t, P["out.weight"], P["out.bias"]).squeeze(1)
    loss = F.binary_cross_entropy_with_logits(logit, y)
    loss.backward()
    out = np.zeros(1 + flat.size, dtype=np.float64)
    out[0] = loss.item()
    for p in m["params"]:
        g = P[p["name"]].grad.detach().numpy().reshape(-1)
        out[1 + p["offset"]:1 + p["offset"] + p["numel"]] = g
    out.tofile(os.path.join(d, "torch.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
