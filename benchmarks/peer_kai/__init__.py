"""kai-stream beside NVIDIA's KAI Scheduler on the same real kube-apiserver + KWOK fixture: the KAI build from the
pinned Go module (``kai.py``), the kai-stream pipeline as processes (``kaistream.py``), one workload
(``workload.py``), timings from the API server's pod records (``records.py``) and the example scenarios' outcomes
(``outcomes.py``). Entry points: ``build.py``, ``run.py`` (throughput and latency), ``agree.py`` (same decisions?).
"""
