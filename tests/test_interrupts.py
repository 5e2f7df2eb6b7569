"""Ctrl-C and kill with the JVM and torch in the same process: a clean line, exit 130/143, no JVM crash log.

The child starts Anserini's JVM (as every BM25 run does), then multiplies torch matrices inside
:func:`pipeline.core.interrupts.exit_cleanly`; the test sends it a real signal.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.core.interrupts import EXIT_SIGINT, EXIT_SIGTERM

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import sys, torch
from indexes.jvm import anserini_class
from pipeline.core.interrupts import exit_cleanly

anserini_class("io.anserini.search.SimpleSearcher")      # the JVM runs, as in every BM25 run
torch.set_num_threads(1)
with exit_cleanly("nothing to keep in this test; run it again"):
    a = torch.randn(256, 256)
    print("ready", flush=True)
    while True:
        a = torch.tanh(a @ a)
"""


@pytest.mark.parametrize("signum, status, word", [(signal.SIGINT, EXIT_SIGINT, "interrupted"),
                                                  (signal.SIGTERM, EXIT_SIGTERM, "terminated")])
def test_a_signal_during_torch_work_with_the_jvm_running_exits_cleanly(tmp_path, signum, status, word):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        child.send_signal(signum)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == status, stderr
    assert f"{word}: nothing to keep in this test; run it again" in stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob("hs_err_pid*.log"))              # no JVM crash report
