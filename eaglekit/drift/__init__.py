"""``eaglekit drift``: EAGLE 3.1's attention-drift diagnosis, measured on a drafter and its target.

``run`` measures, in stages: the ``options`` checked, the ``inputs`` read or cut, each drafter read and run over the
target's sequences (``drafting``), the ``figures`` made from its counts; ``variants`` frames the inputs for
``--variants``; ``sampling`` gives the acceptance expected under vLLM's rejection sampler for ``--temperature``.
``report`` and ``plots`` present the result (no torch: ``push --report`` reads a report too). Nothing is imported
here, so reading a report loads no torch.
"""
