"""Neural infrastructure shared by the first stages (:mod:`indexes`) and the re-rankers (:mod:`rerankers`).

It sits below both and above :mod:`pipeline.core`: it may import ``pipeline.core``, torch and
transformers, never ``indexes`` or ``rerankers`` (``tests/test_architecture.py`` checks it).

Modules: :mod:`.encoders` (pre-trained transformer encoders, offline first), :mod:`.checkpoints` (the
checkpoint format every trained model is saved in), :mod:`.distributed` (data-parallel work under
``torchrun``), :mod:`.maxsim` (late-interaction MaxSim scores).
"""
