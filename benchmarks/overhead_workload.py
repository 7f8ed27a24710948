"""The training loop `container_overhead.py` times inside and outside the image: plain torch, no project code, so
both sides run exactly the same Python and the same torch build. Prints one JSON line."""
import json
import sys
import time

import torch
from torch import nn

STEPS, BATCH = int(sys.argv[1]), 64
WARMUP = int(sys.argv[3]) if len(sys.argv) > 3 else 3  # 0: the process does exactly its first STEPS steps


def net() -> nn.Module:
    """A small CIFAR-shaped conv net: conv, batch norm and ReLU as in the project's ResNets."""
    layers, width = [], 3
    for out in (32, 64, 128):
        layers += [nn.Conv2d(width, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(), nn.MaxPool2d(2)]
        width = out
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * 4 * 4, 100))


torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[2]))
model, x, y = net(), torch.randn(BATCH, 3, 32, 32), torch.randint(0, 100, (BATCH,))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
started = time.perf_counter()
for step in range(WARMUP + STEPS):
    if step == WARMUP:
        started = time.perf_counter()
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
elapsed = time.perf_counter() - started
print(json.dumps({"samples_per_s": BATCH * STEPS / elapsed, "torch": torch.__version__,
                  "python": sys.version.split()[0]}))
