"""Run at the start-up of every Python process whose path holds this folder (Python's ``site``
imports the first ``sitecustomize`` it finds): the checkpoint children a fault test starts.
``tests/faults.py`` puts this folder on their ``PYTHONPATH`` and holds what it installs."""

import faults

faults.install()
