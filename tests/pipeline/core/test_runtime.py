"""Runtime settings: glibc's allocator asked to keep freed memory (the command lines' start-up), and the
test for bfloat16 matrix instructions."""
from __future__ import annotations

import ctypes

import pytest

from pipeline.core import runtime


#: run in a child process, so that the real glibc settings (kept until exit) do not change the test process:
#: a 64 MiB block, which glibc maps on its own by default, comes from the heap, and the heap keeps it once freed
ALLOCATOR_PROBE = """
import ctypes, ctypes.util, json
from pipeline.core import runtime

applied = runtime.keep_freed_memory()
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]


def heap():
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            return tuple(int(x, 16) for x in line.split()[0].split("-"))
    return 0, 0


size = 64 << 20
block = libc.malloc(size)
start, end = heap()
in_heap = start <= block < end
libc.free(block)
start, end = heap()
print(json.dumps({"applied": applied, "in_heap": in_heap, "kept_after_free": end - start >= size}))
"""


def probe_allocator(setting: str | None) -> dict:
    """What :data:`ALLOCATOR_PROBE` finds in a fresh interpreter with ``PIPELINE_KEEP_FREED_MEMORY=setting``."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_KEEP_FREED_MEMORY"}
    if setting is not None:
        env["PIPELINE_KEEP_FREED_MEMORY"] = setting
    done = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not runtime.sys.platform.startswith("linux"), reason="glibc's allocator")
def test_keep_freed_memory_makes_the_real_glibc_keep_large_freed_blocks():
    assert probe_allocator(None) == {"applied": True, "in_heap": True, "kept_after_free": True}


@pytest.mark.skipif(not runtime.sys.platform.startswith("linux"), reason="glibc's allocator")
def test_keep_freed_memory_can_be_refused():
    # glibc's defaults: the block gets its own mapping, returned to the system when freed
    assert probe_allocator("0") == {"applied": False, "in_heap": False, "kept_after_free": False}


def test_keep_freed_memory_is_linux_only(monkeypatch):
    monkeypatch.setattr(runtime.sys, "platform", "darwin")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: pytest.fail("the C library was loaded off Linux"))
    monkeypatch.delenv("PIPELINE_KEEP_FREED_MEMORY", raising=False)
    assert not runtime.keep_freed_memory()


def test_keep_freed_memory_without_mallopt_is_false(monkeypatch):
    monkeypatch.setattr(runtime.sys, "platform", "linux")
    # a C library without mallopt (musl) cannot be loaded beside glibc: a bare object stands for it
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    monkeypatch.delenv("PIPELINE_KEEP_FREED_MEMORY", raising=False)
    assert not runtime.keep_freed_memory()


def test_native_bf16_is_a_boolean_matching_torch():
    import torch

    expected = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert runtime.native_bf16() is bool(expected)
