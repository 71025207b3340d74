"""The lesson models in PyTorch, as models/lessons.cc builds them: used by compare_pytorch.py
(one process) and compare_ddp.py (DistributedDataParallel), so both time the same model."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MHA(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.H = H
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        H, dh = self.H, D // self.H
        q = self.q(x).view(B, T, H, dh).transpose(1, 2)
        k = self.k(x).view(B, T, H, dh).transpose(1, 2)
        v = self.v(x).view(B, T, H, dh).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-2, -1) / (dh ** 0.5), dim=-1)
        return self.o((w @ v).transpose(1, 2).reshape(B, T, D))

class Block(nn.Module):
    """models/lessons.cc, one layer of the general stack with pre_norm and block_mlp."""

    def __init__(self, c):
        super().__init__()
        D = c["D"]
        self.ln1 = nn.LayerNorm(D) if c.get("pre_norm") else None
        self.attn = MHA(D, c["heads"])
        self.ln2 = nn.LayerNorm(D) if c.get("pre_norm") and c.get("block_mlp") else None
        self.mlp = nn.Sequential(nn.Linear(D, c["block_mlp"]), nn.ReLU(),
                                 nn.Linear(c["block_mlp"], D)) if c.get("block_mlp") else None

    def forward(self, h):
        h = h + self.attn(self.ln1(h) if self.ln1 is not None else h)
        if self.mlp is not None:
            h = h + self.mlp(self.ln2(h) if self.ln2 is not None else h)
        return h

class Lesson(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok = nn.Embedding(c["vocab"], c["D"])
        self.pos = nn.Embedding(c["T"], c["D"]) if c["pos"] else None
        if c.get("layers", 1) == 1 and not c.get("pre_norm") and not c.get("block_mlp"):
            self.attn = MHA(c["D"], c["heads"])  # the lesson's head(h + attn(h))
            self.layers = None
        else:
            self.attn = None
            self.layers = nn.ModuleList(Block(c) for _ in range(c.get("layers", 1)))
        if c["head"] == "mlp":
            self.head = nn.Sequential(nn.Linear(c["D"], c["hidden"]), nn.ReLU(),
                                      nn.Linear(c["hidden"], c["classes"]))
        else:
            self.head = nn.Sequential(nn.LayerNorm(c["D"]), nn.Linear(c["D"], c["classes"]))
        self.register_buffer("arange", torch.arange(c["T"]))

    def forward(self, ids):
        h = self.tok(ids)
        if self.pos is not None:
            h = h + self.pos(self.arange)
        if self.layers is None:
            return self.head(h + self.attn(h))
        for block in self.layers:
            h = block(h)
        return self.head(h)

def train_step(model, opt, classes, data, precision="f32"):
    """One training step of model on the cycled (x, y) batches of data, as a function
    returning the loss: cross-entropy averaged over all positions, backward, opt.step().

    precision "bf16" is PyTorch's CPU mixed precision: the forward and the loss run under
    torch.autocast("cpu", dtype=torch.bfloat16) (the products in bfloat16, on oneDNN), the
    backward and the optimizer step outside it as PyTorch's AMP recipe has them; parameters,
    gradients and Adam's moments stay float32 (no gradient scaling: bfloat16 has float32's
    exponent range)."""
    if precision not in ("f32", "bf16"):
        raise ValueError("precision must be f32 or bf16, not %r" % (precision,))
    state = {"i": 0}

    def forward_loss(x, y):
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, classes), y.reshape(-1))

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = forward_loss(x, y)
        else:
            loss = forward_loss(x, y)
        loss.backward()
        opt.step()
        return loss

    return step

def targets(task, x, vocab):
    """The task's answers for token batch x [B, T] (numpy), as models/tasks.cc gives them."""
    if task == "neighbor-sum":
        return (np.roll(x, 1, axis=1) + np.roll(x, -1, axis=1)) % vocab
    if task == "duplicates":
        eq = x[:, :, None] == x[:, None, :]
        return (eq.sum(-1) > 1).astype(np.int64)
    return x[:, ::-1].copy()

