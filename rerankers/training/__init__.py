"""How every trainable re-ranker is fitted: its data (:mod:`.data`), options (:mod:`.config`), schedules and
parameter groups (:mod:`.optim`) and the loop (:mod:`.loop`). Protocols (which queries train and test) and
the model cache belong to the experiment layer (:mod:`pipeline.engine.protocols`, :mod:`pipeline.engine.model_cache`)."""
