"""XLA's CPU backend at its lowest LLVM optimisation level for the tests' own compiles (issue 42).

The tests check values and XLA's HLO (buffer assignment, collectives, cost analysis), which XLA's HLO
passes decide before LLVM runs; none checks the speed of the generated code, and LLVM's passes were
about a third of the CPU of the concrete tests (bench/README.md, "The test suite"). XLA reads
``XLA_FLAGS`` once, when its first compile needs them: this module, which conftest imports before
anything of dcsim's, compiles once with the flags added and then gives the environment back, so that
every child a test starts (a documented command, a server, a checkpoint worker) compiles as a user's
does.
"""

from __future__ import annotations

import os

import jax

TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")

_user_flags = os.environ.get("XLA_FLAGS")
os.environ["XLA_FLAGS"] = " ".join((*([_user_flags] if _user_flags else []), *TEST_XLA_FLAGS))
try:
    jax.jit(lambda x: x + 1)(0).block_until_ready()
finally:
    if _user_flags is None:
        del os.environ["XLA_FLAGS"]
    else:
        os.environ["XLA_FLAGS"] = _user_flags
