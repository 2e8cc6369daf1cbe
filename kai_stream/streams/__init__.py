"""The scheduler processor: a faust app that folds cluster-events, runs the pure core, publishes decisions.

Layout (faust style): ``app`` (the App and its transport), ``topics``, ``tables`` (caches), ``codecs``
(the pydantic/orjson codec), ``agents`` (the one agent), ``__main__`` (the worker); the logic without
faust lives in ``engine`` (pure) and ``runtime`` (rebuild, publish). Importing this package does not
create the app: ``kai_stream.streams.app`` does, from the environment.
"""
