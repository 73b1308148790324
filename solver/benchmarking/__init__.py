"""Benchmarks of the solver: ``python -m solver bench`` (:mod:`.cases`), the GPU suite of the
paper's Tables 3 and 6 (:mod:`.gpu_suite`) and its markdown report (:mod:`.report`)."""
