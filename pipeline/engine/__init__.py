"""The experiment engine: what one run is asked to do and how it is done, below the command lines.

:mod:`.config` (``RunConfig``, every option with its checks) and :mod:`.cli_options` (the flags derived from
it, :mod:`.cli_reference` their generated reference), :mod:`.resolve` (what a config leaves unsaid, settled
from the dataset's recipe) and :mod:`.presets` (``--reranker auto``), :mod:`.plan` (every decision of a run,
checked before any work), :mod:`.protocols` (the train/dev/test queries of each fold), :mod:`.context` (one
first stage per run, built once), :mod:`.stages` (retrieve, re-rank), :mod:`.fitting` (training one fold),
:mod:`.model_cache` (cached models, the one training path), :mod:`.obtain` (``obtain_model``, the one way a
command gets its model), :mod:`.fusion` (interpolation with the first stage), :mod:`.naming` (run names) and
the pair-classification parts :mod:`.pair_data` and :mod:`.pair_metrics`.

The engine imports :mod:`pipeline.core`, ``infra``, ``indexes`` and ``rerankers``, never a command module
(``pipeline.run``, ``pipeline.serve`` ...); ``tests/test_architecture.py`` checks it. Importing this package
imports none of its modules.
"""
