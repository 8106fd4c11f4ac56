"""The small transformer block of the framework sample, and one msprobe dump of one training step.

Run by generate.py in a child process per dump (msprobe's debugger can be set up only once per
process): `python model.py '{"name": ..., "dtype": ..., "task": ..., "summary_mode": ..., "rank_id": ...}'`
with the working directory set to the sample folder, so every path msprobe records is relative.

Two traps are built into the otherwise ordinary block, harmless in fp32:
- LOGIT_SHIFT: the attention logits are shifted by +300 before the softmax. Softmax ignores a
  shift, but bf16 spaces its values 2 apart in [256, 512), so the logits (spread ~1) are rounded
  to a coarse grid: the softmax output loses precision while its input still has cosine ~1.
- ACT_GAIN: the MLP activation is multiplied by 2**16 (and fc2's weight divided by it, so the
  block computes the same function); fp16 overflows (> 65504) wherever gelu(x) > ~1.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 0
VOCAB, D_MODEL, HEADS, D_FF, BATCH, SEQ = 48, 32, 4, 64, 2, 8
LOGIT_SHIFT = 300.0
ACT_GAIN = 65536.0


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(D_MODEL, dim=-1)
        heads = [t.reshape(BATCH, SEQ, HEADS, D_MODEL // HEADS).transpose(1, 2) for t in (q, k, v)]
        q, k, v = heads
        scores = torch.matmul(q, k.transpose(-2, -1)) * (D_MODEL // HEADS) ** -0.5
        scores = scores + LOGIT_SHIFT
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(BATCH, SEQ, D_MODEL)
        return self.proj(out)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(D_MODEL, D_FF)
        self.fc2 = nn.Linear(D_FF, D_MODEL)
        with torch.no_grad():
            self.fc2.weight.div_(ACT_GAIN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)) * ACT_GAIN)


class Block(nn.Module):
    """Embedding, pre-norm attention and MLP with residuals, final norm, vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.attn = SelfAttention()
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.mlp = MLP()
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        h = h + self.attn(self.ln1(h))
        h = h + self.mlp(self.ln2(h))
        logits = self.head(self.ln_f(h))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def msprobe_config(spec: dict) -> dict:
    """The config file of one dump (the layout of framework-dumps.md; risk_level ALL keeps the
    transpose/reshape calls, so consecutive entries connect by their tensors)."""
    task = spec["task"]
    per_task = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        per_task["summary_mode"] = spec["summary_mode"]
    return {"task": task, "level": "mix", "dump_path": f"./{spec['name']}", "rank": [],
            "step": [], "risk_level": "ALL", task: per_task}


def dump_one_step(spec: dict) -> float:
    """One forward+backward step of a freshly seeded Block in spec's dtype under msprobe."""
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # one summation order, so reruns are bit-identical
    model = Block()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    targets = torch.randint(0, VOCAB, (BATCH, SEQ))
    model = model.to(getattr(torch, spec["dtype"]))
    config_path = os.path.join("configs", spec["name"] + ".json")
    os.makedirs("configs", exist_ok=True)
    with open(config_path, "w") as f:
        json.dump(msprobe_config(spec), f, indent=1)
        f.write("\n")
    debugger = PrecisionDebugger(config_path=config_path)
    debugger.start(model=model, rank_id=spec["rank_id"])
    loss = model(tokens, targets)
    loss.backward()
    debugger.stop()
    debugger.step()
    return float(loss)


if __name__ == "__main__":
    print("loss", dump_one_step(json.loads(sys.argv[1])))
