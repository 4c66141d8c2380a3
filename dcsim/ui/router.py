"""The one place dcsim touches a private Streamlit name: the v1 multipage switch.

Streamlit decides at server start that an app with a ``pages/`` folder is a version-1 multipage
app (``PagesManager.uses_pages_directory``), and keeps deciding so until some run calls
``st.navigation``, which clears it (``streamlit/commands/navigation.py``). The design card puts
the pages in ``pages/``, and no public setting turns the old behaviour off, so:

- ``require_router`` (every page calls it first): on a fresh server (a restart, a woken
  Community Cloud app) the first visitor of a deep link such as ``/shards?...`` would get
  ``pages/shards.py`` run alone: no frame, no link handling. The page clears the switch, as
  ``st.navigation`` does, and reruns, which runs app.py and routes to the same page.
- ``NavigationPagesManager``: AppTest resets the switch before every run, so a test would rerun
  the page script alone after its first run; ``route_apptest`` hands AppTest this subclass
  (the suite does it for every test), which clears it as a served app's first ``st.navigation``
  does.

``tests/test_router.py`` fails loudly if a Streamlit upgrade moves or renames any of it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def require_router() -> None:
    """Make sure this page runs inside app.py's router, not alone (see the module's docstring)."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


class NavigationPagesManager(PagesManager):
    """AppTest's ``PagesManager`` with the v1 switch cleared, as a served app's router clears it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        PagesManager.uses_pages_directory = False


def route_apptest(monkeypatch: Any) -> None:
    """For one test (``monkeypatch`` is pytest's), make AppTest build ``NavigationPagesManager``:
    AppTest builds its own ``PagesManager`` by that name in ``streamlit.testing.v1.app_test``."""
    from streamlit.testing.v1 import app_test  # only tests import AppTest's module

    monkeypatch.setattr(app_test, "PagesManager", NavigationPagesManager)
