"""The load of `provision verify --active`, run on the node by its own Python (the one with torch: the launcher's
environment), sent on stdin: `python3 - --seconds 60`. Standard library and torch only; nothing of provision.

Every GPU at once, one thread each: bf16 matrix products (fp16 where the GPU has no bf16: before Ampere) of
8192 x 8192, back to back for the duration, so the GPUs draw what training draws. Prints one JSON line: per GPU
its UUID (as nvidia-smi names it), the TFLOP/s it sustained, and its error if it stopped (a GPU that fell off
the bus raises a CUDA error in its thread; the others go on). Exit 0 when every GPU ran to the end, 1 when one
failed, 3 when there is no load to run here (no torch, no CUDA): "not applicable", with the reason.
SIGTERM or SIGINT (verify stopped: the node script passes it on) ends the products at once: the line says what
each GPU sustained until then, with "stopped" and the seconds it ran.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from types import ModuleType

SIZE = 8192
STOPPING = threading.Event()  # set by SIGTERM or SIGINT: every GPU's thread ends its products and reports


def main() -> int:
    parser = argparse.ArgumentParser(prog="provision-load")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    try:
        import torch  # type: ignore[import-not-found]  # the node's, not ours
    except ImportError:
        return report({"error": f"no torch in this Python ({sys.executable})"}, 3)
    if not torch.cuda.is_available():
        return report({"error": f"torch {torch.__version__} sees no CUDA GPU ({sys.executable})"}, 3)
    count = torch.cuda.device_count()
    results = [{"index": i, "uuid": uuid_of(torch, i), "tflops": 0.0, "error": ""} for i in range(count)]
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: STOPPING.set())
    began = time.monotonic()
    deadline = began + args.seconds
    threads = [threading.Thread(target=burn, args=(torch, i, deadline, results[i]), daemon=True)
               for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.seconds + 120)
        if thread.is_alive():
            results[threads.index(thread)]["error"] = "did not finish: the GPU stopped answering"
    failed = any(r["error"] for r in results)
    ran = {"stopped": True, "seconds": round(time.monotonic() - began, 1)} if STOPPING.is_set() else {
        "seconds": args.seconds}
    return report({**ran, "dtype": "bf16/fp16", "gpus": results}, 1 if failed else 0)


def uuid_of(torch: ModuleType, index: int) -> str:
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)  # torch 2.0 and newer
    return f"GPU-{uuid}" if uuid is not None else ""


def burn(torch: ModuleType, index: int, deadline: float, result: dict[str, object]) -> None:
    try:
        with torch.cuda.device(index):
            major, _ = torch.cuda.get_device_capability(index)
            dtype = torch.bfloat16 if major >= 8 else torch.float16
            a = torch.randn(SIZE, SIZE, device=index, dtype=dtype)
            b = torch.randn(SIZE, SIZE, device=index, dtype=dtype)
            torch.cuda.synchronize(index)
            started, done = time.monotonic(), 0
            while time.monotonic() < deadline and not STOPPING.is_set():
                for _ in range(8):
                    torch.matmul(a, b)
                torch.cuda.synchronize(index)
                done += 8
            elapsed = time.monotonic() - started
            result["tflops"] = round(2 * SIZE ** 3 * done / elapsed / 1e12, 1) if elapsed > 0 else 0.0
    except Exception as exc:  # a CUDA error: this GPU stopped; the others go on
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def report(data: dict[str, object], code: int) -> int:
    print(json.dumps(data), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
