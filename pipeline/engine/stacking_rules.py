"""The values of ``--zero-shot-rule``: how a trained re-ranker joins the zero-shot combination.

They live apart from :mod:`pipeline.engine.stacking` so that :mod:`pipeline.engine.config` can check the option
without importing the scoring stages; the rules themselves are described and carried out there.
"""
from __future__ import annotations

#: step 2 combines the trained re-ranker with the zero-shot combination (the default of ``--zero-shot-base``)
STACK = "stack"
#: step 2 combines the trained re-ranker with the first stage; unproven, the fold keeps the zero-shot combination
FALLBACK = "fallback"
#: step 2 combines the trained re-ranker with the first stage at step 1's weight: the zero-shot model's, tuned on
#: every non-test query (for a re-ranker fine-tuned from the zero-shot model, whose scores it refines)
ANCHOR = "anchor"
#: the values of ``--zero-shot-rule``, the default first
RULES = (STACK, FALLBACK, ANCHOR)
