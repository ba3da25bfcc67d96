"""Modules vLLM's own processes import by their bare names (``eaglekit_*``): its engine and its workers, spawned in
an engine environment where eaglekit is not installed. ``engines/vllm_runner.py`` puts this folder on ``sys.path``
(and on ``PYTHONPATH`` for the processes vLLM starts), so nothing here imports eaglekit, and every module's name
starts with ``eaglekit_`` so that none shadows a package of the environment it runs in.

- ``eaglekit_engine``: the engine's arguments a job asks for (parallelism, where a CPU's threads go) and what vLLM
  says about its requests (per-request spec-decode counters);
- ``eaglekit_capture``: ``eaglekit capture``'s engine side: greedy continuations and the target's aux states from
  vLLM's ``extract_hidden_states``;
- ``eaglekit_cpu_hidden_states``: a KV connector for that capture on vLLM's CPU build, where vLLM's own
  ``ExampleHiddenStatesConnector`` fails (it pins host memory).
"""
