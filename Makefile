# Shortcuts for the commands the README documents; each is one line a person can also type.
.PHONY: lint quick test

# ruff (lint and format) and mypy, as CI runs them (.ci/lint); mypy's cache stays in .mypy_cache.
lint:
	bash .ci/lint

# The quick loop: no child interpreter, server or browser.
quick:
	python -m pytest -m "not slow and not browser"

# Everything, browsers included (CI=true turns a missing Chromium into a failure).
test:
	python -m pytest
