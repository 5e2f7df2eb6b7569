"""Runtime settings: glibc's allocator asked to keep freed memory (the command lines' start-up), and the
test for bfloat16 matrix instructions."""
from __future__ import annotations

import ctypes

import pytest

from pipeline.core import runtime


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, option, value):
        self.calls.append((option, value))
        return 1


def test_keep_freed_memory_sets_both_thresholds_on_glibc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(runtime.sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    monkeypatch.delenv("PIPELINE_KEEP_FREED_MEMORY", raising=False)
    assert runtime.keep_freed_memory()
    assert fake.calls == [(-3, runtime.MMAP_THRESHOLD), (-1, runtime.TRIM_THRESHOLD)]


@pytest.mark.parametrize("platform, variable", [("linux", "0"), ("darwin", None)])
def test_keep_freed_memory_can_be_refused_and_is_linux_only(monkeypatch, platform, variable):
    fake = FakeLibc()
    monkeypatch.setattr(runtime.sys, "platform", platform)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    if variable is None:
        monkeypatch.delenv("PIPELINE_KEEP_FREED_MEMORY", raising=False)
    else:
        monkeypatch.setenv("PIPELINE_KEEP_FREED_MEMORY", variable)
    assert not runtime.keep_freed_memory() and fake.calls == []


def test_keep_freed_memory_without_mallopt_is_false(monkeypatch):
    monkeypatch.setattr(runtime.sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())       # a C library without mallopt (musl)
    monkeypatch.delenv("PIPELINE_KEEP_FREED_MEMORY", raising=False)
    assert not runtime.keep_freed_memory()


def test_the_real_allocator_accepts_the_settings_here():
    assert runtime.keep_freed_memory() is runtime.sys.platform.startswith("linux")


def test_native_bf16_is_a_boolean_matching_torch():
    import torch

    expected = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert runtime.native_bf16() is bool(expected)
