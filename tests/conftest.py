"""Shared setup of the test suite.

* The repository root is importable (the project is not pip-installed in the venv).
* Before any test module imports ir_datasets (which fixes its cache paths at import time), the session
  gets its own ``IR_DATASETS_HOME``, ``PIPELINE_INDEX_DIR`` and ``PIPELINE_HOME`` in a temporary directory,
  so no test writes into the user's ``~/.ir_datasets`` or the repository's ``indexes/cache``, ``models/``
  or ``runs/``.
* ``DATA`` is the real data root (``PIPELINE_DATA``, default ``../shared/data`` beside the repo); tests that
  need it use the ``data_root`` fixture, which skips when it is missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATA = Path(os.environ.get("PIPELINE_DATA") or REPO.parent / "shared" / "data")
PYTHON = sys.executable

#: Proxy settings that make every HTTP(S) request fail at once (connection refused), so tests that must
#: not download anything behave the same with or without a network.
NO_NETWORK = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
}

_SESSION_DIR: Path | None = None


def pytest_configure(config):
    global _SESSION_DIR
    _SESSION_DIR = Path(tempfile.mkdtemp(prefix="pipeline-tests-"))
    os.environ["IR_DATASETS_HOME"] = str(_SESSION_DIR / "ir_datasets")
    os.environ["PIPELINE_INDEX_DIR"] = str(_SESSION_DIR / "indexes")
    os.environ["PIPELINE_HOME"] = str(_SESSION_DIR / "home")  # models and runs of tests never reach the repo
    os.environ.setdefault("PIPELINE_PRECISION", "float32")  # same arithmetic on every host (auto is bf16 on AMX)


def pytest_unconfigure(config):
    if _SESSION_DIR is not None:
        shutil.rmtree(_SESSION_DIR, ignore_errors=True)


# ------------------------------------------------------------------------------------------ helpers


def write(path: Path, content: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to ``path`` (parents created) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def write_files(folder: Path, files: dict[str, str | bytes]) -> Path:
    """Make ``folder`` (parents too), write each ``{name: content}`` of ``files`` in it and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        write(folder / name, content)
    return folder


def assert_located(error, path, line: int | None) -> None:
    """The DataFormatError names ``path`` and ``line`` both as attributes and as ``path:line:`` in its text."""
    assert error.path == str(path), (error.path, str(path))
    assert error.line == line, (error.line, line)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert str(error).startswith(where), str(error)


def raises_at(path, line, call, *args, **kwargs):
    """Call ``call(path, *args, **kwargs)`` (draining a generator), check the DataFormatError it raises points
    at ``path:line`` (:func:`assert_located`), and return it."""
    from pipeline.core.errors import DataFormatError

    with pytest.raises(DataFormatError) as info:
        result = call(path, *args, **kwargs)
        if hasattr(result, "__next__"):
            list(result)
    assert_located(info.value, path, line)
    return info.value


def subprocess_env(**extra) -> dict[str, str]:
    """The environment for a child ``python``: this session's caches, the repo importable, no network."""
    env = dict(os.environ)
    env.update(NO_NETWORK)
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    env["PIPELINE_DATA"] = str(DATA)
    env.update({key: str(value) for key, value in extra.items()})
    return env


def run_python(args: list[str], timeout: float = 300, cwd: Path = REPO, **env) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in ``cwd`` (default the repo root) and capture its output."""
    return subprocess.run(
        [PYTHON, *args], cwd=cwd, env=subprocess_env(**env), capture_output=True, text=True, timeout=timeout
    )


# ----------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The real data root; skips the test when it is not there."""
    if not DATA.is_dir():
        pytest.skip(f"real data not found at {DATA} (set PIPELINE_DATA)")
    return DATA


@pytest.fixture
def no_network(monkeypatch):
    """Make downloads fail at once in this process (requests reads the proxy variables per request)."""
    for key, value in NO_NETWORK.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
