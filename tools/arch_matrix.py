"""The architecture matrix of issue 26 as a script: for each architecture x codec x loading path,
whether the wcodec folder loads with the original's outputs and dtype (and what stays compressed),
saves and reloads, and takes a LoRA step; then the round trips (save / reload, adapter save /
reload, merge, state_dict) on the fused, just-in-time and plain paths, and the dtype of a folder
whose config.json names none. Prints Markdown tables
(pass, or the exception class and first line) and the time taken; the same checks as
tests/hf/test_arch_matrix.py (tests/hf/_arch.py).

    PYTHONPATH=src python tools/arch_matrix.py [--arch llama mixtral ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hf"))


def _run(fn, *args):
    """(text, seconds, value): "pass" or the exception's class and first line."""
    t = time.perf_counter()
    try:
        value = fn(*args)
        text = "pass"
    except Exception as e:  # every failure is a row of the table
        import _arch

        value, text = None, _arch.describe(e)
    return text, time.perf_counter() - t, value


def _quiet():
    """transformers' progress bars and warnings off (the table is the output)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    with contextlib.suppress(Exception):
        from transformers.utils import logging as tlog

        tlog.set_verbosity_error()
        tlog.disable_progress_bar()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    import _arch

    ap.add_argument("--arch", nargs="+", choices=list(_arch.ARCHS), default=list(_arch.ARCHS))
    ap.add_argument("--codec", nargs="+", choices=_arch.CODECS, default=list(_arch.CODECS))
    ap.add_argument("--path", nargs="+", choices=_arch.PATHS, default=list(_arch.PATHS))
    ap.add_argument("--no-round-trips", action="store_true", help="the matrix only")
    ap.add_argument("--round-trip-arch", default="llama", choices=list(_arch.ARCHS))
    ap.add_argument("--round-trip-codec", nargs="+", choices=_arch.CODECS, default=list(_arch.CODECS))
    ap.add_argument("--json", type=Path, help="also write every row as JSON here")
    args = ap.parse_args(argv)
    _quiet()
    rows, start = [], time.perf_counter()
    print("| arch | codec | path | load (outputs, dtype, compressed) | kept | save + reload | LoRA step | s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="wcodec-matrix-") as tmp:
        cells = {}
        for name in dict.fromkeys([*args.arch, *([] if args.no_round_trips else [args.round_trip_arch])]):
            text, secs, cell = _run(_arch.make_cell, name, Path(tmp) / name)
            cells[name] = cell
            if cell is None:
                print(f"| {name} | - | - | build: {text} | | | | {secs:.1f} |")
                rows.append({"arch": name, "build": text})
        for name in args.arch:
            cell = cells[name]
            if cell is None:
                continue
            for codec in args.codec:
                for path in args.path:
                    with contextlib.redirect_stderr(io.StringIO()):
                        load, t1, rep = _run(_arch.check_load, cell, codec, path)
                        save, t2, _ = _run(_arch.check_save_reload, cell, codec, path,
                                           Path(tmp) / f"{name}-{codec}-{path}-saved")
                        lora, t3, _ = _run(_arch.check_lora, cell, codec, path)
                    kept = _arch.summary(rep) if rep is not None else ""
                    print(f"| {name} | {codec} | {path} | {load} | {kept} | {save} | {lora} | {t1 + t2 + t3:.1f} |",
                          flush=True)
                    rows.append({"arch": name, "codec": codec, "path": path, "load": load, "kept": kept,
                                 "save_reload": save, "lora": lora, "seconds": round(t1 + t2 + t3, 2)})
        matrix_s = time.perf_counter() - start
        ok = sum(r.get(k) == "pass" for r in rows for k in ("load", "save_reload", "lora"))
        cellsn = sum(1 for r in rows if "load" in r)
        full = sum(all(r.get(k) == "pass" for k in ("load", "save_reload", "lora")) for r in rows if "load" in r)
        print(f"\nmatrix: {full} of {cellsn} cells pass every check ({ok} of {3 * cellsn} checks), {matrix_s:.1f} s")
        cell = cells.get(args.round_trip_arch)
        if not args.no_round_trips and cell is not None:
            print(f"\nround trips ({args.round_trip_arch})\n")
            print("| codec | path | " + " | ".join(_arch.ROUND_TRIPS) + " | s |")
            print("|---|---|" + "---|" * len(_arch.ROUND_TRIPS) + "---|")
            passed, total, t0 = 0, 0, time.perf_counter()
            for codec in args.round_trip_codec:
                for path in _arch.ROUND_TRIP_PATHS:
                    texts, secs = [], 0.0
                    for op in _arch.ROUND_TRIPS:
                        with contextlib.redirect_stderr(io.StringIO()):
                            text, s, _ = _run(_arch.round_trip, cell, codec, path, op,
                                              Path(tmp) / f"rt-{codec}-{path}-{op}")
                        texts.append(text)
                        secs += s
                        rows.append({"round_trip": op, "codec": codec, "path": path, "result": text,
                                     "seconds": round(s, 2)})
                    passed += texts.count("pass")
                    total += len(texts)
                    print(f"| {codec} | {path} | " + " | ".join(texts) + f" | {secs:.1f} |", flush=True)
            print(f"\nround trips: {passed} of {total} pass, {time.perf_counter() - t0:.1f} s")
            print(f"\nno dtype in config.json ({args.round_trip_arch}): the dtype of the stored weights\n")
            print("| codec | path | result |\n|---|---|---|")
            for codec in args.round_trip_codec:
                for path in args.path:
                    with contextlib.redirect_stderr(io.StringIO()):
                        text, s, _ = _run(_arch.check_dtype_from_weights, cell, codec, path,
                                          Path(tmp) / f"dtype-{codec}-{path}")
                    rows.append({"dtype_from_weights": text, "codec": codec, "path": path, "seconds": round(s, 2)})
                    print(f"| {codec} | {path} | {text} |", flush=True)
    print(f"total {time.perf_counter() - start:.1f} s")
    if args.json:
        _arch.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
