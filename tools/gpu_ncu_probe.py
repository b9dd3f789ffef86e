"""One rans_chunks_kernel launch on an 11008x4096 bf16 layer, for ncu (tools/gpu_* helper)."""
import sys
import numpy as np
import torch
from wcodec.codecs import encode_tensor
from wcodec.gpu import decode as D

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 64
x = (torch.randn(11008 * 4096, device="cuda") * 0.02).to(torch.bfloat16)
bits = x.view(torch.int16).cpu().numpy().view(np.uint16)
rec = encode_tensor(bits, "BF16", chunk_steps=steps)
plan = D.build_plan([("w", rec)])
host = np.zeros(plan.buf_nbytes, np.uint8)
D.fill_host(plan, host)
buf = torch.from_numpy(host).cuda()
out = torch.empty(plan.out_nbytes, dtype=torch.uint8, device="cuda")
prep = D.Prepared(plan, "cuda", {1: (1, 1)})
for _ in range(2):
    D.check(plan, D.run(prep, buf, out))
torch.cuda.synchronize()
