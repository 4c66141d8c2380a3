"""A child that reports which heavy packages a command imports, one fork a command.

Started once by the ``imports_probe`` fixture (conftest). It imports only what ``python -m dcsim``
imports before it dispatches (``dcsim.cli``), then for each JSON request on stdin forks: the fork
runs the command line (``{"argv": [...]}``) or imports the named modules (``{"modules": [...]}``)
with its output sent to files, and reports the heavy top-level packages now in ``sys.modules``. A
fork starts from this interpreter's modules, which are the ones a fresh ``python -m dcsim`` has at
that point, so each answer is what a fresh process would import, at the cost of a fork.
"""

import importlib
import json
import os
import sys
import tempfile

from dcsim.cli import main

HEAVY = ("jax", "flax", "pandas", "altair", "orbax", "optax", "huggingface_hub", "qwix", "gguf", "safetensors")


def run(request, folder):
    out, err, answer = (os.path.join(folder, name) for name in ("out", "err", "answer"))
    pid = os.fork()
    if pid == 0:  # the fork: run, report, and leave without running the parent's exit handlers
        code = 1
        try:
            with open(out, "w") as stdout, open(err, "w") as stderr:
                sys.stdout, sys.stderr = stdout, stderr
                if "argv" in request:
                    try:
                        code = main(request["argv"])
                    except SystemExit as exit:  # argparse's own exit, should main let one through
                        code = exit.code if isinstance(exit.code, int) else 1
                else:
                    for name in request["modules"]:
                        importlib.import_module(name)
                    code = 0
            with open(answer, "w") as file:
                json.dump({"code": code, "heavy": [name for name in HEAVY if name in sys.modules]}, file)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    with open(answer) as file:
        reply = json.load(file)
    with open(out) as stdout, open(err) as stderr:
        reply |= {"stdout": stdout.read(), "stderr": stderr.read()}
    return reply


assert not [name for name in HEAVY if name in sys.modules], "the probe itself imported a heavy package"
with tempfile.TemporaryDirectory(prefix="dcsim-imports-") as folder:
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line), folder)), flush=True)
