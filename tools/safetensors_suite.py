"""Run safetensors' own Python tests against wcodec through a shim that only maps names, and count
the outcomes by cause.

The shim is a ``safetensors`` package written to a temporary folder and put first on the path:
``safetensors.torch`` is ``wcodec.torch``, ``safetensors.numpy`` is ``wcodec.numpy``,
``safe_open`` is ``wcodec.safe_open``, ``SafetensorError`` is ``wcodec.errors.WcodecError``, any
other top-level name is wcodec's of that name (``serialize``, ``TensorSpec``, ``_safe_open_handle``;
``safetensors.safetensors_rust`` is the package itself). A name wcodec does not have resolves to a
placeholder that raises ``NotImplementedError("shim: wcodec has no X")`` when used, so that one
missing helper fails the tests that use it, not the whole file at import. Nothing else is
adapted: every test runs as written, against .wcodec files under safetensors' names.

safetensors' tests are not part of this repository (Apache-2.0, theirs): point ``--tests`` at
``bindings/python/tests`` of a safetensors checkout, e.g.
``git clone --depth 1 --branch v0.8.0 https://github.com/huggingface/safetensors /tmp/st`` then
``PYTHONPATH=src python tools/safetensors_suite.py --tests /tmp/st/bindings/python/tests``; the
release's source archive holds the same folder (``safetensors-0.8.0.tar.gz`` from PyPI: 11 test
files, 100 tests, 80 of them in the torch / numpy files this runs by default).
Test files of frameworks not installed here (flax, tensorflow, paddle, mlx) and the GPU ones are
skipped by default (``--all`` runs them). Prints one line per failing test with its cause, then
the counts; ``--json FILE`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_FILES = ("test_flax_comparison.py", "test_tf_comparison.py", "test_paddle_comparison.py",
              "test_mlx_comparison.py", "test_fast_cuda.py", "test_gds.py")

SHIM_INIT = '''"""safetensors -> wcodec, names only (tools/safetensors_suite.py)."""
import sys

import wcodec
from wcodec import safe_open
from wcodec.errors import WcodecError as SafetensorError

__version__ = "0.8.0"
safetensors_rust = sys.modules[__name__]
sys.modules[__name__ + ".safetensors_rust"] = safetensors_rust  # older tests import it by that name
# the real package's compiled core stays importable as safetensors._safetensors_rust: wcodec reads
# .safetensors files through it (wcodec.stopen), which this shim's names would otherwise hide
__path__.append({real!r})


def _missing(module, name):
    def placeholder(*args, **kwargs):
        raise NotImplementedError(f"shim: wcodec has no {module}.{name}")
    placeholder.__name__ = name
    return placeholder


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:  # safetensors' top-level names that wcodec has under the same name (TensorSpec, serialize, ...)
        return getattr(wcodec, name)
    except AttributeError:
        return _missing("safetensors", name)
'''
SHIM_MODULE = '''"""safetensors.{name} -> wcodec.{name}, names only (tools/safetensors_suite.py)."""
import wcodec.{name} as _target
from safetensors import _missing


def __getattr__(name):
    try:
        return getattr(_target, name)
    except AttributeError:
        if name.startswith("__"):
            raise
        return _missing("safetensors.{name}", name)
'''

#: (cause, pattern over "exception type: message" of a failure), first match wins
CAUSES = (
    ("missing name", r"shim: wcodec has no"),
    ("byte layout (out of scope)", r"^AssertionError: b['\"]|\bb'[@<`f\x80]|\[192:\]|serialization\.safetensors|"
                                   r"index\(b|bad magic|not a \.wcodec|not a wcodec|^MemoryError"),
    ("error class", r"^AssertionError: .*not raised|DID NOT RAISE"),
    ("message text", r"^AssertionError: .* != |^AssertionError: .* not found in "),
)


def write_shim(folder: Path) -> None:
    import safetensors  # the real package, before the shim is on the path

    pkg = folder / "safetensors"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(SHIM_INIT.replace("{real!r}", repr(str(Path(safetensors.__file__).parent))))
    for name in ("torch", "numpy"):
        (pkg / f"{name}.py").write_text(SHIM_MODULE.format(name=name))


def classify(kind: str, message: str) -> str:
    text = f"{kind}: {message}"
    for cause, pattern in CAUSES:
        if re.search(pattern, text, re.M):
            return cause
    return "other: " + kind.rsplit(".", 1)[-1]


def run(tests: Path, run_all: bool, timeout: int) -> dict:
    files = sorted(p for p in tests.glob("test_*.py") if run_all or p.name not in SKIP_FILES)
    if not files:
        raise SystemExit(f"no test_*.py files in {tests}")
    with tempfile.TemporaryDirectory(prefix="st-suite-") as tmp:
        tmp = Path(tmp)
        write_shim(tmp / "shim")
        work = tmp / "work"
        (work / "tests" / "data").mkdir(parents=True)  # the tests write ./tests/data/...
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "shim"), str(REPO / "src")])}
        xml = tmp / "out.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o",
               "junit_family=xunit1",
               f"--junitxml={xml}", "--rootdir", str(work), *map(str, files)]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        if not xml.exists():
            raise SystemExit(f"pytest wrote no report:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        root = ET.parse(xml).getroot()
    results = []
    for case in root.iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{Path(case.get('file', '?')).name}::{cls}::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if case.find("skipped") is not None:
            results.append({"test": name, "outcome": "skipped", "cause": case.find("skipped").get("message", "")})
        elif bad is not None:
            msg = (bad.get("message") or "").strip()
            head, sep, rest = msg.partition(":")
            kind, text = (head, rest.strip()) if sep and " " not in head else (bad.get("type") or msg, msg)
            results.append({"test": name, "outcome": "failed", "cause": classify(kind, text),
                            "message": msg.splitlines()[0][:200] if msg else ""})
        else:
            results.append({"test": name, "outcome": "passed"})
    return {"files": [p.name for p in files], "results": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", required=True, help="safetensors' bindings/python/tests folder")
    ap.add_argument("--all", action="store_true", help="also the other frameworks' and the GPU test files")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the whole run")
    ap.add_argument("--json", default=None, help="write the per-test outcomes here")
    a = ap.parse_args()
    out = run(Path(a.tests), a.all, a.timeout)
    res = out["results"]
    for r in res:
        if r["outcome"] == "failed":
            print(f"FAIL {r['test']}  [{r['cause']}]  {r['message']}")
    counts: dict = {}
    for r in res:
        if r["outcome"] == "failed":
            counts[r["cause"]] = counts.get(r["cause"], 0) + 1
    n_pass = sum(r["outcome"] == "passed" for r in res)
    n_skip = sum(r["outcome"] == "skipped" for r in res)
    print(f"\n{n_pass} of {len(res) - n_skip} passed ({n_skip} skipped) in {', '.join(out['files'])}")
    for cause, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d} failed: {cause}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
